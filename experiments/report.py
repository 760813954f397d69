"""``cpgym report RUN_DIR``: figures and a Markdown summary of a folder of runs.

``RUN_DIR`` may be a sweep's output folder, a parent of several sweeps, or a folder of ``cpgym
simulate --out`` runs: every run folder below it with a ``summary.json`` is read (``cell.json``,
``config.json``, ``extras.json``, ``requests.parquet`` when present). Runs are grouped by
**workload** and **variant** (the settings that differ between runs besides policy, seed and
rate: a sweep's other axes, the sweep's name when there are several sweeps — with its folder
when sweeps of one name in several folders hold different cells under the same axes, policy and
seed, e.g. a spec edited between two ``--out`` folders — and for plain runs the ``sim_config``
fields that differ), then by request rate and policy; seeds are the repetitions. Two runs of the
same cell (the same sweep cell key, or a plain run repeated with the same workload, settings,
policy and seed) count once. A sweep folder's cells are those its ``manifest.json`` lists: cell
folders of an earlier version of the spec, run into the same ``--out``, are left out with a note
(they were pooled with the new cells as extra seeds). A folder in which no run folder is found
is refused with one line. So is a run folder with a broken file, naming the file and before
anything is written: ``summary.json`` whose ``policy`` is not a name, without ``mean_ttft_s``,
or with a metric that is not a number in its range (null: not recorded); a ``requests.parquet``
that is not a Parquet file with ``arrival_s`` and ``ttft_s``; any JSON file that is not a JSON
object; a finished sweep cell (``cell.json`` with a key) without ``summary.json``. Such a run is
not left out, since a table cell would then average fewer seeds than the sweep ran. (A
``summary.json`` without a ``policy`` key is another tool's and is skipped.) Written into
``RUN_DIR/report/``:

* ``ablation.png`` — when an axis is ablated (below): per workload/variant, the axis's values side
  by side in one panel (mean TTFT, one y-axis) and the paired difference of each value to the
  baseline value in % with its 95% CI;
* ``ttft_vs_rate.png`` — mean and P90 TTFT [s] vs request rate [requests/s], one row of panels
  per workload/variant, one line per policy (and ablated value), 95% CI over seeds as error bars;
  with one rate there is no rate axis: x is the ablated values (or the policies), categorical;
* ``ttft_cdf.png`` — empirical CDF of TTFT at each workload/variant's highest rate, seeds pooled;
* ``slo_vs_rate.png`` — token-weighted TTFT SLO attainment (paper §3) vs rate;
* ``composition.png`` — ACTIVE workers per CP degree over time (``extras["composition_series"]``
  of runs with a reconfiguration controller; otherwise the static composition);
* ``cache_transfer.png`` — token-weighted prefix hit rate and KV-transfer volume [GB] vs rate;
  a metric that is 0 (or missing) in every run gets no panel, only a note in ``report.md``;
* ``report.md`` — those figures and a table per workload/variant with a workload column and the
  mean and 95% CI over seeds (and the paired-difference table of the ablated axis), plus the
  sweeps' failed and missing cells;
* ``summary_by_cell_group.csv`` — the numbers behind the tables (``ablated_value``: the cell group's
  value of the ablated axis, empty without one; ``saturated``: in any seed, empty when not known).

**Ablation.** The ablated axis of a sweep is the first axis in the spec's order that takes two or
more values among its cells (a grid or listed setting such as ``cache_capacity_scale``, or a
policy parameter ``<policy>.<param>``; not the rate or the seed); with none, and two or more
policies, it is the policy (:func:`experiments.report_runs.ablated_axis`). It is not part of the
variant: its values share a panel and a table. Other varying axes stay in the variant (rows of
panels). The paired differences (:func:`experiments.report_ablation.paired_differences`) compare
mean TTFT of each value with the baseline value (``--baseline``; default: the axis's first value
in the spec) at the same workload, variant, rate and policy, over the seeds both ran: the mean
of ``100 * (value's - baseline's) / baseline's mean`` with its 95% Student-t interval
(:func:`envs.metrics.stats.paired_ci`).

**Saturated cells** (open markers, ``(saturated)`` in the tables, ``saturated`` in the CSV): a
cell is past saturation in at least one seed by both tests of
:func:`baselines.capacity.saturated` (:func:`experiments.report_runs.run_saturated`), the
verdict of ``cpgym simulate``'s "overloaded" warning and ``cpgym compare``'s ``saturated``
column; there is no measured capacity in a sweep to compare a rate with.

The request rate of a run is the swept ``workload.target_rps`` when there is one, else the
workload's measured mean rate (``summary.json`` ``workload_rate_rps``, or ``(n - 1) / (last -
first arrival)`` from ``requests.parquet`` for plain runs) averaged over the runs that share
the workload, variant and rate-setting axes (``workload.rate_scale``, arrival-process
parameters).

95% CI: the Student-t interval of the mean over seeds, ``mean ± t(0.975, n-1) · s / sqrt(n)``
(:func:`envs.metrics.stats.mean_ci95`; no CI for n = 1, and none printed when every seed gave
the same value: a zero-width interval), **clipped to the quantity's range**: shares (SLO
attainment, prefix hit rate, utilisation) to [0, 1], times, volumes and counts to [0, ∞). With
few seeds the t interval of a bounded quantity can reach past its bound (t(0.975, 1) = 12.7);
clipping keeps the interval's true coverage (the mean cannot lie outside the range) and reports
it as an asymmetric ``[low, high]``; a clipped bound is marked ``†`` in the tables (e.g.
``1057.789 [0.000†, 4576.191]``). ``*_ci95`` in the CSV is the unclipped half-width,
``*_ci95_low`` / ``*_ci95_high`` the clipped bounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from envs.metrics.stats import ci95_halfwidth, mean_ci95
from envs.metrics.table import metric
from experiments.report_ablation import fig_ablation, paired_differences, paired_table
from experiments.report_figures import (
    Panel,
    fig_cdf,
    fig_composition,
    fig_rows,
    group_label,
    has_data,
    in_group,
    run_groups,
)
from experiments.report_runs import (
    METRICS,
    POLICY_AXIS,
    Ablation,
    any_saturated,
    load_runs,
    manifest_cells,
    metric_bounds,
    read_json,
)

#: Follows a table's CI bound that clipping to the quantity's range moved (the t interval reached past it).
CLIPPED_MARK = "†"


def ci95_interval(values, lower: float = -math.inf, upper: float = math.inf) -> tuple[float, float]:
    """95% Student-t confidence interval of the mean, clipped to ``[lower, upper]``.

    Returns:
        ``(low, high)``; ``(nan, nan)`` for fewer than 2 values.
    """
    m, hw = mean_ci95(values)
    if math.isnan(hw):
        return math.nan, math.nan
    return max(m - hw, lower), min(m + hw, upper)


@dataclass
class Report:
    """What :func:`make_report` wrote."""

    out_dir: Path
    markdown_path: Path
    figures: list[Path] = field(default_factory=list)
    num_runs: int = 0
    num_cells_missing: int = 0
    notes: list[str] = field(default_factory=list)


def _aggregate(df):
    """Mean, unclipped CI half-width and clipped CI bounds per (workload, variant, ablated value, rate,
    policy); ``saturated``: in any seed (None: not known for every seed)."""
    import pandas as pd

    out = []
    keys = ["workload", "variant", "ablated_value", "rate_rps", "policy"]
    for (workload, variant, value, rate, policy), g in df.groupby(keys, dropna=False, sort=True):
        row = {"workload": workload, "variant": variant, "ablated_value": value, "rate_rps": rate, "policy": policy,
               "num_seeds": len(g), "saturated": any_saturated(g)}
        for m in METRICS:
            vals = g[m].astype(float) if m in g else pd.Series([math.nan] * len(g))
            row[m] = float(vals.mean())
            row[m + "_ci95"] = ci95_halfwidth(vals.tolist())
            row[m + "_ci95_low"], row[m + "_ci95_high"] = ci95_interval(vals.tolist(), *metric_bounds(m))
        out.append(row)
    return pd.DataFrame(out)


# ------------------------------------------------------------------------------------ report
def _fmt(r, m: str, scale: float = 1.0, digits: int = 3) -> str:
    """``mean [low, high]`` (clipped 95% CI, a bound that clipping moved marked ``†``); ``mean``
    alone for one seed or when every seed gave the same value (a zero-width interval); ``-`` when
    the runs did not record the metric."""
    v = r[m]
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    s = f"{v * scale:.{digits}f}"
    lo, hi = r[m + "_ci95_low"], r[m + "_ci95_high"]
    if not (math.isnan(lo) or math.isnan(hi) or lo == hi):
        half = r.get(m + "_ci95", math.nan)  # unclipped half-width: was a bound moved to the range's end?
        lower, upper = metric_bounds(m)
        lo_mark = CLIPPED_MARK if lo == lower and v - half < lower else ""
        hi_mark = CLIPPED_MARK if hi == upper and v + half > upper else ""
        s += f" [{lo * scale:.{digits}f}{lo_mark}, {hi * scale:.{digits}f}{hi_mark}]"
    return s


def _table(g, ablation: Ablation | None) -> list[str]:
    axis = bool(ablation is not None and ablation.axis != POLICY_AXIS and g["ablated_value"].fillna("").ne("").any())
    lines = ["| workload | rate [req/s] | " + (f"{ablation.axis} | " if axis else "") + "policy | seeds | mean TTFT s "
             "| P90 TTFT s | P99 TTFT s | SLO tok % | SLO req % | hit % | KV GB | unfinished |",
             "|---|---:|" + "---|" * axis + "---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    rank = {v: i for i, v in enumerate(ablation.values)} if ablation is not None else {}
    g = g.assign(rank=[rank.get(v, -1) for v in g["ablated_value"].fillna("")])
    for _, r in g.sort_values(["rate_rps", "rank", "policy"]).iterrows():
        value = f"{r['ablated_value'] if r['ablated_value'] == r['ablated_value'] and r['ablated_value'] else '-'} | " * axis
        policy = r["policy"] + (" (saturated)" if r["saturated"] is True else "")
        lines.append(f"| {r['workload']} | {r['rate_rps']:g} | {value}{policy} | {r['num_seeds']} | "
                     f"{_fmt(r, 'mean_ttft_s')} | "
                     f"{_fmt(r, 'p90_ttft_s')} | {_fmt(r, 'p99_ttft_s')} | "
                     f"{_fmt(r, 'slo_attainment_token_weighted', 100, 1)} | {_fmt(r, 'slo_attainment_requests', 100, 1)} | "
                     f"{_fmt(r, 'prefix_hit_rate', 100, 1)} | {_fmt(r, 'kv_transfer_bytes', 1e-9, 2)} | "
                     f"{r['num_unfinished']:.1f} |")
    return lines + [""]


def _manifests(run_dir: Path) -> tuple[list[str], dict]:
    """(sweep names, {cell key: manifest entry}) of every sweep manifest under ``run_dir``."""
    names, cells = [], {}
    for m in sorted(run_dir.rglob("manifest.json")):
        if any(part.startswith(".") for part in m.relative_to(run_dir).parts):
            continue
        doc = read_json(m)
        names.append(str(doc.get("sweep", m.parent.name)))
        cells.update(manifest_cells(m))
    return names, cells


def make_report(run_dir: str | Path, out_dir: str | Path | None = None, baseline: str | None = None) -> Report:
    """Writes the figures, ``summary_by_cell_group.csv`` and ``report.md`` of the runs under ``run_dir``.

    ``baseline``: the value of the ablated axis the paired differences refer to (default: the
    axis's first value in the spec; module docstring).

    Raises:
        FileNotFoundError: ``run_dir`` does not exist.
        NotADirectoryError: ``run_dir`` is a file.
        ValueError: no run folder (with a cpgym ``summary.json``) under it, a run whose request
            rate cannot be told, or a broken ``summary.json`` / ``requests.parquet`` / JSON file
            (naming it; see the module docstring), or a ``baseline`` that is not a value of the
            ablated axis (or no axis is ablated), all before anything is written.
    """
    import matplotlib

    matplotlib.use("Agg")
    run_dir = Path(run_dir)
    if not run_dir.exists():
        raise FileNotFoundError(f"run folder {str(run_dir)!r} does not exist")
    if not run_dir.is_dir():
        raise NotADirectoryError(f"run folder {str(run_dir)!r} is not a folder; give a sweep's --out folder "
                                 f"or a folder of `cpgym simulate --out` runs")
    df = load_runs(run_dir)
    if df.empty:
        stale = df.attrs.get("stale_runs") or []
        why = f" ({len(stale)} folder(s) hold cells that their sweep's manifest.json no longer lists)" * bool(stale)
        raise ValueError(f"no runs (folders with summary.json) under {run_dir}{why}; give a sweep's --out folder "
                         f"or a folder of `cpgym simulate --out` runs")
    ablation = Ablation.of(df, baseline)
    out = Path(out_dir) if out_dir else run_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    agg = _aggregate(df)
    pairs = paired_differences(df, ablation) if ablation is not None else None
    rep = Report(out_dir=out, markdown_path=out / "report.md", num_runs=len(df))
    figures = [
        fig_ablation(agg, pairs, ablation, out) if ablation is not None else None,
        fig_rows(agg, out, "ttft_vs_rate.png", [
            Panel("mean_ttft_s", 1.0, metric("mean_ttft_s").label, "mean TTFT (95% CI over seeds)", log_y=True),
            Panel("p90_ttft_s", 1.0, metric("p90_ttft_s").label, "P90 TTFT", log_y=True)], ablation),
        fig_cdf(df, out),
        fig_rows(agg, out, "slo_vs_rate.png", [
            Panel("slo_attainment_token_weighted", 100.0, "token-weighted SLO attainment [%]",
                   "token-weighted TTFT SLO attainment (95% CI)", top=102.0)], ablation),
    ]
    comp_path, dynamic = fig_composition(df, out)
    figures.append(comp_path)
    figures.append(fig_rows(agg, out, "cache_transfer.png", [
        Panel("prefix_hit_rate", 100.0, "prefix hit rate [% of prompt tokens]", "token-weighted prefix hit rate",
               top=102.0),
        Panel("kv_transfer_bytes", 1e-9, "KV transfer [GB]", "KV-transfer volume (replication + reconciliation)")],
        ablation))
    rep.figures = [f for f in figures if f is not None]
    for m, what in (("kv_transfer_bytes", "KV transfers"), ("prefix_hit_rate", "prefix hits")):
        if not has_data(agg, m):
            rep.notes.append(f"No {what} in any run: no panel drawn for it.")
    if df.attrs.get("num_duplicates"):
        rep.notes.append(f"{df.attrs['num_duplicates']} run folder(s) repeat another run (same sweep cell, or the same "
                         f"workload, settings, policy and seed) and are counted once.")
    stale = df.attrs.get("stale_runs") or []
    if stale:
        rep.notes.append(f"{len(stale)} run folder(s) hold cells that are not in their sweep's manifest.json (cells of "
                         f"an earlier version of the spec run into the same folder, e.g. {stale[0].relative_to(run_dir)}) "
                         f"and are left out.")
    agg.to_csv(out / "summary_by_cell_group.csv", index=False)

    sweeps, cells = _manifests(run_dir)
    failed = {k: v for k, v in cells.items() if v.get("status") == "failed"}
    pending = {k: v for k, v in cells.items() if v.get("status") == "pending"}
    rep.num_cells_missing = len(failed) + len(pending)
    rep.markdown_path.write_text("\n".join(_markdown(run_dir, df, agg, rep, sweeps, cells, failed, pending, dynamic,
                                                     ablation, pairs)) + "\n")
    return rep


def _markdown(run_dir: Path, df, agg, rep: Report, sweeps: list[str], cells: dict, failed: dict, pending: dict,
              dynamic: bool, ablation: Ablation | None, pairs) -> list[str]:
    title = sweeps[0] if len(sweeps) == 1 else (", ".join(sweeps) if sweeps else run_dir.name)
    lines = [f"# Report: {title}", ""]
    rates = "; ".join(f"{w}: {', '.join(f'{r:g}' for r in sorted(g['rate_rps'].unique()))}"
                      for w, g in df.groupby("workload", sort=True))
    lines.append(f"{len(df)} runs from `{run_dir}`; workloads: {', '.join(sorted(df['workload'].unique()))}; "
                 f"policies: {', '.join(sorted(df['policy'].unique()))}; "
                 f"seeds: {', '.join(str(s) for s in sorted(df['seed'].unique()))}; rates [requests/s]: {rates}.")
    if cells:
        lines.append(f"Sweep cells: {len(cells)} ({len(cells) - rep.num_cells_missing} finished, {len(failed)} failed, "
                     f"{len(pending)} not run).")
    lines += ["", "Values are means over seeds with the 95% Student-t confidence interval of the mean in brackets, "
                  f"clipped to the quantity's range ([0, 100] % for shares, >= 0 otherwise; a clipped bound is marked "
                  f"{CLIPPED_MARK}); no interval when there is one seed or every seed gave the same value. TTFT in "
                  "seconds; SLO attainment and hit rate in %; KV transfer in GB.", ""]
    lines += [f"_{n}_" for n in rep.notes] + [""] * bool(rep.notes)
    if ablation is not None:
        lines += [f"Ablated axis: `{ablation.axis}` ({', '.join(ablation.values)}); paired differences to "
                  f"{ablation.axis}={ablation.baseline}. (saturated): past saturation in at least one seed (the last "
                  "third's mean TTFT slowdown > 1.2x the first third's and token-weighted SLO attainment < 90 %, as "
                  "`cpgym simulate` warns 'overloaded'): its TTFTs measure this window's backlog.", ""]
    for group in run_groups(agg):
        lines += [f"## {group_label(*group)}", ""] + _table(in_group(agg, group), ablation)
        group_pairs = in_group(pairs, group) if pairs is not None and len(pairs) else None
        if group_pairs is not None and len(group_pairs):
            lines += paired_table(group_pairs, ablation)
    lines += ["## Figures", ""]
    captions = {"ablation.png": "the ablated values side by side and their paired difference to the baseline",
                "ttft_vs_rate.png": "mean and P90 TTFT", "ttft_cdf.png": "TTFT CDF at the highest rate",
                "slo_vs_rate.png": "token-weighted SLO attainment vs rate",
                "composition.png": "worker composition over time"
                + ("" if dynamic else " (no run reconfigured: static compositions)"),
                "cache_transfer.png": "prefix hit rate and KV-transfer volume"}
    for f in rep.figures:
        lines += [f"![{captions[f.name]}]({f.name})", ""]
    if failed:
        lines += ["## Failed cells", "", "| cell | policy | seed | axes | error |", "|---|---|---:|---|---|"]
        for k, v in failed.items():
            err = str(v.get("error", "")).replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {k} | {v.get('policy')} | {v.get('seed')} | {v.get('axes')} | {err} |")
        lines.append("")
    if pending:
        lines += [f"{len(pending)} cells were not run (interrupted?); re-run the sweep to finish them.", ""]
    return lines


__all__ = ["make_report", "Report", "ci95_interval", "metric_bounds"]
