"""Progress output of long commands (``cpgym simulate``, ``cpgym sweep``, ``cpgym train``).

One rule for every command: a tqdm bar on stderr when stderr is a terminal; otherwise (piped,
redirected to a log file, CI) one plain line at least every ``interval_s`` seconds; nothing
with ``--quiet``. The lines use tqdm's own formatter (``tqdm.format_meter``), so bar and line
show the same counts, rate, ETA and extra fields (``set_postfix``).
"""

from __future__ import annotations

import sys
import threading
import time

PROGRESS_MODES = ("auto", "bar", "lines", "off")
LINE_INTERVAL_S = 10.0
_LINE_FORMAT = "{desc}: {n_fmt}/{total_fmt} {unit} ({percentage:.0f}%) [{elapsed}<{remaining}, {rate_fmt}{postfix}]"


def progress_mode(progress: bool | str | None = None, quiet: bool = False, stream=None) -> str:
    """The output mode of a command from its options.

    Args:
        progress: ``None`` = auto, ``True`` = always a bar, ``False`` = off, or one of
            :data:`PROGRESS_MODES` (``"auto"`` = bar on a terminal, lines otherwise).
        quiet: ``--quiet``: off, whatever ``progress`` says.
        stream: where the output goes (default ``sys.stderr``); decides ``"auto"``.

    Raises:
        ValueError: ``progress`` is a string outside :data:`PROGRESS_MODES`.
    """
    if quiet or progress is False:
        return "off"
    if progress is True:
        return "bar"
    mode = "auto" if progress is None else progress
    if mode not in PROGRESS_MODES:
        raise ValueError(f"progress must be one of {', '.join(PROGRESS_MODES)}, got {progress!r}")
    if mode == "auto":
        s = sys.stderr if stream is None else stream
        return "bar" if getattr(s, "isatty", lambda: False)() else "lines"
    return mode


class Progress:
    """A progress display of ``total`` units (see the module docstring).

    Args:
        total: units to do (``None``: unknown).
        desc: label at the start of the bar / line.
        unit: unit name (``"req"``, ``"cell"``, ``"step"``).
        mode: one of :data:`PROGRESS_MODES` (see :func:`progress_mode`).
        interval_s: lines mode: the longest gap between two lines [s]; a heartbeat thread prints
            a line when no update came for that long (a slow sweep cell, a PPO update).
        initial: units already done (a resumed sweep).
        file: output stream (default ``sys.stderr``).
        leave: bar mode: keep the finished bar on screen.

    Usable as a context manager; :meth:`close` prints a final line in lines mode.
    """

    def __init__(self, total: int | None, desc: str, unit: str, mode: str = "auto", interval_s: float = LINE_INTERVAL_S,
                 initial: int = 0, file=None, leave: bool = True) -> None:
        self.file = sys.stderr if file is None else file
        self.mode = progress_mode(mode, stream=self.file)
        self.total, self.desc, self.unit, self.interval_s = total, desc, unit, float(interval_s)
        self.n = initial
        self._initial = initial
        self._postfix: dict[str, object] = {}
        self._lock = threading.Lock()
        self._t0 = self._last_line = time.monotonic()
        self._bar = None
        self._stop = threading.Event()
        self._heartbeat = None
        if self.mode == "bar":
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, file=self.file, leave=leave)
        elif self.mode == "lines" and self.interval_s > 0:
            self._heartbeat = threading.Thread(target=self._beat, name="cpgym-progress", daemon=True)
            self._heartbeat.start()

    # ------------------------------------------------------------------ public
    def update(self, n: int = 1) -> None:
        """Adds ``n`` done units."""
        with self._lock:
            self.n += n
            if self._bar is not None:
                self._bar.update(n)
            elif self.mode == "lines" and time.monotonic() - self._last_line >= self.interval_s:
                self._line()

    def set_postfix(self, **fields) -> None:
        """Extra ``name=value`` fields shown after the counts (floats with 4 significant digits)."""
        with self._lock:
            self._postfix = {k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in fields.items()}
            if self._bar is not None:
                self._bar.set_postfix(self._postfix, refresh=False)

    def write(self, text: str) -> None:
        """Prints a message line (in every mode, also "off": messages are not progress) without
        breaking the bar."""
        with self._lock:
            if self._bar is not None:
                self._bar.write(text, file=self.file)
            else:
                print(text, file=self.file, flush=True)

    def close(self, final_line: bool = True) -> None:
        """Ends the display (lines mode: one final line unless ``final_line`` is false)."""
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
            self._heartbeat = None
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None
            elif self.mode == "lines":
                if final_line:
                    self._line()
                self.mode = "off"

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(final_line=exc_type is None)  # a failed run ends with its error, not a progress line

    # ------------------------------------------------------------------ lines
    def _line(self) -> None:
        from tqdm import tqdm

        now = time.monotonic()
        postfix = ", ".join(f"{k}={v}" for k, v in self._postfix.items())
        text = tqdm.format_meter(self.n, self.total, now - self._t0, prefix=self.desc, unit=self.unit,
                                 postfix=postfix or None, bar_format=_LINE_FORMAT if self.total else None,
                                 initial=self._initial)
        print(text, file=self.file, flush=True)
        self._last_line = now

    def _beat(self) -> None:
        while not self._stop.wait(min(self.interval_s, 1.0)):
            with self._lock:
                if self.mode == "lines" and time.monotonic() - self._last_line >= self.interval_s:
                    self._line()


__all__ = ["Progress", "progress_mode", "PROGRESS_MODES", "LINE_INTERVAL_S"]
