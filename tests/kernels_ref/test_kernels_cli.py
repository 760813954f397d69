"""`cpgym kernels calibrate`, `cpgym kernels check` and `cpgym kernels profile` end to end."""

from __future__ import annotations

import json

import pytest

from envs.sim.cost_model import Calibration
from experiments.cli import main
from kernels_ref import roofline, specs


def test_calibrate_json_reports_published_figures(capsys):
    assert main(["kernels", "calibrate", "--model", "Qwen3-8B", "--gpu", "A100-80GB", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kv_bytes_per_token"] == 147456
    assert out["prefill_time_s_8192"] == pytest.approx(0.856, abs=0.005)
    assert out["kv_handoff_time_s_8192_at_25GBps"] == pytest.approx(0.0483, abs=5e-5)
    assert set(out["coefficients"]) == {"d_s", "a_s_per_token", "b_s_per_token", "c_s_per_token", "alpha_s_per_pair"}


def test_calibrate_writes_a_loadable_file_with_provenance(tmp_path, capsys):
    path = tmp_path / "cal.json"
    assert main(["kernels", "calibrate", "--model", "qwen3-8b", "--gpu", "h20", "--compute-efficiency", "0.4",
                 "--out", str(path)]) == 0
    cal = Calibration.load(path)
    assert (cal.model, cal.gpu_type) == ("Qwen3-8B", "H20")
    prov = cal.provenance
    assert prov["method"] == "roofline" and prov["efficiency"] == {"compute": 0.4, "hbm": 0.5, "link": 0.5}
    assert prov["command"] == f"cpgym kernels calibrate --model Qwen3-8B --gpu H20 --compute-efficiency 0.4 --out {path}"
    assert prov["datasheet"]["peak_bf16_flops_per_s"] == 148e12 and prov["model_config"]["num_layers"] == 36
    assert "wrote" in capsys.readouterr().out


def test_launch_refuses_more_ranks_than_the_cpu_limit():
    """The library check behind `--degrees 99999` (a row of tests/kernels_ref/test_cli_errors.py)."""
    from kernels_ref.dist import MAX_CPU_RANKS, launch

    with pytest.raises(ValueError, match=f"more than {MAX_CPU_RANKS}"):
        launch(print, MAX_CPU_RANKS + 1)


def test_the_memory_estimate_of_the_default_grid_is_modest():
    from kernels_ref.profile import ProfileConfig

    cfg = ProfileConfig()
    assert 2 ** 20 < cfg.estimated_peak_bytes_per_rank() < 2 ** 30  # the default grid runs on any laptop
    cfg.check_memory(2 ** 32, "4 GiB")
    with pytest.raises(ValueError, match=r"x 4 rank\(s\) .* more than 1 MiB"):
        cfg.check_memory(2 ** 20, "1 MiB")


def test_calibrate_deepseek_v3_json_shows_the_weight_placement(capsys):
    """Done-when of the placement item: DeepSeek-V3 (671B FP8) on H20-3e needs a shard group of 8."""
    assert main(["kernels", "calibrate", "--model", "deepseek-v3", "--gpu", "h20-3e", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    pl = out["placement"]
    m = specs.get_model("DeepSeek-V3")
    # G = 4 would need 17.1 GB replicated + 653.9 GB / 4 of experts = 180 GB per rank > 141 GB
    assert pl["weight_shard_gpus"] == 8 and pl["min_worker_degree"] == 8
    assert pl["weight_bytes_per_rank"] == pl["replicated_weight_bytes"] + pl["routed_expert_weight_bytes"] // 8
    assert pl["replicated_weight_bytes"] + pl["routed_expert_weight_bytes"] == m.total_params()  # FP8: 1 B/param
    assert pl["weight_bytes_per_rank"] + pl["activation_reserve_bytes_per_rank"] + pl["kv_bytes_per_rank"] == 141_000_000_000
    assert pl["kv_capacity_tokens_per_rank"] == pl["kv_bytes_per_rank"] // (61 * 576 * 2)
    assert pl["kv_capacity_blocks_per_rank_512"] == pl["kv_capacity_tokens_per_rank"] // 512
    assert pl["moe_all_to_all_s_per_token"] > 0


def test_calibrate_weight_shard_and_reserve_options(tmp_path):
    path = tmp_path / "v4.json"
    assert main(["kernels", "calibrate", "--model", "DeepSeek-V4-Flash-FP8", "--gpu", "H20-3e", "--weight-shard-gpus", "8",
                 "--activation-reserve-gb", "20", "--out", str(path)]) == 0
    cal = Calibration.load(path)
    assert cal.weight_shard_gpus == 8 and cal.activation_reserve_bytes == 20_000_000_000
    assert cal.provenance["command"].endswith(f"--activation-reserve-gb 20 --weight-shard-gpus 8 --out {path}")
    assert cal.provenance["activation_reserve"]["source"] == "given on the command line"


def test_kernels_check_cli_json(capsys):
    assert main(["kernels", "check", "--degrees", "2", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) >= 10 and all(r["passed"] for r in rows)
    assert {r["case"].split()[2] for r in rows} == {"C=2"}


def test_profile_cli_tiny_grid_writes_calibration(tmp_path, capsys):
    path = tmp_path / "prof.json"
    argv = ["kernels", "profile", "--out", str(path), "--new-tokens", "8,32,64", "--cached-tokens", "0,48", "--degrees", "1,2",
            "--layers", "1", "--hidden", "32", "--q-heads", "4", "--kv-heads", "2", "--head-dim", "8", "--intermediate", "64",
            "--warmup", "0", "--repeats", "1"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "MAPE" in text and "degree C=2" in text
    cal = Calibration.load(path)
    prov = cal.provenance
    assert prov["method"] == "profile" and prov["profile_dtype"] == "float32"
    assert prov["hardware"]["torch"].startswith("2.") and prov["grid"]["degrees"] == [1, 2]
    assert len(prov["samples"]) == 12 and all(s["time_s"] > 0 for s in prov["samples"])
    assert set(prov["fit_error"]["by_degree"]) == {"C=1", "C=2"}
    assert set(prov["fit_error"]["by_cache_ratio"]) == {"0", "(0.5,1)", "(0,0.5]"}
    # memory fields come from the roofline presets
    assert cal.kv_bytes_per_token == 98304 and prov["memory_fields_from"]["gpu"] == specs.DEFAULT_GPU


@pytest.mark.slow
def test_default_profile_grid_fits_and_shows_cp_scaling():
    """The default `cpgym profile` grid (~1-2 min on 2 cores): per-rank work shrinks with C and the fit is usable."""
    from kernels_ref.profile import ProfileConfig, profile_and_fit

    samples, fit = profile_and_fit(ProfileConfig())
    t = {(s.num_new_tokens, s.num_cached_tokens, s.degree): s.time_s for s in samples}
    assert t[(2048, 4096, 4)] < 0.5 * t[(2048, 4096, 1)]
    assert fit.coefficients["alpha_s_per_pair"] > 0 and fit.coefficients["c_s_per_token"] > 0
    assert fit.mape < 0.35  # per-rank CPU time on a shared host is noisy; see the fit table for the buckets


def test_calibrate_reports_cp_parallel_efficiency(capsys):
    """The CP-serial share (`--cp-serial-fraction`) sets how much GPU time CP costs: the report gives
    the parallel efficiency E_1 / (C x E_C) of uncached prompts, lower for larger degrees and
    shorter prompts, and lower everywhere with a larger serial share."""
    reports = {}
    for f in ("0.15", "0.45"):
        assert main(["kernels", "calibrate", "--model", "Qwen3-30B-A3B", "--gpu", "H20-3e", "--cp-serial-fraction", f,
                     "--format", "json"]) == 0
        reports[f] = json.loads(capsys.readouterr().out)["cp_parallel_efficiency"]
    for rep in reports.values():
        assert rep["base_degree"] == 1 and list(rep["efficiency"]) == ["8192", "24576", "65536"]
        for n, by_degree in rep["efficiency"].items():
            effs = [by_degree[str(c)] for c in (1, 2, 4, 8)]
            assert effs[0] == pytest.approx(1.0) and all(a > b > 0 for a, b in zip(effs, effs[1:])), (n, effs)
        assert rep["efficiency"]["8192"]["4"] < rep["efficiency"]["24576"]["4"] < rep["efficiency"]["65536"]["4"]
    for n in ("8192", "24576", "65536"):
        for c in ("2", "4", "8"):
            assert reports["0.45"]["efficiency"][n][c] < reports["0.15"]["efficiency"][n][c]
    # the roofline docstring's figures: CP-4 on an uncached 8k prompt ~75 % efficient at the default share, ~92 % at 64k
    doc = " ".join(roofline.__doc__.split())
    assert "~3.0x faster than one GPU (~75 % parallel efficiency) and ~3.7x at 64k (~92 %" in doc
    assert reports["0.15"]["efficiency"]["8192"]["4"] == pytest.approx(0.75, abs=0.005)
    assert reports["0.15"]["efficiency"]["65536"]["4"] == pytest.approx(0.92, abs=0.005)
    assert main(["kernels", "calibrate", "--model", "Qwen3-30B-A3B", "--gpu", "H20-3e"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "CP efficiency" in x)
    assert line.strip() == ("CP efficiency       vs CP-1, uncached 8192 / 24576 / 65536 tokens: CP-2 0.90 / 0.95 / 0.97, "
                            "CP-4 0.75 / 0.85 / 0.92, CP-8 0.57 / 0.71 / 0.84")


def test_calibrate_cp_efficiency_leaves_out_prompts_the_base_worker_cannot_hold(capsys):
    """Qwen3-30B-A3B on an 80 GB H100 keeps 49,264 KV tokens per GPU: a CP-1 worker cannot serve a 65,536-token
    prompt (the simulator's per-worker limit is min(model limit, KV capacity)), so no efficiency is reported
    against it there; the table line says which lengths were left out and why (as for DeepSeek-V2-Lite's 32k
    model limit)."""
    from experiments.commands.calibrate import cp_parallel_efficiency

    cal = Calibration.from_dict(roofline.build_calibration_dict(specs.get_model("Qwen3-30B-A3B"),
                                                                specs.get_gpu("H100")))
    assert cal.kv_capacity_tokens(1) == 49264 < 65536 <= cal.max_prompt_tokens
    rep = cp_parallel_efficiency(cal)
    assert rep["base_max_prompt_tokens"] == 49264 and list(rep["efficiency"]) == ["8192", "24576"]
    assert main(["kernels", "calibrate", "--model", "Qwen3-30B-A3B", "--gpu", "H100", "--format", "json"]) == 0
    assert list(json.loads(capsys.readouterr().out)["cp_parallel_efficiency"]["efficiency"]) == ["8192", "24576"]
    for model, gpu, limit in (("Qwen3-30B-A3B", "H100", 49264), ("DeepSeek-V2-Lite", "H20", 32768)):
        assert main(["kernels", "calibrate", "--model", model, "--gpu", gpu]) == 0
        line = next(x for x in capsys.readouterr().out.splitlines() if "CP efficiency" in x)
        assert "uncached 8192 / 24576 tokens:" in line, line
        assert line.endswith(f"(65536 tokens left out: above the {limit}-token prompt limit of a CP-1 worker)"), line


@pytest.mark.parametrize("argv, reason", [
    (["--model", "DeepSeek-V3", "--gpu", "H20-3e"],  # shard group G = 8: every worker is CP-8
     "none: CP-8 (the weight shard group) is the smallest worker and there is no larger multiple of it among degrees "
     "1, 2, 4, 8"),
    (["--model", "Qwen3-30B-A3B", "--gpu", "H100", "--activation-reserve-gb", "18.5"],  # 4,432 KV tokens per GPU
     "none: no uncached prompt of 8192 / 24576 / 65536 tokens fits a CP-1 worker (4432-token prompt limit)"),
])
def test_calibrate_says_why_it_has_no_cp_efficiency_to_report(argv, reason, capsys):
    """With nothing to compare the table used to leave the "CP efficiency" line out silently."""
    assert main(["kernels", "calibrate", *argv]) == 0
    lines = [x.strip() for x in capsys.readouterr().out.splitlines() if "CP efficiency" in x]
    assert lines == [f"CP efficiency       {reason}"], lines


def test_profile_warns_when_the_fit_has_no_cost_per_token():
    import io

    from experiments.commands.profile import warn_length_independent

    flat = {"d_s": 0.01, "a_s_per_token": 0.0, "b_s_per_token": 1e-9, "c_s_per_token": 0.0, "alpha_s_per_pair": 0.0}
    f = io.StringIO()
    assert warn_length_independent(flat, "prof.json", file=f)
    assert "prof.json" in f.getvalue() and "--new-tokens" in f.getvalue()
    assert not warn_length_independent({**flat, "c_s_per_token": 1e-6}, "prof.json", file=f)


def test_profile_config_refuses_a_repeated_degree_and_its_grid_has_none():
    """The library side of `kernels profile --new-tokens 64,256,64` (a row of tests/kernels_ref/test_cli_errors.py)."""
    from kernels_ref.profile import ProfileConfig

    with pytest.raises(ValueError, match=r"degrees \(--degrees\) lists 2 twice"):
        ProfileConfig(degrees=(1, 2, 2))
    grid = ProfileConfig().grid()
    assert len(set(grid)) == len(grid)

