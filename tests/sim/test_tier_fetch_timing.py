"""KV tiers (envs/sim/tiers.py): when a step that reads fetched KV may run, per-worker cost
models in heterogeneous pools, the fetch wait recorded apart from the service time, and the
next-use rule in the store (issue #43 items 2, 3, 8, 12)."""

import dataclasses

import pytest

from baselines.simple import RoundRobinRouter
from envs.sim import CostCoefficients, PoolConfig, Request, SimConfig, Simulator, Workload
from envs.sim.config import PredictionErrorConfig
from envs.sim.tiers import FETCH_PULL, FETCH_RECOMPUTE, TierConfig
from kernels_ref.roofline import Efficiency, build_calibration, get_gpu, get_model

BLOCK = 512
ONE_GPU = PoolConfig(num_gpus=1, gpus_per_node=1, composition="cp1@0", supported_degrees=(1,))
PREFIX = tuple(range(1, 17))  # 16 blocks = 8192 tokens
PREFIX_TOKENS = len(PREFIX) * BLOCK


@pytest.fixture(scope="module")
def a100():
    return build_calibration(get_model("Qwen3-8B"), get_gpu("A100-80GB"), Efficiency(0.5, 0.5, 0.5))


def _scaled(cal, speed: float):
    """``cal`` on a GPU ``speed`` times as fast (every cost coefficient divided by ``speed``)."""
    co = cal.coefficients
    return dataclasses.replace(cal, gpu_type=f"x{speed:g}", coefficients=CostCoefficients(
        co.d_s / speed, co.a_s_per_token / speed, co.b_s_per_token / speed, co.c_s_per_token / speed,
        co.alpha_s_per_pair / speed))


def _req(i, t, L, prefix=(), first_new=10**9):
    n = -(-L // BLOCK)
    return Request(i, t, L, 1, tuple(prefix) + tuple(range(first_new, first_new + n - len(prefix))))


def _sim(reqs, cal, node_cal=None, pool=ONE_GPU, prediction_error=None, seed=0, **tier_kw):
    tiers = TierConfig(**{"levels": ("hbm", "dram"), "num_layers": 36, "store_lookup_latency_s": 0.0, **tier_kw})
    cfg = SimConfig(pool=pool, kv_tiers=tiers, seed=seed, prediction_error=prediction_error or PredictionErrorConfig())
    wl = Workload("t", tuple(reqs), kv_block_size_tokens=BLOCK)
    return Simulator(wl, cfg, cal, node_calibrations=None if node_cal is None else [node_cal])


# ---------------------------------------------------------------------------------- item 3
def test_fetch_or_recompute_uses_the_workers_own_cost_model(a100):
    # A node 20x faster than the run's calibration produces the prefix's KV 20x faster: a link
    # that beats recomputing on the run's calibration loses on that node (it used to fetch).
    L = PREFIX_TOKENS + 1
    fast = _scaled(a100, 20.0)

    def production_rate(cal):  # bytes/s at which one GPU produces the prefix's KV (test_tiers.py)
        cm = cal.cost_model()
        return PREFIX_TOKENS * cal.kv_bytes_per_token / (cm.service_time_s(1, L, 0) - cm.service_time_s(1, 1, PREFIX_TOKENS))

    bw = 2.0 * production_rate(a100)
    assert bw < production_rate(fast)
    for node_cal, decision in ((None, FETCH_PULL), (fast, FETCH_RECOMPUTE)):
        sim = _sim([_req(0, 0.0, L, PREFIX)], a100, node_cal, dram_bytes_per_s_per_gpu=bw)
        sim.kv_tiers.dram[0].put(PREFIX, 0.0)
        req = sim.run_until_decision()
        w = sim.workers[0]
        p, delay = sim.kv_tiers.route_estimate(w, req, 0, 0.0)  # what the tiered routers see
        r = sim.run(RoundRobinRouter()).records
        assert r["kv_fetch_decision"][0] == decision
        cm = (node_cal or a100).cost_model()
        expected = cm.service_time_s(1, L, 0) if decision == FETCH_RECOMPUTE else \
            PREFIX_TOKENS * a100.kv_bytes_per_token / bw + cm.service_time_s(1, 1, PREFIX_TOKENS)
        assert r["finish_s"][0] == pytest.approx(expected, rel=1e-9)
        assert p == (0 if decision == FETCH_RECOMPUTE else PREFIX_TOKENS)
        assert delay + w.cost_model.service_time_s(1, L - p, p) == pytest.approx(expected, rel=1e-9)



# ---------------------------------------------------------------------------------- item 12
@pytest.mark.parametrize("eviction", ["lru", "next-use"])
def test_next_use_eviction_keeps_store_blocks_a_queued_request_needs(a100, eviction):
    # r0 runs; r1 (queue index 0) fetches PREFIX from the store at routing; r2 (index 1) defers
    # its fetch of PREFIX2 (queue-head prefetch, depth 1). Then 16 other blocks enter the full
    # store: next-use evicts those (no queued request needs them), LRU evicts PREFIX2 (least
    # recently used). The store's blocks were never registered as needed, so it evicted as LRU.
    prefix2 = tuple(range(101, 117))
    L = PREFIX_TOKENS + 1024
    bb = BLOCK * a100.kv_bytes_per_token
    sim = _sim([_req(0, 0.0, 16384, (), 5 * 10**8), _req(1, 0.0, L, PREFIX, 6 * 10**8), _req(2, 0.0, L, prefix2, 7 * 10**8)],
               a100, levels=("hbm", "store"), store_capacity_bytes=32 * bb, eviction=eviction, prefetch="queue-head",
               prefetch_depth_requests=1, fetch_policy="always")
    store = sim.kv_tiers.store
    store.put(prefix2 + PREFIX, 0.0)
    for _ in range(3):
        sim.run_until_decision()
        sim.decide(0)
    assert [len(sim.workers[0].batch), len(sim.workers[0].queue)] == [1, 2]
    store.put(tuple(range(201, 217)), 0.0)
    kept = all(h in store for h in prefix2)
    assert kept == (eviction == "next-use")
    r = sim.run(RoundRobinRouter()).records
    assert r["store_hit_tokens"][1] == PREFIX_TOKENS
    assert r["store_hit_tokens"][2] == (PREFIX_TOKENS if eviction == "next-use" else 0)
    assert not store._needed  # every registration was released when the fetches started
