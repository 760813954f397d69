"""``cpgym reproduce`` (experiments/reproduce.py): row schema on a tiny configuration, paired
changes against the strongest baseline, paper values."""

import json

import pytest

from experiments.cli import main
from experiments.reproduce import METRICS, paired_changes, paper_value

KEYS = ["experiment", "workload", "model", "metric", "paper_value", "cpgym_value", "ci_low", "ci_high", "load_fraction",
        "strongest_baseline"]


def test_reproduce_rows_on_a_tiny_configuration(tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["reproduce", "--workloads", "leval-like", "--window-s", "40", "--seeds", "0,1,2", "--loads", "0.6,0.95",
               "--pool-gpus", "8", "--pool-composition", "cp4x1,cp2x2", "--rel-tol", "0.2",
               "--cache-dir", str(tmp_path / "cache"), "--out", str(out), "--format", "json", "--quiet", "--jobs", "1"])
    assert rc == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["metric"] for r in rows] == list(METRICS)
    for r in rows:
        assert list(r) == KEYS
        assert r["experiment"] == "end-to-end" and r["workload"] == "leval-like" and r["model"] == "Qwen3-30B-A3B"
        assert r["load_fraction"] == 0.95
        assert r["strongest_baseline"] in {"homogeneous-cp2", "homogeneous-cp4", "static-threshold", "vllm-tp4",
                                           "sglang-cache-aware"}
        assert r["ci_low"] <= r["cpgym_value"] <= r["ci_high"]
    assert [r["paper_value"] for r in rows] == [-13.9, -17.8, 0.9]
    assert json.loads((out / "rows.json").read_text()) == rows
    for name in ("end-to-end.png", "end-to-end-runs.csv", "end-to-end-capacities.csv", "provenance.json"):
        assert (out / name).is_file()
    import pandas as pd

    runs = pd.read_csv(out / "end-to-end-runs.csv")
    assert len(runs) == 3 * 2 * 6  # seeds x loads x policies
    assert set(runs["overloaded"]) <= {True, False}
    # a rate above a policy's own capacity is labelled overloaded
    assert (runs["overloaded"] == (runs["rate_scale"] > runs["capacity_rate_scale"] * (1 + 1e-9))).all()


def test_paired_changes_use_the_lowest_mean_baseline():
    runs = []
    for seed, (v, a, b) in enumerate([(1.0, 2.0, 4.0), (3.0, 4.0, 2.0), (1.0, 2.0, 4.0)]):
        for p, m in (("vertumnus", v), ("a", a), ("b", b)):
            runs.append({"policy": p, "seed": seed, "load_fraction": 0.95, "mean_ttft_s": m, "p90_ttft_s": 2 * m,
                         "slo_attainment_token_weighted": 0.5})
    best, ch = paired_changes(runs, 0.95, ["a", "b"])
    assert best == "a"  # mean 2.67 < 3.33
    assert ch["mean_ttft_pct"] == pytest.approx([-50.0, -25.0, -50.0])
    assert ch["slo_token_pp"] == pytest.approx([0.0, 0.0, 0.0])


def test_paper_values_only_for_the_paper_model():
    assert paper_value("Qwen3-30B-A3B", "production", "mean_ttft_pct") == -28.1
    assert paper_value("Qwen3-30B-A3B", "tool-agent", "p90_ttft_pct") == -55.0
    assert paper_value("DeepSeek-V3", "production", "mean_ttft_pct") is None


def test_reproduce_rejects_bad_input(capsys):
    assert main(["reproduce", "--workloads", "nope"]) == 2
    assert "unknown workload" in capsys.readouterr().err
    assert main(["reproduce", "--loads", "0.9,0.5", "--workloads", "leval-like"]) == 2
    assert "--loads" in capsys.readouterr().err
