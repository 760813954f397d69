"""Reference points of a reconfiguration task built from fixed pools (issue #39, item 4): the
best fixed composition chosen on training workloads, and the per-phase hindsight oracle.

Every number here comes from whole-workload simulations of *fixed* pools, one per candidate
composition, with a router (default the Vertumnus router, paper §5):

* :func:`phase_ttft` — per composition and phase, the mean TTFT of the phase's requests;
* :func:`best_fixed_composition` — the composition with the lowest mean (over the workloads,
  each weighted equally) of its whole-workload mean TTFT: chosen on the TRAINING workloads, it
  is an attainable reference (a deployment that never reconfigures);
* :func:`per_phase_oracle_ttft` — the request-weighted mean TTFT when every phase gets the fixed
  pool that was fastest for it: a hindsight oracle ("not attainable": it knows the outcome and
  reconfigures for free at every phase boundary, with no drain or cold cache), an upper bound on
  what reconfiguring once per phase can gain;
* :func:`schedule_oracle` — a schedule of compositions chosen in hindsight from the per-phase
  table and *followed in the simulator* from the best fixed composition (:class:`ScheduleFollower`):
  every split and merge drains and switches as a controller's would, so it is the head-room a controller that knew the phase
  boundaries and their outcomes could reach, below the free per-phase oracle;
* :func:`fixed_and_oracle_rows` — both, and the starting composition, per evaluation workload;
* :func:`headroom` — their means and the paired differences against the fixed composition [%].

The learned controller's behaviour-cloning labels (``policies.reconfig.oracle``) use the same
per-phase table.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import replace

import numpy as np

from baselines.registry import get_policy
from baselines.runner import run_policy
from envs.metrics.stats import paired_ci
from envs.metrics.summary import measured_summary
from envs.planning.composition import degree_counts
from envs.planning.operations import composition_distance, covers_pool, operations_towards
from envs.sim.events import EventPriority
from envs.sim.reconfig import apply_operation

__all__ = ["phase_ttft", "fixed_mean_ttft", "best_fixed_composition", "per_phase_oracle_ttft", "fixed_and_oracle_rows",
           "headroom", "phase_at", "select_targets", "ScheduleFollower", "follow_schedule_run", "schedule_oracle",
           "SCHEDULE_SWITCH_COSTS_S_PER_GPU", "MIN_DECISION_WINDOW_S", "check_decision_window_s"]


def phase_ttft(workload, sim_config, compositions: list[str], router: str = "vertumnus-router"):
    """Per fixed composition and phase, the mean TTFT of the phase's requests
    (``metadata["phase_of_request"]``, by arrival) when the whole workload runs on that fixed pool.

    One simulation per composition (``router``, simulator seed = ``sim_config.seed``).

    Returns:
        ``(ttft_s, num_requests)``: a float array ``(len(compositions), num_phases)`` [s] (inf
        for a phase without finished requests) and an int array ``(num_phases,)`` of the
        requests per phase.

    Raises:
        ValueError: when the workload has no ``phase_of_request`` metadata.
    """
    phase = (workload.metadata or {}).get("phase_of_request")
    if phase is None:
        raise ValueError(f"workload {workload.name!r} has no metadata['phase_of_request'] (expected a phased "
                         "synthetic workload such as matched-phases or production-day)")
    phase = np.asarray(phase)
    num_phases = len(workload.metadata["phase_boundaries_s"]) - 1
    ttft = np.full((len(compositions), num_phases), np.inf)
    for k, comp in enumerate(compositions):
        cfg = replace(sim_config, pool=replace(sim_config.pool, composition=comp))
        t = run_policy(router, workload, cfg).records["ttft_s"]
        for p in range(num_phases):
            sel = t[phase == p]
            if len(sel) and not np.isnan(sel).all():
                ttft[k, p] = np.nanmean(sel)
    return ttft, np.bincount(phase, minlength=num_phases)


def fixed_mean_ttft(ttft_s: np.ndarray, num_requests: np.ndarray) -> np.ndarray:
    """Whole-workload mean TTFT [s] of each fixed composition, shape ``(K,)``: the per-phase means
    ``ttft_s`` ``(K, P)`` weighted by the phase's requests ``num_requests`` ``(P,)`` (phases without
    requests are skipped; ``inf`` where a composition has no data for a phase with requests, ``nan``
    when no phase has requests)."""
    ttft_s = np.asarray(ttft_s, float)
    num = np.asarray(num_requests, float)
    used = num > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        return (ttft_s[:, used] * num[used]).sum(axis=1) / num[used].sum()


def per_phase_oracle_ttft(ttft_s: np.ndarray, num_requests: np.ndarray) -> tuple[float, list[int]]:
    """The per-phase hindsight oracle of a :func:`phase_ttft` table: each phase gets the
    composition with its lowest mean TTFT (ties: the earlier one).

    Args:
        ttft_s: ``(K, P)`` mean TTFT [s] per composition and phase (inf: no finished request).
        num_requests: ``(P,)`` requests per phase.

    Returns:
        ``(mean_ttft_s, schedule)``: the request-weighted mean over phases of those lowest means
        [s] (phases without requests skipped; nan when none has requests) and the chosen
        composition index per phase.

    Raises:
        ValueError: when the shapes do not match.
    """
    ttft_s = np.asarray(ttft_s, float)
    num = np.asarray(num_requests, float)
    if ttft_s.ndim != 2 or ttft_s.shape[0] < 1 or num.shape != (ttft_s.shape[1],):
        raise ValueError(f"ttft_s must be (num_compositions >= 1, num_phases) and num_requests (num_phases,); got "
                         f"{ttft_s.shape} and {num.shape}")
    schedule = [int(k) for k in np.argmin(ttft_s, axis=0)]
    best = ttft_s[schedule, np.arange(ttft_s.shape[1])]
    used = num > 0
    if not used.any():
        return float("nan"), schedule
    return float((best[used] * num[used]).sum() / num[used].sum()), schedule


def phase_at(workload, time_s: float) -> int:
    """Index of the phase of ``workload`` (``metadata["phase_boundaries_s"]``) that holds ``time_s``
    (the last phase after the end).

    Raises:
        ValueError: when the workload has no phase metadata (not a phased synthetic workload).
    """
    bounds = (workload.metadata or {}).get("phase_boundaries_s")
    if not bounds:
        raise ValueError(f"workload {workload.name!r} has no metadata['phase_boundaries_s'] (expected a phased "
                         "synthetic workload such as matched-phases)")
    return int(min(max(np.searchsorted(bounds, time_s, side="right") - 1, 0), len(bounds) - 2))


def select_targets(ttft_s: np.ndarray, num_requests: np.ndarray, counts: list[dict], initial: dict,
                   tolerance: float = 0.0, switch_cost_s_per_gpu: float = 0.0) -> list[int]:
    """Oracle composition (index into ``counts``) of each phase from the per-phase mean TTFTs of
    :func:`phase_ttft`.

    With ``switch_cost_s_per_gpu == 0`` (the per-phase rule): per phase, among the compositions
    within ``tolerance`` (a share: 0.03 = 3 %) of its lowest mean TTFT, the one closest
    (``envs.planning.operations.composition_distance``) to the previous phase's choice
    (``initial`` for the first phase): near-ties cost no reconfiguration; remaining ties go to
    the earlier composition.

    With ``switch_cost_s_per_gpu > 0`` (myopia about reconfiguration removed): the schedule
    ``k_0..k_{P-1}`` minimising ``Σ_p num_requests[p] x ttft_s[k_p, p] + switch_cost_s_per_gpu x
    Σ_p distance(k_{p-1}, k_p)`` (total TTFT [request-s] plus a cost per GPU moved, ``k_{-1}`` =
    ``initial``), by dynamic programming over phases (exact; ties to the earlier composition);
    ``tolerance`` is then not used. The move from ``initial`` is charged too, so a very large
    cost keeps ``initial`` throughout; in between, the oracle trades per-phase optima against
    the drain of the operations reaching them (the per-phase fixed-pool TTFTs themselves still
    ignore the backlog a switch leaves).

    Args:
        ttft_s: ``(K, P)`` mean TTFT [s] per composition and phase (inf: no data; never chosen
            in a phase with requests where another composition has data).
        num_requests: ``(P,)`` requests per phase.
        counts: ``K`` compositions as ``{degree: num_workers}`` (``envs.planning.composition.degree_counts``).
        initial: the pool's initial composition, same form.

    Raises:
        ValueError: on shapes that do not match, a negative tolerance, or a negative or
            non-finite switch cost.
    """
    ttft_s = np.asarray(ttft_s, float)
    num_requests = np.asarray(num_requests, float)
    K, P = ttft_s.shape if ttft_s.ndim == 2 else (-1, -1)
    if K != len(counts) or num_requests.shape != (P,):
        raise ValueError(f"ttft_s must be (len(counts)={len(counts)}, num_phases) and num_requests (num_phases,); "
                         f"got {np.shape(ttft_s)} and {np.shape(num_requests)}")
    if not (tolerance >= 0 and 0 <= switch_cost_s_per_gpu < np.inf):
        raise ValueError(f"tolerance must be >= 0 and switch_cost_s_per_gpu finite and >= 0, got {tolerance}, "
                         f"{switch_cost_s_per_gpu}")
    if switch_cost_s_per_gpu == 0:
        out, prev = [], initial
        for p in range(P):
            best = ttft_s[:, p].min()
            near = [k for k in range(K) if ttft_s[k, p] <= best * (1.0 + tolerance)]
            k = min(near, key=lambda k: (composition_distance(prev, counts[k]), ttft_s[k, p], k))
            out.append(k)
            prev = counts[k]
        return out
    dist = np.array([[composition_distance(a, b) for b in counts] for a in counts], float)
    # (K, P) [request-s]: inf (no finished request) stays inf in a phase with requests, as the
    # per-phase rule never picks it; 0 in a phase without requests or without any finite entry
    informative = (num_requests > 0) & np.isfinite(ttft_s).any(axis=0)
    phase_cost = np.where(informative, ttft_s, 0.0) * num_requests
    cost = phase_cost[:, 0] + switch_cost_s_per_gpu * np.array([composition_distance(initial, c) for c in counts])
    back = np.zeros((P, K), dtype=np.int64)
    for p in range(1, P):
        total = cost[:, None] + switch_cost_s_per_gpu * dist  # [from, to]
        back[p] = np.argmin(total, axis=0)  # first minimum: ties to the earlier composition
        cost = total[back[p], np.arange(K)] + phase_cost[:, p]
    path = [int(np.argmin(cost))]
    for p in range(P - 1, 0, -1):
        path.append(int(back[p, path[-1]]))
    return path[::-1]


def best_fixed_composition(workloads, sim_config, compositions: list[str],
                           router: str = "vertumnus-router") -> tuple[str, np.ndarray]:
    """The fixed composition with the lowest mean TTFT on ``workloads`` (the training split).

    Each composition runs every workload on a fixed pool (``router``, simulator seed =
    ``sim_config.seed``); its score is the mean over the workloads of each run's mean TTFT of
    the finished requests (every workload weighs the same, like an episode of the paired
    comparison). Ties go to the earlier composition.

    Args:
        workloads: one or more :class:`~envs.sim.request.Workload` (training episodes).
        sim_config: the simulator settings; its pool's composition is replaced by each candidate.
        compositions: candidate compositions (``envs.planning.composition.enumerate_compositions``
            or ``envs.reconfig_env.target_menu``).
        router: a registered policy name.

    Returns:
        ``(composition, mean_ttft_s)``: the winner and the ``(len(compositions),)`` scores [s]
        (nan where no request finished in some workload; such a composition never wins over a
        finite score).

    Raises:
        ValueError: on no workload or no composition.
    """
    workloads = list(workloads)
    if not workloads or not compositions:
        raise ValueError(f"best_fixed_composition needs at least one workload and one composition, got "
                         f"{len(workloads)} and {len(compositions)}")
    table = np.array([[_mean_ttft(run_policy(router, wl, replace(sim_config, pool=replace(sim_config.pool, composition=c))))
                       for c in compositions] for wl in workloads])
    scores = table.mean(axis=0)
    k = int(np.argmin(np.where(np.isnan(scores), np.inf, scores)))
    return compositions[k], scores


def _mean_ttft(result) -> float:
    t = np.asarray(result.records["ttft_s"], float)
    return float(np.nanmean(t)) if t.size and not np.isnan(t).all() else float("nan")


def fixed_and_oracle_rows(workloads, sim_config, compositions: list[str], fixed: str,
                          router: str = "vertumnus-router") -> list[dict]:
    """Per evaluation workload, the mean TTFT [s] of the references: ``fixed`` held all along
    (e.g. :func:`best_fixed_composition` of the training split), the starting composition
    ``sim_config.pool.composition`` held all along (no reconfiguration), and the per-phase
    hindsight oracle (:func:`per_phase_oracle_ttft`) over ``compositions``, ``fixed`` and the
    starting composition (so that it is never behind either).

    One :func:`phase_ttft` table per workload over ``compositions`` plus ``fixed`` and the
    starting composition when they are not in it (whole-workload means are request-weighted
    phase means, :func:`fixed_mean_ttft`).

    Returns:
        one dict per workload: ``workload`` (its name), ``source``, ``fixed_mean_ttft_s``,
        ``no_reconfiguration_mean_ttft_s``, ``best_fixed_hindsight_mean_ttft_s`` (the best
        composition of ``menu`` for this workload, chosen knowing its outcome),
        ``oracle_mean_ttft_s`` [s], ``oracle_schedule`` (a composition per phase).

    Raises:
        ValueError: when a workload has no phase metadata.
    """
    start = sim_config.pool.composition
    menu = list(compositions) + [c for c in dict.fromkeys((fixed, start)) if c not in compositions]
    rows = []
    for wl in workloads:
        ttft, num = phase_ttft(wl, sim_config, menu, router)
        means = fixed_mean_ttft(ttft, num)
        oracle, schedule = per_phase_oracle_ttft(ttft, num)
        rows.append({"workload": wl.name, "source": wl.source, "fixed_mean_ttft_s": float(means[menu.index(fixed)]),
                     "no_reconfiguration_mean_ttft_s": float(means[menu.index(start)]),
                     "best_fixed_hindsight_mean_ttft_s": float(np.nanmin(means)), "oracle_mean_ttft_s": oracle,
                     "oracle_schedule": [menu[k] for k in schedule]})
    return rows


def headroom(rows: list[dict]) -> dict:
    """Summary of :func:`fixed_and_oracle_rows`: the mean over workloads of each reference's mean
    TTFT [s] and, per workload, the difference to the fixed composition in % of it, as
    ``(mean, ci_low, ci_high)`` (95 % Student-t interval over the workloads, paired,
    ``envs.metrics.stats.paired_ci``; nan bounds for one workload). Negative: faster than fixed.

    Returns:
        ``{"num_workloads", "fixed_mean_ttft_s", "oracle_mean_ttft_s",
        "no_reconfiguration_mean_ttft_s", "oracle_vs_fixed_pct", "no_reconfiguration_vs_fixed_pct"}``.

    Raises:
        ValueError: on no rows.
    """
    if not rows:
        raise ValueError("headroom needs at least one row of fixed_and_oracle_rows")
    fixed = np.array([r["fixed_mean_ttft_s"] for r in rows], float)
    out: dict = {"num_workloads": len(rows), "fixed_mean_ttft_s": float(fixed.mean())}
    for key in ("oracle", "no_reconfiguration"):
        values = np.array([r[f"{key}_mean_ttft_s"] for r in rows], float)
        out[f"{key}_mean_ttft_s"] = float(values.mean())
        out[f"{key}_vs_fixed_pct"] = tuple(float(x) for x in paired_ci(100.0 * (values - fixed) / fixed))
    return out


#: Switching costs [request-s per GPU moved] of :func:`schedule_oracle`'s candidate schedules
#: (:func:`select_targets`): 0 is the per-phase rule, each next cost a factor ~3 higher (log-spaced),
#: up to one at which moving rarely pays; the best fixed composition held is a candidate too.
SCHEDULE_SWITCH_COSTS_S_PER_GPU = (0.0, 1.0, 3.0, 10.0, 30.0, 100.0)
#: Shortest decision window a schedule follower accepts [s]: a window that does not advance the
#: simulated clock would repeat its decision forever; controllers decide every few seconds or more.
MIN_DECISION_WINDOW_S = 1e-3


def _finite_real(value, what: str, minimum: float = -math.inf, unit: str = "") -> float:
    """``value`` as a float when it is a real number (not a bool) in [``minimum``, inf).

    Raises:
        ValueError: naming ``what`` and what was expected.
    """
    try:
        ok = not isinstance(value, (bool, np.bool_)) and isinstance(value, numbers.Real) \
            and minimum <= float(value) < math.inf
    except OverflowError:
        ok = False
    if not ok:
        bound = "" if minimum == -math.inf else f" >= {minimum:g}"
        raise ValueError(f"{what} must be a finite number{bound}{unit}, got {value!r:.60}")
    return float(value)


def check_decision_window_s(value) -> float:
    """``value`` as a float when it is a real number (not a bool) in
    [:data:`MIN_DECISION_WINDOW_S`, inf) [s].

    Raises:
        ValueError: naming ``decision_window_s`` and what was expected.
    """
    return _finite_real(value, "decision_window_s", MIN_DECISION_WINDOW_S, " [s]")


def _composition_index(value, num_compositions: int, what: str) -> int:
    """``value`` as an index into ``num_compositions`` compositions (an integer, not a bool)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) \
            or not 0 <= int(value) < num_compositions:
        raise ValueError(f"{what} must be an index into the {num_compositions} compositions (an integer in "
                         f"[0, {num_compositions})), got {value!r:.60}")
    return int(value)


