"""The production-day workload (issue #39, reconfig/production-day-v1) meets the paper's §2
measurements it is built to: > 3x diurnal rate swing, long requests 4-8 % of arrivals carrying
32-54 % of input tokens, an infinite-cache prefix hit rate moving within 35-55 %."""

from __future__ import annotations

import numpy as np
import pytest

from envs.workloads import get_workload, ideal_prefix_reuse_per_request
from envs.workloads.production_day import LONG_PROMPT_TOKENS, production_day

SEEDS = (0, 1, 2)


def _columns(wl):
    t = np.array([r.arrival_time_s for r in wl.requests])
    L = np.array([r.num_prompt_tokens for r in wl.requests])
    return t, L, ideal_prefix_reuse_per_request(wl)


def _bins(t, duration_s, num_bins):
    return np.minimum((t * num_bins / duration_s).astype(int), num_bins - 1)


@pytest.fixture(scope="module")
def days():
    return {s: get_workload("production-day", seed=s) for s in SEEDS}


@pytest.mark.parametrize("seed", SEEDS)
def test_rate_swings_more_than_three_fold(days, seed):
    t, _, _ = _columns(days[seed])
    counts = np.bincount(_bins(t, 1440.0, 24), minlength=24)  # arrivals per 1/24 day
    assert counts.max() / counts.min() > 3.0
    assert np.argmax(counts) in range(11, 18) and np.argmin(counts) in (*range(0, 6), *range(22, 24))


@pytest.mark.parametrize("seed", SEEDS)
def test_long_requests_few_arrivals_many_tokens(days, seed):
    wl = days[seed]
    t, L, _ = _columns(wl)
    long_ = L > LONG_PROMPT_TOKENS
    assert np.array_equal(long_, np.array(wl.metadata["is_long_request"]))
    assert 0.04 <= long_.mean() <= 0.08
    assert 0.32 <= L[long_].sum() / L.sum() <= 0.54
    b = _bins(t, 1440.0, 6)  # every 4 hours of the day
    n = np.bincount(b, minlength=6)
    share = np.bincount(b, long_, 6) / n
    se = np.sqrt(0.08 * 0.92 / n)  # binomial standard error of a bin's share
    assert ((share >= 0.04 - 3 * se) & (share <= 0.08 + 3 * se)).all(), share
    assert share[0] > share[3]  # night (00-04) more long-heavy than the afternoon peak (12-16)


@pytest.mark.parametrize("seed", SEEDS)
def test_prefix_hit_rate_moves_within_35_to_55_percent(days, seed):
    t, L, reuse = _columns(days[seed])
    b = _bins(t, 1440.0, 12)  # every 2 hours, infinite prefix cache
    hit = np.bincount(b, reuse, 12) / np.bincount(b, L, 12)
    assert ((hit >= 0.35) & (hit <= 0.55)).all(), hit
    assert hit.max() - hit.min() >= 0.05, hit


def test_same_seed_same_workload_and_phases(days):
    a = days[0]
    assert a == get_workload("production-day", seed=0)
    assert a.requests != days[1].requests
    t = np.array([r.arrival_time_s for r in a.requests])
    assert a.metadata["phase_boundaries_s"] == [60.0 * i for i in range(25)]
    assert np.array_equal(a.metadata["phase_of_request"], _bins(t, 1440.0, 24))
    assert a.metadata["compression_factor"] == 60.0


def test_stationary_hour_holds_the_rate_and_mix():
    wl = production_day(duration_s=120.0, stationary_hour=14.0, seed=3)
    t, L, _ = _columns(wl)
    first, second = (t < 60.0).sum(), (t >= 60.0).sum()
    assert abs(first - second) < 4 * np.sqrt(first + second)  # constant rate: Poisson noise only
    assert 60.0 < wl.num_requests / 120.0 < 90.0  # the 73 req/s peak, times the slow noise
    assert 0.03 <= (L > LONG_PROMPT_TOKENS).mean() <= 0.07  # the peak's 5 % long share


@pytest.mark.parametrize("kwargs, word", [
    ({"peak_to_trough_ratio": 0.5}, "peak_to_trough_ratio"),
    ({"long_fraction_range": (0.08, 0.04)}, "long_fraction_range"),
    ({"reuse_probability_range": (0.2, 1.5)}, "reuse_probability_range"),
    ({"peak_rate_rps": 0.0}, "peak_rate_rps"),
    ({"num_phases": 0}, "num_phases"),
    ({"stationary_hour": float("nan")}, "stationary_hour"),
])
def test_bad_parameters_name_themselves(kwargs, word):
    with pytest.raises(ValueError, match=word):
        production_day(duration_s=10.0, **kwargs)
