"""The targets of issue #40 (``results/vertumnus/``): the full ``vertumnus`` system against the
router alone, no reconfiguration and the best fixed composition, paired per seed, as rows of
``cpgym reproduce`` (experiments ``vertumnus-steady``, ``vertumnus-overload``, ``vertumnus-phases``).

Every value is a per-seed relative difference of mean TTFT, ``100 x (new / old - 1)`` [%]
(negative = ``new`` is faster); ``cpgym_value`` is their mean over seeds and ``[ci_low, ci_high]``
the paired 95 % Student-t interval (:func:`envs.metrics.stats.paired_ci`; NaN for one seed).

* Steady / overload (:func:`compare_loads`): per ``(workload, load)`` of :data:`STEADY_CASES` /
  :data:`OVERLOAD_CASES` and seed, the workload (:func:`base_workload`) rescaled to ``load x`` its
  capacity (:func:`capacity_rps`: the profiled capacity of the deployment pool, the controller's
  own definition, for the seed's mix and ideal prefix reuse); ``vertumnus`` on the configured
  pool; ``vertumnus-router``, :data:`ROUTER_WITH_CACHE` and ``vertumnus-adaptive`` on the pool
  ``vertumnus`` started from (its initial composition). Metrics ``vs_router_mean_ttft_pct``
  (vertumnus vs router alone), ``vs_global_cache_mean_ttft_pct`` (vs router + global cache: the
  controller's share) and ``adaptive_vs_router_mean_ttft_pct``.
* Phases (:func:`phases`): per scenario of :data:`PHASE_SCENARIOS`, the best fixed composition
  (router ``vertumnus-router``, the lowest mean TTFT over the training seeds among every
  composition of the pool) and, on each test seed, ``vertumnus-adaptive`` vs no reconfiguration
  (``vertumnus-router`` on the configured pool; ``vs_no_reconfig_mean_ttft_pct``) and vs the best
  fixed composition (``vs_best_fixed_mean_ttft_pct``), and ``vertumnus`` vs
  :data:`ROUTER_WITH_CACHE` on its initial pool (``full_vs_no_reconfig_mean_ttft_pct``). The
  two systems that plan from history (``vertumnus``'s initial composition, both controllers'
  first reference mix) read the training seeds (:class:`~envs.planning.capacity.DemandHistory`),
  never the test seed.

Defaults (:data:`SEEDS`, the cases, windows and scenario parameters) are those of the issue #40
measurements in ``results/vertumnus/README.md``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from baselines.cache_manager import with_global_cache
from baselines.registry import get_policy
from baselines.runner import run_policy
from envs import workloads
from envs.metrics.stats import paired_ci
from envs.planning.capacity import CapacityCache, CapacityTable, DemandHistory, reuse_prefix_tokens
from envs.planning.composition import composition_capacity_rps, degree_counts, deployment_pool, enumerate_compositions
from envs.sim import Calibration, SimConfig
from envs.workloads.transforms import scale_to_rate

#: Seeds of the steady and overload cases (results/vertumnus/README.md).
SEEDS = (0, 1, 2)
#: ``(workload, load as a fraction of capacity)`` of the steady-load target (within 2 % of the router alone).
STEADY_CASES = (("conversation", 0.5), ("conversation", 0.75), ("conversation", 0.9), ("leval-like", 0.9),
                ("tool-agent", 0.9))
#: ``(workload, load)`` of the overload target (never slower than the router alone): 4x and 16x capacity.
OVERLOAD_CASES = (("conversation", 4.0), ("conversation", 16.0))
#: Conversation-trace seed ``s``: arrivals in ``[s x SHIFT, s x SHIFT + LENGTH)`` s of native time.
CONVERSATION_WINDOW_LENGTH_S = 1000.0
CONVERSATION_SEED_SHIFT_S = 1000.0
#: Seconds of a generated synthetic workload, by name (results/vertumnus/README.md).
SYNTHETIC_DURATION_S = {"leval-like": 20.0, "tool-agent": 60.0}
#: Phase scenarios: name -> (training seeds, test seeds, workload parameters). ``matched-phases``
#: with its registry defaults; ``phases`` as ``cpgym dynamic`` runs it (paper §9: short-heavy
#: 40 req/s, long-heavy 4 req/s, rising rate inside each phase).
PHASE_SCENARIOS: dict[str, tuple[tuple[int, ...], tuple[int, ...], dict]] = {
    "matched-phases": ((0, 1, 2), (1000, 1001, 1002), {}),
    "phases": ((10, 11, 12), (0, 1, 2), {"short_phase_rate_rps": 40.0, "long_phase_rate_rps": 4.0, "rising_rate": True}),
}
#: "Router + global cache": the Vertumnus router with ``vertumnus``'s own cache manager (with its
#: ``backlog_bound``, ``baselines/registry.py``), so that ``vertumnus`` against it is the controller's share alone.
ROUTER_WITH_CACHE = with_global_cache(get_policy("vertumnus-router"), name="vertumnus-global-cache-bounded",
                                      backlog_bound=True)
#: Metric keys of :func:`compare_loads` and :func:`phases` -> the policy compared against (``strongest_baseline``).
LOAD_METRICS = {"vs_router": "vertumnus-router", "vs_global_cache": "vertumnus-router + vertumnus's cache manager",
                "adaptive_vs_router": "vertumnus-router"}
PHASE_METRICS = {"vs_no_reconfig": "vertumnus-router", "vs_best_fixed": "vertumnus-router on the best fixed composition",
                 "full_vs_no_reconfig": "vertumnus-router + vertumnus's cache manager on vertumnus's initial pool"}


def base_workload(name: str, seed: int, trace_path: str | Path | None = None):
    """The unscaled workload of one case and seed: ``conversation`` is the trace at ``trace_path``
    (default :func:`envs.workloads.default_trace_path`) in the window of seed ``seed``
    (:data:`CONVERSATION_SEED_SHIFT_S`); ``leval-like`` / ``tool-agent`` are generated with the seed
    for :data:`SYNTHETIC_DURATION_S`.

    Raises:
        KeyError: on another workload name. OSError: when the trace cannot be read.
    """
    if name == "conversation":
        wl = workloads.load_trace(str(trace_path or workloads.default_trace_path()))
        start = seed * CONVERSATION_SEED_SHIFT_S
        return workloads.window(wl, start, start + CONVERSATION_WINDOW_LENGTH_S)
    return workloads.get_workload(name, seed=seed, duration_s=SYNTHETIC_DURATION_S[name])


def capacity_rps(wl, config: SimConfig, cache: CapacityCache) -> float:
    """The profiled capacity [req/s] of ``config``'s deployment pool (its composition's degrees)
    for ``wl``'s prompt lengths and ideal prefix reuse (``envs.planning.capacity``)."""
    pool = deployment_pool(config.pool)
    cfg = replace(config, pool=pool)
    table = CapacityTable(cfg, Calibration.resolve(cfg.calibration_path), cache=cache)
    lengths = np.array([r.num_prompt_tokens for r in wl.requests], float)
    profiles = table.profiles(pool.supported_degrees, lengths, reuse_prefix_tokens(wl))
    return composition_capacity_rps(degree_counts(pool.composition, pool), profiles)


