"""Profile memoisation (envs/planning/capacity.py CapacityCache), the full Vertumnus system and its
router-only ablation (baselines/registry.py)."""

import math

import numpy as np
import pytest

from baselines.controller import WindowRecord
from baselines.registry import POLICIES, SUITES
from baselines.runner import build_simulator, run_policy
from envs.planning.capacity import (
    CapacityCache,
    CapacityTable,
    DemandHistory,
    ProfileConfig,
    resolve_history,
    reuse_prefix_tokens,
)
from envs.planning.composition import enumerate_compositions, workload_initial_pool
from envs.sim import Calibration, Request, SimConfig, Workload
from tests.factories import RECONFIG_POOL

FAST = ProfileConfig(duration_s=20.0, num_bisection_steps=6)


def _workload(rate_rps: float = 4.0, duration_s: float = 120.0, seed: int = 0) -> Workload:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1.0 / rate_rps, int(rate_rps * duration_s * 1.3) + 10))
    t = t[t < duration_s]
    L = rng.integers(500, 6000, t.size)
    reqs, h = [], 0
    for i, (x, n) in enumerate(zip(t, L)):
        nb = -(-int(n) // 512)
        shared = (7,) if i % 2 else ()  # half share a one-block system prompt
        own = tuple(range(1000 + h, 1000 + h + nb - len(shared)))
        h += nb
        reqs.append(Request(i, float(x), int(n), 8, shared + own))
    return Workload("cache-test", tuple(reqs), kv_block_size_tokens=512)


def test_shared_cache_computes_each_profile_once_and_never_changes_results():
    cal = Calibration.default()
    cfg = SimConfig(pool=RECONFIG_POOL)
    L = np.full(200, 3000.0)
    cache = CapacityCache()
    a = CapacityTable(cfg, cal, FAST, cache=cache).profiles((2, 4), L)
    assert cache.num_profiles_computed == 2
    sims = cache.num_simulations
    b = CapacityTable(cfg, cal, FAST, cache=cache).profiles((2, 4), L)  # a second run's table
    assert cache.num_profiles_computed == 2 and cache.num_simulations == sims
    fresh = CapacityTable(cfg, cal, FAST).profiles((2, 4), L)  # its own cache: same numbers
    assert a == b == fresh
    # another run seed shares the profile (profiles are seeded by ProfileConfig.seed)
    CapacityTable(SimConfig(pool=RECONFIG_POOL, seed=5), cal, FAST, cache=cache).profiles((2, 4), L)
    assert cache.num_profiles_computed == 2
    # a different SLO rule is a different key
    from envs.sim import SLOConfig

    fixed_slo = SimConfig(pool=RECONFIG_POOL, slo=SLOConfig(kind="fixed", ttft_slo_s=5.0))
    CapacityTable(fixed_slo, cal, FAST, cache=cache).profiles((2,), L)
    assert cache.num_profiles_computed == 3


def test_window_mixes_near_a_reference_are_rescaled_not_reprofiled():
    cal = Calibration.default()
    table = CapacityTable(SimConfig(pool=RECONFIG_POOL), cal, FAST)
    L = np.full(100, 3000.0)
    base = table.mix_profile(2, L)
    n = table.cache.num_profiles_computed
    near = np.concatenate([L[:95], np.full(5, 9000.0)])  # 5 % longer prompts: TV distance 0.05
    p = table.mix_profile(2, near)
    assert table.cache.num_profiles_computed == n and p.reference == base.reference
    assert p.capacity_rps < base.capacity_rps  # more work per request, lower capacity
    ratio = table.mean_work_s(2, table.shares(L)) / table.mean_work_s(2, table.shares(near))
    assert p.capacity_rps == pytest.approx(base.capacity_rps * ratio)


def test_adaptive_controller_profiles_once_per_regime():
    wl = _workload()
    sim, spec = build_simulator("vertumnus-adaptive", wl, SimConfig(pool=RECONFIG_POOL))
    sim.run(spec.make_router())
    ctl = sim.attachments["controller"]
    windows = [w for w in ctl.windows if isinstance(w, WindowRecord) and w.capacity_rps == w.capacity_rps]
    assert len(windows) >= 4
    # one stationary regime: one reference, at most one profile per supported degree
    assert len(ctl.table.references) == 1
    assert sim.attachments["capacity_cache"].num_profiles_computed <= len(RECONFIG_POOL.supported_degrees)


def test_full_system_and_router_ablation():
    assert "vertumnus-router" in POLICIES and "vertumnus-router" in SUITES["ablations"]
    full = POLICIES["vertumnus"]
    assert full.choose_pool is not None and POLICIES["vertumnus-router"].choose_pool is None
    wl = _workload()
    cfg = SimConfig(pool=RECONFIG_POOL)
    cache = CapacityCache()
    res = run_policy("vertumnus", wl, cfg, capacity_cache=cache)
    assert res.policy == "vertumnus" and res.num_requests == wl.num_requests
    init = res.extras["initial_pool"]
    # light load: the initial composition favours large-degree workers among the pool's degrees {2, 4}
    assert init["composition"] == "cp4x2" and init["feasible"]
    assert "controller_windows" in res.extras and "reconfig_operations" in res.extras
    # the paper's gated rule has no candidate menu (the look-ahead's, vertumnus-lookahead's, is
    # every composition of the pool's degrees {2, 4}: test_full_system_with_the_paper_rule_is_registered)
    assert res.extras["controller_candidates"] == []
    # the global prefix-cache manager is attached
    sim, _ = build_simulator("vertumnus", wl, cfg)
    assert "cache_manager" in sim.attachments and "controller" in sim.attachments
    # the initial composition and the controller share the run's cache: no profile is computed twice
    n = cache.num_profiles_computed
    run_policy("vertumnus", wl, cfg, capacity_cache=cache)
    assert cache.num_profiles_computed == n
    # the router alone keeps the run's pool and attaches nothing
    r = run_policy("vertumnus-router", wl, cfg)
    assert r.extras.get("reconfig_operations", []) == [] and "initial_pool" not in r.extras


def test_full_system_with_the_paper_rule_is_registered():
    # the same full system (initial pool, controller, cache manager) with the paper's §6 load rule
    spec = POLICIES["vertumnus-paper-rule"]
    assert spec.choose_pool is not None and spec.params["decision"] == "paper-rule"
    assert POLICIES["vertumnus"].params["decision"] == "analytic"
    assert POLICIES["vertumnus-lookahead"].params["decision"] == "target"
    sim, _ = build_simulator("vertumnus-lookahead", _workload(), SimConfig(pool=RECONFIG_POOL))
    assert sorted(sim.attachments["controller"].candidates) == sorted(enumerate_compositions(RECONFIG_POOL))
    assert "vertumnus-paper-rule" in SUITES["ablations"]
    sim, _ = build_simulator("vertumnus-paper-rule", _workload(), SimConfig(pool=RECONFIG_POOL))
    assert sim.attachments["controller"].config.decision == "paper-rule" and "cache_manager" in sim.attachments


def test_demand_history_pools_workloads_and_validates():
    a, b = _workload(rate_rps=4.0, seed=0), _workload(rate_rps=8.0, seed=1)
    one = DemandHistory.of([a], "a")
    assert one.rate_rps == a.mean_rate_rps and one.mean_cached_tokens == reuse_prefix_tokens(a)
    both = DemandHistory.of([a, Workload("empty", ()), b], "a+b")  # empty workloads are skipped
    assert both.prompt_tokens.shape == (a.num_requests + b.num_requests,)
    assert both.rate_rps == pytest.approx((a.num_requests + b.num_requests - 2) / (a.duration_s + b.duration_s))
    assert both.mean_cached_tokens == pytest.approx(
        (reuse_prefix_tokens(a) * a.num_requests + reuse_prefix_tokens(b) * b.num_requests)
        / (a.num_requests + b.num_requests))
    with pytest.raises(ValueError, match="no workload with a request"):
        DemandHistory.of([Workload("empty", ())], "empty")
    with pytest.raises(ValueError, match="rate_rps must be a finite number >= 0"):
        DemandHistory(np.ones(3), math.nan, 0.0, "bad")
    with pytest.raises(ValueError, match="non-empty 1-D"):
        DemandHistory(np.ones((2, 2)), 1.0, 0.0, "bad")
    with pytest.raises(ValueError, match="finite lengths >= 1"):
        DemandHistory(np.array([10.0, np.nan]), 1.0, 0.0, "bad")
    with pytest.raises(ValueError, match="mean_cached_tokens must be a finite number"):
        DemandHistory(np.ones(3), 1.0, True, "bad")
    with pytest.raises(ValueError, match="expected a Workload or a sequence"):
        DemandHistory.of(None, "bad")
    assert DemandHistory.of(a, "a").rate_rps == one.rate_rps  # one workload, not in a list
    lengths = np.full(3, 100.0)
    h = DemandHistory(lengths, 1.0, 0.0, "copy")
    lengths[0] = 1.0
    assert h.prompt_tokens[0] == 100.0 and not h.prompt_tokens.flags.writeable
    assert resolve_history(lambda: h, a) is h and resolve_history(h, a) is h
    assert resolve_history(None, a).rate_rps == one.rate_rps and resolve_history(b, a).source == "workload cache-test"
    assert resolve_history(None, Workload("empty", ())) is None
    with pytest.raises(TypeError, match="must be a DemandHistory, a Workload or a function returning one, got str"):
        resolve_history("x", a)


def test_the_initial_pool_of_a_workload_is_that_of_its_history():
    wl = _workload(rate_rps=6.0)
    cfg, cal = SimConfig(pool=RECONFIG_POOL), Calibration.resolve(None)
    cache = CapacityCache()
    pool_w, info_w = workload_initial_pool(RECONFIG_POOL, wl, cfg, cal, cache)
    pool_h, info_h = workload_initial_pool(RECONFIG_POOL, DemandHistory.of([wl], "run workload"), cfg, cal, cache)
    assert pool_w == pool_h and info_w == info_h and info_w["history"] == "run workload"


def test_a_given_initial_composition_is_validated():
    spec = POLICIES["vertumnus"]
    assert spec.params["initial_composition"] == "profile"
    with pytest.raises(ValueError, match="initial_composition: expected 'profile' or a composition"):
        spec.with_params(initial_composition=123)
    given = spec.with_params(initial_composition="cp2x4")
    pool, info = given.choose_pool(RECONFIG_POOL, None, None, None, None)
    assert pool.composition == "cp2x4" and info == {"given": "cp2x4"} and pool.supported_degrees == (2, 4)
    with pytest.raises(ValueError, match="initial_composition 'cp8x9': expected 'profile'"):
        spec.with_params(initial_composition="cp8x9").check_pool(RECONFIG_POOL)
