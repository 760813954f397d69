"""Successive screening of the look-ahead candidates and warm-up scoring (baselines/lookahead.py)."""

import math

import numpy as np
import pytest

from baselines.lookahead import LookaheadConfig, LookaheadPredictor, screened_scores
from envs.planning.capacity import CapacityTable, ProfileConfig
from envs.planning.composition import enumerate_compositions
from envs.sim import Calibration, PoolConfig, Request, SimConfig, Simulator
from envs.sim.router import LeastWorkRouter

POOL = PoolConfig(num_gpus=16, gpus_per_node=8, composition="cp4x4", supported_degrees=(2, 4))
FAST = ProfileConfig(duration_s=40.0, num_bisection_steps=5)


def _values(true: dict, noise: float, seed: int):
    """Per-(composition, rate, stream) predictions: a true level, common stream noise (CRN) and
    a small composition-specific noise; counts the calls."""
    rng = np.random.default_rng(seed)
    common = {(r, k): rng.normal(0.0, noise) for r in (1.0, 2.0) for k in range(5)}
    own = {(c, r, k): rng.normal(0.0, noise / 10) for c in true for r in (1.0, 2.0) for k in range(5)}
    calls = []

    def value(c, rate, rep):
        calls.append((c, rate, rep))
        return true[c] * rate * (1.0 + common[(rate, rep)] + own[(c, rate, rep)])

    return value, calls


def test_screened_scores_infinite_margin_is_the_full_mean():
    true = {f"c{i}": 1.0 + 0.1 * i for i in range(6)}
    value, calls = _values(true, 0.2, 0)
    got = screened_scores(list(true), [1.0, 2.0], value, 3, math.inf)
    for c in true:
        full = np.mean([np.mean([value(c, r, k) for k in range(3)]) for r in (1.0, 2.0)])
        assert got[c] == pytest.approx(full, rel=1e-12)
    assert len(set(calls)) == 2 * 6 * 3  # every (composition, rate, stream)


@pytest.mark.parametrize("seed", range(5))
def test_screening_keeps_the_full_argmin_and_runs_fewer_streams(seed):
    true = {"a": 1.3, "b": 1.02, "c": 1.0, "d": 1.5, "e": 2.0, "f": 1.25}
    value, calls = _values(true, 0.15, seed)
    full = screened_scores(list(true), [1.0, 2.0], value, 4, math.inf)
    n_full = len(set(calls))
    calls.clear()
    got = screened_scores(list(true), [1.0, 2.0], value, 4, 0.1, keep=("e",))
    assert min(got, key=got.get) == min(full, key=full.get) == "c"
    for c in ("b", "c", "e"):  # within the margin, or kept: every stream, the full score
        assert got[c] == full[c]
    assert got["d"] != full["d"]  # screened out after stream 0 (50 % worse): its 1-stream score
    assert len(set(calls)) < n_full


def _table():
    return CapacityTable(SimConfig(pool=POOL), Calibration.default(), FAST)


