"""cpgym report: figures, Markdown tables with 95% CIs over seeds, failed cells listed."""

from __future__ import annotations

import math

import pytest

from envs.metrics.stats import ci95_halfwidth
from experiments.cli import main
from experiments.report import make_report
from experiments.spec import load_spec
from experiments.sweep.run import run_sweep
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
    assert "## mixed-default — cache_capacity_scale=1.0" in md
    rows = [line for line in md.splitlines() if line.startswith(("| mixed-default | 10 |", "| mixed-default | 30 |"))]
    assert len(rows) == 4 and all(" [" in r for r in rows)  # 2 rates x 2 policies, with CIs over 2 seeds
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
    from experiments.report import _aggregate
    from experiments.report_runs import load_runs

    agg = _aggregate(load_runs(out))  # the tables behind the figures (rendering is tested above)
    assert len(agg) == 2 and set(agg["num_seeds"]) == {2}
    lo, hi = sorted(agg["rate_rps"])
    assert 2.0 < lo < 9.0 and 14.0 < hi < 30.0  # Poisson 5 and 20 req/s over 5 s
    assert set(agg["variant"].fillna("")) == {""} and set(agg["workload"]) == {"system-prompts"}


def _png_width(path) -> int:
    return int.from_bytes(path.read_bytes()[16:20], "big")


@pytest.mark.slow
def test_report_on_a_folder_of_simulate_runs(tmp_path):
    """Plain `cpgym simulate --out` runs of two workloads: a workload column, the measured rates
    (not 0), repeated runs counted once, no empty panel and no matplotlib warning."""
    import warnings

    out = tmp_path / "runs"
    common = ["--arrival-window-s", "0", "8", "--out", str(out), "--quiet"]
    assert main(["simulate", "--workload", "tool-agent", "--policy", "least-work,round-robin", *common]) == 0
    assert main(["simulate", "--workload", "mixed-default", "--policy", "least-work", *common]) == 0
    assert main(["simulate", "--workload", "mixed-default", "--policy", "least-work", *common]) == 0  # a repeat
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rep = make_report(out)
    assert rep.num_runs == 3 and any("counted once" in n for n in rep.notes)
    md = rep.markdown_path.read_text()
    assert "| workload | rate [req/s] | policy |" in md
    rows = [line.split(" | ") for line in md.splitlines() if line.startswith(("| tool-agent", "| mixed-default"))]
    # an 8 s slice of tool-agent saturates least-work: the report marks it (experiments/report.py)
    assert sorted((r[0].lstrip("| "), r[2].removesuffix(" (saturated)")) for r in rows) == [
        ("mixed-default[0:8]", "least-work"), ("tool-agent[0:8]", "least-work"), ("tool-agent[0:8]", "round-robin")]
    assert all(float(r[1]) > 1.0 for r in rows)  # the measured request rate, never 0
    assert [r[10] for r in rows] == ["0.00"] * 3  # KV GB: recorded by every run (0 moved), as in sweep cells
    assert "at 0 requests/s" not in md and "rates [requests/s]: 0" not in md
    # no KV transfers in plain simulate runs: that panel is left out, not drawn empty
    cache = rep.out_dir / "cache_transfer.png"
    assert _png_width(cache) < _png_width(rep.out_dir / "ttft_vs_rate.png")
    assert any("No KV transfers" in n for n in rep.notes)


def test_report_on_a_parent_of_two_sweeps(tmp_path):
    parent = tmp_path / "sweeps"
    for name, workload in (("one", "mixed-default"), ("two", "tool-agent")):
        spec = load_spec(write_spec(tmp_path, f"""
name: {name}
workload: {{name: {workload}, params: {{duration_s: 4.0}}}}
policies: [least-work]
seeds: [0]
rates: [10]
""", name=f"{name}.yaml"))
        run_sweep(spec, parent / name, jobs=1, progress=False)
    rep = make_report(parent)
    md = rep.markdown_path.read_text()
    assert md.startswith("# Report: one, two")
    assert "## mixed-default — sweep=one" in md and "## tool-agent — sweep=two" in md
    assert "| mixed-default | 10 | least-work | 1 |" in md and "| tool-agent | 10 | least-work | 1 |" in md


