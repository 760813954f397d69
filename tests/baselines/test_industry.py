"""Industry/paper baselines: SGLang cache-aware, llm-d, Dynamo, Mooncake, static threshold,
vLLM TP-4 cost form, homogeneous compositions and the registry."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from baselines.industry import (ApproxPrefixIndex, DynamoKVRouter, LlmdRouter, MooncakeTTFTRouter, SGLangCacheAwareRouter,
                                SGLangParams, StaticThresholdRouter, TensorParallelCostForm, default_length_threshold_tokens,
                                homogeneous_composition)
from baselines.registry import POLICIES, SUITES, get_policy
from envs.sim import Calibration, CostCoefficients, PoolConfig, SimConfig, Simulator
from experiments.runner import build_simulator, run_policy
from tests.sim.conftest import make_workload

POOL4 = PoolConfig(num_gpus=4, gpus_per_node=4, composition="cp1x4", supported_degrees=(1,))


def _cal(d=0.01, c=0.001, a=0.0, b=0.0):
    return Calibration(model="toy", gpu_type="toy", coefficients=CostCoefficients(d, a, b, c, 0.0), kv_bytes_per_token=1,
                       gpu_memory_bytes=40_000, weight_bytes_per_gpu=0, activation_reserve_bytes=0, max_prompt_tokens=100_000)


def _drive(sim, router, hook=None):
    router.reset(sim.view, sim.policy_rng)
    while (req := sim.run_until_decision()) is not None:
        wid = router.route(req, sim.view)
        if hook:
            hook(req, wid)
        sim.decide(wid)
        router.on_dispatch(req, wid, sim.view)
    return sim.result()


def test_sglang_follows_match_above_threshold_and_least_load_below():
    # r0 -> worker 0 (all idle, no match: least load, pool order); r1 shares 3 of 4 blocks
    # (match 0.75 > 0.3) -> worker 0 although it is busy; r2 shares 1 of 4 (0.25 <= 0.3) -> least load.
    wl = make_workload([(0.0, 16, (1, 2, 3, 4)), (0.0, 16, (1, 2, 3, 9)), (0.0, 16, (1, 7, 8, 9))])
    res = Simulator(wl, SimConfig(pool=POOL4), _cal()).run(SGLangCacheAwareRouter())
    assert res.records["worker_id"].tolist() == [0, 0, 1]


def test_sglang_imbalance_switches_to_least_load():
    # abs threshold 1, rel 1.5: after two requests pile on worker 0 (same prefix), loads are
    # (2, 0, 0, 0): 2 - 0 > 1 and 2 > 0 -> the third same-prefix request goes to the least loaded.
    params = SGLangParams(balance_abs_threshold=1, balance_rel_threshold=1.5)
    wl = make_workload([(0.0, 16, (1, 2, 3, 4))] * 3)
    res = Simulator(wl, SimConfig(pool=POOL4), _cal()).run(SGLangCacheAwareRouter(params))
    assert res.records["worker_id"].tolist() == [0, 0, 1]
    # default thresholds (64 / 1.5): all three follow the prefix
    res = Simulator(wl, SimConfig(pool=POOL4), _cal()).run(SGLangCacheAwareRouter())
    assert res.records["worker_id"].tolist() == [0, 0, 0]


def test_approx_index_lru_eviction_keeps_heads_and_longest_match():
    idx = ApproxPrefixIndex(capacity_blocks=3)
    idx.insert(0, (1, 2, 3, 4), 0.0)  # 4 blocks into a 3-block index: the tail block goes first
    assert idx.match(0, (1, 2, 3, 4)) == 3
    idx.insert(1, (1, 2), 1.0)
    assert idx.longest_match((1, 2, 3), {0, 1}) == (0, 3)
    assert idx.longest_match((1, 2, 5), {0, 1}) == (1, 2)  # equal depth: most recent holder
    assert idx.longest_match((1, 2, 3), {1}) == (1, 2)
    idx.remove_worker(0)
    assert idx.match(0, (1,)) == 0 and idx.longest_match((1, 2, 3), {0, 1}) == (1, 2)


def test_llmd_weighted_scores():
    # r0 -> worker 0 (all scores tie; seeded tie-break among all 4), r1 with the same prefix:
    # prefix score 3 on r0's worker beats queue/KV scores (<= 4 on the others) -> same worker.
    wl = make_workload([(0.0, 16, (1, 2, 3, 4)), (0.0, 16, (1, 2, 3, 4))])
    res = Simulator(wl, SimConfig(pool=POOL4), _cal()).run(LlmdRouter())
    w = res.records["worker_id"].tolist()
    assert w[0] == w[1]
    # with prefix weight 0, load scorers send the second request elsewhere
    from baselines.industry import LlmdParams

    res = Simulator(wl, SimConfig(pool=POOL4), _cal()).run(LlmdRouter(LlmdParams(prefix_weight=0.0)))
    w = res.records["worker_id"].tolist()
    assert w[0] != w[1]


def test_dynamo_cost_values():
    # worker 0 runs r0 (16 new tokens = 4 blocks, 4 active blocks); the cache fills only after
    # the step, so r1 (same prefix, t=0) has overlap 0 everywhere:
    #   w0: (16 + 16)/4 - 0 + (4 + 4) = 16 ; idle w: 16/4 + 4 = 8 -> r1 to worker 1.
    wl = make_workload([(0.0, 16, (1, 2, 3, 4)), (0.0, 16, (1, 2, 3, 4)), (100.0, 16, (1, 2, 3, 4))])
    costs = []
    router = DynamoKVRouter()
    sim = Simulator(wl, SimConfig(pool=POOL4), _cal())

    def hook(req, wid):
        bs = sim.view.kv_block_size_tokens
        c = {}
        for w in sim.view.worker_ids:
            active = sim.view.num_queued_new_tokens(w) + sim.view.num_running_new_tokens(w)
            c[w] = max(0.0, (active + req.num_prompt_tokens) / bs - sim.view.cached_blocks(w, req)) + \
                -(-router.inflight.inflight_tokens(sim.view, w) // bs) + len(req.block_hashes)
        costs.append(c)

    res = _drive(sim, router, hook)
    assert costs[1][0] == pytest.approx(16) and costs[1][1] == pytest.approx(8)
    # at t=100 workers 0 and 1 are idle with the 4 blocks cached: 16/4 - 4 + 4 = 4; cold: 8
    # -> worker 0 (pool order)
    assert costs[2][0] == pytest.approx(4) and costs[2][2] == pytest.approx(8)
    assert res.records["worker_id"].tolist() == [0, 1, 0]


def test_mooncake_minimises_queue_plus_cached_prefill():
    # r0 warms worker 0 with 4 blocks; at t=0.05 worker 0 is idle -> r1 (same prefix) goes there;
    # the hit makes its service shorter than a cold start elsewhere.
    wl = make_workload([(0.0, 16, (1, 2, 3, 4)), (1.0, 16, (1, 2, 3, 4))])
    res = Simulator(wl, SimConfig(pool=POOL4), _cal()).run(MooncakeTTFTRouter())
    assert res.records["worker_id"].tolist() == [0, 0]
    assert res.records["num_cached_tokens"].tolist() == [0, 15]


def test_static_threshold_routes_by_length():
    pool = PoolConfig(num_gpus=8, gpus_per_node=8, composition="cp4@0,cp2@4,cp2@6", supported_degrees=(2, 4))
    wl = make_workload([(0.0, 100, None), (0.0, 4000, None), (0.0, 120, None)])
    res = Simulator(wl, SimConfig(pool=pool), _cal()).run(StaticThresholdRouter(threshold_tokens=1000))
    assert res.records["degree"].tolist() == [2, 4, 2]
    assert res.records["worker_id"].tolist()[2] != res.records["worker_id"].tolist()[0]  # least work within class


def test_default_length_threshold_from_profile():
    cal = Calibration.default()
    cm = cal.cost_model()
    t = default_length_threshold_tokens(cm, 2, 4, 0.9, 512)
    eff = lambda L: 2 * cm.service_time_s(2, L, 0) / (4 * cm.service_time_s(4, L, 0))  # noqa: E731
    assert eff(t) >= 0.9 > eff(t - 512)
    with pytest.raises(ValueError, match="min_efficiency"):
        default_length_threshold_tokens(cm, 2, 4, 1.5)


def test_tp_cost_form_and_same_slos():
    cal = Calibration.default()
    tp = TensorParallelCostForm()(cal)
    co, ct = cal.coefficients, tp.coefficients
    assert (ct.c_s_per_token, ct.alpha_s_per_pair, ct.d_s) == (co.c_s_per_token, co.alpha_s_per_pair, co.d_s)
    prov = cal.provenance
    link = prov["datasheet"]["link_bandwidth_bytes_per_s"] * prov["efficiency"]["link"]
    gather = cal.kv_bytes_per_token / link
    serial = co.a_s_per_token - gather  # the CP-undivided compute share stays under TP
    assert serial > 0
    assert ct.a_s_per_token == pytest.approx(serial + 2 * 48 * 2048 * 2 * 2 * 3 / 4 / link)
    assert ct.b_s_per_token == pytest.approx(co.b_s_per_token - gather)
    hbm_bytes_per_s = prov["datasheet"]["hbm_bandwidth_bytes_per_s"] * prov["efficiency"]["hbm"]
    assert ct.b_s_per_token == pytest.approx(cal.kv_bytes_per_token / hbm_bytes_per_s)
    # without provenance all of a is taken as the all-gather (a pure-link calibration)
    bare = TensorParallelCostForm()(replace(cal, provenance={}))
    assert bare.coefficients.b_s_per_token == pytest.approx(max(0.0, co.b_s_per_token - co.a_s_per_token))
    wl = make_workload([(0.0, 3000, None), (0.5, 9000, None)], block=512)
    sim_tp, _ = build_simulator("vllm-tp4", wl, SimConfig())
    sim_cp, _ = build_simulator("homogeneous-cp4", wl, SimConfig())
    assert [sim_tp.ttft_slo_s(i) for i in range(2)] == pytest.approx([sim_cp.ttft_slo_s(i) for i in range(2)])
    assert sim_tp.cost_model.a > sim_cp.cost_model.a
    assert sim_tp.config.pool.composition == "cp4x10"
    with pytest.raises(ValueError, match="tp_degree"):
        TensorParallelCostForm(tp_degree=0)


def test_homogeneous_composition_follows_pool_size():
    assert homogeneous_composition(2)(PoolConfig()) == "cp2x20"
    assert homogeneous_composition(4)(PoolConfig()) == "cp4x10"
    small = PoolConfig(num_gpus=16, composition="cp4x2,cp2x4")
    assert get_policy("homogeneous-cp4").resolve_composition(small) == "cp4x4"
    with pytest.raises(ValueError, match="divisible"):
        homogeneous_composition(4)(PoolConfig(num_gpus=6, gpus_per_node=6, composition="cp2x3"))


def test_registry_complete_named_and_documented():
    want = {"vertumnus", "vertumnus-lambda0", "vertumnus-beta1", "vertumnus-no-reservation", "vertumnus-length-only",
            "homogeneous-cp2", "homogeneous-cp4", "static-threshold", "vllm-tp4", "sglang-cache-aware", "llm-d",
            "dynamo-kv", "mooncake-ttft"}
    assert want <= set(POLICIES)
    for name, spec in POLICIES.items():
        assert spec.description and spec.source
        assert spec.make_router().name == name
    for suite in SUITES.values():
        assert all(n in POLICIES for n in suite)


# "vertumnus" (the full system: its capacity profiling simulates, ~7 s a run) is checked the same
# way, at another seed, by tests/baselines/test_vertumnus.py::test_same_seed_same_result
@pytest.mark.parametrize("name", sorted({"vertumnus-no-reservation", "vertumnus-length-only", "homogeneous-cp2",
                                         "static-threshold", "vllm-tp4", "sglang-cache-aware", "llm-d", "dynamo-kv",
                                         "mooncake-ttft"}))
def test_every_policy_runs_deterministically(name, small_prefix_workload):
    wl = small_prefix_workload
    a = run_policy(name, wl, SimConfig(seed=2))
    b = run_policy(name, wl, SimConfig(seed=2))
    assert a.policy == name
    assert np.isnan(a.records["ttft_s"]).sum() == 0
    assert np.array_equal(a.records["worker_id"], b.records["worker_id"])
