"""``experiments.sweep_rows``: a sweep's finished cells as per-episode rows (one per setting and seed)."""

from __future__ import annotations

import json
import math

import pytest

from experiments.sweep_rows import main as rows_main
from experiments.sweep_rows import sweep_rows


def _cell(root, name: str, policy: str, seed: int, params: dict, mean_ttft_s: float, num_ops: int | None):
    d = root / name
    d.mkdir()
    (d / "summary.json").write_text(json.dumps({"mean_ttft_s": mean_ttft_s, "p90_ttft_s": 2 * mean_ttft_s,
                                                "slo_attainment_token_weighted": 0.99, "num_unfinished": 0,
                                                "wall_time_s": 1.0}))
    if num_ops is not None:
        (d / "extras.json").write_text(json.dumps({"reconfig_operations": [{}] * num_ops, "num_reconfigurations": num_ops}))
    (d / "cell.json").write_text(json.dumps({"key": name, "policy": policy, "seed": seed, "policy_params": params}))


def test_sweep_reconfig_rows_feed_paired_deltas(tmp_path, capsys):
    """One evaluation row per finished cell, labelled by policy and swept parameters, paired by seed."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    for seed, (router, adaptive) in enumerate([(1.0, 1.2), (2.0, 2.2)]):
        _cell(sweep, f"r{seed}", "vertumnus-router", seed, {}, router, 0)
        _cell(sweep, f"a{seed}", "vertumnus-adaptive", seed, {"target_sample": "latest"}, adaptive, 3)
    with pytest.raises(ValueError, match="no sweep.json"):  # not a sweep's output folder
        sweep_rows(sweep)
    (sweep / "sweep.json").write_text(json.dumps({"cells": [{}] * 4}))
    rows = sweep_rows(sweep)
    labels = {(r["policy"], r["seed"]) for r in rows}
    assert labels == {("vertumnus-router", 0), ("vertumnus-router", 1), ("vertumnus-adaptive[target_sample=latest]", 0),
                      ("vertumnus-adaptive[target_sample=latest]", 1)}
    assert {r["num_operations"] for r in rows if r["policy"] == "vertumnus-router"} == {0}
    out = tmp_path / "rows.csv"
    assert rows_main([str(sweep), "--out", str(out)]) == 0
    # the sweep's manifest says how many cells it has: an unfinished one is an error, not a shorter table
    (sweep / "sweep.json").write_text(json.dumps({"cells": [{}] * 5}))
    with pytest.raises(ValueError, match="4 of 5 cells finished"):
        sweep_rows(sweep)
    (sweep / "sweep.json").write_text(json.dumps({"cells": [{}] * 4}))
    _cell(sweep, "z", "vertumnus-router", 0, {}, 1.0, 0)  # a second router seed 0: would be averaged silently
    with pytest.raises(ValueError, match="both vertumnus-router seed 0"):
        sweep_rows(sweep)
    with pytest.raises(ValueError, match="no such folder"):
        sweep_rows(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "sweep.json").write_text(json.dumps({"cells": [{}]}))
    with pytest.raises(ValueError, match="no finished (sweep )?cell"):
        sweep_rows(tmp_path / "empty")
    # a cell without extras.json: its operations are unknown (NaN), not 0
    unknown = tmp_path / "unknown"
    unknown.mkdir()
    (unknown / "sweep.json").write_text(json.dumps({"cells": [{}]}))
    _cell(unknown, "a0", "vertumnus-adaptive", 0, {}, 1.0, None)
    assert math.isnan(sweep_rows(unknown)[0]["num_operations"])
    with pytest.raises(SystemExit):  # --out a folder: a usage error before reading anything
        rows_main([str(sweep), "--out", str(tmp_path)])
    capsys.readouterr()
    written = out.read_text().splitlines()
    assert len(written) == 5 and "vertumnus-adaptive[target_sample=latest]" in written[1] + written[2] + written[3]

