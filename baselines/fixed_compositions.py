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
* :func:`fixed_and_oracle_rows` — both, and the starting composition, per evaluation workload;
* :func:`headroom` — their means and the paired differences against the fixed composition [%].

The learned controller's behaviour-cloning labels (``policies.reconfig.oracle``) use the same
per-phase table.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from baselines.runner import run_policy
from envs.metrics.stats import paired_ci

__all__ = ["phase_ttft", "fixed_mean_ttft", "best_fixed_composition", "per_phase_oracle_ttft", "fixed_and_oracle_rows",
           "headroom"]


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
