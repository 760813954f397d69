"""The spec model: frozen dataclasses for a validated experiment spec, its workload and its cells.

See :mod:`experiments.spec` for the file format; :mod:`experiments.spec.loader` builds these.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from envs.sim import SimConfig
from envs.workloads import arrivals
from envs.workloads.source import build_workload

SPEC_VERSION = 1  # part of every cell key; bump when the meaning of a resolved cell changes
TRACES_PREFIX = "@traces/"



class SpecError(ValueError):
    """An invalid experiment spec: ``"<file>: <key>: <problem>; expected <form>"``; without a key
    (an error of the whole file, e.g. its syntax) ``"<file>: <problem>; expected <form>"``."""

    def __init__(self, file: str | Path, key: str | None, problem: str, expected: str) -> None:
        self.file, self.key, self.problem, self.expected = str(file), key, problem, expected
        super().__init__(f"{file}: {key + ': ' if key else ''}{problem}; expected {expected}")


class WorkloadValueError(ValueError):
    """A bad :class:`WorkloadSpec` value: the problem (``str``) and the ``expected`` values, for a
    :class:`SpecError` (was "expected a valid workload (see experiments/spec/model.py)")."""

    def __init__(self, problem: str, expected: str) -> None:
        super().__init__(problem)
        self.expected = expected


@dataclass(frozen=True)
class WorkloadSpec:
    """Where a cell's requests come from and how they are transformed.

    Args:
        name: named synthetic workload (a key of ``envs.workloads.WORKLOADS``), or ``None``.
        trace: trace file (absolute after loading; Mooncake JSONL, Azure 2023 CSV, L-Eval CSV).
        seed: seed of the synthetic generator / of spreading quantised trace timestamps.
        params: keyword overrides of the named workload, as ``((name, value), ...)``.
        target_rps: time-scale arrivals to this mean rate [requests/s] (``scale_to_rate``).
        rate_scale: multiply the arrival rate by this factor (``scale_rate``).
        arrival_window_s: keep arrivals in ``[start, end)`` [s], applied after rate scaling.
        skip_invalid: skip invalid trace lines instead of failing.

    Raises:
        ValueError: unless exactly one of ``name``/``trace`` is set, or on ``params`` with a trace,
            a non-positive rate, both rate knobs set, or an empty window.
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
            raise WorkloadValueError("exactly one of workload.name (named workload) and workload.trace (trace file) must "
                                     "be set", "workload.name (a named workload) or workload.trace (a trace file)")
        if self.trace is not None and self.params:
            raise WorkloadValueError(f"workload.params {sorted(k for k, _ in self.params)} override a named workload's "
                                     "generator, not a trace (a trace keeps its own requests; use target_rps, rate_scale "
                                     "or arrival_window_s)", "workload.params only with workload.name")
        if self.target_rps is not None and self.rate_scale is not None:
            raise WorkloadValueError("workload.target_rps and workload.rate_scale are exclusive",
                                     "one of workload.target_rps and workload.rate_scale")
        for key in ("target_rps", "rate_scale"):
            v = getattr(self, key)
            if v is not None and not (v > 0 and math.isfinite(v)):
                raise WorkloadValueError(f"workload.{key} must be a finite number > 0, got {v!r}", "a finite number > 0")
        if self.arrival_window_s is not None and not (self.arrival_window_s[1] > self.arrival_window_s[0] >= 0):
            raise WorkloadValueError(f"workload.arrival_window_s must be [start, end) with 0 <= start < end, got "
                                     f"{list(self.arrival_window_s)}", "[start, end] [s] with 0 <= start < end")
        if self.seed < 0:
            raise WorkloadValueError(f"workload.seed must be >= 0, got {self.seed}", "an integer >= 0")

    @property
    def label(self) -> str:
        """Short name: the named workload or the trace file's stem."""
        return self.name if self.name is not None else Path(self.trace).name.split(".")[0]

    def build(self):
        """Loads / generates the workload and applies rate scaling and windowing.

        Returns:
            ``envs.sim.Workload``.

        Raises:
            ValueError / FileNotFoundError: from the loaders and transforms.
        """
        return build_workload(name=self.name, trace=self.trace, seed=self.seed, target_rps=self.target_rps,
                              rate_scale=self.rate_scale, arrival_window_s=self.arrival_window_s,
                              skip_invalid=self.skip_invalid,
                              params=tuple((k, materialize_param(v)) for k, v in self.params))