def mean_ttft_s(res) -> float:
    """Mean TTFT [s] of a run (NaN entries, unfinished requests, left out)."""
    return float(np.nanmean(res.records["ttft_s"]))


def on_pool(config: SimConfig, composition: str) -> SimConfig:
    """``config`` on its deployment pool with ``composition``."""
    return replace(config, pool=replace(deployment_pool(config.pool), composition=composition))


def _pct(new: float, old: float) -> float:
    return 100 * (new / old - 1)


def _num_windows_with_ops(res) -> int:
    return sum(1 for w in res.extras.get("controller_windows", []) if "(" in w["action"])


def _cis(per: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    return {k: dict(zip(("mean_pct", "ci_low_pct", "ci_high_pct"), paired_ci(v))) for k, v in per.items()}


def compare_loads(cases, config: SimConfig, trace_path: str | Path | None = None, seeds=SEEDS,
                  log: Callable[[str], None] | None = None) -> list[dict]:
    """One result per ``(workload, load)`` of ``cases`` (module docstring): ``{workload, load,
    seeds: [per-seed detail], vs_router, vs_global_cache, adaptive_vs_router}``, each comparison
    ``{mean_pct, ci_low_pct, ci_high_pct}`` over ``seeds``."""
    cache = CapacityCache()
    rows = []
    for name, load in cases:
        per: dict[str, list[float]] = {k: [] for k in LOAD_METRICS}
        detail = []
        for seed in seeds:
            wl0 = base_workload(name, seed, trace_path)
            cap = capacity_rps(wl0, config, cache)
            wl = scale_to_rate(wl0, load * cap)
            full = run_policy("vertumnus", wl, config, capacity_cache=cache)
            initial = full.extras["initial_pool"]["composition"]
            pool_cfg = on_pool(config, initial)
            t = {"vertumnus": mean_ttft_s(full)}
            for key, policy in (("router", "vertumnus-router"), ("global_cache", ROUTER_WITH_CACHE),
                                ("adaptive", "vertumnus-adaptive")):
                t[key] = mean_ttft_s(run_policy(policy, wl, pool_cfg, capacity_cache=cache))
            per["vs_router"].append(_pct(t["vertumnus"], t["router"]))
            per["vs_global_cache"].append(_pct(t["vertumnus"], t["global_cache"]))
            per["adaptive_vs_router"].append(_pct(t["adaptive"], t["router"]))
            detail.append({"seed": seed, "capacity_rps": cap, "rate_rps": load * cap, "num_requests": wl.num_requests,
                           "initial": initial, "mean_ttft_s": t, "num_windows_with_ops": _num_windows_with_ops(full)})
            if log is not None:
                log(f"[vertumnus {name} load {load:g}] seed {seed}: {json.dumps(detail[-1])}")
        rows.append({"workload": name, "load": load, "seeds": detail, **_cis(per)})
    return rows


def phases(config: SimConfig, scenarios: dict | None = None, log: Callable[[str], None] | None = None) -> list[dict]:
    """One result per scenario of ``scenarios`` (default :data:`PHASE_SCENARIOS`; module
    docstring): ``{workload, train_seeds, test_seeds, best_fixed, seeds: [per-seed detail],
    vs_no_reconfig, vs_best_fixed, full_vs_no_reconfig}``. The configured pool is the deployment
    pool of ``config`` (its composition's degrees); every composition of it is a candidate."""
    cache = CapacityCache()
    pool = deployment_pool(config.pool)
    config = replace(config, pool=pool)
    comps = enumerate_compositions(pool)
    out = []
    for name, (train, test, kw) in (PHASE_SCENARIOS if scenarios is None else scenarios).items():
        train_ttft: dict[str, list[float]] = {c: [] for c in comps}
        train_wls = [workloads.get_workload(name, seed=s, **kw) for s in train]
        # the systems that plan from history read the training seeds, never the test seed
        history = DemandHistory.of(train_wls, f"{name} training seeds {', '.join(map(str, train))}")
        for wl in train_wls:
            for c in comps:
                train_ttft[c].append(mean_ttft_s(run_policy("vertumnus-router", wl, on_pool(config, c), capacity_cache=cache)))
        best = min(comps, key=lambda c: np.mean(train_ttft[c]))
        per: dict[str, list[float]] = {k: [] for k in PHASE_METRICS}
        detail = []
        for s in test:
            wl = workloads.get_workload(name, seed=s, **kw)
            ad = run_policy("vertumnus-adaptive", wl, config, capacity_cache=cache, history=history)
            nr = run_policy("vertumnus-router", wl, config, capacity_cache=cache)
            bf = run_policy("vertumnus-router", wl, on_pool(config, best), capacity_cache=cache)
            full = run_policy("vertumnus", wl, config, capacity_cache=cache, history=history)
            initial = full.extras["initial_pool"]["composition"]
            fnr = run_policy(ROUTER_WITH_CACHE, wl, on_pool(config, initial), capacity_cache=cache)
            t = {"adaptive": mean_ttft_s(ad), "no_reconfig": mean_ttft_s(nr), "best_fixed": mean_ttft_s(bf),
                 "vertumnus": mean_ttft_s(full), "global_cache_on_initial": mean_ttft_s(fnr)}
            per["vs_no_reconfig"].append(_pct(t["adaptive"], t["no_reconfig"]))
            per["vs_best_fixed"].append(_pct(t["adaptive"], t["best_fixed"]))
            per["full_vs_no_reconfig"].append(_pct(t["vertumnus"], t["global_cache_on_initial"]))
            detail.append({"seed": s, "workload": wl.name, "num_requests": wl.num_requests, "mean_ttft_s": t,
                           "num_windows_with_ops": _num_windows_with_ops(ad), "initial_full": initial})
            if log is not None:
                log(f"[vertumnus {name}] seed {s}: {json.dumps(detail[-1])}")
        out.append({"workload": name, "train_seeds": list(train), "test_seeds": list(test), "best_fixed": best,
                    "seeds": detail, **_cis(per)})
    return out


def target_rows(experiment: str, results: list[dict], model: str) -> list[dict]:
    """``cpgym reproduce`` rows (its ``Row`` fields) of :func:`compare_loads` or :func:`phases`
    results: one per result and comparison, metric ``<comparison>_mean_ttft_pct``, ``paper_value``
    None (issue #40's targets, not paper figures), ``load_fraction`` the load (None for phases) and
    ``strongest_baseline`` the policy compared against (:data:`LOAD_METRICS` / :data:`PHASE_METRICS`;
    phases: with the best fixed composition)."""
    rows = []
    for r in results:
        metrics = LOAD_METRICS if "load" in r else PHASE_METRICS
        for key, against in metrics.items():
            if key == "vs_best_fixed":
                against = f"vertumnus-router on {r['best_fixed']}"
            ci = r[key]
            rows.append({"experiment": experiment, "workload": r["workload"], "model": model,
                         "metric": f"{key}_mean_ttft_pct", "paper_value": None,
                         "cpgym_value": ci["mean_pct"], "ci_low": ci["ci_low_pct"],
                         "ci_high": ci["ci_high_pct"], "load_fraction": r.get("load"),
                         "strongest_baseline": against})
    return rows


def target_runs(results: list[dict], model: str) -> list[dict]:
    """One flat dict per result and seed (``KIND-runs.csv`` of ``cpgym reproduce``): the per-seed
    detail with each mean TTFT as ``<policy>_mean_ttft_s``."""
    out = []
    for r in results:
        for d in r["seeds"]:
            flat = {k: v for k, v in d.items() if k != "mean_ttft_s"}
            out.append({"model": model, "workload": r["workload"], "load_fraction": r.get("load"),
                        "best_fixed": r.get("best_fixed"), **flat,
                        **{f"{k}_mean_ttft_s": v for k, v in d["mean_ttft_s"].items()}})
    return out


__all__ = ["SEEDS", "STEADY_CASES", "OVERLOAD_CASES", "PHASE_SCENARIOS", "LOAD_METRICS", "PHASE_METRICS",
           "base_workload", "capacity_rps", "mean_ttft_s", "on_pool", "compare_loads", "phases", "target_rows",
           "target_runs", "ROUTER_WITH_CACHE"]
