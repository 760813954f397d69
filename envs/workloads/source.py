"""The one workload builder: where requests come from (a trace file or a named synthetic
workload) and the transforms applied to them (rate scaling, then an arrival window).

Every entry point builds its workload here — experiment specs (``experiments.spec.WorkloadSpec``),
the CLI's shared workload flags (``experiments.common.workload_from_args``), both trainers
(``policies.routing.train.EpisodeSource`` and ``policies.reconfig.train``), both environments' default
episodes and the paper experiments (``experiments.paper_experiments``) — so the same settings
give the same request list everywhere (tested in ``tests/workloads/test_workload_source.py``).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from envs.sim.request import Workload
from envs.workloads.registry import WORKLOADS, get_workload
from envs.workloads.traces import load_trace
from envs.workloads.transforms import scale_rate, scale_to_rate, window

__all__ = ["WorkloadSource", "build_workload"]


@dataclass(frozen=True)
class WorkloadSource:
    """A workload's source and transforms.

    Args:
        name: named synthetic workload (a key of ``envs.workloads.WORKLOADS``), or ``None``.
        trace: trace file (Mooncake JSONL, Azure 2023 CSV, L-Eval lengths CSV), or ``None``.
        seed: seed of the synthetic generator / of spreading quantised trace timestamps (>= 0).
        params: keyword overrides of the named workload, as ``((name, value), ...)``.
        target_rps: time-scale arrivals to this mean rate [requests/s] (``scale_to_rate``).
        rate_scale: multiply the arrival rate by this factor (``scale_rate``); exclusive with
            ``target_rps``.
        arrival_window_s: keep arrivals in ``[start, end)`` [s], applied after rate scaling.
        skip_invalid: skip invalid trace lines instead of failing (their count is in
            ``Workload.metadata["num_skipped_invalid"]``).

    Raises:
        ValueError: naming the field, unless exactly one of ``name``/``trace`` is set, on a
            non-positive or non-finite rate, both rate knobs, a negative seed, ``params`` with a
            trace, or a window that is not ``0 <= start < end``.
    """

    name: str | None = None
    trace: str | None = None
    seed: int = 0
    params: tuple[tuple[str, Any], ...] = ()
    target_rps: float | None = None
    rate_scale: float | None = None
    arrival_window_s: tuple[float, float] | None = None
    skip_invalid: bool = False

    def __post_init__(self) -> None:
        if (self.name is None) == (self.trace is None):
            raise ValueError("workload: exactly one of a named workload and a trace file must be set")
        if self.name is not None:
            if not isinstance(self.name, str) or self.name not in WORKLOADS:
                # an unknown name failed only at build(): after a trainer had written to its --out
                raise ValueError(f"unknown workload {self.name!r}; known workloads: {', '.join(sorted(WORKLOADS))}")
        if self.trace is not None:
            object.__setattr__(self, "trace", str(self.trace))
            if self.params:
                raise ValueError("workload: params override a named workload, not a trace")
        object.__setattr__(self, "params", tuple((str(k), v) for k, v in (dict(self.params).items())))
        if self.target_rps is not None and self.rate_scale is not None:
            raise ValueError("workload: target_rps and rate_scale are exclusive")
        for key in ("target_rps", "rate_scale"):
            v = getattr(self, key)
            if v is not None and not (isinstance(v, numbers.Real) and not isinstance(v, bool) and v > 0 and math.isfinite(v)):
                raise ValueError(f"workload: {key} must be a finite number > 0, got {v!r}")
        if self.arrival_window_s is not None:
            try:
                start, end = (float(x) for x in self.arrival_window_s)
            except (TypeError, ValueError):
                raise ValueError(f"workload: arrival_window_s must be two numbers (start, end) [s], "
                                 f"got {self.arrival_window_s!r}") from None
            if not (0 <= start < end):
                raise ValueError(f"workload: arrival_window_s must be [start, end) with 0 <= start < end, "
                                 f"got {start:g} {end:g}")
            object.__setattr__(self, "arrival_window_s", (start, end))
        seed = self.seed
        if isinstance(seed, bool) or not isinstance(seed, numbers.Real) or not float(seed).is_integer() or seed < 0:
            raise ValueError(f"workload: seed must be an integer >= 0, got {seed!r}")
        object.__setattr__(self, "seed", int(seed))

    @property
    def label(self) -> str:
        """Short name: the named workload or the trace file's stem."""
        return self.name if self.name is not None else Path(self.trace).name.split(".")[0]

    def with_seed(self, seed: int) -> WorkloadSource:
        """The same source with another generator / arrival-spreading seed."""
        return replace(self, seed=seed)

    def build(self) -> Workload:
        """Loads or generates the workload, then rate-scales it, then keeps the arrival window.

        Returns:
            The :class:`~envs.sim.request.Workload` (identical for identical fields).

        Raises:
            ValueError / FileNotFoundError / ``TraceFormatError``: from the loaders, the
                generators (unknown name or override) and the transforms.
        """
        return self.transform(self.load())

    def load(self) -> Workload:
        """The untransformed workload: the trace as loaded, or the generator's output."""
        if self.trace is not None:
            return load_trace(self.trace, skip_invalid=self.skip_invalid, spread_seed=self.seed)
        return get_workload(self.name, seed=self.seed, **dict(self.params))

    def transform(self, wl: Workload) -> Workload:
        """Applies this source's rate scaling, then its arrival window, to ``wl`` (the output of
        :meth:`load`; lets a caller load once and sweep rates with ``dataclasses.replace``)."""
        if self.target_rps is not None:
            wl = scale_to_rate(wl, self.target_rps)
        elif self.rate_scale is not None:
            wl = scale_rate(wl, self.rate_scale)
        if self.arrival_window_s is not None:
            wl = window(wl, self.arrival_window_s[0], self.arrival_window_s[1])
        return wl


def build_workload(**fields: Any) -> Workload:
    """``WorkloadSource(**fields).build()`` (see :class:`WorkloadSource` for fields and errors)."""
    return WorkloadSource(**fields).build()
