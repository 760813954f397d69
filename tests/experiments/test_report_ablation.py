"""cpgym report on an ablation sweep: the swept values side by side in one panel, the paired
difference to a baseline value (figure and table), no rate axis at one rate, plain tick labels,
saturated cells marked. The sweep folders are written directly (no simulation) except where the
saturation verdict is checked against ``baselines.capacity.saturated`` on real runs."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from baselines.capacity import saturated
from baselines.registry import get_policy
from baselines.runner import run_policy, write_run
from envs.metrics import summarize
from envs.sim import Calibration, LatencyConfig, SimConfig
from envs.sim.pool import PoolConfig
from envs.workloads.source import build_workload
from experiments.cli import main
from experiments.report import _aggregate, make_report
from experiments.report_ablation import draw_ablation, paired_differences
from experiments.report_figures import SATURATED_LABEL, plain_log_ticks
from experiments.report_runs import Ablation, load_runs, run_saturated

AXIS = "cache_capacity_scale"
#: mean TTFT [s] per (axis value, rate, seed); the spec lists 1.0 first, so it is the default baseline
TTFT = {("1.0", 10.0): [0.50, 0.62, 0.55], ("0.5", 10.0): [0.61, 0.70, 0.69],
        ("1.0", 20.0): [0.90, 1.10, 1.00], ("0.5", 20.0): [2.00, 2.60, 2.30]}
SATURATED = {("0.5", 20.0)}  # its TTFT grows over the window and SLO attainment is 0.5


def _write_sweep(out: Path, rates=(10.0,), values=("1.0", "0.5"), policies=("least-work",), seeds=(0, 1, 2),
                 axis: str | None = AXIS, ttft=None) -> Path:
    """A finished sweep folder as `cpgym sweep` writes it (manifest.json, sweep.json, one folder per
    cell with cell.json, summary.json, config.json and requests.parquet)."""
    out.mkdir(parents=True)
    config = {"sim_config": {"latency": asdict(LatencyConfig())}, "calibration": Calibration.resolve(None).to_dict()}
    manifest, spec_cells = {}, []
    for value in values if axis else ("",):
        for rate in rates:
            for pi, policy in enumerate(policies):
                for seed in seeds:
                    key = f"k{len(spec_cells):04d}"
                    axes = {"workload.target_rps": rate, **({axis: float(value)} if axis else {}), "policy": policy,
                            "seed": seed}
                    mean = (ttft or TTFT)[(value or "1.0", rate)][seed] * (1 + 0.5 * pi)
                    saturated = (value, rate) in SATURATED
                    run = out / f"mixed-default-{rate:g}rps-{value}__{policy}__{seed}"
                    run.mkdir()
                    arrivals = np.linspace(0.0, 10.0, 30)
                    ttfts = mean * (0.5 + arrivals / 10.0 if saturated else np.ones_like(arrivals))
                    pd.DataFrame({"arrival_s": arrivals, "ttft_s": ttfts, "num_prompt_tokens": np.full(30, 2000)}
                                 ).to_parquet(run / "requests.parquet")
                    (run / "summary.json").write_text(json.dumps({
                        "policy": policy, "workload": "mixed-default", "mean_ttft_s": mean, "p90_ttft_s": 1.5 * mean,
                        "slo_attainment_token_weighted": 0.5 if saturated else 1.0, "workload_rate_rps": rate}))
                    cell = {"key": key, "sweep": "abl", "policy": policy, "seed": seed, "axes": axes,
                            "workload": {"name": "mixed-default"}}
                    (run / "cell.json").write_text(json.dumps(cell))
                    (run / "config.json").write_text(json.dumps(config))
                    manifest[key] = {"axes": axes, "policy": policy, "seed": seed, "workload": "mixed-default",
                                     "status": "done", "run_dir": run.name}
                    spec_cells.append(cell)
    (out / "manifest.json").write_text(json.dumps({"sweep": "abl", "cells": dict(sorted(manifest.items()))}))
    (out / "sweep.json").write_text(json.dumps({"name": "abl", "cells": spec_cells}))
    return out


def _expected_pair(value: str, rate: float) -> tuple[float, float, float]:
    """The paired difference in % of the baseline's mean and its 95 % t interval, computed here."""
    a, b = np.array(TTFT[(value, rate)]), np.array(TTFT[("1.0", rate)])
    d = 100.0 * (a - b) / b.mean()
    half = 4.303 * d.std(ddof=1) / math.sqrt(3)  # t(0.975, 2)
    return d.mean(), d.mean() - half, d.mean() + half


