"""Roofline calibration: published figures, parameter counts, coefficient mapping, shipped default."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources

import pytest

from kernels_ref import roofline
from kernels_ref.roofline import Efficiency, get_gpu, get_model

SHIPPED_COMMAND = "cpgym calibrate --model Qwen3-30B-A3B --gpu H20 --out envs/sim/calibrations/qwen3-30b-a3b__h20.json"


def test_qwen3_8b_kv_figures_match_published():
    m = get_model("Qwen3-8B")
    assert m.kv_bytes_per_token() == 144 * 1024  # 2 * 36 layers * 8 KV heads * 128 * 2 B
    assert m.kv_bytes_per_token() * 8192 == 1.125 * 2**30
    assert roofline.kv_transfer_time_s(m, 8192, 25e9) == pytest.approx(0.0483, abs=5e-5)


@pytest.mark.parametrize("gpu, expected_s", [("A100-80GB", 0.856), ("H20", 1.81)])
def test_qwen3_8b_prefill_8192_matches_published(gpu, expected_s):
    t = roofline.prefill_compute_time_s(get_model("Qwen3-8B"), get_gpu(gpu), 8192, 0, compute_efficiency=0.5)
    assert t == pytest.approx(expected_s, abs=0.005)


def test_prefill_flops_follow_the_published_rule():
    m = get_model("Qwen3-8B")
    w = 8192 * 8193 // 2
    assert m.prefill_flops(8192) == 2 * m.non_embedding_params() * 8192 + 4 * 36 * 32 * 128 * w
    # with a cached prefix only the suffix's pairs and tokens count
    assert m.prefill_flops(100, 900) == 2 * m.non_embedding_params() * 100 + 4 * 36 * 32 * 128 * (100 * 900 + 5050)


@pytest.mark.parametrize("name, total_b, lo_b, hi_b", [
    ("Qwen3-8B", "total", 8.1, 8.3),              # model card: 8.2B
    ("Qwen3-8B", "non_embedding", 6.9, 7.0),      # model card: 6.95B non-embedding
    ("Qwen3-30B-A3B", "total", 30.4, 30.6),       # model card: 30.5B
    ("Qwen3-30B-A3B", "activated", 3.2, 3.4),     # model card: 3.3B activated
    ("DeepSeek-V2-Lite", "total", 15.6, 15.8),    # model card: 15.7B
    ("DeepSeek-V3", "total", 670, 672),           # paper: 671B (without the MTP module)
    ("DeepSeek-V3", "activated", 36, 38),         # paper: 37B
])
def test_parameter_counts_match_model_cards(name, total_b, lo_b, hi_b):
    m = get_model(name)
    value = {"total": m.total_params(), "non_embedding": m.non_embedding_params(),
             "activated": m.active_non_embedding_params() + m.embedding_params()}[total_b]
    assert lo_b * 1e9 <= value <= hi_b * 1e9


def test_mla_kv_bytes_are_latent_plus_rope():
    v3 = get_model("DeepSeek-V3")
    assert v3.kv_bytes_per_token() == 61 * (512 + 64) * 2
    lite = get_model("DeepSeek-V2-Lite")
    assert lite.kv_bytes_per_token() == 27 * 576 * 2
    # MLA caches far less than the equivalent multi-head K/V would
    assert v3.kv_bytes_per_token() < 2 * 61 * 128 * 128 * 2 / 50
    assert v3.attention_flops_per_pair() == 2 * 61 * 128 * (192 + 128)


def test_coefficient_mapping():
    m, g = get_model("Qwen3-30B-A3B"), get_gpu("H20")
    c = roofline.roofline_coefficients(m, g, Efficiency(0.5, 0.4, 0.25), overhead_s=0.02, cp_serial_fraction=0.0)
    kv = 48 * 4 * 128 * 2 * 2
    assert c.c_s_per_token == pytest.approx(2 * m.active_non_embedding_params() / 74e12, rel=1e-12)
    assert c.alpha_s_per_pair == pytest.approx(4 * 48 * 32 * 128 / 74e12, rel=1e-12)
    assert c.a_s_per_token == pytest.approx(kv / 225e9, rel=1e-12)
    assert c.b_s_per_token == pytest.approx(kv / 1.6e12 + kv / 225e9, rel=1e-12)
    assert c.d_s == 0.02
    # doubling compute efficiency halves the compute terms only
    c2 = roofline.roofline_coefficients(m, g, Efficiency(1.0, 0.4, 0.25), overhead_s=0.02, cp_serial_fraction=0.0)
    assert c2.c_s_per_token == pytest.approx(c.c_s_per_token / 2) and c2.alpha_s_per_pair == pytest.approx(c.alpha_s_per_pair / 2)
    assert (c2.a_s_per_token, c2.b_s_per_token) == (c.a_s_per_token, c.b_s_per_token)
    # the CP-serial share moves per-token linear work from c (divided by C) to a (not divided)
    f = roofline.DEFAULT_CP_SERIAL_FRACTION
    c3 = roofline.roofline_coefficients(m, g, Efficiency(0.5, 0.4, 0.25), overhead_s=0.02)
    assert c3.c_s_per_token == pytest.approx((1 - f) * c.c_s_per_token, rel=1e-12)
    assert c3.a_s_per_token == pytest.approx(c.a_s_per_token + f * c.c_s_per_token, rel=1e-12)
    assert c3.service_time_s(1, 8192, 0) == pytest.approx(c.service_time_s(1, 8192, 0), rel=1e-12)
    assert c3.service_time_s(4, 8192, 0) > c.service_time_s(4, 8192, 0)
    with pytest.raises(ValueError, match="cp_serial_fraction"):
        roofline.roofline_coefficients(m, g, cp_serial_fraction=1.5)


def test_cost_model_at_zero_overhead_reduces_to_compute_roofline_plus_gather():
    m, g = get_model("Qwen3-8B"), get_gpu("H100")
    c = roofline.roofline_coefficients(m, g, overhead_s=0.0)
    kv_gather = m.kv_bytes_per_token() / (g.link_bandwidth_bytes_per_s * roofline.DEFAULT_EFFICIENCY)
    t = c.service_time_s(1, 8192, 0) - kv_gather * 8192
    assert t == pytest.approx(roofline.prefill_compute_time_s(m, g, 8192), rel=1e-12)


def test_memory_fields_and_capacity():
    m, g = get_model("Qwen3-30B-A3B"), get_gpu("H20")
    mem = roofline.memory_fields(m, g)
    assert mem["weight_bytes_per_gpu"] == m.total_params() * 2
    assert mem["activation_reserve_bytes"] == 9_600_000_000
    assert mem["max_prompt_tokens"] == 131072
    cal = roofline.build_calibration(m, g)
    # ~25 GB of KV per H20 at 96 KiB/token: about a quarter million tokens per GPU, C times that per worker
    assert 250_000 < cal.kv_capacity_tokens(1) < 265_000
    assert cal.kv_capacity_tokens(4) == (cal.kv_bytes_per_gpu * 4) // 98304


def test_weights_that_do_not_fit_raise():
    with pytest.raises(ValueError, match="do not fit"):
        roofline.memory_fields(get_model("DeepSeek-V3"), get_gpu("H200"))


@pytest.mark.parametrize("call, match", [
    (lambda: get_gpu("B200"), "unknown GPU"),
    (lambda: get_model("llama"), "unknown model"),
    (lambda: Efficiency(compute=0.0), "efficiency compute"),
    (lambda: roofline.roofline_coefficients(get_model("Qwen3-8B"), get_gpu("H20"), overhead_s=-1), "overhead_s"),
    (lambda: roofline.memory_fields(get_model("Qwen3-8B"), get_gpu("H20"), 1.0), "activation_reserve_fraction"),
])
def test_bad_input_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_shipped_default_equals_roofline_output():
    ref = resources.files("envs.sim").joinpath("calibrations", "qwen3-30b-a3b__h20.json")
    shipped = json.loads(ref.read_text())
    assert shipped["provenance"]["method"] == "roofline"
    built = roofline.build_calibration_dict(get_model("Qwen3-30B-A3B"), get_gpu("H20"), command=SHIPPED_COMMAND,
                                            created=shipped["provenance"]["created"])
    assert json.loads(json.dumps(built)) == shipped


def test_roofline_and_calibrate_command_do_not_import_torch():
    code = ("import sys, kernels_ref.roofline, experiments.commands.calibrate as c, argparse\n"
            "import experiments.commands.profile as pr, experiments.commands.kernels as k\n"
            "pr.add_arguments(argparse.ArgumentParser()); k.add_arguments(argparse.ArgumentParser())\n"
            "p = argparse.ArgumentParser(); c.add_arguments(p)\n"
            "assert c.run(p.parse_args(['--model', 'Qwen3-8B', '--gpu', 'H20', '--format', 'json'])) == 0\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["kv_bytes_per_token"] == 147456


def test_pair_count_agrees_with_the_simulator():
    from envs.sim.cost_model import attention_pairs as sim_pairs

    for r, p in ((1, 0), (2, 6), (8, 0), (4097, 12345)):
        assert roofline.attention_pairs(r, p) == sim_pairs(r, p)
    assert roofline.attention_pairs(2, 6) == 15  # paper §2.2 worked example (L=8, P=6)