def _sample(n: int = 200) -> list[Request]:
    rng = np.random.default_rng(3)
    lengths = np.where(rng.random(n) < 0.1, 12000, 1500)
    return [Request(i, 0.1 * i, int(L), 1, (7,) + tuple(range(10 * i + 100, 10 * i + 100 + -(-int(L) // 512) - 1)))
            for i, L in enumerate(lengths)]


def test_predictor_screening_same_best_fewer_simulations_and_target_fully_evaluated():
    comps = enumerate_compositions(POOL)
    full = LookaheadPredictor(_table(), LeastWorkRouter, LookaheadConfig(num_replications=3, screen_margin=math.inf,
                                                                        duration_s=20.0, min_requests=20))
    scr = LookaheadPredictor(_table(), LeastWorkRouter, LookaheadConfig(num_replications=3, screen_margin=0.05,
                                                                       duration_s=20.0, min_requests=20))
    rates = [14.0, 16.0]
    pf = full.score_from_requests(comps, _sample(), 512, rates, (0, 200))
    worst = max(pf, key=pf.get)
    ps = scr.score_from_requests(comps, _sample(), 512, rates, (0, 200), keep=(worst,))
    assert min(ps, key=ps.get) == min(pf, key=pf.get)
    assert ps[worst] == pf[worst]  # kept: every stream
    assert scr.num_simulations < full.num_simulations == len(comps) * 3 * 2
    # memoised per stream: repeating the call simulates nothing; a wider call reuses stream results
    n = scr.num_simulations
    assert scr.score_from_requests(comps, _sample(), 512, rates, (0, 200), keep=(worst,)) == ps
    assert scr.num_simulations == n


def test_warmup_scores_only_requests_arriving_after_it():
    sample = _sample()
    cfg = LookaheadConfig(duration_s=30.0, min_requests=20, warmup_s=10.0, num_replications=1)
    pred = LookaheadPredictor(_table(), LeastWorkRouter, cfg)
    got = pred.predict_from_requests(["cp4x4"], sample, 512, 12.0, (0, 200))["cp4x4"]
    wl = pred.resampled_stream(sample, 512, cfg.bucket_rate(12.0), (0, 200))
    sim_cfg = SimConfig(pool=POOL, seed=cfg.seed, record_events=False)
    res = Simulator(wl, sim_cfg, Calibration.default()).run(LeastWorkRouter())
    ttft, arr = res.records["ttft_s"], res.records["arrival_s"]
    assert (arr < 10.0).any() and (arr >= 10.0).any()
    assert got == pytest.approx(float(np.nanmean(ttft[arr >= 10.0])), rel=1e-12)
    assert got != pytest.approx(float(np.nanmean(ttft)), rel=1e-6)


def test_screen_margin_and_warmup_validation():
    with pytest.raises(ValueError, match="screen_margin"):
        LookaheadConfig(screen_margin=-0.1)
    with pytest.raises(ValueError, match="warmup_s"):
        LookaheadConfig(duration_s=60.0, warmup_s=60.0)
    assert LookaheadConfig(screen_margin=math.inf).screen_margin == math.inf


def test_stationary_load_gets_the_longer_stream_scored_after_its_warmup():
    sample = _sample()
    cfg = LookaheadConfig(duration_s=20.0, min_requests=20, num_replications=1, stationary_duration_s=40.0,
                          stationary_warmup_s=10.0)
    pred = LookaheadPredictor(_table(), LeastWorkRouter, cfg)
    short = pred.predict_from_requests(["cp4x4"], sample, 512, 12.0, (0, 200))["cp4x4"]
    long = pred.predict_from_requests(["cp4x4"], sample, 512, 12.0, (0, 200), stationary=True)["cp4x4"]
    assert {k[3] for k in pred.stream_memo} == {(20.0, 0.0), (40.0, 10.0)}  # memoised apart
    wl = pred.resampled_stream(sample, 512, cfg.bucket_rate(12.0), (0, 200), 40.0)
    assert wl.requests[-1].arrival_time_s > 30.0
    res = Simulator(wl, SimConfig(pool=POOL, seed=cfg.seed, record_events=False), Calibration.default()).run(LeastWorkRouter())
    ttft, arr = res.records["ttft_s"], res.records["arrival_s"]
    assert long == pytest.approx(float(np.nanmean(ttft[arr >= 10.0])), rel=1e-12)
    assert short != long
    with pytest.raises(ValueError, match="stationary_duration_s"):
        LookaheadConfig(duration_s=60.0, stationary_duration_s=30.0)


def _sessions(num_sessions: int = 40) -> list[Request]:
    """Two-turn sessions: turn 2 (6 blocks) extends turn 1 (4 blocks) of the same session, 20 s later
    (the conversation trace's structure: a later turn's prefix is its session's history)."""
    turns = []
    for s in range(num_sessions):
        first = tuple(range(1000 + 10 * s, 1004 + 10 * s))
        turns.append((0.5 * s, 4 * 512, first))
        turns.append((0.5 * s + 20.0, 6 * 512, first + (5000 + 2 * s, 5001 + 2 * s)))
    turns.sort(key=lambda t: t[0])
    return [Request(i, t, L, 1, h) for i, (t, L, h) in enumerate(turns)]


def test_replayed_sample_precedes_the_stream_scored_after_it_with_warm_prefix_caches():
    from baselines.vertumnus import VertumnusRouter

    sample = _sessions()
    cfg = LookaheadConfig(duration_s=20.0, min_requests=20, num_replications=1)
    pred = LookaheadPredictor(_table(), VertumnusRouter, cfg)
    rate = cfg.bucket_rate(4.0)
    stream = pred.resampled_stream(sample, 512, rate, (0, len(sample)))
    wl, scored_from_s = pred.after_replay(sample, 512, stream)
    n = len(sample)
    # the sample first, in order, at its own gaps from 0 s, every hash kept; then the stream, shifted past it
    assert [(r.arrival_time_s, r.num_prompt_tokens, r.block_hashes) for r in wl.requests[:n]] == [
        (r.arrival_time_s - sample[0].arrival_time_s, r.num_prompt_tokens, r.block_hashes) for r in sample]
    assert wl.requests[n - 1].arrival_time_s < scored_from_s <= wl.requests[n].arrival_time_s
    assert [r.arrival_time_s - scored_from_s for r in wl.requests[n:]] == pytest.approx(
        [r.arrival_time_s for r in stream.requests])
    assert [r.block_hashes for r in wl.requests[n:]] == [r.block_hashes for r in stream.requests]
    # the score is the mean TTFT of the stream's requests only, memoised apart from the cold stream
    got = pred.predict_from_requests(["cp4x4"], sample, 512, 4.0, (0, n), replay_sample=True)["cp4x4"]
    cold = pred.predict_from_requests(["cp4x4"], sample, 512, 4.0, (0, n))["cp4x4"]
    assert {k[3] for k in pred.stream_memo} == {(20.0, 0.0), (20.0, 0.0, "replay")}
    sim_cfg = SimConfig(pool=POOL, seed=cfg.seed, record_events=False)
    warm_res = Simulator(wl, sim_cfg, Calibration.default()).run(VertumnusRouter())
    scored = warm_res.records["arrival_s"] >= scored_from_s
    assert scored.sum() == len(stream.requests)
    assert got == pytest.approx(float(np.nanmean(warm_res.records["ttft_s"][scored])), rel=1e-12)
    # the replay leaves the turn-1 prefixes cached: the stream's drawn turn-2 copies hit them; cold, only
    # an earlier draw of the same session in the stream can
    cold_res = Simulator(stream, sim_cfg, Calibration.default()).run(VertumnusRouter())
    warm_hit = warm_res.records["num_cached_tokens"][scored].sum()
    cold_hit = cold_res.records["num_cached_tokens"].sum()
    assert warm_hit > 1.5 * cold_hit and got != cold