def test_intervals_of_bounded_quantities_stay_in_range():
    from experiments.report import ci95_interval
    from experiments.report_runs import metric_bounds

    # hit rate 5 % and 68 % over two seeds: the t interval 36.5 ± 400 pp is clipped to [0, 1]
    lo, hi = ci95_interval([0.05, 0.68], *metric_bounds("prefix_hit_rate"))
    assert (lo, hi) == (0.0, 1.0)
    lo, hi = ci95_interval([0.95, 0.97, 0.96], *metric_bounds("slo_attainment_token_weighted"))
    assert 0.9 < lo < 0.96 < hi <= 1.0
    assert ci95_interval([1.0, 3.0], *metric_bounds("mean_ttft_s"))[0] == 0.0
    assert metric_bounds("kv_transfer_bytes") == (0.0, math.inf)
    assert all(math.isnan(v) for v in ci95_interval([0.5]))


def test_panel_titles_are_wrapped_to_the_panel():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.report_figures import _title

    fig, ax = plt.subplots()
    _title(ax, "mixed-default — cache_capacity_scale=1.0, max_batch_tokens=16384, pool.composition=cp4x6,cp2x8\n"
               "mean TTFT vs request rate (95% CI over seeds)")
    assert all(len(line) <= 48 for line in ax.get_title().splitlines())
    plt.close(fig)


def test_table_cells_show_a_zero_width_interval_as_the_value():
    from experiments.report import _fmt

    row = {"mean_ttft_s": 0.0, "mean_ttft_s_ci95_low": 0.0, "mean_ttft_s_ci95_high": 0.0}
    assert _fmt(row, "mean_ttft_s", 1e-9, 2) == "0.00"
    row = {"mean_ttft_s": 2.0, "mean_ttft_s_ci95_low": 1.0, "mean_ttft_s_ci95_high": 3.0}
    assert _fmt(row, "mean_ttft_s") == "2.000 [1.000, 3.000]"
    nan_row = {"mean_ttft_s": math.nan, "mean_ttft_s_ci95_low": math.nan, "mean_ttft_s_ci95_high": math.nan}
    assert _fmt(nan_row, "mean_ttft_s") == "-"


@pytest.fixture(scope="module")
def two_seed_sweep(tmp_path_factory):
    """A finished sweep: one policy, one rate, seeds 0 and 1 (copy it before breaking a file)."""
    tmp = tmp_path_factory.mktemp("sweep")
    spec = load_spec(write_spec(tmp, """
name: broken
workload: {name: mixed-default, params: {duration_s: 4.0}}
policies: [least-work]
seeds: [0, 1]
rates: [10]
"""))
    run_sweep(spec, tmp / "out", jobs=1, progress=False)
    return tmp / "out"


def _junk_parquet(f):
    f.write_bytes(b"junk\n")  # was a pyarrow ArrowInvalid traceback


def _parquet_without_ttft(f):
    import pandas as pd

    pd.read_parquet(f).drop(columns=["ttft_s"]).to_parquet(f)


def _summary(**fields):
    def edit(f):
        import json

        doc = json.loads(f.read_text())
        doc.update(fields)
        f.write_text(json.dumps({k: v for k, v in doc.items() if v != "DROP"}))
    return edit


@pytest.mark.parametrize("name, edit, message", [
    ("requests.parquet", _junk_parquet, "not a readable Parquet file (Parquet file size is 5 bytes"),
    ("requests.parquet", _parquet_without_ttft, "no column(s) ttft_s; expected the requests.parquet"),
    # the next ones were left out (or averaged as NaN) while the cell still said "2" seeds
    ("summary.json", lambda f: f.write_text('{"policy": 5}'),
     "field 'policy': got 5; expected a policy name (a non-empty string)"),
    ("summary.json", _summary(mean_ttft_s="DROP"), "no field 'mean_ttft_s'; expected the summary.json written by a cpgym run"),
    ("summary.json", _summary(mean_ttft_s=-1.0), "field 'mean_ttft_s': got -1.0; expected null or a finite number >= 0"),
    ("summary.json", _summary(slo_attainment_requests=1.5),
     "field 'slo_attainment_requests': got 1.5; expected null or a finite number [0, 1]"),
    ("summary.json", _summary(p90_ttft_s="abc"), "field 'p90_ttft_s': got 'abc'; expected null or a finite number >= 0"),
    # a finished cell (cell.json) without its summary.json was left out silently: "1 seed", 0 cells missing
    ("summary.json", lambda f: f.unlink(), "missing, but cell.json marks"),
    # a TypeError traceback (unhashable type: 'list')
    ("cell.json", _summary(key=[1]), "field 'key': expected the cell key (a string, as `cpgym sweep` writes it), got [1]"),
])
def test_a_broken_run_file_is_one_line_naming_it_before_anything_is_written(two_seed_sweep, tmp_path, capsys,
                                                                              name, edit, message):
    import shutil

    out = tmp_path / "sweep"
    shutil.copytree(two_seed_sweep, out)
    run = sorted(p.parent for p in out.glob("*/cell.json"))[0]
    edit(run / name)
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cpgym report: error: {run / name}: {message}") and len(err.splitlines()) == 1, err
    assert not (out / "report").exists()


