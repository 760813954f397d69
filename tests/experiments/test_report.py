"""cpgym report: figures, Markdown tables with 95% CIs over seeds, failed cells listed."""

from __future__ import annotations

import math

import pytest

from experiments.cli import main
from experiments.report import ci95_halfwidth, make_report
from experiments.spec import load_spec
from experiments.sweep import run_sweep
from tests.experiments.conftest import write_spec


def test_ci95_halfwidth():
    assert math.isnan(ci95_halfwidth([1.0]))
    # n = 2: t(0.975, 1) = 12.706, s = sqrt(2)/... : values 1, 3 -> s = sqrt(2), half-width = 12.706 * sqrt(2) / sqrt(2)
    assert ci95_halfwidth([1.0, 3.0]) == pytest.approx(12.706)
    assert ci95_halfwidth([2.0, 2.0, 2.0]) == 0.0
    assert ci95_halfwidth([1.0, 2.0, 3.0, float("nan")]) == pytest.approx(4.303 * 1.0 / math.sqrt(3))


def test_report_renders_figures_and_tables(tmp_path, capsys):
    spec = load_spec(write_spec(tmp_path, """
name: rep
workload: {name: mixed-default, params: {duration_s: 6.0}}
policies: [least-work, round-robin]
seeds: [0, 1]
rates: [10, 30]
sweep: {grid: {cache_capacity_scale: [1.0]}}
"""))
    out = tmp_path / "out"
    run_sweep(spec, out, jobs=1, progress=False)
    assert main(["report", str(out)]) == 0
    rep_dir = out / "report"
    for name in ("ttft_vs_rate.png", "ttft_cdf.png", "slo_vs_rate.png", "composition.png", "cache_transfer.png"):
        f = rep_dir / name
        assert f.is_file() and f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f.stat().st_size > 10_000
    md = (rep_dir / "report.md").read_text()
    assert "## cache_capacity_scale=1.0" in md
    rows = [line for line in md.splitlines() if line.startswith("| 10 |") or line.startswith("| 30 |")]
    assert len(rows) == 4 and all(" ± " in r for r in rows)  # 2 rates x 2 policies, with CIs over 2 seeds
    import pandas as pd

    agg = pd.read_csv(rep_dir / "summary_by_cell_group.csv")
    assert set(agg["num_seeds"]) == {2} and len(agg) == 4
    # the table's mean equals the mean of the two runs' summaries
    import json

    runs = [json.loads((p.parent / "summary.json").read_text()) for p in out.glob("*/cell.json")
            if json.loads(p.read_text())["axes"] == {"workload.target_rps": 10.0, "cache_capacity_scale": 1.0,
                                                     "policy": "least-work", "seed": json.loads(p.read_text())["seed"]}]
    assert len(runs) == 2
    row = agg[(agg.policy == "least-work") & (agg.rate_rps == 10)].iloc[0]
    assert row["mean_ttft_s"] == pytest.approx(sum(r["mean_ttft_s"] for r in runs) / 2)


def test_report_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        make_report(tmp_path / "nope")
    with pytest.raises(ValueError, match="no runs"):
        make_report(tmp_path)


def test_rate_from_workload_parameters_groups_seeds(tmp_path):
    """Without a target_rps axis, x = measured rate averaged over seeds of the same rate setting."""
    spec = load_spec(write_spec(tmp_path, """
name: rates-by-param
workload: {name: system-prompts, params: {duration_s: 5.0}}
policies: [least-work]
seeds: [0, 1]
sweep:
  grid:
    workload.params.arrivals: [{poisson_rps: 5.0}, {poisson_rps: 20.0}]
"""))
    out = tmp_path / "out"
    assert run_sweep(spec, out, jobs=1, progress=False).num_done == 4
    from experiments.report import _aggregate, _load_runs

    agg = _aggregate(_load_runs(out))  # the tables behind the figures (rendering is tested above)
    assert len(agg) == 2 and set(agg["num_seeds"]) == {2}
    lo, hi = sorted(agg["rate_rps"])
    assert 2.0 < lo < 9.0 and 14.0 < hi < 30.0  # Poisson 5 and 20 req/s over 5 s
    assert agg["variant"].isna().all() or set(agg["variant"].fillna("")) == {""}