@dataclass(frozen=True)
class Cell:
    """One run of a sweep: everything needed to reproduce it, plus its labels.

    Args:
        key: deterministic cell key (16 hex digits of the SHA-256 of the resolved config).
        sweep: sweep (spec) name.
        workload: resolved workload spec.
        config: resolved simulator config (``config.seed`` is the run seed).
        policy: registered policy name.
        policy_params: ``((name, value), ...)`` passed to the policy (empty: registry defaults).
        axes: ``((dotted path, value), ...)`` of the swept values that define this cell
            (grid, listed overrides, ``policy``, ``seed``) — the report's grouping columns.
        legacy_key: the key earlier versions gave this cell, with the absolute trace / calibration
            paths of this checkout hashed (``experiments.spec.cells.cell_key``); ``None`` where it
            equals ``key``. A resume counts a finished cell of that key as this cell.
    """

    key: str
    sweep: str
    workload: WorkloadSpec
    config: SimConfig
    policy: str
    policy_params: tuple[tuple[str, Any], ...]
    axes: tuple[tuple[str, Any], ...]
    legacy_key: str | None = field(default=None, compare=False)

    def to_dict(self) -> dict:
        """JSON-able description (``cell.json``)."""
        wl = asdict(self.workload)
        wl["params"] = dict(self.workload.params)
        return {"key": self.key, "sweep": self.sweep, "policy": self.policy, "seed": self.config.seed,
                "policy_params": dict(self.policy_params), "axes": dict(self.axes), "workload": wl,
                "sim_config": self.config.to_dict(), "spec_version": SPEC_VERSION}


@dataclass(frozen=True)
class ExperimentSpec:
    """A validated experiment spec (see the module docstring for the file format).

    Args:
        name: sweep name (output folder name, wandb group).
        path: the spec file.
        description: free text.
        workload: base workload.
        config: base simulator config (``sim``, ``calibration``, ``horizon_s`` applied).
        policies: policy names (cartesian axis).
        policy_params: static parameters per policy, ``((policy, ((param, value), ...)), ...)``.
        seeds: run seeds (cartesian axis).
        seed_workload: each run seed also offsets the workload seed (see the module docstring).
        grid: cartesian axes ``((dotted path, (value, ...)), ...)`` (``rates`` included).
        cells: listed overrides ``(((dotted path, value), ...), ...)``; ``((),)`` when none.
    """

    name: str
    path: str
    description: str
    workload: WorkloadSpec
    config: SimConfig
    policies: tuple[str, ...]
    policy_params: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]
    seeds: tuple[int, ...]
    seed_workload: bool
    grid: tuple[tuple[str, tuple[Any, ...]], ...]
    cells: tuple[tuple[tuple[str, Any], ...], ...]
    _resolved: tuple[Cell, ...] = field(default=(), repr=False, compare=False)

    def resolve(self) -> list[Cell]:
        """All cells, in a deterministic order (listed x grid x policies x seeds)."""
        return list(self._resolved)

    @property
    def num_cells(self) -> int:
        return len(self._resolved)


def materialize_param(value: Any) -> Any:
    """Turns an arrival-process parameter (see :func:`experiments.spec.loader.check_arrivals`) into its object."""
    if isinstance(value, tuple) and value and all(isinstance(x, tuple) and len(x) == 2 for x in value):
        d = dict(value)

        if set(d) == {"poisson_rps"}:
            return arrivals.PoissonArrivals(d["poisson_rps"])
        if set(d) == {"gamma_rps", "cv"}:
            return arrivals.GammaArrivals(d["gamma_rps"], cv=d["cv"])
    return value


def make_workload(file: str | Path, kwargs: dict, key: str) -> WorkloadSpec:
    """``WorkloadSpec(**kwargs)``, its ``__post_init__`` errors turned into a :class:`SpecError` at ``key``."""
    try:
        return WorkloadSpec(**kwargs)
    except (ValueError, TypeError) as exc:
        from dataclasses import fields

        expected = getattr(exc, "expected", None) or ("a workload mapping with the keys "
                                                      + ", ".join(f.name for f in fields(WorkloadSpec)))
        raise SpecError(file, key, str(exc), expected) from None
