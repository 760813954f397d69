"""Industry/paper baselines: SGLang cache-aware, llm-d, Dynamo, Mooncake, static threshold,
vLLM TP-4 cost form, homogeneous compositions and the registry."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from baselines.industry import (
    ApproxPrefixIndex,
    DynamoKVRouter,
    LlmdRouter,
    MooncakeTTFTRouter,
    SGLangCacheAwareRouter,
    SGLangParams,
    StaticThresholdRouter,
    TensorParallelCostForm,
    default_length_threshold_tokens,
    homogeneous_composition,
)
from baselines.registry import POLICIES, SUITES, get_policy
from baselines.runner import build_simulator, run_policy
from envs.sim import Calibration, PoolConfig, SimConfig, Simulator
from tests.factories import ONE_GPU_POOL, make_workload, toy_calibration

POOL4 = PoolConfig(num_gpus=4, gpus_per_node=4, composition="cp1x4", supported_degrees=(1,))


def _cal(d=0.01, c=0.001, a=0.0, b=0.0):
    return toy_calibration(d, c, a_s_per_token=a, b_s_per_token=b, gpu_memory_bytes=40_000, max_prompt_tokens=100_000)


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


def test_llmd_kv_utilization_counts_distinct_blocks_of_running_requests():
    # vLLM's kv_cache_usage_perc: blocks held by running requests, a shared block once. x runs
    # r1 and r2 together (16 tokens each, sharing 3 of their 4 blocks: 5 blocks held), y runs
    # r3 (24 tokens, 6 blocks). With the KV scorer alone the probe r4 goes to x (5 < 6 blocks;
    # counting prompt tokens, 32 > 24, sent it to y).
    from baselines.industry import LlmdParams

    wl = make_workload([(0.0, 40, None), (0.0, 16, (1, 2, 3, 4)), (0.0, 16, (1, 2, 3, 5)), (0.4, 24, None),
                        (0.5, 8, None)])
    sim = Simulator(wl, SimConfig(pool=POOL2), _cal(c=0.01))
    router = LlmdRouter(LlmdParams(prefix_weight=0.0, queue_weight=0.0))
    router.reset(sim.view, sim.policy_rng)
    script = {0: 0, 1: 0, 2: 0, 3: 1}
    while (req := sim.run_until_decision()) is not None:
        wid = script.get(req.request_id)
        if wid is None:
            assert [r.request_id for r in sim.workers[0].batch] == [1, 2]
            assert [r.request_id for r in sim.workers[1].batch] == [3]
            assert LlmdRouter.kv_usage(sim.workers[0]) * sim.workers[0].cache.capacity_blocks == pytest.approx(5)
            wid = router.route(req, sim.view)
            assert wid == 0
        sim.decide(wid)
        router.on_dispatch(req, wid, sim.view)


def test_llmd_prefix_match_counts_every_held_block_while_any_server_holds_it():
    # GAIE matchLongestPrefix: walk the blocks while some server holds the block; each holder
    # counts it. Worker 1's LRU lost block 1 (added first, so least recent): it still matches 3
    # of 4 (score 0.75), where a per-worker leading match gave it 0.
    idx = ApproxPrefixIndex(None)
    idx.insert(0, (1, 2, 3, 4), 0.0, head_first=True)
    idx.insert(1, (1, 2, 3, 4), 0.0, head_first=True)
    idx.evict(1, 3)
    assert idx.match(1, (1, 2, 3, 4)) == 0
    assert idx.match_counts((1, 2, 3, 4)) == {0: 4, 1: 3}
    assert idx.match_counts((9, 2, 3)) == {}  # no server holds the first block: nothing matches
    idx.remove_worker(0)
    assert idx.match_counts((1, 2, 3, 4)) == {}


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


POOL2 = PoolConfig(num_gpus=2, gpus_per_node=2, composition="cp1x2", supported_degrees=(1,))


def test_llmd_prefix_index_holds_each_workers_kv_capacity():
    # the prefix-cache-scorer's default autoTune sizes a server's LRU to its CacheNumGPUBlocks:
    # 64 tokens of KV = 16 blocks of 4 tokens here. r0 (8 blocks) then r1 (12 other blocks) on
    # the one worker: 20 > 16, so r0 keeps only 4 entries (the old fixed 2,000,000-token index
    # kept all 8): its last 4, since GAIE adds a prompt's blocks in order (head least recent)
    one = ONE_GPU_POOL
    cal = replace(_cal(), gpu_memory_bytes=64, max_prompt_tokens=64)
    wl = make_workload([(0.0, 32, tuple(range(1, 9))), (1.0, 48, tuple(range(11, 23)))])
    sim = Simulator(wl, SimConfig(pool=one), cal)
    router = LlmdRouter()
    _drive(sim, router)
    assert sim.workers[0].cache.capacity_blocks == 16
    assert router.index.size(0) == 16
    assert router.index.match(0, tuple(range(5, 9))) == 4 and router.index.match_counts(tuple(range(1, 9))) == {}
    # a fixed capacity [tokens] still works: 200 tokens = 50 blocks, nothing evicted
    from baselines.industry import LlmdParams

    sim = Simulator(wl, SimConfig(pool=one), cal)
    router = LlmdRouter(LlmdParams(lru_capacity_tokens=200))
    _drive(sim, router)
    assert router.index.size(0) == 20
    with pytest.raises(ValueError, match="lru_capacity_tokens"):
        LlmdParams(lru_capacity_tokens=-1)


def test_dynamo_logits_by_hand():
    # Dynamo (lib/llm/src/kv_router/scheduler.rs, sequence.rs), block 4, weight 1:
    #   logit = (active prefill tokens + max(0, L - overlap*4)) / 4 + distinct in-flight blocks
    #           + request blocks not in flight
    wl = make_workload([(0.0, 16, (1, 2, 3, 4)), (0.0, 14, (1, 2, 3, 9)),
                        (100.0, 24, (1, 2, 3, 4, 5, 6)), (100.0, 14, (1, 2, 3, 4))])
    logits = []
    router = DynamoKVRouter()
    sim = Simulator(wl, SimConfig(pool=POOL4), _cal())
    res = _drive(sim, router, lambda req, wid: logits.append(dict(router.logits(req, sim.view))))
    x, y = res.records["worker_id"].tolist()[:2]
    # r1 while r0 (4 blocks) runs on x: (16 + 14)/4 + 4 + 1 (block 9 is new; 1-3 are in flight
    # already) = 12.5 -- the old undeduplicated form gave (16+14)/4 + 4 + 4 = 15.5; idle: 14/4 + 4
    assert logits[1][x] == pytest.approx(12.5)
    assert all(logits[1][w] == pytest.approx(7.5) for w in range(4) if w != x)
    assert y != x
    # t=100: x holds 1-4, y holds 1-3 and 9. r2 extends x's prefix: (24 - 16)/4 + 6 = 8 -> x.
    # r3 = r0's blocks while r2 runs on x: its full overlap (16 tokens > L = 14) leaves 0 new
    # tokens (r2's 8 active ones stay): 8/4 + 6 + 0 = 8 (the old form: (8 + 14)/4 - 4 + 6 + 4 = 11.5)
    assert res.records["worker_id"].tolist()[2] == x
    assert logits[3][x] == pytest.approx(8.0)
    assert logits[3][y] == pytest.approx((14 - 12) / 4 + 4)
    assert all(logits[3][w] == pytest.approx(14 / 4 + 4) for w in range(4) if w not in (x, y))
    assert res.records["worker_id"].tolist()[3] == y


def test_dynamo_counts_shared_in_flight_blocks_once():
    # two workers: r0 (4 blocks) runs on x, r1 (3 other blocks, 12 tokens) on y. r2 shares r0's
    # first 3 blocks: x: (16 + 16)/4 + 4 + 1 = 13 < y: (12 + 16)/4 + 3 + 4 = 14 -> x (Dynamo's
    # ActiveSequences count blocks shared by in-flight requests once; counted per request, as
    # cpgym did, x would cost 16 and y win)
    wl = make_workload([(0.0, 16, (1, 2, 3, 4)), (0.0, 12, (11, 12, 13)), (0.0, 16, (1, 2, 3, 9))])
    res = Simulator(wl, SimConfig(pool=POOL2), _cal()).run(DynamoKVRouter())
    w = res.records["worker_id"].tolist()
    assert w[1] != w[0] and w[2] == w[0]


def test_dynamo_ties_go_to_the_worker_with_fewest_cached_blocks():
    # Dynamo's selector.rs (temperature 0): equal minimum logits -> the smallest indexer tree
    # size, random if those are equal too. r0: four idle empty workers tie -> seeded random x.
    # r1 (t=100, unrelated, all idle): equal logits 8/4 + 2 everywhere; x holds r0's 4 blocks
    # -> one of the other three (pool order would pick worker 0, i.e. x again)
    wl = make_workload([(0.0, 16, (1, 2, 3, 4)), (100.0, 8, (11, 12))])
    for seed in range(4):
        res = Simulator(wl, SimConfig(pool=POOL4, seed=seed), _cal()).run(DynamoKVRouter())
        w = res.records["worker_id"].tolist()
        assert w[1] != w[0]
    firsts = {Simulator(wl, SimConfig(pool=POOL4, seed=s), _cal()).run(DynamoKVRouter()).records["worker_id"][0]
              for s in range(12)}
    assert len(firsts) > 1  # seeded random among equal tree sizes, not pool order


def test_active_sequences_drop_finished_requests():
    from baselines.industry import ActiveSequences
    from envs.sim.cache import PrefixCache
    from envs.sim.worker import Worker

    w = Worker(0, 1, 0, 0, PrefixCache(10, 0), 100)
    act = ActiveSequences()
    act.record(0, (1, 2, 3))
    act.record(0, (1, 2, 7))
    w.queue.extend(["a", "b"])  # two in flight
    assert act.active_blocks_of(w) == 4
    assert act.potential_blocks_of(w, (1, 2, 8)) == 5
    w.queue.popleft()  # the oldest finished
    assert act.active_blocks_of(w) == 3 and act.potential_blocks_of(w, (1, 2, 3)) == 4


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