def _sequence(value, what: str, expected: str) -> list:
    """``value`` as a list when it is a non-empty sequence (list, tuple, 1-D array), else ValueError."""
    if isinstance(value, (str, bytes, dict)) or np.ndim(value) != 1 or len(value) == 0:
        raise ValueError(f"{what} must be {expected}, got {value!r:.60}")
    return list(value)


def _is_count(x) -> bool:
    """Whether ``x`` is an integer >= 0 (not a bool)."""
    return not isinstance(x, (bool, np.bool_)) and isinstance(x, numbers.Integral) and x >= 0


def _num_phases(workload) -> int:
    """Number of phases of a phased workload (``metadata["phase_boundaries_s"]``), else ValueError."""
    bounds = (getattr(workload, "metadata", None) or {}).get("phase_boundaries_s")
    if not bounds:
        raise ValueError(f"workload {getattr(workload, 'name', workload)!r:.60} has no metadata['phase_boundaries_s']: "
                         "a schedule follows a phased workload")
    return len(bounds) - 1


def _routing_only(router: str):
    """The registered policy ``router`` when it only routes (no pool of its own, no attachment such
    as a controller or a cache manager), else ValueError naming ``router``."""
    if not isinstance(router, str):
        raise ValueError(f"router must be a registered policy name, got {router!r:.60}")
    spec = get_policy(router)
    if spec.composition is not None or spec.choose_pool is not None or spec.make_attachments():
        raise ValueError(f"router {router!r} brings its own pool or attachments (controller, cache manager); a "
                         "schedule needs a routing-only policy such as 'vertumnus-router'")
    return spec


