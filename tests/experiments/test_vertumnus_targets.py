"""``cpgym reproduce --experiments vertumnus-steady,vertumnus-overload,vertumnus-phases`` (issue #40's
targets, experiments.paper_experiments.vertumnus_targets): rows with paired 95 % intervals.

The simulations are replaced by a fake ``run_policy`` whose mean TTFT is a known function of the
policy, pool and seed, so the expected per-seed changes and their Student-t interval (t = 4.303
for 3 seeds) are computed here by hand."""

from __future__ import annotations

import math
import statistics
import types

import numpy as np
import pytest

from experiments.paper_experiments import vertumnus_targets as vt
from experiments.reproduce import EXPERIMENTS, ReproduceConfig, WorkloadCase

T975_DF2 = 4.303
# mean TTFT [s] of each policy: seed s adds s x 0.1 to vertumnus and 0 to the others (a changing paired difference)
# (the router with vertumnus's cache manager is a spec, vt.ROUTER_WITH_CACHE, not a registry name)
BASE_TTFT_S = {"vertumnus": 1.0, "vertumnus-router": 1.25, vt.ROUTER_WITH_CACHE.name: 1.1, "vertumnus-adaptive": 1.5}


HISTORIES: list[tuple] = []  # (policy, test seed, the history it planned from) of the fake runs given one


def _fake_run(policy, wl, config, capacity_cache=None, history=None):
    policy = getattr(policy, "name", policy)
    if history is not None:
        HISTORIES.append((policy, wl.seed, history))
    seed = wl.seed
    ttft = BASE_TTFT_S[policy] + (0.1 * seed if policy == "vertumnus" else 0.0)
    if policy == "vertumnus-router" and config.pool.composition == "cp4x10":  # the "best fixed" of the phases test
        ttft = 0.5
    return types.SimpleNamespace(records={"ttft_s": np.array([ttft, math.nan, ttft])},
                                 extras={"initial_pool": {"composition": "cp2x20"},
                                         "controller_windows": [{"action": "split(1)"}, {"action": "hold"}]})


def _fake_workload(name, seed, **_):
    return types.SimpleNamespace(name=name, seed=seed % 1000, num_requests=7)


@pytest.fixture
def fake_sim(monkeypatch):
    monkeypatch.setattr(vt, "run_policy", _fake_run)
    monkeypatch.setattr(vt, "base_workload", lambda name, seed, trace_path=None: _fake_workload(name, seed))
    monkeypatch.setattr(vt, "capacity_rps", lambda wl, config, cache: 10.0 + wl.seed)
    monkeypatch.setattr(vt, "scale_to_rate", lambda wl, rate: wl)
    monkeypatch.setattr(vt, "workloads", types.SimpleNamespace(get_workload=_fake_workload))
    monkeypatch.setattr(vt, "DemandHistory", types.SimpleNamespace(
        of=lambda wls, source: ("history of seeds", tuple(w.seed for w in wls))))
    HISTORIES.clear()
    return ReproduceConfig(workloads=(WorkloadCase("leval-like", name="leval-like"),), seeds=(0, 1, 2))


def _ci(changes):
    mean = statistics.fmean(changes)
    half = T975_DF2 * statistics.stdev(changes) / math.sqrt(len(changes))
    return mean, mean - half, mean + half


@pytest.mark.parametrize(("kind", "cases"), [("vertumnus-steady", vt.STEADY_CASES),
                                             ("vertumnus-overload", vt.OVERLOAD_CASES)])
def test_load_experiments_pair_each_seed(fake_sim, kind, cases):
    res = EXPERIMENTS[kind](fake_sim)
    assert [(r.workload, r.load_fraction) for r in res.rows] == [c for c in cases for _ in vt.LOAD_METRICS]
    by_metric = {r.metric: r for r in res.rows if (r.workload, r.load_fraction) == cases[0]}
    expected = {
        "vs_router_mean_ttft_pct": _ci([100 * ((1.0 + 0.1 * s) / 1.25 - 1) for s in (0, 1, 2)]),
        "vs_global_cache_mean_ttft_pct": _ci([100 * ((1.0 + 0.1 * s) / 1.1 - 1) for s in (0, 1, 2)]),
    }
    for metric, (mean, lo, hi) in expected.items():
        row = by_metric[metric]
        assert (row.cpgym_value, row.ci_low, row.ci_high) == pytest.approx((mean, lo, hi), abs=2e-3)
        assert row.ci_low < row.cpgym_value < row.ci_high and row.paper_value is None and row.experiment == kind
    same = by_metric["adaptive_vs_router_mean_ttft_pct"]  # +20 % on every seed: a zero-width interval
    assert (same.cpgym_value, same.ci_low, same.ci_high) == pytest.approx((20.0, 20.0, 20.0))
    assert by_metric["vs_router_mean_ttft_pct"].strongest_baseline == "vertumnus-router"
    assert len(res.runs) == len(cases) * 3
    run = res.runs[0]
    assert run["seed"] == 0 and run["capacity_rps"] == 10.0 and run["rate_rps"] == pytest.approx(10.0 * cases[0][1])
    assert run["initial"] == "cp2x20" and run["num_windows_with_ops"] == 1 and run["vertumnus_mean_ttft_s"] == 1.0


def test_phases_experiment_picks_the_best_fixed_on_training_seeds(fake_sim):
    res = EXPERIMENTS["vertumnus-phases"](fake_sim)
    assert [r.workload for r in res.rows] == [w for w in vt.PHASE_SCENARIOS for _ in vt.PHASE_METRICS]
    rows = {r.metric: r for r in res.rows if r.workload == "matched-phases"}
    assert rows["vs_best_fixed_mean_ttft_pct"].strongest_baseline == "vertumnus-router on cp4x10"
    # adaptive 1.5 s vs no reconfiguration 1.25 s and the best fixed 0.5 s on every test seed
    assert rows["vs_no_reconfig_mean_ttft_pct"].cpgym_value == pytest.approx(20.0)
    assert rows["vs_best_fixed_mean_ttft_pct"].cpgym_value == pytest.approx(200.0)
    # vertumnus (1.0 + 0.1 x seed, test seeds 1000-1002 -> 0-2) vs router + global cache on its initial pool (1.1 s)
    mean, lo, hi = _ci([100 * ((1.0 + 0.1 * s) / 1.1 - 1) for s in (0, 1, 2)])
    full = rows["full_vs_no_reconfig_mean_ttft_pct"]
    assert (full.cpgym_value, full.ci_low, full.ci_high) == pytest.approx((mean, lo, hi), abs=2e-3)
    assert all(r.load_fraction is None for r in res.rows)
    assert [r["seed"] for r in res.runs] == [1000, 1001, 1002, 0, 1, 2]
    assert res.runs[0]["best_fixed"] == "cp4x10" and res.runs[0]["best_fixed_mean_ttft_s"] == 0.5
    # the systems that plan from history read the scenario's training seeds, never the test seed
    expected = [(p, s % 1000, ("history of seeds", tuple(x % 1000 for x in train)))
                for train, test, _ in vt.PHASE_SCENARIOS.values() for s in test
                for p in ("vertumnus-adaptive", "vertumnus")]
    assert HISTORIES == expected


def test_one_seed_gives_no_interval(fake_sim):
    from dataclasses import replace

    res = EXPERIMENTS["vertumnus-overload"](replace(fake_sim, seeds=(2,)))
    row = res.rows[0]
    assert row.cpgym_value == pytest.approx(100 * (1.2 / 1.25 - 1))
    assert math.isnan(row.ci_low) and math.isnan(row.ci_high)
