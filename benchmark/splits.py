"""Sealed splits of a benchmark task: train, validation and test never share a request.

Two kinds (issue #39, "Splits that cannot leak"):

* :class:`TraceSplit` — a recorded trace is cut into three **contiguous time blocks** of its own
  time axis (train first, then validation, then test), each separated from the next by a gap.
  Every episode of a block is built from that block's requests only: its warm-up is taken from
  inside the block (the first episode starts ``warmup_s`` after the block does), so no request of
  another block is ever routed in an episode, its warm-up or the features the environment derives
  from what it routed. The gap (at least the longest warm-up, checked at the task's rate) keeps
  even the session structure of the trace (multi-turn conversations crossing a boundary) apart.
* :class:`SeedSplit` — a generator's episodes come from **disjoint seed ranges**.

Times are seconds of the trace's own (unscaled) clock; a task scales the trace to its rate
(``benchmark.tasks``) before cutting episodes, so the blocks in scaled time are these divided by
the task's ``rate_scale``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: The three parts of every split, in time (or seed) order.
SPLIT_NAMES = ("train", "validation", "test")
#: ``--quick``: at most this many episodes per task (evenly spread over the split, first and last kept).
QUICK_EPISODES = 4


def _check_range(name: str, lo, hi, kind: str) -> None:
    ok = all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in (lo, hi))
    if not ok or not 0 <= lo < hi:
        raise ValueError(f"split.{name}: expected a {kind} range (start, end) with 0 <= start < end, got ({lo!r}, {hi!r})")


@dataclass(frozen=True)
class TraceSplit:
    """Contiguous time blocks of a trace [s of the trace's own clock].

    Args:
        train_s, validation_s, test_s: ``(start, end)`` of each block; in that order in time, each
            starting at least ``gap_s`` after the previous one ends.
        gap_s: the minimum gap between blocks [s of the trace's clock].

    Raises:
        ValueError: naming the field, on an empty or overlapping block or a gap shorter than
            ``gap_s``.
    """

    train_s: tuple[float, float]
    validation_s: tuple[float, float]
    test_s: tuple[float, float]
    gap_s: float

    def __post_init__(self) -> None:
        for name in ("train_s", "validation_s", "test_s"):
            _check_range(name, *getattr(self, name), "time")
        if not (isinstance(self.gap_s, (int, float)) and math.isfinite(self.gap_s) and self.gap_s >= 0):
            raise ValueError(f"split.gap_s: expected a finite number >= 0 [s], got {self.gap_s!r}")
        for (a, ra), (b, rb) in (((n, getattr(self, n + "_s")), (m, getattr(self, m + "_s")))
                                 for n, m in (("train", "validation"), ("validation", "test"))):
            if rb[0] - ra[1] < self.gap_s - 1e-9:
                raise ValueError(f"split: {b} starts {rb[0] - ra[1]:g} s after {a} ends; expected a gap >= "
                                 f"gap_s = {self.gap_s:g} s")

    def block_s(self, split: str) -> tuple[float, float]:
        """``(start, end)`` of ``split``'s block [s of the trace's clock].

        Raises:
            ValueError: on an unknown split name.
        """
        check_split_name(split)
        return getattr(self, f"{split}_s")

    def to_dict(self) -> dict:
        return {"kind": "time", "train_s": list(self.train_s), "validation_s": list(self.validation_s),
                "test_s": list(self.test_s), "gap_s": self.gap_s}


@dataclass(frozen=True)
class SeedSplit:
    """Disjoint seed ranges of a generator: ``range(start, end)`` per part.

    Raises:
        ValueError: naming the field, on an empty range or overlapping ranges.
    """

    train: tuple[int, int]
    validation: tuple[int, int]
    test: tuple[int, int]

    def __post_init__(self) -> None:
        for name in SPLIT_NAMES:
            lo, hi = getattr(self, name)
            if not (isinstance(lo, int) and isinstance(hi, int)):
                raise ValueError(f"split.{name}: expected integer seeds, got ({lo!r}, {hi!r})")
            _check_range(name, lo, hi, "seed")
        ranges = sorted(getattr(self, n) for n in SPLIT_NAMES)
        for (_, end), (start, _) in zip(ranges, ranges[1:]):
            if start < end:
                raise ValueError(f"split: seed ranges overlap: {ranges}")

    def seeds(self, split: str) -> range:
        """The seeds of ``split``.

        Raises:
            ValueError: on an unknown split name.
        """
        check_split_name(split)
        return range(*getattr(self, split))

    def to_dict(self) -> dict:
        return {"kind": "seed", **{n: list(getattr(self, n)) for n in SPLIT_NAMES}}


def check_split_name(split: str) -> None:
    """Raises ValueError unless ``split`` is one of :data:`SPLIT_NAMES`."""
    if split not in SPLIT_NAMES:
        raise ValueError(f"split: expected one of {', '.join(SPLIT_NAMES)}, got {split!r}")