class ScheduleFollower:
    """A simulator attachment following a schedule of compositions, one per phase of the workload:
    at time 0 and every ``decision_window_s`` after (while arrivals continue: the last decision
    comes at most one window after the last arrival, as a controller's) it starts the
    operations towards the composition of the phase that time falls in (:func:`phase_at`;
    ``envs.planning.operations.operations_towards``: paper §6 ranking, no GPU budget), as a
    reconfiguration environment in target mode does with that action. The operations drain and
    switch like any controller's (``envs/sim/reconfig.py``).

    Args:
        workload: the phased workload the run serves (``metadata["phase_boundaries_s"]``).
        targets: one ``{CP degree: number of workers}`` dict of integers per phase.
        decision_window_s: time between decisions [s] (a task's ``decision_window_s``), at least
            :data:`MIN_DECISION_WINDOW_S`.

    Raises:
        ValueError: on a workload without phases, a target count other than its number of
            phases, a target that is not a ``{degree: count}`` dict of integers, or a bad window; at
            :meth:`attach`, a target that does not cover the run's pool with its supported degrees.
    """

    def __init__(self, workload, targets: list[dict[int, int]], decision_window_s: float) -> None:
        num_phases = _num_phases(workload)
        targets = _sequence(targets, "targets", f"one {{CP degree: number of workers}} dict per phase ({num_phases})")
        if len(targets) != num_phases:
            raise ValueError(f"the schedule has {len(targets)} compositions for {num_phases} phases of "
                             f"{workload.name!r}")
        if not all(isinstance(t, dict) and all(_is_count(d) and d > 0 and _is_count(n) for d, n in t.items())
                   for t in targets):
            raise ValueError("every target must be a {CP degree: number of workers} dict of integers "
                             "(envs.planning.composition.degree_counts)")
        self.decision_window_s = check_decision_window_s(decision_window_s)
        self.workload = workload
        self.targets = [dict(t) for t in targets]
        self.num_operations = 0
        self.sim = None

    def attach(self, sim) -> None:
        """Checks every target against the run's pool and schedules the first decision (at time
        0; one attachment per run).

        Raises:
            RuntimeError: when already attached.
            ValueError: a target names an unsupported CP degree or does not cover the pool's GPUs.
        """
        if self.sim is not None:
            raise RuntimeError("a ScheduleFollower attaches to one simulator only; build one per run")
        pool = sim.config.pool
        for p, target in enumerate(self.targets):
            if any(d not in pool.supported_degrees for d in target) or not covers_pool(target, pool):
                raise ValueError(f"phase {p}'s target {target} must cover the pool's {pool.num_gpus} GPUs with CP "
                                 f"degrees in {list(pool.supported_degrees)}")
        self.sim = sim
        reqs = sim.workload.requests
        self._last_arrival_s = reqs[-1].arrival_time_s if reqs else 0.0
        if reqs:
            sim.schedule(0.0, EventPriority.CONTROL, self._decide, None)

    def _decide(self, _payload) -> None:
        sim = self.sim
        target = self.targets[phase_at(self.workload, sim.env.now)]
        for op in operations_towards(sim, target):
            apply_operation(sim, op)
            self.num_operations += 1
        if sim.env.now < self._last_arrival_s:
            sim.schedule(self.decision_window_s, EventPriority.CONTROL, self._decide, None)


