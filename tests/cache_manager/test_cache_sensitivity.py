"""Sensitivity table of the cache-manager settings from a sweep folder (paired by seed)."""

from __future__ import annotations

import json

import pytest

from experiments.paper_experiments.cache_sensitivity import load_runs, sensitivity_rows, to_markdown


def _run(root, name, policy, seed, params, mean, p90, hit):
    d = root / name
    d.mkdir()
    (d / "cell.json").write_text(json.dumps({"key": name, "policy": policy, "seed": seed, "policy_params": params}))
    (d / "summary.json").write_text(json.dumps({"mean_ttft_s": mean, "p90_ttft_s": p90, "prefix_hit_rate": hit,
                                                "slo_attainment_token_weighted": 1.0, "kv_transfer_bytes": 2e9}))


def test_paired_changes_by_setting(tmp_path):
    _run(tmp_path, "a", "vertumnus", 0, {}, 1.0, 2.0, 0.5)
    _run(tmp_path, "b", "vertumnus", 1, {}, 2.0, 4.0, 0.5)
    fast = {"cache_scan_interval_s": 5.0}
    slow = {"cache_scan_interval_s": 20.0}
    _run(tmp_path, "c", "vertumnus-global-cache", 0, fast, 0.9, 1.6, 0.51)  # -10 %, -20 %
    _run(tmp_path, "d", "vertumnus-global-cache", 1, fast, 1.6, 3.2, 0.52)  # -20 %, -20 %
    _run(tmp_path, "e", "vertumnus-global-cache", 0, slow, 1.1, 2.0, 0.5)   # +10 %, 0 %
    _run(tmp_path, "f", "vertumnus-global-cache", 1, slow, 2.2, 4.0, 0.5)   # +10 %, 0 %
    rows = sensitivity_rows(load_runs(tmp_path))
    assert [r["params"] for r in rows] == [fast, slow]  # best mean change first
    assert rows[0]["mean_ttft_pct"] == pytest.approx(-15.0) and rows[0]["p90_ttft_pct"] == pytest.approx(-20.0)
    assert rows[0]["hit_rate_pp"] == pytest.approx(1.5) and rows[0]["num_seeds"] == 2
    assert rows[1]["mean_ttft_pct"] == pytest.approx(10.0) and rows[1]["mean_ttft_pct_ci"] == pytest.approx(0.0)
    md = to_markdown(rows)
    assert "scan_interval_s" in md and "-15.0" in md


def test_unpaired_or_empty_sweeps_are_errors(tmp_path):
    with pytest.raises(ValueError, match="no finished sweep cell"):
        load_runs(tmp_path)
    (tmp_path / ".tmp-cell").mkdir()  # a cell still running is not read
    (tmp_path / ".tmp-cell" / "cell.json").write_text("{")
    with pytest.raises(ValueError, match="no finished sweep cell"):
        load_runs(tmp_path)
    _run(tmp_path, "a", "vertumnus-global-cache", 0, {"cache_decay": 0.5}, 1.0, 2.0, 0.5)
    with pytest.raises(ValueError, match="local-caches policy"):
        sensitivity_rows(load_runs(tmp_path))
    _run(tmp_path, "b", "vertumnus-router", 1, {}, 1.0, 2.0, 0.5)  # found as the local policy
    with pytest.raises(ValueError, match="seed 0"):
        sensitivity_rows(load_runs(tmp_path))


def test_a_finished_cell_without_a_readable_summary_names_the_file(tmp_path):
    _run(tmp_path, "a", "vertumnus-router", 0, {}, 1.0, 2.0, 0.5)
    (tmp_path / "a" / "summary.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"a/summary.json: expected a JSON object"):
        load_runs(tmp_path)
    (tmp_path / "a" / "summary.json").unlink()
    with pytest.raises(ValueError, match=r"a/summary.json: cannot read"):
        load_runs(tmp_path)
