"""Vertumnus router: the worked values of issue #3 (paper §5 walk-through), eligibility,
reservation and the ablations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from baselines.vertumnus import StaleLoadView, VertumnusParams, VertumnusRouter, extra_gpu_time_s, placement_cost
from envs.sim import CostCoefficients, CostModel, PoolConfig, SimConfig, Simulator, WorkerState
from tests.factories import ONE_GPU_POOL, make_workload, toy_calibration

MS = 1e-3


def _j(A, B, C, c_min=1, q=0.0, beta=1.0, lam=1.0):
    """J in ms for E_C = A + B/C (ms), via the library's placement_cost."""
    s = A + B / C
    s_min = A + B / c_min
    return s, placement_cost(q, s, C, c_min, s_min, beta, lam)


@pytest.mark.parametrize("A,B,lam,expect", [(2, 24, 1, 4), (2, 4, 1, 1), (2, 24, 4, 1)])
def test_worked_cp_choice(A, B, lam, expect):
    s1, j1 = _j(A, B, 1, lam=lam)
    s4, j4 = _j(A, B, 4, lam=lam)
    if (A, B, lam) == (2, 24, 1):
        assert (s1, j1, s4, j4) == pytest.approx((26, 26, 8, 14))
    if (A, B, lam) == (2, 4, 1):
        assert (s1, j1, s4, j4) == pytest.approx((6, 6, 3, 9))
    if lam == 4:
        assert j4 == pytest.approx(32) and j1 == pytest.approx(26)
    assert (4 if j4 < j1 else 1) == expect