def test_two_values_share_one_panel_and_the_paired_table_has_the_right_numbers(tmp_path):
    out = _write_sweep(tmp_path / "sweep")
    rep = make_report(out)
    assert (rep.out_dir / "ablation.png").is_file() and rep.out_dir / "ablation.png" in rep.figures
    md = rep.markdown_path.read_text()
    # one section (one panel row), not one per value; the values are a column of its table
    assert md.count("## mixed-default") == 1 and f"| workload | rate [req/s] | {AXIS} | policy |" in md
    assert f"## mixed-default — {AXIS}=" not in md
    row = next(line for line in md.splitlines() if line.startswith("| 10 | least-work | 0.5 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    delta, lo, hi = _expected_pair("0.5", 10.0)
    assert cells[3] == "3" and [float(c) for c in cells[6:9]] == [round(delta, 1), round(lo, 1), round(hi, 1)]
    assert float(cells[4]) == pytest.approx(np.mean(TTFT[("1.0", 10.0)]), abs=5e-4)

    df = load_runs(out)
    ab = Ablation.of(df)
    assert (ab.axis, ab.values, ab.baseline) == (AXIS, ("1.0", "0.5"), "1.0")  # spec order, not sorted
    fig = draw_ablation(_aggregate(df), paired_differences(df, ab), ab)
    left, right = fig.axes
    assert len(fig.axes) == 2  # ONE panel with both values, one with their difference
    fig.canvas.draw()
    # one rate: no rate axis, the values are the categorical x
    assert [t.get_text() for t in left.get_xticklabels()] == ["1.0", "0.5"] and left.get_xlabel() == AXIS
    assert [t.get_text() for t in right.get_xticklabels()] == ["0.5"] and "10 requests/s" in left.get_title()
    [points] = [ln for ln in left.get_lines() if ln.get_marker() == "o" and len(ln.get_xdata())]  # filled markers
    assert list(points.get_xdata()) == [0, 1]  # both values in this panel, the baseline first
    assert list(points.get_ydata()) == pytest.approx([np.mean(TTFT[(v, 10.0)]) for v in ("1.0", "0.5")])
    [diff] = [ln for ln in right.get_lines() if ln.get_marker() == "o" and len(ln.get_xdata())]
    assert list(diff.get_ydata()) == pytest.approx([delta])


def test_a_chosen_baseline_and_a_bad_one(tmp_path, capsys):
    out = _write_sweep(tmp_path / "sweep")
    assert main(["report", str(out), "--baseline", "0.50"]) == 0  # a number matches the equal value
    md = (out / "report" / "report.md").read_text()
    assert f"to {AXIS}=0.5 over the seeds" in md and "| 10 | least-work | 1.0 | 3 |" in md
    capsys.readouterr()
    other = _write_sweep(tmp_path / "other")
    assert main(["report", str(other), "--baseline", "2"]) == 2
    assert capsys.readouterr().err == (f"cpgym report: error: --baseline 2: not a value of the ablated axis {AXIS} "
                                       "(1.0, 0.5)\n")
    assert not (other / "report").exists()


def test_several_rates_keep_the_rate_axis_with_one_line_per_value(tmp_path):
    out = _write_sweep(tmp_path / "sweep", rates=(10.0, 20.0))
    df = load_runs(out)
    ab = Ablation.of(df)
    pairs = paired_differences(df, ab)
    assert list(pairs["rate_rps"]) == [10.0, 20.0]
    for (_, r), rate in zip(pairs.iterrows(), (10.0, 20.0)):
        assert (r["delta_pct"], r["ci_low_pct"], r["ci_high_pct"]) == pytest.approx(_expected_pair("0.5", rate))
    fig = draw_ablation(_aggregate(df), pairs, ab)
    assert len(fig.axes) == 2 and fig.axes[0].get_xlabel() == "request rate [requests/s]"
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert f"{AXIS}=1.0" in labels and f"{AXIS}=0.5" in labels


def test_a_saturated_cell_is_marked_in_the_figure_and_the_tables(tmp_path):
    out = _write_sweep(tmp_path / "sweep", rates=(10.0, 20.0))
    rep = make_report(out)
    md = rep.markdown_path.read_text()
    assert "| mixed-default | 20 | 0.5 | least-work (saturated) | 3 |" in md
    assert "| mixed-default | 20 | 1.0 | least-work | 3 |" in md and "| 20 | least-work | 0.5 (saturated) | 3 |" in md
    table = pd.read_csv(rep.out_dir / "summary_by_cell_group.csv")
    assert {(v, r): s for v, r, s in zip(table["ablated_value"], table["rate_rps"], table["saturated"])} == {
        (0.5, 10.0): False, (0.5, 20.0): True, (1.0, 10.0): False, (1.0, 20.0): False}
    df = load_runs(out)
    ab = Ablation.of(df)
    fig = draw_ablation(_aggregate(df), paired_differences(df, ab), ab)
    left = fig.axes[0]
    assert SATURATED_LABEL in left.get_legend_handles_labels()[1]
    open_points = [(x, y) for ln in left.get_lines() if ln.get_markerfacecolor() == "white"
                   for x, y in zip(ln.get_xdata(), ln.get_ydata())]
    assert open_points == [(20.0, pytest.approx(np.mean(TTFT[("0.5", 20.0)])))]


def test_the_saturation_verdict_is_that_of_simulate_on_real_runs(tmp_path):
    config = SimConfig(pool=PoolConfig(num_gpus=8, composition="cp2x4"))
    verdicts = []
    for rate in (4.0, 12.0):  # a small pool: sustainable at 4 requests/s, saturated at 12
        result = run_policy(get_policy("round-robin"), build_workload(name="mixed-default", params={"duration_s": 6.0},
                                                                      target_rps=rate), config)
        summary = summarize(result)
        d = write_run(tmp_path, result, summary)
        verdicts.append((run_saturated(d, json.loads((d / "summary.json").read_text())), saturated(result, summary)[0]))
    assert verdicts == [(False, False), (True, True)]


def test_several_policies_and_no_other_axis_ablate_the_policy(tmp_path):
    out = _write_sweep(tmp_path / "sweep", policies=("round-robin", "least-work"), axis=None)
    df = load_runs(out)
    ab = Ablation.of(df)
    assert (ab.axis, ab.values, ab.baseline) == ("policy", ("round-robin", "least-work"), "round-robin")
    pairs = paired_differences(df, ab)
    # least-work's TTFT is 1.5x round-robin's in every seed: +50 % on the mean
    b = np.array(TTFT[("1.0", 10.0)])
    d = 100.0 * 0.5 * b / b.mean()
    half = 4.303 * d.std(ddof=1) / math.sqrt(3)
    assert list(pairs["ablated_value"]) == ["least-work"] and pairs["num_pairs"].iloc[0] == 3
    assert tuple(pairs.iloc[0][["delta_pct", "ci_low_pct", "ci_high_pct"]]) == pytest.approx((50.0, 50.0 - half, 50.0 + half))


def test_no_ablated_axis_no_ablation_figure_and_baseline_refused(tmp_path):
    out = _write_sweep(tmp_path / "sweep", axis=None)
    rep = make_report(out)
    assert not (rep.out_dir / "ablation.png").exists() and "Paired difference" not in rep.markdown_path.read_text()
    with pytest.raises(ValueError, match="--baseline 1: these runs ablate no axis"):
        make_report(out, tmp_path / "again", baseline="1")


@pytest.mark.parametrize("low, high", [(1.5, 2.5), (0.05, 300.0)])
def test_log_axes_have_plain_tick_labels(low, high):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [low, high])
    ax.set_yscale("log")
    plain_log_ticks(ax.yaxis)
    fig.canvas.draw()
    labels = [t.get_text() for t in [*ax.get_yticklabels(), *ax.get_yticklabels(minor=True)] if t.get_text()]
    plt.close(fig)
    assert labels and not any("times" in s or "$" in s or "e" in s for s in labels), labels
    assert ("2" in labels and "1.8" in labels) if high < 3 else {"0.1", "1", "10", "100"} <= set(labels)
