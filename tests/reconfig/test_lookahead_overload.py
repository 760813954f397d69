"""Overload clip of the look-ahead (baselines/lookahead.py, ``LookaheadConfig.overload_rate_factor``):
a forecast rate above a multiple of the candidates' throughput bound is simulated at that multiple."""

import math
from dataclasses import replace

import numpy as np
import pytest

from baselines.controller import ControllerConfig, ReconfigController
from baselines.lookahead import LookaheadConfig, LookaheadPredictor
from envs.planning.capacity import CapacityTable, ProfileConfig
from envs.planning.composition import enumerate_compositions
from envs.sim import Calibration, PoolConfig, PredictionErrorConfig, Request, SimConfig, Simulator
from envs.sim.router import LeastWorkRouter
from tests.factories import RECONFIG_POOL, poisson_workload

POOL = PoolConfig(num_gpus=16, gpus_per_node=8, composition="cp4x4", supported_degrees=(2, 4))
FAST = ProfileConfig(duration_s=40.0, num_bisection_steps=5)


def _table(config: SimConfig | None = None) -> CapacityTable:
    return CapacityTable(config or SimConfig(pool=POOL), Calibration.default(), FAST)


def _sample(n: int = 200) -> list[Request]:
    """A shared first block (a system prompt), then blocks of the request's own; 10 % long prompts."""
    rng = np.random.default_rng(3)
    lengths = np.where(rng.random(n) < 0.1, 12000, 1500)
    return [Request(i, 0.1 * i, int(L), 1, (7,) + tuple(range(10 * i + 100, 10 * i + 100 + -(-int(L) // 512) - 1)))
            for i, L in enumerate(lengths)]


def _stubbed(pred: LookaheadPredictor) -> list[int]:
    """Replaces the predictor's simulations by a stub (TTFT by composition and stream size);
    returns the list the stub appends each simulated stream's request count to."""
    sizes: list[int] = []

    def fake(composition, workload, *args, **kwargs):
        pred.num_simulations += 1
        sizes.append(workload.num_requests)
        return float(len(composition)) + 1e-6 * workload.num_requests, 0.5

    pred._simulate_stream = fake
    return sizes


@pytest.mark.parametrize("bad", [1.0, 0.5, 0, -2.0, math.nan, True, "2"])
def test_overload_rate_factor_validation_names_the_field(bad):
    with pytest.raises(ValueError, match="lookahead.overload_rate_factor"):
        LookaheadConfig(overload_rate_factor=bad)


def test_rate_cap_is_the_factor_times_the_gpu_time_bound():
    cm = Calibration.default().cost_model()
    # two 1500-token prompts (3 blocks of 512): the first block shared, so at most 512 tokens hit
    sample = [Request(0, 0.0, 1500, 1, (7, 10, 11)), Request(1, 0.1, 1500, 1, (7, 12, 13))]
    R = 1500 - 512

    def gpu_s(c_min):  # the least GPU-seconds of one request on a worker of degree c_min
        return c_min * cm.a * R + cm.c * R + cm.alpha * R * (R + 1) * 0.5

    pred = LookaheadPredictor(_table(), LeastWorkRouter, LookaheadConfig(overload_rate_factor=2.0))
    assert pred.rate_cap_rps(["cp2x8"], sample, 512, (0, 2)) == pytest.approx(2.0 * 16 / gpu_s(2), rel=1e-12)
    assert pred.rate_cap_rps(["cp4x4"], sample, 512, (0, 2)) == pytest.approx(2.0 * 16 / gpu_s(4), rel=1e-12)
    # the largest over the candidates (the smallest degree needs the least GPU time)
    assert pred.rate_cap_rps(["cp4x4", "cp4x2,cp2x4"], sample, 512, (0, 2)) == pytest.approx(2.0 * 16 / gpu_s(2))
    # no shared block: nothing can hit
    own = [Request(0, 0.0, 1500, 1, (1, 2, 3)), Request(1, 0.1, 1500, 1, (4, 5, 6))]
    full = 2 * cm.a * 1500 + cm.c * 1500 + cm.alpha * 1500 * 1501 * 0.5
    assert pred.rate_cap_rps(["cp2x8"], own, 512, (5, 2)) == pytest.approx(2.0 * 16 / full, rel=1e-12)
    # steps taking twice their prediction: half the throughput
    slow = LookaheadPredictor(_table(SimConfig(pool=POOL, prediction_error=PredictionErrorConfig(bias=2.0))),
                              LeastWorkRouter)
    assert slow.rate_cap_rps(["cp2x8"], sample, 512, (0, 2)) == pytest.approx(16 / gpu_s(2), rel=1e-12)
    off = LookaheadPredictor(_table(), LeastWorkRouter, LookaheadConfig(overload_rate_factor=math.inf))
    assert off.rate_cap_rps(["cp2x8"], sample, 512, (0, 2)) == math.inf


def test_the_bound_is_a_rate_the_pool_cannot_serve():
    # every request at once: the pool's makespan is at least the bound's GPU time
    sample = _sample()
    pred = LookaheadPredictor(_table(), LeastWorkRouter, LookaheadConfig(overload_rate_factor=2.0))
    for comp in ("cp2x8", "cp4x4"):
        bound = pred.rate_cap_rps([comp], sample, 512, (0, len(sample))) / 2.0
        wl = pred.resampled_stream(sample, 512, 1e6, (0, len(sample)), 1e-3)  # 200 requests within microseconds
        res = Simulator(wl, SimConfig(pool=replace(POOL, composition=comp), record_events=False),
                        Calibration.default()).run(LeastWorkRouter())
        makespan = float(np.max(res.records["arrival_s"] + res.records["ttft_s"]))
        assert res.records["num_cached_tokens"].sum() > 0  # the shared block hits
        assert wl.num_requests / makespan <= bound
        assert wl.num_requests / makespan > 0.5 * bound  # and it is not a loose one here


def test_a_huge_forecast_rate_simulates_a_bounded_stream_shared_by_every_rate_above_the_cap():
    cfg = LookaheadConfig(duration_s=20.0, min_requests=20, num_replications=1)
    pred = LookaheadPredictor(_table(), LeastWorkRouter, cfg)
    sizes = _stubbed(pred)
    comps = enumerate_compositions(POOL)
    sample = _sample()
    cap = pred.rate_cap_rps(comps, sample, 512, (0, 200))
    assert math.isfinite(cap)
    got = pred.score_from_requests(comps, sample, 512, [1e4], (0, 200))
    assert len(sizes) == len(comps)
    # without the clip: 1e4 req/s x 20 s = 200,000 requests per stream
    assert max(sizes) <= math.ceil(cfg.rate_bucket_ratio * cap * cfg.duration_s)
    assert pred.num_clipped_rates == 1
    assert {k[1] for k in pred.stream_memo} == {cfg.bucket_rate(cap)}
    assert pred.score_calls[-1][1] == (cfg.bucket_rate(cap),)  # the simulated rates, as the memo holds them
    # another window's forecast far above the cap: the same bucket, nothing simulated again; the
    # scores follow the forecast along the backlog slope (the stub's 0.5 s per req/s)
    again = pred.score_from_requests(comps, sample, 512, [3e4, 5e4], (0, 200))
    assert len(sizes) == len(comps) and pred.num_clipped_rates == 3
    for c in comps:
        step = 0.5 * (np.mean([cfg.bucket_rate(3e4), cfg.bucket_rate(5e4)]) - cfg.bucket_rate(1e4))
        assert again[c] == pytest.approx(got[c] + step, rel=1e-12)


def test_below_the_cap_the_scores_are_those_without_it():
    comps = enumerate_compositions(POOL)
    sample = _sample()
    base = LookaheadConfig(duration_s=20.0, min_requests=20, num_replications=2)
    on = LookaheadPredictor(_table(), LeastWorkRouter, base)
    off = LookaheadPredictor(_table(), LeastWorkRouter, replace(base, overload_rate_factor=math.inf))
    rates = [14.0, 16.0]
    assert max(rates) < on.rate_cap_rps(comps, sample, 512, (0, 200))
    assert on.score_from_requests(comps, sample, 512, rates, (0, 200)) == off.score_from_requests(
        comps, sample, 512, rates, (0, 200))
    assert on.stream_memo == off.stream_memo and on.score_calls == off.score_calls
    assert on.num_clipped_rates == 0


def test_a_clipped_score_is_the_capped_one_plus_the_backlog_growth_to_the_forecast():
    comps = ["cp4x4", "cp2x8"]
    sample = _sample()
    base = LookaheadConfig(duration_s=8.0, min_requests=20, num_replications=1)
    capped = LookaheadPredictor(_table(), LeastWorkRouter, base)
    full = LookaheadPredictor(_table(), LeastWorkRouter, replace(base, overload_rate_factor=math.inf))
    cap = capped.rate_cap_rps(comps, sample, 512, (0, 200))
    rate = 3.0 * cap
    got = capped.score_from_requests(comps, sample, 512, [rate], (0, 200))
    want = full.score_from_requests(comps, sample, 512, [rate], (0, 200))  # simulated at the forecast rate
    (key,) = capped.stream_memo
    assert key[1] == base.bucket_rate(cap)
    for c in comps:
        at_cap, slope = capped.stream_memo[key][c], capped.backlog_slopes[key][c]
        assert got[c] == pytest.approx(at_cap + (base.bucket_rate(rate) - key[1]) * slope, rel=1e-12)
        assert got[c] > 2.0 * at_cap  # the backlog at the forecast rate, not the cap's
        assert got[c] == pytest.approx(want[c], rel=0.06)  # 2-4 % here at 1.5-6x the cap


def _controller_run(rate_rps: float, duration_s: float, factor: float):
    pool = RECONFIG_POOL
    cfg = SimConfig(pool=pool, seed=0)
    sim = Simulator(poisson_workload(rate_rps, duration_s, shared=(5,)), cfg)  # 2,000-token prompts sharing block 5
    ctl = ReconfigController(ControllerConfig(decision_window_s=20.0, k_windows=2, profile=ProfileConfig(duration_s=20.0),
                                              decision="target",
                                              lookahead=LookaheadConfig(num_replications=1, overload_rate_factor=factor)))
    ctl.attach(sim)
    sizes = ctl.sizes = []  # requests of every look-ahead simulation
    run = ctl.predictor._run  # every look-ahead simulation goes through it

    def counted(composition, workload, *args, **kwargs):
        sizes.append(workload.num_requests)
        return run(composition, workload, *args, **kwargs)

    ctl.predictor._run = counted
    res = sim.run(LeastWorkRouter())
    return ctl, res


def test_controller_below_saturation_decides_as_without_the_clip():
    on, res_on = _controller_run(4.0, 100.0, 2.0)
    off, res_off = _controller_run(4.0, 100.0, math.inf)
    assert on.predictor.num_clipped_rates == 0 and len(on.windows) >= 4
    assert [w.as_dict() for w in on.windows] == [w.as_dict() for w in off.windows]
    assert res_on.extras["reconfig_operations"] == res_off.extras["reconfig_operations"]
    assert np.array_equal(res_on.records["ttft_s"], res_off.records["ttft_s"])


def test_controller_in_deep_overload_simulates_at_most_the_cap():
    ctl, _ = _controller_run(200.0, 45.0, 2.0)
    pred = ctl.predictor
    forecasts = [w.lookahead_rate_rps for w in ctl.windows if w.lookahead_rate_rps == w.lookahead_rate_rps]
    assert max(forecasts) > 180.0 and pred.num_clipped_rates >= 2
    simulated = {r for _, rates, *_ in pred.score_calls for r in rates}
    # 2000-token prompts (one 512-token block shared) on 8 GPUs: the bound is ~58 req/s, the cap ~116
    assert max(simulated) < 125.0
    assert ctl.sizes and max(ctl.sizes) <= 125.0 * ctl.config.lookahead.duration_s  # 12,000 at the forecast