@pytest.mark.parametrize("beta,expect", [(1.0, "cold"), (3.0, "warm")])
def test_worked_queue_vs_cache(beta, expect):
    # lambda = 0: warm q=20 s=4, cold q=0 s=14 (ms); beta 1 -> 24 vs 14; beta 3 -> 32 vs 42
    warm = placement_cost(20, 4, 1, 1, 4, beta, 0.0)
    cold = placement_cost(0, 14, 1, 1, 14, beta, 0.0)
    assert (warm, cold) == pytest.approx((24, 14) if beta == 1 else (32, 42))
    assert ("warm" if warm < cold else "cold") == expect


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 20000), st.integers(0, 50000), st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4]))
def test_gpu_time_identity(R, P, C, c_min):
    cm = CostModel(CostCoefficients(0.015, 2.2e-7, 2.7e-7, 7.4e-5, 1.06e-8))
    A, _ = cm.split_s(R, P)
    assert extra_gpu_time_s(cm, C, c_min, R, P) == pytest.approx((C - c_min) * A, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("kw", [dict(beta=0.99), dict(lambda_=-0.1), dict(beta=math.nan), dict(lambda_=math.inf)])
def test_invalid_params_raise(kw):
    with pytest.raises(ValueError, match="beta|lambda"):
        VertumnusParams(**kw)


# --- the router inside the simulator ---------------------------------------------------------
def _cal(d=0.0, c=0.0, a=0.0):
    """E_C(R, P) = d + a*R + c*R/C [s]; KV capacity 4,000 tokens per GPU (1,000 blocks of 4)."""
    return toy_calibration(d, c, a_s_per_token=a, max_prompt_tokens=100_000)


def _run(wl, pool, cal, params=None, record=False):
    sim = Simulator(wl, SimConfig(pool=pool, record_events=record), cal)
    # the walk-through's worked examples use beta = 1 (the default is 3, see baselines/vertumnus.py)
    return sim, sim.run(VertumnusRouter(params or VertumnusParams(beta=1.0)))


HETERO = PoolConfig(num_gpus=8, gpus_per_node=8, composition="cp4@0,cp2@4,cp1@6,cp1@7", supported_degrees=(1, 2, 4))


def test_router_reproduces_worked_choice_in_simulator():
    # A = d = 2 ms, B = c*R = 24 ms for R = 24 tokens -> CP4 (J 14 < 26 of CP1); the CP-2 worker
    # has J = 2 + 12 + 1*(2*14 - 26) = 16.
    pool = PoolConfig(num_gpus=8, gpus_per_node=8, composition="cp4@0,cp1@4,cp1@5,cp1@6,cp1@7", supported_degrees=(1, 4))
    wl = make_workload([(0.0, 24, None)])
    _, res = _run(wl, pool, _cal(d=2 * MS, c=1 * MS))
    assert res.records["degree"].tolist() == [4]
    # lambda = 4 -> CP1 (J 26 < 32)
    _, res = _run(wl, pool, _cal(d=2 * MS, c=1 * MS), VertumnusParams(beta=1.0, lambda_=4.0))
    assert res.records["degree"].tolist() == [1]
    # B = 4 ms -> CP1 (6 < 9)
    wl4 = make_workload([(0.0, 4, None)])
    _, res = _run(wl4, pool, _cal(d=2 * MS, c=1 * MS))
    assert res.records["degree"].tolist() == [1]


def test_reservation_spreads_a_burst():
    # 4 simultaneous identical requests on 4 CP-1 workers: each sees the previous ones' s at once.
    pool = PoolConfig(num_gpus=4, gpus_per_node=4, composition="cp1x4", supported_degrees=(1,))
    wl = make_workload([(0.0, 40, None)] * 4)
    _, res = _run(wl, pool, _cal(d=0.1, c=0.01))
    assert sorted(res.records["worker_id"].tolist()) == [0, 1, 2, 3]


def test_no_reservation_piles_a_burst_on_one_busy_worker():
    # Worker 0 runs a long request; a burst arrives while worker 1 is slightly busier.
    # The stale view (last step boundary) does not see the burst's own queued work, so all
    # three burst requests join worker 0's queue; with reservation they spread.
    pool = PoolConfig(num_gpus=2, gpus_per_node=2, composition="cp1x2", supported_degrees=(1,))
    wl = make_workload([(0.0, 100, None), (0.0, 110, None), (0.5, 10, None), (0.5, 10, None), (0.5, 10, None)])
    cal = _cal(d=0.0, c=0.01)
    _, res_stale = _run(wl, pool, cal, VertumnusParams(beta=1.0, reservation=False))
    _, res_res = _run(wl, pool, cal)
    assert res_stale.records["worker_id"].tolist()[2:] == [0, 0, 0]
    assert set(res_res.records["worker_id"].tolist()[2:]) == {0, 1}
    assert np.nanmean(res_stale.records["ttft_s"]) > np.nanmean(res_res.records["ttft_s"])


def test_stale_view_matches_exact_view_at_step_boundaries():
    sv = StaleLoadView()
    pool = ONE_GPU_POOL
    wl = make_workload([(0.0, 10, None), (0.0, 10, None)])
    sim = Simulator(wl, SimConfig(pool=pool), _cal(d=1.0, c=0.1))
    req = sim.run_until_decision()
    sim.decide(0)
    sv.record(0, 0.0, sim.view.predicted_service_s(0, req))
    req = sim.run_until_decision()
    s2 = sim.view.predicted_service_s(0, req)
    sim.decide(0)
    sv.record(0, 0.0, s2)
    # the second request is queued behind the running step and was dispatched at its start
    assert sim.view.outstanding_work_s(0) == pytest.approx(2.0 + s2)
    assert sv.outstanding_work_s(sim.view, 0) == pytest.approx(2.0)


def test_eligibility_excludes_draining_and_too_small_workers_but_not_cache_misses():
    pool = PoolConfig(num_gpus=4, gpus_per_node=4, composition="cp2@0,cp1@2,cp1@3", supported_degrees=(1, 2))
    cal = _cal(d=0.01, c=0.001)
    # 6,000-token prompt: a CP-1 worker holds 4,000 tokens, so only the CP-2 worker is eligible
    wl = make_workload([(0.0, 6000, None)])
    _, res = _run(wl, pool, cal)
    assert res.records["degree"].tolist() == [2]
    # a draining worker is never chosen even when it has the prefix cached
    wl = make_workload([(0.0, 8, (1, 2)), (5.0, 8, (1, 2))])
    sim = Simulator(wl, SimConfig(pool=pool), cal)
    router = VertumnusRouter()
    router.reset(sim.view, sim.policy_rng)
    first = True
    while (req := sim.run_until_decision()) is not None:
        wid = router.route(req, sim.view)
        if first:
            sim.decide(wid)
            warm, first = wid, False
            continue
        assert sim.view.cached_blocks(warm, req) == 2
        sim.workers[warm].state = WorkerState.DRAINING
        wid = router.route(req, sim.view)
        assert wid != warm
        sim.decide(wid)


def test_length_only_picks_degree_by_length_and_least_work_within():
    pool = PoolConfig(num_gpus=8, gpus_per_node=8, composition="cp4@0,cp1@4,cp1@5,cp1@6,cp1@7", supported_degrees=(1, 4))
    cal = _cal(d=2 * MS, c=1 * MS)
    # long (24 tokens: CP-4 cost 8+6 < 26) -> CP-4; short (4 tokens: 3+6 > 6) -> CP-1, and the
    # next short ones spread over the CP-1 workers by least q_w
    wl = make_workload([(0.0, 24, None), (0.0, 4, None), (0.0, 4, None), (0.0, 4, None)])
    _, res = _run(wl, pool, cal, VertumnusParams(beta=1.0, length_only=True))
    assert res.records["degree"].tolist() == [4, 1, 1, 1]
    assert res.records["worker_id"].tolist()[1:] == [4, 5, 6]
    # load-blind: a queue of long prompts all go to the only CP-4 worker even when CP-1 is idle
    wl = make_workload([(0.0, 24, None)] * 4)
    _, lo = _run(wl, pool, cal, VertumnusParams(beta=1.0, length_only=True))
    _, full = _run(wl, pool, cal)
    assert lo.records["degree"].tolist() == [4, 4, 4, 4]
    assert 1 in full.records["degree"].tolist()


@pytest.mark.slow
def test_same_seed_same_result(small_prefix_workload):
    from baselines.runner import run_policy

    wl = small_prefix_workload
    a = run_policy("vertumnus", wl, SimConfig(seed=1))
    b = run_policy("vertumnus", wl, SimConfig(seed=1))
    assert a.policy == "vertumnus" and np.isnan(a.records["ttft_s"]).sum() == 0
    assert np.array_equal(a.records["worker_id"], b.records["worker_id"])
    assert np.allclose(a.records["ttft_s"], b.records["ttft_s"], equal_nan=True)
