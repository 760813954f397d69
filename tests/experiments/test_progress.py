"""Progress output: a line-based display when stderr is not a terminal (``cpgym simulate`` piped
used to say nothing), a tqdm bar on a terminal, silence with ``--quiet``."""

from __future__ import annotations

import io
import re

from envs.progress import Progress, progress_mode
from experiments.cli import main


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_mode_follows_the_stream_and_the_options():
    assert progress_mode(None, stream=io.StringIO()) == "lines"
    assert progress_mode(None, stream=_Tty()) == "bar"
    assert progress_mode(True, stream=io.StringIO()) == "bar"
    assert progress_mode(None, quiet=True, stream=_Tty()) == "off"
    assert progress_mode(False) == "off"


def test_lines_mode_prints_counts_and_fields():
    f = io.StringIO()
    with Progress(10, "run", "req", mode="lines", interval_s=0.0, file=f) as p:
        p.update(4)
        p.set_postfix(mean_ttft_s=1.23456)
        p.update(6)
    lines = f.getvalue().splitlines()
    assert lines[0].startswith("run: 4/10 req (40%)")
    assert lines[-1].startswith("run: 10/10 req (100%)") and "mean_ttft_s=1.235" in lines[-1]
    assert "\r" not in f.getvalue()  # plain lines, no carriage-return redraws in a log file


def test_lines_mode_heartbeat_without_updates():
    """A slow unit (a long sweep cell) still gets a line every interval_s."""
    import time

    f = io.StringIO()
    p = Progress(3, "sweep", "cell", mode="lines", interval_s=0.05, file=f)
    deadline = time.monotonic() + 30
    while not f.getvalue() and time.monotonic() < deadline:
        time.sleep(0.01)
    p.close()
    assert f.getvalue().startswith("sweep: 0/3 cell (0%)")


def test_off_mode_prints_nothing_but_messages():
    f = io.StringIO()
    with Progress(5, "x", "req", mode="off", file=f) as p:
        p.update(5)
        p.write("cell failed")
    assert f.getvalue() == "cell failed\n"


def test_simulate_piped_reports_progress_and_quiet_silences(capsys):
    argv = ["simulate", "--workload", "mixed-default", "--arrival-window-s", "0", "10", "--policy", "least-work,round-robin"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    for policy in ("least-work", "round-robin"):
        done = [line for line in err.splitlines() if line.startswith(f"{policy}: ")]
        assert done and re.match(rf"{policy}: (\d+)/\1 req \(100%\)", done[-1]), err
    assert main(argv + ["--quiet"]) == 0
    # only warnings are left (round-robin is past saturation in this window: one 'overloaded' line)
    assert [line for line in capsys.readouterr().err.splitlines() if not line.startswith("warning: ")] == []


def test_sweep_piped_reports_progress_lines(tmp_path, capsys):
    from experiments.spec import load_spec
    from experiments.sweep.run import run_sweep
    from tests.experiments.conftest import write_spec

    spec = load_spec(write_spec(tmp_path, """
name: lines
workload: {name: mixed-default, params: {duration_s: 3.0}}
policies: [least-work, round-robin]
seeds: [0]
"""))
    run_sweep(spec, tmp_path / "out", jobs=1)  # default: stderr is not a terminal here -> lines
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("lines: 2/2 cell (100%)") and "done=2, failed=0" in last


def test_interrupt_of_any_command_is_one_line_and_status_130(monkeypatch, capsys):
    from experiments.commands import simulate

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(simulate, "run", interrupted)
    assert main(["simulate"]) == 130
    assert capsys.readouterr().err == "cpgym simulate: interrupted\n"


def test_a_failed_run_ends_with_its_error_not_a_progress_line():
    import pytest

    f = io.StringIO()
    with pytest.raises(RuntimeError):
        with Progress(10, "run", "req", mode="lines", interval_s=60.0, file=f):
            raise RuntimeError("boom")
    assert f.getvalue() == ""