def follow_schedule_run(workload, sim_config, compositions: list[str], schedule, decision_window_s: float,
                        router: str = "vertumnus-router", start_index: int | None = None):
    """One run of ``workload`` that starts on ``compositions[start_index]`` (default: the first
    phase's, ``schedule[0]``) and follows ``schedule`` (an index into ``compositions`` per phase)
    with a :class:`ScheduleFollower`, the requests routed by ``router`` (a registered policy that
    only routes: no pool of its own, no controller or cache manager).

    Returns:
        the ``SimResult``; ``extras["num_schedule_operations"]`` counts the operations started.

    Raises:
        ValueError: as :class:`ScheduleFollower`, on an empty or non-integer schedule, an index
            outside ``compositions``, or a ``router`` that is not a routing-only policy.
    """
    compositions = _sequence(compositions, "compositions", "a non-empty list of composition strings")
    schedule = _sequence(schedule, "schedule", f"one index into the {len(compositions)} compositions per phase")
    schedule = [_composition_index(k, len(compositions), "every schedule entry") for k in schedule]
    start_index = schedule[0] if start_index is None else _composition_index(start_index, len(compositions),
                                                                             "start_index")
    start = replace(sim_config.pool, composition=compositions[start_index])
    follower = ScheduleFollower(workload, [degree_counts(compositions[k], start) for k in schedule], decision_window_s)
    spec = replace(_routing_only(router), make_attachments=lambda: [follower])
    result = run_policy(spec, workload, replace(sim_config, pool=start))
    return replace(result, extras={**result.extras, "num_schedule_operations": follower.num_operations})


