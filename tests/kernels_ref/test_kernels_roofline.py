"""Roofline calibration: published figures, parameter counts, coefficient mapping, shipped default."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources

import pytest

from envs.sim import Calibration
from kernels_ref import roofline, specs
from kernels_ref.roofline import Efficiency
from kernels_ref.specs import get_gpu, get_model

SHIPPED = [("Qwen3-30B-A3B", "H20-3e"), ("Qwen3-30B-A3B", "H20"), ("DeepSeek-V3", "H20-3e"),
           ("DeepSeek-V4-Flash-FP8", "H20-3e")]


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
    ("DeepSeek-V4-Flash-FP8", "total", 282, 286),  # model card: 284B
    ("DeepSeek-V4-Flash-FP8", "activated", 12.5, 14.5),  # model card: 13B
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
    assert c2.c_s_per_token == pytest.approx(c.c_s_per_token / 2)
    assert c2.alpha_s_per_pair == pytest.approx(c.alpha_s_per_pair / 2)
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
    m, g = get_model("Qwen3-30B-A3B"), get_gpu("H20-3e")
    mem = roofline.memory_fields(m, g)
    assert mem["weight_shard_gpus"] == 1  # 61 GB of BF16 weights fit one GPU: replicated on every rank
    assert mem["weight_bytes_per_gpu"] == m.total_params() * 2
    assert mem["activation_reserve_bytes"] == 13_440 * 2**20  # SGLang: 512 + 1.5 * 8192 + 2 * 256 + 1/8 * 1024 MiB
    assert mem["max_prompt_tokens"] == 131072
    cal = Calibration.from_dict(roofline.build_calibration_dict(m, g))
    # 141 - 61.06 - 14.09 = 65.84 GB of KV per rank at 96 KiB/token: 1,308 blocks of 512 tokens, C times that per worker
    assert cal.kv_bytes_per_gpu == 141_000_000_000 - 61_064_245_248 - 14_092_861_440
    assert cal.kv_capacity_blocks(1, 512) == 1308
    assert cal.kv_capacity_tokens(4) == (cal.kv_bytes_per_gpu * 4) // 98304


def test_activation_reserve_is_sglangs_absolute_default():
    mib = 2**20
    assert roofline.default_activation_reserve_bytes(get_gpu("H20-3e"), 1) == 13_440 * mib
    assert roofline.default_activation_reserve_bytes(get_gpu("H20-3e"), 4) == (512 + 12288 + 1024 + 512) * mib
    assert roofline.default_activation_reserve_bytes(get_gpu("H20-3e"), 8) == (512 + 12288 + 1024 + 1024) * mib
    # the same absolute figure on the 96 GB H20: it is not a share of HBM
    assert roofline.default_activation_reserve_bytes(get_gpu("H20"), 1) == 13_440 * mib


@pytest.mark.parametrize("model, gpu, g", [("Qwen3-30B-A3B", "H20-3e", 1), ("Qwen3-8B", "H20", 1),
                                           ("DeepSeek-V3", "H20-3e", 8), ("DeepSeek-V4-Flash-FP8", "H20-3e", 4),
                                           ("DeepSeek-V3", "H200", 8)])
def test_placement_arithmetic(model, gpu, g):
    """Per rank: replicated weights + routed experts / G + activation reserve + KV = HBM."""
    m, spec = get_model(model), get_gpu(gpu)
    cal = Calibration.from_dict(roofline.build_calibration_dict(m, spec))
    assert cal.weight_shard_gpus == g == roofline.default_weight_shard_gpus(m, spec)
    experts = m.routed_expert_params() * m.dtype_bytes
    replicated = m.total_params() * m.dtype_bytes - experts
    assert cal.weight_bytes_per_gpu == replicated + -(-experts // g)
    assert cal.weight_bytes_per_gpu + cal.activation_reserve_bytes + cal.kv_bytes_per_gpu == spec.hbm_capacity_bytes
    assert cal.kv_capacity_blocks(1, 512) == cal.kv_bytes_per_gpu // (m.kv_bytes_per_token() * 512)
    if g > 1:  # the next smaller group does not fit
        with pytest.raises(ValueError, match="do not fit"):
            roofline.memory_fields(m, spec, weight_shard_gpus=g // 2)


def test_shard_group_changes_only_the_expert_share_and_the_all_to_all():
    m, g = get_model("DeepSeek-V4-Flash-FP8"), get_gpu("H20-3e")
    w4, w8 = roofline.weight_bytes_per_gpu(m, 4), roofline.weight_bytes_per_gpu(m, 8)
    assert w4 - w8 == m.routed_expert_params() // 4 - m.routed_expert_params() // 8
    c4 = roofline.roofline_coefficients(m, g, weight_shard_gpus=4)
    c8 = roofline.roofline_coefficients(m, g, weight_shard_gpus=8)
    c1 = roofline.roofline_coefficients(m, g, weight_shard_gpus=1)
    # all-to-all: moe_layers * top_k * hidden * (1 + 2) B * (G-1)/G over the link at 50 %
    a2a = 43 * 6 * 4096 * 3 / 450e9
    assert c4.c_s_per_token - c1.c_s_per_token == pytest.approx(a2a * 3 / 4, rel=1e-9)
    assert c8.c_s_per_token - c1.c_s_per_token == pytest.approx(a2a * 7 / 8, rel=1e-9)
    for field in ("a_s_per_token", "b_s_per_token", "alpha_s_per_pair"):
        assert getattr(c4, field) == getattr(c1, field)


def test_fp8_weights_use_the_fp8_peak_and_attention_the_bf16_peak():
    m, g = get_model("DeepSeek-V3"), get_gpu("H20-3e")
    c = roofline.roofline_coefficients(m, g, cp_serial_fraction=0.0, weight_shard_gpus=8)
    a2a = roofline.moe_all_to_all_s_per_token(m, g, 8)
    assert c.c_s_per_token - a2a == pytest.approx(m.linear_flops_per_token() / (296e12 * 0.5), rel=1e-12)
    assert c.alpha_s_per_pair == pytest.approx(m.attention_flops_per_pair() / (148e12 * 0.5), rel=1e-12)
    with pytest.raises(ValueError, match="no FP8 tensor cores"):
        roofline.roofline_coefficients(m, get_gpu("A100-80GB"), weight_shard_gpus=8)


def test_weights_that_do_not_fit_raise():
    with pytest.raises(ValueError, match="do not fit"):
        roofline.memory_fields(get_model("DeepSeek-V3"), get_gpu("H20"))
    with pytest.raises(ValueError, match="dense"):
        roofline.weight_bytes_per_gpu(get_model("Qwen3-8B"), 2)
    with pytest.raises(ValueError, match="weight_shard_gpus"):
        roofline.weight_bytes_per_gpu(get_model("DeepSeek-V3"), 3)


def test_v4_flash_compressed_attention_work_term():
    """CSA/HCA: the quadratic work is the indexer (CSA, r = 4) and the compressed attention (HCA,
    r = 128); window and top-k work is bounded per token. Not the dense pair count."""
    m = get_model("DeepSeek-V4-Flash-FP8")
    assert m.compress_ratios.count(4) == 21 and m.compress_ratios.count(128) == 20 and m.compress_ratios.count(0) == 2
    per_entry = 2 * 64 * (512 + 512)  # QK^T and PV over 64 heads of one shared 512-d key-value entry
    assert m.attention_flops_per_pair() == 21 * (2 * 64 * 128) / 4 + 20 * per_entry / 128
    assert m.attention_flops_per_token() == (43 * 128 + 21 * 512) * per_entry
    dense = 2 * 43 * 64 * (512 + 512)  # what a silent dense assumption would charge per pair
    assert m.attention_flops_per_pair() < dense / 50  # ~1/53
    # exact for a long suffix: R new tokens over P cached cost token_flops * R + pair_flops * W(R, P)
    r, p = 4096, 65536
    per_token = m.linear_flops_per_token() + m.attention_flops_per_token()
    assert m.prefill_flops(r, p) == pytest.approx(per_token * r + m.attention_flops_per_pair() * (r * p + r * (r + 1) // 2))
    # compressed KV cache: per CSA layer (512 + 128) / 4 and per HCA layer 512 / 128 FP8 elements per token
    assert m.kv_bytes_per_token() == 21 * 640 // 4 + 20 * 512 // 128


def test_attention_kind_without_a_work_term_is_refused():
    with pytest.raises(ValueError, match="not modelled.*W\\(R, P\\)"):
        specs.ModelSpec(name="nsa-model", num_layers=2, hidden_size=64, num_q_heads=4, num_kv_heads=4, head_dim=16,
                           intermediate_size=128, vocab_size=100, max_prompt_tokens=1024, source="test", attention="nsa")
    with pytest.raises(ValueError, match="compress_ratios"):
        specs.ModelSpec(name="bad-v4", num_layers=3, hidden_size=64, num_q_heads=4, num_kv_heads=1, head_dim=16,
                           intermediate_size=0, vocab_size=100, max_prompt_tokens=1024, source="test", attention="csa_hca",
                           compress_ratios=(0, 4), sliding_window=8, index_topk=4, index_n_heads=2, index_head_dim=8,
                           o_lora_rank=8, o_groups=2, q_lora_rank=8)


@pytest.mark.parametrize("call, match", [
    (lambda: get_gpu("B200"), "unknown GPU"),
    (lambda: get_model("llama"), "unknown model"),
    (lambda: Efficiency(compute=0.0), "efficiency compute"),
    (lambda: roofline.roofline_coefficients(get_model("Qwen3-8B"), get_gpu("H20"), overhead_s=-1), "overhead_s"),
    (lambda: roofline.memory_fields(get_model("Qwen3-8B"), get_gpu("H20"), activation_reserve_bytes=-1),
     "activation_reserve_bytes"),
    (lambda: roofline.default_activation_reserve_bytes(specs.GpuSpec("small", 1e12, 1e12, 40_000_000_000, 1e11, "t")),
     "60 GiB"),
])
def test_bad_input_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("model, gpu", SHIPPED)
def test_shipped_calibrations_equal_roofline_output(model, gpu):
    m, g = get_model(model), get_gpu(gpu)
    name = roofline.calibration_file_name(m, g)
    shipped = json.loads(resources.files("envs.sim").joinpath("calibrations", name).read_text())
    assert shipped["provenance"]["method"] == "roofline"
    command = f"cpgym kernels calibrate --model {m.name} --gpu {g.name} --out envs/sim/calibrations/{name}"
    built = roofline.build_calibration_dict(m, g, command=command, created=shipped["provenance"]["created"])
    assert json.loads(json.dumps(built)) == shipped


def test_default_calibration_is_the_paper_model_on_the_paper_gpu():
    from envs.sim.cost_model import DEFAULT_CALIBRATION

    default = roofline.calibration_file_name(get_model(specs.DEFAULT_MODEL), get_gpu(specs.DEFAULT_GPU))
    assert DEFAULT_CALIBRATION == default
    assert (specs.DEFAULT_MODEL, specs.DEFAULT_GPU) == ("Qwen3-30B-A3B", "H20-3e")


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
        assert specs.attention_pairs(r, p) == sim_pairs(r, p)
    assert specs.attention_pairs(2, 6) == 15  # paper §2.2 worked example (L=8, P=6)