def test_a_null_metric_is_not_recorded_not_an_error(two_seed_sweep, tmp_path):
    import shutil

    out = tmp_path / "sweep"
    shutil.copytree(two_seed_sweep, out)
    _summary(p99_ttft_s=None)(sorted(out.glob("*/summary.json"))[0])
    assert make_report(out).num_runs == 2


def test_sweeps_of_one_name_with_different_cells_are_not_pooled_as_more_seeds(two_seed_sweep, tmp_path):
    import json
    import shutil

    from experiments.report_runs import load_runs

    parent = tmp_path / "sweeps"
    shutil.copytree(two_seed_sweep, parent / "a")
    shutil.copytree(two_seed_sweep, parent / "b")
    for f in (parent / "b").glob("*/cell.json"):  # the spec edited between the two folders: other cell keys, same labels
        doc = json.loads(f.read_text())
        doc["key"] = "edited" + doc["key"][6:]
        f.write_text(json.dumps(doc))
    manifest = json.loads((parent / "b" / "manifest.json").read_text())  # as the edited spec's sweep writes it
    manifest["cells"] = {"edited" + k[6:]: v for k, v in manifest["cells"].items()}
    (parent / "b" / "manifest.json").write_text(json.dumps(manifest))
    df = load_runs(parent)
    # they were one group of 4 "seeds" (0, 1, 0, 1) mixing two configurations
    assert len(df) == 4 and sorted(df["variant"].unique()) == ["sweep=broken (a)", "sweep=broken (b)"]
    assert all(sorted(g["seed"]) == [0, 1] for _, g in df.groupby("variant"))
    # copies of one sweep are the same cells: counted once, not split by folder
    same = tmp_path / "same"
    shutil.copytree(two_seed_sweep, same / "a")
    shutil.copytree(two_seed_sweep, same / "b")
    df = load_runs(same)
    assert len(df) == 2 and set(df["variant"]) == {""}


def test_cells_of_an_earlier_version_of_the_spec_in_the_same_folder_are_left_out(two_seed_sweep, tmp_path, capsys):
    import shutil

    out = tmp_path / "sweep"
    shutil.copytree(two_seed_sweep, out)
    edited = load_spec(write_spec(tmp_path, """
name: broken
workload: {name: mixed-default, params: {duration_s: 4.0}}
sim: {slo.slo_scale: 2.0}
policies: [least-work]
seeds: [0, 1]
rates: [10]
"""))  # the spec edited (another SLO) and run again into the same --out: two new cells beside the two old ones
    outcome = run_sweep(edited, out, jobs=1, progress=False)
    assert (outcome.num_skipped, outcome.num_done, len(outcome.stale_dirs)) == (0, 2, 2)
    rep = make_report(out)
    # the old cells were pooled with the new ones: "4 seeds" of least-work at 10 req/s, mixing two SLOs
    assert rep.num_runs == 2 and any("2 run folder(s) hold cells that are not in their sweep's manifest.json" in n
                                     for n in rep.notes)
    import pandas as pd

    assert list(pd.read_csv(out / "report" / "summary_by_cell_group.csv")["num_seeds"]) == [2]
    assert main(["sweep", str(tmp_path / "spec.yaml"), "--out", str(out), "--dry-run"]) == 0
    assert "warning: 2 finished cell folder(s) in" in capsys.readouterr().err
    # the sweep analyses (cache sensitivity, controller tuning) read the same cells as the report
    from experiments.paper_experiments.cache_sensitivity import load_runs
    from experiments.sweep.manifest import finished_cells

    assert len(list(finished_cells(out))) == 4  # the sweep's own reader (resume) still sees every finished cell
    assert len(list(finished_cells(out, current_only=True))) == 2
    assert sorted(r["seed"] for r in load_runs(out)) == [0, 1]  # was [0, 0, 1, 1]: two SLO settings as one