def schedule_oracle(workload, sim_config, compositions: list[str], ttft_s: np.ndarray, num_requests: np.ndarray,
                    fixed_index: int, fixed_result, decision_window_s: float, measure_from_s: float = 0.0,
                    router: str = "vertumnus-router", costs=SCHEDULE_SWITCH_COSTS_S_PER_GPU):
    """The schedule oracle of one phased workload: the best, *as simulated*, of the schedules
    :func:`select_targets` gives for each switching cost in ``costs`` (from the per-phase table
    ``ttft_s`` / ``num_requests`` of :func:`phase_ttft` over ``compositions``, starting from the
    best fixed composition ``compositions[fixed_index]``) and of that composition held all along
    (its run ``fixed_result``, not simulated again). Each other distinct schedule runs once with
    :func:`follow_schedule_run` *from the fixed composition*, so every move is paid, the first
    one included; the lowest (unfinished requests, mean TTFT of the requests arriving at or after
    ``measure_from_s``) wins, ties to the fixed composition, then to the lower cost. A hindsight
    reference: it reads the workload's phase boundaries and outcomes, but pays every move's drain
    and switch. It is never behind the fixed composition (a candidate); the free per-phase
    oracle, which moves without cost, is usually ahead of it (measured, not guaranteed).

    Returns:
        ``(result, schedule)``: the winner's ``SimResult`` and its composition index per phase.

    Raises:
        ValueError: checked before any run: no composition, a workload without phases, a table
            that is not ``(len(compositions), num_phases)`` mean TTFTs >= 0 (inf allowed, no NaN),
            bad ``num_requests``, ``fixed_index``, ``measure_from_s``, window or costs (finite,
            >= 0), a ``router`` that only routes, or a ``fixed_result`` that is no run result.
    """
    window_s = check_decision_window_s(decision_window_s)
    if not compositions:
        raise ValueError("schedule_oracle needs at least one composition")
    num_phases = _num_phases(workload)
    shape = (len(compositions), num_phases)
    try:
        table = np.asarray(ttft_s, float) if not np.iscomplexobj(ttft_s) else None
    except (TypeError, ValueError):
        table = None
    if table is None or table.shape != shape or np.isnan(table).any() or (table < 0).any():
        raise ValueError(f"ttft_s must be a {shape} (compositions x phases) table of mean TTFTs >= 0 [s] (inf: no "
                         f"data, no NaN), got {np.shape(ttft_s) if table is not None else type(ttft_s).__name__}")
    try:
        num = np.asarray(num_requests, float)
    except (TypeError, ValueError):
        num = None
    if num is None or num.shape != (num_phases,) or not (np.isfinite(num) & (num >= 0)).all():
        raise ValueError(f"num_requests must be ({num_phases},) finite counts >= 0, got {num_requests!r:.60}")
    fixed_index = _composition_index(fixed_index, len(compositions), "fixed_index")
    measure_from_s = _finite_real(measure_from_s, "measure_from_s", unit=" [s]")
    costs = [_finite_real(c, "every switching cost", 0.0, " [request-s per GPU]")
             for c in _sequence(costs, "costs", "a non-empty list of switching costs [request-s per GPU]")]
    _routing_only(router)
    if not isinstance(getattr(fixed_result, "records", None), dict) or "ttft_s" not in fixed_result.records:
        raise ValueError(f"fixed_result must be the SimResult of the fixed composition's run, got {fixed_result!r:.60}")
    counts = [degree_counts(c, sim_config.pool) for c in compositions]

    def score(result) -> tuple[int, float]:
        s = measured_summary(result, measure_from_s)
        mean = s["mean_ttft_s"]
        return int(s.get("num_unfinished", 0)), float(mean) if np.isfinite(mean) else float("inf")

    best_schedule = [fixed_index] * num_phases
    best_result, best_score = fixed_result, score(fixed_result)
    seen = {tuple(best_schedule)}
    for cost in costs:
        schedule = select_targets(table, num, counts, counts[fixed_index], 0.0, cost)
        if tuple(schedule) in seen:
            continue
        seen.add(tuple(schedule))
        result = follow_schedule_run(workload, sim_config, compositions, schedule, window_s, router,
                                     start_index=fixed_index)
        s = score(result)
        if s < best_score:
            best_schedule, best_result, best_score = schedule, result, s
    return best_result, best_schedule
