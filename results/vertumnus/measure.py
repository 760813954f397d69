"""Measurements of results/vertumnus/README.md (issue #40): the full system against the router
alone and against no reconfiguration, 3 seeds, paired 95 % CIs (envs.metrics.stats.paired_ci).

    python results/vertumnus/measure.py steady   > results/vertumnus/steady.json
    python results/vertumnus/measure.py overload > results/vertumnus/overload.json
    python results/vertumnus/measure.py phases   > results/vertumnus/phases.json
    python results/vertumnus/measure.py speed    > results/vertumnus/speed.json

Capacity ("load 0.9 of capacity"): the profiled capacity (envs.planning.capacity, the controller's
own definition) of the configured pool cp4x6,cp2x8 (deployment degrees {2, 4}) for the seed's
workload mix and its ideal prefix reuse. Seeds: the conversation trace's seed s is its arrival
window [1000 s, 2000 s) shifted by s x 1000 s of native time, then rescaled to the target rate (the
same requests at every load); a synthetic workload's seed is its generator seed.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace

import numpy as np

from baselines.registry import get_policy
from baselines.runner import run_policy
from envs import workloads
from envs.metrics.stats import paired_ci
from envs.planning.capacity import CapacityCache, CapacityTable, reuse_prefix_tokens
from envs.planning.composition import composition_capacity_rps, degree_counts, deployment_pool, enumerate_compositions
from envs.sim import Calibration, SimConfig
from envs.workloads.transforms import scale_to_rate

TRACE = "/work/shared/data/traces/conversation_trace.jsonl"
SEEDS = (0, 1, 2)
CACHE = CapacityCache()


def base_workload(name: str, seed: int):
    if name == "conversation":
        wl = workloads.load_trace(TRACE)
        return workloads.window(wl, seed * 1000.0, seed * 1000.0 + 1000.0)
    duration = {"leval-like": 20.0, "tool-agent": 60.0}[name]
    return workloads.get_workload(name, seed=seed, duration_s=duration)


def capacity_rps(wl, config: SimConfig) -> float:
    pool = deployment_pool(config.pool)
    cfg = replace(config, pool=pool)
    cal = Calibration.resolve(cfg.calibration_path)
    table = CapacityTable(cfg, cal, cache=CACHE)
    L = np.array([r.num_prompt_tokens for r in wl.requests], float)
    hit = reuse_prefix_tokens(wl)
    profiles = table.profiles(pool.supported_degrees, L, hit)
    return composition_capacity_rps(degree_counts(pool.composition, pool), profiles)


def mean_ttft(res) -> float:
    return float(np.nanmean(res.records["ttft_s"]))


def on_pool(config: SimConfig, composition: str) -> SimConfig:
    return replace(config, pool=replace(deployment_pool(config.pool), composition=composition))


def compare_loads(cases):
    config = SimConfig()
    rows = []
    for name, load in cases:
        per = {"vs_router": [], "vs_global_cache": [], "adaptive_vs_router": []}
        detail = []
        for seed in SEEDS:
            wl0 = base_workload(name, seed)
            cap = capacity_rps(wl0, config)
            wl = scale_to_rate(wl0, load * cap)
            full = run_policy("vertumnus", wl, config, capacity_cache=CACHE)
            initial = full.extras["initial_pool"]["composition"]
            pool_cfg = on_pool(config, initial)
            router = run_policy("vertumnus-router", wl, pool_cfg, capacity_cache=CACHE)
            gcache = run_policy("vertumnus-global-cache", wl, pool_cfg, capacity_cache=CACHE)
            adaptive = run_policy("vertumnus-adaptive", wl, pool_cfg, capacity_cache=CACHE)
            ops = [w["action"] for w in full.extras.get("controller_windows", [])
                   if "(" in w["action"]]
            t = {k: mean_ttft(r) for k, r in (("vertumnus", full), ("router", router), ("global_cache", gcache),
                                               ("adaptive", adaptive))}
            per["vs_router"].append(100 * (t["vertumnus"] / t["router"] - 1))
            per["vs_global_cache"].append(100 * (t["vertumnus"] / t["global_cache"] - 1))
            per["adaptive_vs_router"].append(100 * (t["adaptive"] / t["router"] - 1))
            detail.append({"seed": seed, "capacity_rps": cap, "rate_rps": load * cap, "num_requests": wl.num_requests,
                           "initial": initial, "mean_ttft_s": t, "num_windows_with_ops": len(ops)})
            print(name, load, seed, json.dumps(detail[-1]), file=sys.stderr)
        rows.append({"workload": name, "load": load, "seeds": detail,
                     **{k: dict(zip(("mean_pct", "ci_low_pct", "ci_high_pct"), paired_ci(v))) for k, v in per.items()}})
    return rows


def phases():
    """matched-phases (rising-rate and alternating-phase scenarios below saturation) and the
    paper's phases workload with rising rates: vertumnus-adaptive against no reconfiguration
    (vertumnus-router on the same pool) and against the best fixed composition chosen on training
    seeds (all 11 compositions of 40 GPUs over {2, 4})."""
    config = SimConfig()
    pool = replace(deployment_pool(config.pool), composition="cp4x6,cp2x8")
    config = replace(config, pool=pool)
    comps = enumerate_compositions(pool)
    out = []
    scen = {"matched-phases": ((0, 1, 2), (1000, 1001, 1002), {}),
            "phases": ((10, 11, 12), (0, 1, 2), {"short_phase_rate_rps": 40.0, "long_phase_rate_rps": 4.0,
                                                  "rising_rate": True})}
    for name, (train, test, kw) in scen.items():
        train_ttft = {c: [] for c in comps}
        for s in train:
            wl = workloads.get_workload(name, seed=s, **kw)
            for c in comps:
                train_ttft[c].append(mean_ttft(run_policy("vertumnus-router", wl, on_pool(config, c),
                                                          capacity_cache=CACHE)))
        best = min(comps, key=lambda c: np.mean(train_ttft[c]))
        per = {"vs_no_reconfig": [], "vs_best_fixed": [], "full_vs_no_reconfig": []}
        detail = []
        for s in test:
            wl = workloads.get_workload(name, seed=s, **kw)
            ad = run_policy("vertumnus-adaptive", wl, config, capacity_cache=CACHE)
            nr = run_policy("vertumnus-router", wl, config, capacity_cache=CACHE)
            bf = run_policy("vertumnus-router", wl, on_pool(config, best), capacity_cache=CACHE)
            full = run_policy("vertumnus", wl, config, capacity_cache=CACHE)
            fnr = run_policy("vertumnus-global-cache", wl, on_pool(config, full.extras["initial_pool"]["composition"]),
                             capacity_cache=CACHE)
            t = {"adaptive": mean_ttft(ad), "no_reconfig": mean_ttft(nr), "best_fixed": mean_ttft(bf),
                 "vertumnus": mean_ttft(full), "global_cache_on_initial": mean_ttft(fnr)}
            per["vs_no_reconfig"].append(100 * (t["adaptive"] / t["no_reconfig"] - 1))
            per["vs_best_fixed"].append(100 * (t["adaptive"] / t["best_fixed"] - 1))
            per["full_vs_no_reconfig"].append(100 * (t["vertumnus"] / t["global_cache_on_initial"] - 1))
            ops = sum(1 for w in ad.extras.get("controller_windows", []) if "(" in w["action"])
            detail.append({"seed": s, "workload": wl.name, "num_requests": wl.num_requests, "mean_ttft_s": t,
                           "num_windows_with_ops": ops, "initial_full": full.extras["initial_pool"]["composition"]})
            print(name, s, json.dumps(detail[-1]), file=sys.stderr)
        out.append({"workload": name, "train_seeds": list(train), "test_seeds": list(test), "best_fixed": best,
                    "seeds": detail,
                    **{k: dict(zip(("mean_pct", "ci_low_pct", "ci_high_pct"), paired_ci(v))) for k, v in per.items()}})
    return out


def speed():
    wl = workloads.load_trace(TRACE)
    config = SimConfig()
    rows = []
    for name in ("vertumnus-router", "vertumnus-adaptive", "vertumnus", "vertumnus-paper-rule"):
        cpus = []
        for _ in range(3):
            c = time.process_time()
            run_policy(get_policy(name), wl, config)
            cpus.append(time.process_time() - c)
        cpu = float(np.median(cpus))
        rows.append({"policy": name, "num_requests": wl.num_requests, "cpu_time_s": cpu,
                     "requests_per_cpu_s": wl.num_requests / cpu})
        print(json.dumps(rows[-1]), file=sys.stderr)
    return rows


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "steady":
        res = compare_loads([("conversation", 0.5), ("conversation", 0.75), ("conversation", 0.9),
                             ("leval-like", 0.9), ("tool-agent", 0.9)])
    elif what == "overload":
        res = compare_loads([("conversation", 4.0), ("conversation", 16.0)])
    elif what == "phases":
        res = phases()
    elif what == "speed":
        res = speed()
    else:
        raise SystemExit(f"unknown measurement {what!r}")
    print(json.dumps(res, indent=1))
