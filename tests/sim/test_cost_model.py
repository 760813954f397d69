import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from envs.sim import Calibration, CostCoefficients, CostModel, attention_pairs


def test_attention_pairs_worked_values():
    # paper walk-through: L=8 uncached -> 36 pairs; P=6 cached -> 2 queries, 15 pairs (not 3)
    assert attention_pairs(8, 0) == 36
    assert attention_pairs(2, 6) == 15


@given(st.integers(1, 5000), st.integers(0, 5000))
def test_attention_pairs_prefix_triangle(L, P):
    P = min(P, L)
    assert attention_pairs(L - P, P) * 2 == L * (L + 1) - P * (P + 1)


@given(st.integers(1, 100_000), st.integers(0, 100_000), st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4]))
def test_gpu_time_identity(R, P, C, Cmin):
    cm = CostModel(CostCoefficients(0.01, 2e-7, 3e-8, 7e-5, 1e-8))
    A, B = cm.split_s(R, P)
    assert cm.service_time_s(C, R, P) == pytest.approx(A + B / C, rel=1e-12)
    lhs = C * cm.service_time_s(C, R, P) - Cmin * cm.service_time_s(Cmin, R, P)
    assert lhs == pytest.approx((C - Cmin) * A, rel=1e-9, abs=1e-9)


def test_default_calibration_loads_and_is_plausible():
    cal = Calibration.default()
    assert cal.model == "Qwen3-30B-A3B" and cal.gpu_type == "H20-3e" and cal.weight_shard_gpus == 1
    # paper hardware: ~1,300 KV blocks of 512 tokens per rank (141 GB - 61.1 GB BF16 weights - 14.1 GB reserve)
    assert 1250 <= cal.kv_capacity_blocks(1, 512) <= 1350
    cm = cal.cost_model()
    # an 8k uncached prompt on one H20-3e takes on the order of a second; CP-4 is faster
    t1 = cm.service_time_s(1, 8192, 0)
    assert 0.2 < t1 < 5.0
    assert cm.service_time_s(4, 8192, 0) < t1
    assert (cal.kv_capacity_blocks(4, 512) == 4 * cal.kv_capacity_blocks(1, 512)
            or cal.kv_capacity_blocks(4, 512) >= 4 * cal.kv_capacity_blocks(1, 512) - 3)


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d.pop("kv_bytes_per_token"), "kv_bytes_per_token"),
    (lambda d: d["coefficients"].pop("alpha_s_per_pair"), "coefficients.alpha_s_per_pair"),
    (lambda d: d["coefficients"].update(d_s="fast"), "coefficients.d_s"),
    (lambda d: d["coefficients"].update(c_s_per_token=-1.0), "c_s_per_token"),
    (lambda d: d.update(format_version=99), "format_version"),
    (lambda d: d.update(bogus_key=1), "bogus_key"),
    (lambda d: d["coefficients"].update(zeta=1.0), "coefficients.zeta"),
])
def test_bad_calibration_names_file_and_field(tmp_path, mutate, field):
    d = Calibration.default().to_dict()
    mutate(d)
    p = tmp_path / "cal.json"
    p.write_text(json.dumps(d))
    with pytest.raises(ValueError) as e:
        Calibration.load(p)
    assert str(p) in str(e.value) and field in str(e.value)


def test_calibration_not_json(tmp_path):
    p = tmp_path / "cal.json"
    p.write_text("{not json")
    with pytest.raises(ValueError, match="line 1"):
        Calibration.load(p)
