"""KV tiers (envs/sim/tiers.py): when a step that reads fetched KV may run, per-worker cost
models in heterogeneous pools, the fetch wait recorded apart from the service time, and the
next-use rule in the store (issue #43 items 2, 3, 8, 12)."""

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from baselines.prediction_error import summarize_prediction_errors
from baselines.simple import RoundRobinRouter
from envs.sim import CostCoefficients, Request, SimConfig, Simulator, Workload
from envs.sim.config import PredictionErrorConfig
from envs.sim.tier_config import TierConfig
from envs.sim.tiers import FETCH_PULL, FETCH_RECOMPUTE
from tests.factories import ONE_GPU_POOL

BLOCK = 512
PREFIX = tuple(range(1, 17))  # 16 blocks = 8192 tokens
PREFIX_TOKENS = len(PREFIX) * BLOCK


def _scaled(cal, speed: float):
    """``cal`` on a GPU ``speed`` times as fast (every cost coefficient divided by ``speed``)."""
    co = cal.coefficients
    return dataclasses.replace(cal, gpu_type=f"x{speed:g}", coefficients=CostCoefficients(
        co.d_s / speed, co.a_s_per_token / speed, co.b_s_per_token / speed, co.c_s_per_token / speed,
        co.alpha_s_per_pair / speed))


