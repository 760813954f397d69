"""Non-negative relative-error fit of the cost model."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kernels_ref.fit import cache_ratio_label, evaluate, features, fit_cost_model, format_fit_table, length_label, nnls

TRUE = {"d_s": 0.015, "a_s_per_token": 2.2e-7, "b_s_per_token": 2.7e-7, "c_s_per_token": 7.4e-5, "alpha_s_per_pair": 1.06e-8}
GRID = [(r, p, c) for r in (128, 512, 2048, 8192) for p in (0, 2048, 16384) for c in (1, 2, 4)]


def _times(coef, grid):
    x = np.array(list(coef.values()))
    return [(r, p, c, float(np.dot(features(r, p, c), x))) for r, p, c in grid]


def _brute_force_nnls(a, b):
    best, best_x = np.inf, None
    n = a.shape[1]
    for k in range(n + 1):
        for cols in itertools.combinations(range(n), k):
            x = np.zeros(n)
            if cols:
                x[list(cols)] = np.linalg.lstsq(a[:, cols], b, rcond=None)[0]
            if (x >= -1e-12).all():
                res = np.linalg.norm(a @ np.clip(x, 0, None) - b)
                if res < best - 1e-12:
                    best, best_x = res, np.clip(x, 0, None)
    return best_x


@pytest.mark.parametrize("seed", range(8))
def test_nnls_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(12, 5))
    b = rng.normal(size=12)
    x = nnls(a, b)
    assert (x >= 0).all()
    ref = _brute_force_nnls(a, b)
    assert np.linalg.norm(a @ x - b) == pytest.approx(np.linalg.norm(a @ ref - b), rel=1e-9, abs=1e-12)


def test_fit_recovers_exact_coefficients():
    fit = fit_cost_model(_times(TRUE, GRID))
    for k, v in TRUE.items():
        assert fit.coefficients[k] == pytest.approx(v, rel=1e-6)
    assert fit.mape < 1e-8 and fit.max_abs_rel_err < 1e-8


def test_fit_with_noise_and_a_zero_coefficient():
    coef = dict(TRUE, a_s_per_token=0.0)
    rng = np.random.default_rng(0)
    noisy = [(r, p, c, t * (1 + rng.normal(0, 0.02))) for r, p, c, t in _times(coef, GRID)]
    fit = fit_cost_model(noisy)
    assert all(v >= 0 for v in fit.coefficients.values())
    assert fit.coefficients["alpha_s_per_pair"] == pytest.approx(coef["alpha_s_per_pair"], rel=0.05)
    assert fit.coefficients["c_s_per_token"] == pytest.approx(coef["c_s_per_token"], rel=0.1)
    assert 0.005 < fit.mape < 0.04
    assert set(fit.by_degree) == {"C=1", "C=2", "C=4"}
    assert sum(b["n"] for b in fit.by_cache_ratio.values()) == len(GRID)
    assert "MAPE" in format_fit_table(fit)


def test_fit_is_relative_not_absolute():
    # a constant 10 % over-prediction on the long points and exact short points: relative error weighs both alike
    samples = _times(TRUE, GRID)
    fit = evaluate(TRUE, [(r, p, c, t / 1.1 if r == 8192 else t) for r, p, c, t in samples])
    assert fit.max_abs_rel_err == pytest.approx(0.1, rel=1e-9)
    assert all(b["n"] == 12 and b["mape"] == pytest.approx(0.1 * 3 / 12, rel=1e-9) for b in fit.by_degree.values())
    assert fit.by_length["<1024"]["mape"] < 1e-12 and fit.by_length["[4096,16384)"]["max"] == pytest.approx(0.1, rel=1e-9)
    assert fit.mape == pytest.approx(0.1 * 9 / 36, rel=1e-9)


def test_bucket_labels():
    assert cache_ratio_label(10, 0) == "0" and cache_ratio_label(10, 10) == "(0,0.5]" and cache_ratio_label(1, 10) == "(0.5,1)"
    assert length_label(100) == "<1024" and length_label(1024) == "[1024,4096)" and length_label(10**6) == ">=65536"


@pytest.mark.parametrize("samples, match", [
    ([(1, 0, 1, 1.0)] * 4, "at least 5"),
    ([(1, 0, 1, 1.0)] * 4 + [(2, 0, 1, 0.0)], "> 0"),
])
def test_fit_rejects_bad_samples(samples, match):
    with pytest.raises(ValueError, match=match):
        fit_cost_model(samples)


GOOD = [(r, p, c, t) for r, p, c, t in _times(TRUE, GRID)]


@pytest.mark.parametrize("bad, match", [
    ((512, 0, 2, float("inf")), r"sample 3 \(R=512, P=0, C=2\): time_s must be a finite number > 0, got inf"),  # NaN MAPE
    ((512, 0, 2, float("nan")), r"sample 3 \(R=512, P=0, C=2\): time_s must be a finite number > 0, got nan"),
    ((512, 0, 0, 1.0), r"sample 3 \(512, 0, 0, 1.0\): .*C an integer >= 1"),  # was a ZeroDivisionError
    ((0, 0, 2, 1.0), r"sample 3 .*R must be an integer >= 1"),
    ((512, -5, 2, 1.0), r"sample 3 .*P an integer >= 0"),
    ((512, 0, 2), r"sample 3 must be \(R, P, C, time_s\)"),
])
def test_fit_and_evaluate_name_the_bad_sample(bad, match):
    """An infinite time was fitted (NaN error table, garbage coefficients), C = 0 raised ZeroDivisionError,
    R = 0 and P < 0 were fitted silently, and a NaN time gave 'sample times must be > 0' without saying which."""
    samples = GOOD[:3] + [bad] + GOOD[3:]
    with pytest.raises(ValueError, match=match):
        fit_cost_model(samples)
    with pytest.raises(ValueError, match=match):
        evaluate(TRUE, samples)


@pytest.mark.parametrize("grid, match", [
    ([(r, p, 1) for r in (128, 512, 2048, 8192) for p in (0, 2048, 16384)], "2 distinct CP degrees C .*got only 1"),
    ([(r, 0, c) for r in (128, 512, 2048, 8192) for c in (1, 2, 4)], "2 distinct cached-token counts P .*got only 0"),
    ([(512, p, c) for p in (0, 2048, 16384) for c in (1, 2, 4)], "2 distinct new-token counts R .*got only 512"),
])
def test_fit_refuses_samples_that_do_not_determine_the_coefficients(grid, match):
    """A profile at one CP degree was 'fitted exactly' (MAPE 0) with the per-token cost put into a and c = 0:
    the calibration then predicted no CP speed-up at all (CP-4, R = 8192: 0.71 s instead of 0.26 s). With P = 0
    only, b was silently 0; with one R, d and a were confounded."""
    with pytest.raises(ValueError, match="do not determine the cost model.*" + match):
        fit_cost_model(_times(TRUE, grid))


def test_fit_refuses_collinear_features_of_a_sparse_grid():
    # two or more distinct values of each of R, P and C, but P = R on every sample: b and a are the same column
    grid = [(r, r, c) for r in (64, 256, 1024) for c in (1, 2)]
    with pytest.raises(ValueError, match="collinear"):
        fit_cost_model(_times(TRUE, grid))
    fit = fit_cost_model(_times(TRUE, [(r, p, c) for r in (1, 2) for p in (0, 1) for c in (1, 2)]))  # 2 x 2 x 2 suffices
    assert fit.mape < 1e-8


def test_profile_config_refuses_a_grid_the_fit_cannot_determine():
    """`cpgym kernels profile --degrees 1` profiled for minutes and wrote a calibration with an arbitrary a / c split."""
    from kernels_ref.profile import ProfileConfig

    for kwargs, flag in (({"degrees": (1,)}, "--degrees"), ({"num_cached_tokens": (0,)}, "--cached-tokens"),
                         ({"num_new_tokens": (64,)}, "--new-tokens")):
        with pytest.raises(ValueError, match=f"\\({flag}\\) needs at least 2 distinct values for the fit"):
            ProfileConfig(**kwargs)
