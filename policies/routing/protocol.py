"""Windows, capacity and Vertumnus tuning of the former learned-vs-heuristic routing protocol,
kept for what trains on them: ``cpgym train routing --warmup-s`` (:func:`protocol_windows`),
``cpgym train arms`` (:class:`Scenario`, :func:`capacity_rps`) and ``cpgym tune vertumnus``
(:func:`tune_vertumnus`, :func:`scenarios`). Evaluation is the benchmark's
(``benchmark.protocol``: sealed splits of named tasks; ``cpgym benchmark run``, ``cpgym
evaluate``): the windows here interleave the parts in time and are not sealed.

Windows. A (workload, rate) is cut into consecutive windows of ``episode_window_s`` seconds
(``envs.workloads.windows``); window ``j`` belongs to

* ``test``       if ``j % 4 == 3``,
* ``validation`` if ``j % 4 == 1`` (model selection and early stopping only),
* ``train``      otherwise (``j % 4`` in {0, 2}; heuristic tuning and training).

Warm start. Each window is preceded by ``warmup_s`` seconds of the trace (less for the first
windows): those requests are routed by the policy too, so the pool and caches are in steady state
when the window starts, but only requests arriving inside the window are measured
(:func:`measured_summary`). Requests of the window are followed until they finish (no horizon).

Loads. ``load_fraction x capacity``, with the capacity of the workload on the pool from
:func:`capacity_rps` (the highest rate at which the backlog of the whole workload drains under the
reference router, by bisection).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from baselines.registry import vertumnus_spec
from baselines.runner import run_policy
from baselines.vertumnus import VertumnusParams
from envs import workloads
from envs.metrics.summary import measured_summary  # noqa: F401  (part of the protocol's API)
from envs.planning.capacity_definitions import CapacityBracketError, ProtocolQueueingDefinition, search_capacity
from envs.workloads import transforms

#: Windows of one split period: index j % PERIOD decides the part (module docstring).
PERIOD = 4
PARTS = {"train": (0, 2), "validation": (1,), "test": (3,)}
#: The registry name of the router-only Vertumnus policy (the routing environment's reference).
VERTUMNUS_ROUTER = "vertumnus-router"


def part_of(window_index: int) -> str:
    """``"train"``, ``"validation"`` or ``"test"`` for window ``window_index`` (module docstring)."""
    r = window_index % PERIOD
    return next(p for p, rs in PARTS.items() if r in rs)


def protocol_windows(workload, episode_window_s: float, part: str, warmup_s: float = 0.0) -> list:
    """The windows of ``part`` with their warm-up prefixes.

    Args:
        workload: the full (rate-scaled) workload.
        episode_window_s: window length [s].
        part: ``"train"``, ``"validation"``, ``"test"`` or ``"all"``.
        warmup_s: seconds of the preceding trace prepended to each window [s].

    Returns:
        Workloads re-based to the warm-up start; ``metadata`` holds ``window_index``,
        ``part`` and ``measure_from_s`` (the window start on the re-based time axis [s]), and
        ``window_start_s`` / ``window_end_s`` (the window on the re-based axis, for the
        environment's time-to-window-end feature).

    Raises:
        ValueError: on an unknown part, ``episode_window_s`` <= 0, ``warmup_s`` < 0, or no window.
    """
    if part not in (*PARTS, "all"):
        raise ValueError(f"part must be one of {(*PARTS, 'all')}, got {part!r}")
    if not episode_window_s > 0 or not warmup_s >= 0:
        raise ValueError(f"episode_window_s must be > 0 and warmup_s >= 0, got {episode_window_s}, {warmup_s}")
    if workload.num_requests == 0:
        raise ValueError(f"workload {workload.name!r} is empty")
    num = int(workload.requests[-1].arrival_time_s // episode_window_s) + 1
    out = []
    for j in range(num):
        if part != "all" and part_of(j) != part:
            continue
        start = j * episode_window_s
        warm = min(warmup_s, start)
        wl = transforms.window(workload, start - warm, start + episode_window_s)
        if not any(r.arrival_time_s >= warm for r in wl.requests):
            continue
        wl.metadata.update(window_index=j, part=part_of(j), measure_from_s=warm, window_start_s=0.0,
                           window_end_s=warm + episode_window_s)
        out.append(replace(wl, name=f"{workload.name}[w{j}]"))
    if not out:
        raise ValueError(f"no {part} window of {episode_window_s:g} s in workload {workload.name!r}")
    return out


@dataclass(frozen=True)
class CapacityResult:
    """Capacity of a workload on a pool under a reference router.

    Attributes:
        capacity_rps: highest sustainable rate found [requests/s].
        policy: the reference router.
        probes: ``(rate_rps, last-quarter mean queueing delay [s], sustainable)`` per probe.
    """

    capacity_rps: float
    policy: str
    probes: tuple[tuple[float, float, bool], ...]


def capacity_rps(build_workload: Callable[[float], object], sim_config, policy: str = VERTUMNUS_ROUTER,
                 low_rps: float = 1.0, high_rps: float = 64.0, max_queueing_delay_s: float = 5.0,
                 num_iterations: int = 7) -> CapacityResult:
    """Sustainable rate by bisection (DESIGN.md, "Loads relative to capacity": the highest rate
    at which a long window's backlog drains): the ``protocol-queueing-delay`` definition of
    ``envs.planning.capacity_definitions`` (criterion and search), probed with ``policy``.

    A rate is sustainable when, with the whole workload time-scaled to it, the requests arriving
    in the last quarter of the arrival span wait on average at most ``max_queueing_delay_s``
    before their prefill starts (an overloaded pool's wait grows with time instead).

    Args:
        build_workload: ``rate_rps -> Workload`` (the full workload at that mean rate).
        sim_config: the pool and engine.
        policy: the reference router (registry name).
        low_rps, high_rps: bracket [requests/s]; ``high_rps`` is returned if it is sustainable.

    Raises:
        ValueError: if ``low_rps`` is not sustainable or the bracket is empty.
    """
    if not 0 < low_rps < high_rps:
        raise ValueError(f"need 0 < low_rps < high_rps, got {low_rps}, {high_rps}")
    definition = ProtocolQueueingDefinition(max_queueing_delay_s=max_queueing_delay_s, num_iterations=num_iterations)
    probes = []

    def ok(rate: float) -> bool:
        passes, delay = definition.verdict(run_policy(policy, build_workload(rate), sim_config))
        probes.append((rate, delay, passes))
        return passes

    try:
        lo, _ = search_capacity(ok, definition.search, low_rps, high_rps)
    except CapacityBracketError:
        raise ValueError(f"capacity: {low_rps} requests/s is already overloaded under {policy}") from None
    return CapacityResult(lo, policy, tuple(probes))


# ------------------------------------------------------------------------------------------
# (beta, lambda) tuning of the Vertumnus router on training windows

#: Default tuning grid (24 points; paper §5 bounds beta >= 1, lambda >= 0).
TUNE_BETAS = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
TUNE_LAMBDAS = (0.0, 0.5, 1.0, 2.0)


def tuned_spec(beta: float, lambda_: float, name: str = "vertumnus-tuned"):
    """A :class:`~baselines.registry.PolicySpec` of the Vertumnus router with these parameters,
    labelled ``name`` in results."""
    return vertumnus_spec(name, f"Vertumnus router tuned on training windows (beta {beta:g}, lambda {lambda_:g})",
                          "cpgym tune vertumnus (policies.routing.protocol.tune_vertumnus)",
                          VertumnusParams(beta=beta, lambda_=lambda_))


def run_heuristic_window(policy, wl, sim_config) -> dict:
    """Runs a heuristic (name or spec) on one protocol window; :func:`measured_summary` of it."""
    res = run_policy(policy, wl, sim_config)
    return measured_summary(res, wl.metadata.get("measure_from_s", 0.0))


def tune_vertumnus(windows: Sequence, sim_config, betas: Sequence[float] = TUNE_BETAS,
                   lambdas: Sequence[float] = TUNE_LAMBDAS, log=None) -> dict:
    """Grid search of the Vertumnus router's (beta, lambda) minimising the mean over ``windows``
    (the training windows of a scenario) of the measured mean TTFT.

    Returns:
        ``{"beta", "lambda", "mean_ttft_s", "num_windows", "grid": [{"beta", "lambda",
        "mean_ttft_s"}, ...]}`` (ties: first in grid order, betas outer).

    Raises:
        ValueError: on an empty grid or a parameter outside the paper's bounds.
    """
    if not betas or not lambdas or not windows:
        raise ValueError("tune_vertumnus: empty grid or no window")
    grid = []
    for b in betas:
        for lam in lambdas:
            spec = tuned_spec(float(b), float(lam))
            vals = [run_heuristic_window(spec, wl, sim_config)["mean_ttft_s"] for wl in windows]
            m = float(np.nanmean(vals))
            grid.append({"beta": float(b), "lambda": float(lam), "mean_ttft_s": m})
            if log:
                log(f"tune: beta {b:g} lambda {lam:g}: mean TTFT {m:.4f} s over {len(windows)} windows")
    best = min(grid, key=lambda g: g["mean_ttft_s"])
    return {"beta": best["beta"], "lambda": best["lambda"], "mean_ttft_s": best["mean_ttft_s"],
            "num_windows": len(windows), "grid": grid}


# ------------------------------------------------------------------------------------------
# cells and the evaluation table

def cell_name(workload: str, load_fraction: float | None, rate_rps: float) -> str:
    """A protocol cell's name: ``<workload>@<load>`` (``@0.9`` for a fraction of capacity,
    ``@13.2rps`` for an absolute rate)."""
    return f"{workload}@{load_fraction:g}" if load_fraction is not None else f"{workload}@{rate_rps:g}rps"


@dataclass(frozen=True)
class Scenario:
    """One evaluation scenario: a workload source at one load.

    Args:
        source: ``policies.routing.train.EpisodeSource``-like object with ``workload_obj(seed)`` and
            ``label`` (its ``target_rps`` is ignored: the cell's rate is set here).
        rate_rps: the arrival rate [requests/s].
        load_fraction: ``rate_rps / capacity`` (``None`` for an absolute ``--target-rps``).
        episode_window_s, warmup_s: see :func:`protocol_windows`.
    """

    source: object
    rate_rps: float
    load_fraction: float | None
    episode_window_s: float = 10.0
    warmup_s: float = 30.0

    @property
    def key(self) -> str:
        """``<workload label>@<load>`` (``@0.9`` for a fraction, ``@13.2rps`` absolute)."""
        from pathlib import Path

        s = self.source
        w = s.workload
        return cell_name(Path(w.trace).stem if w.trace else w.name, self.load_fraction, self.rate_rps)

    def windows(self, part: str, seed: int = 0, max_windows: int | None = None) -> list:
        """The ``part`` windows at this cell's rate; at most ``max_windows`` of them, evenly
        spread (:func:`spread_subset`)."""
        source = replace(self.source, workload=replace(self.source.workload, target_rps=None))
        wl = workloads.scale_to_rate(source.workload_obj(seed), self.rate_rps)
        return spread_subset(protocol_windows(wl, self.episode_window_s, part, self.warmup_s), max_windows)


def spread_subset(windows: Sequence, max_windows: int | None) -> list:
    """At most ``max_windows`` of ``windows``, evenly spread over the sequence (first and last
    included; indices ``round(linspace(0, n - 1, max_windows))``), so a long workload's cell keeps
    windows from its whole time span; all of them when ``max_windows`` is None or >= their number.

    Raises:
        ValueError: if ``max_windows`` < 1.
    """
    if max_windows is None or max_windows >= len(windows):
        return list(windows)
    if max_windows < 1:
        raise ValueError(f"max_windows must be >= 1, got {max_windows}")
    idx = np.unique(np.round(np.linspace(0, len(windows) - 1, max_windows)).astype(int))
    return [windows[i] for i in idx]


def scenarios(sim_config, *, trace: str | None = None, workload: str | None = None, loads: Sequence[float] = (),
              target_rps: float | None = None, episode_window_s: float = 10.0, warmup_s: float = 30.0,
              log=None) -> list[Scenario]:
    """The :class:`Scenario` of each load (capacity by bisection once) or of ``target_rps``.

    Args:
        trace / workload: the source (neither: the Mooncake conversation trace).
        loads: fractions of capacity in (0, 2]; exclusive with ``target_rps`` [requests/s].

    Raises:
        ValueError: if neither or both of ``loads`` and ``target_rps`` are given, or a load is
            outside (0, 2] or repeated (the same cell twice: its windows counted twice, a
            narrower, fake confidence interval).
    """
    from policies.routing.episodes import EpisodeSource  # lazy: gymnasium (start-up of the CLI)

    if bool(loads) == (target_rps is not None):
        raise ValueError("give exactly one of loads (--loads, fractions of capacity) and target_rps (--target-rps)")
    if trace is None and workload is None:
        trace = str(workloads.default_trace_path())
    source = EpisodeSource(workloads.WorkloadSource(trace=trace) if trace else workloads.WorkloadSource(name=workload))
    if target_rps is not None:
        return [Scenario(source, float(target_rps), None, episode_window_s, warmup_s)]
    if any(not 0 < x <= 2 for x in loads):
        raise ValueError(f"loads are fractions of capacity in (0, 2], got {list(loads)}")
    repeated = sorted({float(x) for x in loads if list(loads).count(x) > 1})
    if repeated:
        raise ValueError(f"--loads lists {repeated[0]:g} twice: {','.join(f'{x:g}' for x in loads)}; expected distinct "
                         "loads (each is one cell of windows)")
    full = source.workload_obj()
    cap = capacity_rps(lambda r: workloads.scale_to_rate(full, r), sim_config, low_rps=0.5, high_rps=256.0)
    if log:
        log(f"capacity of {source.label} on the pool: {cap.capacity_rps:.2f} requests/s "
            f"({cap.policy}, {len(cap.probes)} probes)")
    return [Scenario(source, f * cap.capacity_rps, f, episode_window_s, warmup_s) for f in loads]
