"""``cpgym cache-curve`` and ``cpgym cache-ablation`` (issue #5)."""

from __future__ import annotations

import json

import pytest

from experiments.cli import main


def _write_trace(path):
    # 512-token blocks; request 2 reuses request 1's first block, request 3 reuses all of request 1
    rows = [
        {"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]},
        {"timestamp": 1000, "input_length": 1024, "output_length": 1, "hash_ids": [1, 3]},
        {"timestamp": 2000, "input_length": 1536, "output_length": 1, "hash_ids": [1, 2, 4]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_cache_curve_json_by_hand(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    _write_trace(trace)
    assert main(["cache-curve", "--trace", str(trace), "--capacities", "1,3", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    total = 1024 + 1024 + 1536
    # capacity 1: inserts keep only the leading block 1, so requests 2 and 3 hit 512 tokens each;
    # unbounded: request 2 hits block 1 (512), request 3 hits blocks 1-2 (1024)
    assert rows[0] == {"capacity_blocks": 1, "hit_rate": pytest.approx(1024 / total)}
    assert rows[-1] == {"capacity_blocks": None, "hit_rate": pytest.approx((512 + 1024) / total)}
    assert [r["capacity_blocks"] for r in rows] == [1, 3, None]
    hits = [r["hit_rate"] for r in rows]
    assert hits == sorted(hits)


def test_cache_curve_bad_capacities(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    _write_trace(trace)
    assert main(["cache-curve", "--trace", str(trace), "--capacities", "0,x"]) == 2
    assert "--capacities" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--capacities", "--dram-capacities"])
def test_cache_curve_refuses_a_repeated_capacity(flag, tmp_path, capsys):
    # was replayed and shown once, without a word
    trace = tmp_path / "t.jsonl"
    _write_trace(trace)
    assert main(["cache-curve", "--trace", str(trace), flag, "3,1,3"]) == 2
    assert capsys.readouterr().err == (f"cpgym cache-curve: error: {flag} lists 3 twice: '3,1,3'; "
                                       "expected distinct capacities (each is one row)\n")


def test_cache_curve_refuses_a_workload_seed_with_a_trace(tmp_path, capsys):
    # it was accepted and ignored: a trace is replayed in file order whatever the seed
    trace = tmp_path / "t.jsonl"
    _write_trace(trace)
    assert main(["cache-curve", "--trace", str(trace), "--workload-seed", "3"]) == 2
    assert "--workload-seed applies to --workload only" in capsys.readouterr().err


@pytest.mark.parametrize("argv, expected", [
    (["--duration-s", "inf"], "--duration-s must be a finite number of seconds > 0, got inf"),
    (["--duration-s", "nan"], "--duration-s must be a finite number of seconds > 0, got nan"),
    (["--workload-seed", "-1"], "--workload-seed must be an integer >= 0, got -1")])
def test_cache_curve_workload_flags_name_the_flag(argv, expected, capsys):
    """--duration-s inf and --workload-seed -1 reached the generator, whose error named its own
    fields ('duration_s must be ...', 'workload: seed must be ...'), not the flags."""
    assert main(["cache-curve", "--workload", "tool-agent", *argv]) == 2
    assert capsys.readouterr().err == f"cpgym cache-curve: error: {expected}\n"


def test_cache_curve_on_a_synthetic_workload_with_reuse_statistics(capsys):
    argv = ["cache-curve", "--workload", "tool-agent", "--duration-s", "20", "--capacities", "100", "--format", "json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["capacity_blocks"] for r in out["curve"]] == [100, None]
    reuse = out["reuse"]
    assert reuse["ideal_reuse_fraction"] == pytest.approx(out["curve"][-1]["hit_rate"])
    assert reuse["cross_session_reuse_fraction"] > 0 and reuse["within_session_reuse_fraction"] > 0
    assert 1 <= reuse["num_shared_prefix_roots"] <= 8  # the tool-agent's shared agent prompts
    assert main(["cache-curve", "--trace", "x.jsonl", "--duration-s", "5"]) == 2
    assert "--duration-s" in capsys.readouterr().err


def test_prefix_reuse_stats_by_hand():
    from envs.sim.request import Request, Workload
    from envs.workloads import prefix_reuse_stats

    # sessions 0 and 1 share block 1 (a shared prompt); session 0 reuses its own block 2
    reqs = (Request(0, 0.0, 1024, 1, (1, 2), 0), Request(1, 1.0, 1024, 1, (1, 3), 1),
            Request(2, 3.0, 1536, 1, (1, 2, 4), 0))
    s = prefix_reuse_stats(Workload("w", reqs, 512, "test", {}))
    total = 1024 + 1024 + 1536
    assert s["cross_session_reuse_fraction"] == pytest.approx(512 / total)  # request 1 reuses block 1
    assert s["within_session_reuse_fraction"] == pytest.approx((512 + 512) / total)  # request 2: blocks 1, 2
    assert s["num_shared_prefix_roots"] == 1 and s["shared_prefix_tokens"]["mean"] == 512
    assert s["shared_block_lifetime_s"]["mean"] == pytest.approx(3.0)
    assert s["reuse_interval_s"]["mean"] == pytest.approx((1.0 + 2.0 + 3.0) / 3)  # block 1 twice, block 2 once
    assert s["num_sessions"] == 2 and s["calls_per_session"]["mean"] == 1.5
    assert s["session_lifetime_s"]["p50"] == pytest.approx(1.5)


def test_cache_ablation_json(capsys):
    argv = ["cache-ablation", "--rates", "4", "--duration-s", "30", "--pool-gpus", "8", "--pool-composition", "cp4x1,cp2x2",
            "--scan-interval-s", "5", "--format", "json"]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in rows] == ["vertumnus-router", "vertumnus-global-cache"]
    for r in rows:
        assert set(r) >= {"policy", "rate_rps", "mean_ttft_s", "p90_ttft_s", "slo_attainment_token_weighted",
                          "prefix_hit_rate", "kv_transfer_bytes"}
        assert r["rate_rps"] == 4.0 and r["mean_ttft_s"] > 0
    assert rows[0]["kv_transfer_bytes"] == 0
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out) == rows  # same seed, same table


def test_cache_curve_dram_capacities_errors_name_that_flag(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    _write_trace(trace)
    assert main(["cache-curve", "--trace", str(trace), "--dram-capacities", "-1"]) == 2
    assert capsys.readouterr().err == "cpgym cache-curve: error: --dram-capacities values must be >= 1 block, got -1\n"


def test_cache_curve_refuses_a_trace_without_prefix_information(tmp_path, capsys):
    # an Azure 2023 trace gets fresh blocks per request: its "curve" was all zeros with exit status 0
    trace = tmp_path / "azure.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n")
    assert main(["cache-curve", "--trace", str(trace)]) == 2
    assert capsys.readouterr().err.startswith(f"cpgym cache-curve: error: {trace}: an Azure 2023 trace has no prefix "
                                              "information")
