"""Distributed correctness: the whole suite on ONE spawned gloo group (4 ranks, sub-groups for C = 1, 2, 4)."""

from __future__ import annotations

import pytest

from kernels_ref.check import TOLERANCES, CheckCase, default_cases, format_table, run_check_suite

CASES = default_cases((1, 2, 4))


@pytest.fixture(scope="module")
def results():
    return run_check_suite(CASES)


@pytest.mark.parametrize("index", range(len(CASES)), ids=[c.name for c in CASES])
def test_case_matches_float64_reference(results, index):
    res = results[index]
    assert res.case == CASES[index]
    atol, rtol = TOLERANCES[res.case.dtype]
    assert (res.atol, res.rtol) == (atol, rtol)
    assert res.within_tolerance, f"{res.case.name}: max abs err {res.max_abs_err:.3e}"
    assert res.max_abs_err <= atol + rtol * 10  # outputs are O(1)
    if res.case.kind == "attention":
        assert res.balance_ok, (res.rank_pairs, res.expected_pairs)


def test_suite_covers_required_cases():
    assert {c.degree for c in CASES} == {1, 2, 4}
    assert {c.dtype for c in CASES} == {"float64", "float32"} and {c.algorithm for c in CASES} == {"allgather", "ring"}
    assert any(c.num_cached_tokens == 0 for c in CASES) and any(c.num_cached_tokens > 0 for c in CASES)
    assert any(c.num_new_tokens % (2 * c.degree) for c in CASES if c.degree > 1)  # padding
    assert {c.num_q_heads // c.num_kv_heads for c in CASES} >= {1, 2, 4, 8}
    assert any(c.kind == "layer" and c.num_experts for c in CASES)


def test_balance_within_one_chunk(results):
    for res in results:
        c = res.case
        if c.kind != "attention" or c.degree == 1:
            continue
        w = c.num_new_tokens * c.num_cached_tokens + c.num_new_tokens * (c.num_new_tokens + 1) // 2
        assert sum(res.rank_pairs) == w
        s = -(-c.num_new_tokens // (2 * c.degree))
        dev = max(abs(p - w / c.degree) for p in res.rank_pairs)
        if c.num_new_tokens % (2 * c.degree) == 0:
            assert dev == 0
        elif s >= 2 * c.degree - 1:
            assert dev <= s * (c.num_cached_tokens + c.num_new_tokens)


def test_table_lists_every_case(results):
    text = format_table(results)
    assert text.count("PASS") == len(CASES) and f"{len(CASES)}/{len(CASES)} passed" in text


def test_bf16_requires_cuda():
    with pytest.raises(ValueError, match="cuda"):
        run_check_suite([CheckCase("attention", "ring", "bfloat16", 1, 4, 0)])


def test_check_detects_a_small_error(monkeypatch):
    """Negative control (in-process, C = 1): a 1e-9 perturbation of the output fails the fp64 tolerance."""
    import kernels_ref.cp_attention as cp
    from kernels_ref.check import _run_case

    case = CheckCase("attention", "allgather", "float64", 1, 21, 13, 4, 2, 8, seed=2)
    assert _run_case(case, 0, None, "cpu")["ok"]
    real = cp.zigzag_allgather_attention

    def perturbed(*args, **kwargs):
        res = real(*args, **kwargs)
        return cp.CPAttentionResult(res.out + 1e-9, res.pairs)

    monkeypatch.setattr(cp, "zigzag_allgather_attention", perturbed)
    row = _run_case(case, 0, None, "cpu")
    assert not row["ok"] and 0.9e-9 < row["max_abs_err"] < 1.1e-9


def test_check_reports_a_nan_output_as_nan(monkeypatch):
    """A kernel returning NaN in one element (not the first compared tensor's first row) was reported with
    max_abs_err 0.00e+00 and FAIL: Python's max(0.0, nan) is 0.0."""
    import math

    import kernels_ref.cp_attention as cp
    from kernels_ref.check import _nanmax, _run_case

    case = CheckCase("attention", "ring", "float64", 1, 9, 4, 4, 2, 8, seed=3)
    real = cp.ring_attention

    def with_nan(*args, **kwargs):
        res = real(*args, **kwargs)
        out = res.out.clone()
        out[3, 1, 2] = float("nan")
        return cp.CPAttentionResult(out, res.pairs)

    monkeypatch.setattr(cp, "ring_attention", with_nan)
    row = _run_case(case, 0, None, "cpu")
    assert not row["ok"] and math.isnan(row["max_abs_err"]) and math.isnan(row["max_rel_err"])
    assert math.isnan(_nanmax([1e-3, float("nan"), 0.0])) and _nanmax([1e-3, 2e-3]) == 2e-3 and _nanmax([]) == 0.0