def _req(i, t, L, prefix=(), first_new=10**9):
    n = -(-L // BLOCK)
    return Request(i, t, L, 1, tuple(prefix) + tuple(range(first_new, first_new + n - len(prefix))))


def _sim(reqs, cal, node_cal=None, pool=ONE_GPU_POOL, prediction_error=None, seed=0, **tier_kw):
    tiers = TierConfig(**{"levels": ("hbm", "dram"), "num_layers": 36, "store_lookup_latency_s": 0.0, **tier_kw})
    cfg = SimConfig(pool=pool, kv_tiers=tiers, seed=seed, prediction_error=prediction_error or PredictionErrorConfig())
    wl = Workload("t", tuple(reqs), kv_block_size_tokens=BLOCK)
    return Simulator(wl, cfg, cal, node_calibrations=None if node_cal is None else [node_cal])


def _step_s(cm, degree, num_new, num_cached):
    """The simulator's predicted time of a one-request step (same operations as ``_start_step``)."""
    r, p = num_new, num_cached
    return cm.d + (cm.a * r + cm.b * p + (cm.c * r + cm.alpha * (r * p + r * (r + 1) * 0.5)) / degree)


# ---------------------------------------------------------------------------------- item 2
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(num_layers=st.integers(1, 96), buffer_share=st.floats(0.0, 1.2), load_over_compute=st.floats(0.05, 20.0),
       bias=st.floats(0.2, 3.0), noise_sigma=st.sampled_from([0.0, 0.4]), node_speed=st.floats(0.05, 20.0),
       queued=st.booleans(), num_new_tokens=st.integers(1, 4096), seed=st.integers(0, 3))
def test_layerwise_step_never_computes_a_layer_before_it_is_loaded(a100, num_layers, buffer_share, load_over_compute,
                                                                   bias, noise_sigma, node_speed, queued,
                                                                   num_new_tokens, seed):
    # A step reading KV loaded layer by layer (chunks of B of N layers) computes layer i after
    # layer i arrived, whatever the prediction error and however fast the node is against the
    # run's calibration. The step's compute takes its last A seconds, A/N per layer, so layer i
    # starts at finish - (N - i) * A / N. (It used to start the step from the *predicted* compute
    # time: a step faster than predicted ended before its last layers had arrived.)
    B = max(1, round(buffer_share * num_layers))
    node = _scaled(a100, node_speed)
    cm = node.cost_model()
    L = PREFIX_TOKENS + num_new_tokens
    load_s = load_over_compute * cm.service_time_s(1, num_new_tokens, PREFIX_TOKENS)
    bw = PREFIX_TOKENS * a100.kv_bytes_per_token / load_s
    reqs = ([_req(0, 0.0, 16384, (), 5 * 10**8)] if queued else []) + [_req(int(queued), 0.0, L, PREFIX)]
    sim = _sim(reqs, a100, node, prediction_error=PredictionErrorConfig(bias=bias, noise_sigma=noise_sigma), seed=seed,
               dram_bytes_per_s_per_gpu=bw, fetch_policy="always", layerwise=True, layerwise_buffer_layers=B,
               num_layers=num_layers)
    sim.kv_tiers.dram[0].put(PREFIX, 0.0)
    r = sim.run(RoundRobinRouter()).records
    i = int(queued)
    assert r["num_cached_tokens"][i] == PREFIX_TOKENS and r["dram_hit_tokens"][i] == PREFIX_TOKENS
    # the step's actual compute time, from the same noise stream (one draw per step, r0's first)
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(3)[0])
    draws = rng.normal(-0.5 * noise_sigma ** 2, noise_sigma, size=i + 1) if noise_sigma > 0 else np.zeros(i + 1)
    A = _step_s(cm, 1, num_new_tokens, PREFIX_TOKENS) * bias * math.exp(draws[i])
    t0, ready, finish = r["fetch_start_s"][i], r["fetch_ready_s"][i], r["finish_s"][i]
    assert ready - t0 == pytest.approx(load_s, rel=1e-9)
    tol = 1e-9 * max(1.0, finish)
    for layer in range(num_layers):
        loaded = t0 + (ready - t0) * min((layer // B + 1) * B, num_layers) / num_layers
        assert finish - (num_layers - layer) * A / num_layers >= loaded - tol, (layer, B)
    assert finish - A >= r["start_s"][i] - tol
    # ... and not later than needed: the tightest of the bounds (whole-prefix loading for B >= N)
    f = min(1.0, B / num_layers)
    bound = max(r["start_s"][i] + A, t0 + (ready - t0) * f + A, ready + f * A) if f < 1 else max(r["start_s"][i], ready) + A
    assert finish == pytest.approx(bound, rel=1e-9)


def test_a_step_faster_than_predicted_still_waits_for_its_last_layer(a100):
    # the case: --prediction-bias 0.5, the link slower than the compute
    cm = a100.cost_model()
    C = cm.service_time_s(1, 1024, PREFIX_TOKENS)
    T = 2.0 * C
    B, N = 4, 36
    sim = _sim([_req(0, 0.0, PREFIX_TOKENS + 1024, PREFIX)], a100, prediction_error=PredictionErrorConfig(bias=0.5),
               dram_bytes_per_s_per_gpu=PREFIX_TOKENS * a100.kv_bytes_per_token / T, fetch_policy="always",
               layerwise=True, layerwise_buffer_layers=B)
    sim.kv_tiers.dram[0].put(PREFIX, 0.0)
    r = sim.run(RoundRobinRouter()).records
    A = 0.5 * _step_s(cm, 1, 1024, PREFIX_TOKENS)
    assert r["finish_s"][0] == pytest.approx(T + A * B / N)  # the last chunk arrives at T, then its compute
    assert r["fetch_exposed_s"][0] == pytest.approx(T - A * (1 - B / N))


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


def test_layerwise_overlap_on_a_faster_node_waits_for_the_last_layer(a100):
    # the second case: a node 2x faster than the run's calibration, no prediction error
    fast = _scaled(a100, 2.0)
    cm = fast.cost_model()
    A = _step_s(cm, 1, 1024, PREFIX_TOKENS)
    T = 3.0 * A
    B, N = 4, 36
    sim = _sim([_req(0, 0.0, PREFIX_TOKENS + 1024, PREFIX)], a100, fast,
               dram_bytes_per_s_per_gpu=PREFIX_TOKENS * a100.kv_bytes_per_token / T, fetch_policy="always",
               layerwise=True, layerwise_buffer_layers=B)
    sim.kv_tiers.dram[0].put(PREFIX, 0.0)
    r = sim.run(RoundRobinRouter()).records
    assert r["finish_s"][0] == pytest.approx(T + A * B / N)


# ---------------------------------------------------------------------------------- item 8
@pytest.mark.parametrize("layerwise", [False, True])
def test_fetch_wait_is_recorded_apart_from_the_service_time(a100, layerwise):
    # an idle worker waits for a slow fetch: the wait is kv_fetch_wait_s, the engine step's
    # compute is actual_service_s (it used to be wait + compute: 3x the prediction here)
    cm = a100.cost_model()
    C = cm.service_time_s(1, 1024, PREFIX_TOKENS)
    T = 2.0 * C
    sim = _sim([_req(0, 0.0, PREFIX_TOKENS + 1024, PREFIX), _req(1, 10.0, 2048, (), 7 * 10**8)], a100,
               dram_bytes_per_s_per_gpu=PREFIX_TOKENS * a100.kv_bytes_per_token / T, fetch_policy="always",
               layerwise=layerwise)
    sim.kv_tiers.dram[0].put(PREFIX, 0.0)
    res = sim.run(RoundRobinRouter())
    r = res.records
    assert r["actual_service_s"][0] == pytest.approx(r["predicted_service_s"][0], rel=1e-12)
    f = 4 / 36 if layerwise else 1.0
    assert r["kv_fetch_wait_s"][0] == pytest.approx(T - (1.0 - f) * C, rel=1e-12) == r["fetch_exposed_s"][0]
    assert r["start_s"][0] + r["kv_fetch_wait_s"][0] + r["actual_service_s"][0] == pytest.approx(r["finish_s"][0])
    assert r["kv_fetch_wait_s"][1] == 0.0 and r["actual_service_s"][1] == pytest.approx(r["predicted_service_s"][1])
    errors = summarize_prediction_errors(res)
    assert errors.loc[errors["group_by"] == "all", "mean_abs_service_rel_error"].item() == pytest.approx(0.0, abs=1e-12)


def test_fetch_wait_is_nan_for_requests_that_never_ran(a100):
    sim = _sim([_req(0, 0.0, 1024)], a100)
    sim.run_until_decision()
    assert math.isnan(sim.result().records["kv_fetch_wait_s"][0])


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