def test_a_sweep_resumed_after_a_move_is_one_variant_not_one_per_file_location(tmp_path):
    # the cell key leaves out file paths, so a sweep folder moved with its spec resumes its cells; the
    # report grouped by the cells' own axes, so the cells run before the move (old calibration_path)
    # and those run after it (new path) were two variants, each with only some of the policies
    import shutil

    import pandas as pd

    from experiments.spec.cells import _default_calibration_path

    spec = """
name: moved
workload: {name: mixed-default, params: {duration_s: 4.0}}
policies: [POLICIES]
seeds: [0]
rates: [10]
sweep: {grid: {calibration_path: [calib.json]}}
"""
    (tmp_path / "a").mkdir()
    shutil.copy(_default_calibration_path(), tmp_path / "a" / "calib.json")
    first = load_spec(write_spec(tmp_path / "a", spec.replace("POLICIES", "least-work")))
    assert run_sweep(first, tmp_path / "a" / "out", jobs=1, progress=False).num_done == 1
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    moved = load_spec(write_spec(tmp_path / "b", spec.replace("POLICIES", "least-work, round-robin")))
    outcome = run_sweep(moved, tmp_path / "b" / "out", jobs=1, progress=False)
    assert (outcome.num_skipped, outcome.num_done) == (1, 1)
    make_report(tmp_path / "b" / "out")
    table = pd.read_csv(tmp_path / "b" / "out" / "report" / "summary_by_cell_group.csv")
    assert sorted(table["policy"]) == ["least-work", "round-robin"]
    assert list(table["variant"].unique()) == [f"calibration_path={tmp_path / 'b' / 'calib.json'}"]


@pytest.mark.parametrize("cells, message", [
    (["a"], "field 'cells': expected a JSON object {cell key: entry} (as `cpgym sweep` writes it), got list"),
    ("x", "field 'cells': expected a JSON object {cell key: entry} (as `cpgym sweep` writes it), got str"),
    ({"k": 5}, "cells['k']: expected a JSON object (the cell's entry), got 5"),
    ({"k": {"run_dir": 5}}, "cells['k'].run_dir: expected the cell's folder name, got 5"),
])
def test_a_broken_manifest_is_one_line_naming_it_and_the_sweep_rebuilds_it(two_seed_sweep, tmp_path, capsys, cells,
                                                                            message):
    # each was an AttributeError traceback ('list' object has no attribute 'values' / 'get'), in the
    # report and in the sweep resuming the folder
    import json
    import shutil

    out = tmp_path / "sweep"
    shutil.copytree(two_seed_sweep, out)
    (out / "manifest.json").write_text(json.dumps({"sweep": "broken", "cells": cells}))
    assert main(["report", str(out)]) == 2
    assert capsys.readouterr().err == f"cpgym report: error: {out / 'manifest.json'}: {message}\n"
    assert not (out / "report").exists()
    spec = write_spec(tmp_path, "name: broken\nworkload: {name: mixed-default, params: {duration_s: 4.0}}\n"
                                "policies: [least-work]\nseeds: [0, 1]\nrates: [10]\n")
    assert main(["sweep", str(spec), "--out", str(out), "--wandb", "disabled", "--quiet"]) == 0
    assert "skipped 2 finished, ran 0" in capsys.readouterr().out
    assert make_report(out).num_runs == 2  # rebuilt from the run folders


def test_a_cell_document_with_broken_axes_is_one_line_naming_it(two_seed_sweep, tmp_path, capsys):
    import json
    import shutil

    out = tmp_path / "sweep"
    shutil.copytree(two_seed_sweep, out)
    (out / "manifest.json").unlink()  # no manifest entry names the cell's axes
    f = sorted(out.glob("*/cell.json"))[0]
    f.write_text(json.dumps({**json.loads(f.read_text()), "axes": 3}))
    assert main(["report", str(out)]) == 2
    assert capsys.readouterr().err == (f"cpgym report: error: {f}: field 'axes': expected a JSON object {{axis: value}} "
                                       "(as `cpgym sweep` writes it), got 3\n")
