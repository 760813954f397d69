"""The ablation view of ``cpgym report``: the values of the ablated axis side by side and the paired
difference of each value against a baseline value (``ablation.png``, the paired tables of
``report.md``; the rules are in :mod:`experiments.report`)."""

from __future__ import annotations

import math
from pathlib import Path

from envs.metrics.stats import finite_values, paired_ci
from experiments.report_figures import (
    SeriesStyle,
    _title,
    draw_series,
    group_label,
    in_group,
    log_y,
    plot_points,
    policy_colors,
    rate_text,
    run_groups,
    saturated_flags,
    saturated_legend,
)
from experiments.report_runs import POLICY_AXIS, Ablation, any_saturated

#: The metric of the paired differences (a name of :mod:`envs.metrics.table`).
PAIRED_METRIC = "mean_ttft_s"


def paired_differences(df, ablation: Ablation, metric: str = PAIRED_METRIC):
    """The paired difference of ``metric`` between each value of the ablated axis and the baseline
    value, per workload, variant, rate and policy (for :data:`~experiments.report_runs.POLICY_AXIS`:
    per workload, variant and rate, the value being the policy).

    The paired units are the seeds that both cells ran with a recorded ``metric`` (with the
    sweep's default ``seed_workload: true`` one seed is one workload draw and one simulator seed,
    the same under both values). Per pair: ``100 * (value's - baseline's) / mean of the
    baseline's over the pairs``, so the mean of the column is the difference of the means in % of
    the baseline's; its 95 % Student-t interval is :func:`envs.metrics.stats.paired_ci` (none for
    one pair). Negative = lower (for TTFT: faster) than the baseline.

    Args:
        df: one row per run (:func:`experiments.report_runs.load_runs`; columns workload, variant,
            rate_rps, policy, ablated_value, seed, saturated, ``metric``).

    Returns:
        A DataFrame, one row per (workload, variant, rate_rps, policy, ablated_value) with a
        baseline to pair with (the baseline's own rows left out): ``num_pairs``, ``baseline_mean`` and ``value_mean``
        (in the metric's unit, over the pairs), ``delta_pct``, ``ci_low_pct``, ``ci_high_pct`` (NaN
        without a pair, or for a baseline mean of 0), ``saturated`` (either side saturated in a
        paired seed; ``None``: not known).
    """
    import pandas as pd

    d = df[df["ablated_value"].fillna("") != ""]
    within = ["workload", "variant", "rate_rps"] + ([] if ablation.axis == POLICY_AXIS else ["policy"])
    rows = []
    for key, g in d.groupby(within, sort=True, dropna=False):
        base = g[g["ablated_value"] == ablation.baseline]
        if base.empty:
            continue  # e.g. a policy that does not take the ablated parameter
        b = base.groupby("seed")[metric].mean()
        for v in ablation.values:
            other = g[g["ablated_value"] == v]
            if v == ablation.baseline or other.empty:
                continue
            a = other.groupby("seed")[metric].mean()
            seeds = sorted(s for s in set(a.index) & set(b.index) if len(finite_values([a[s], b[s]])) == 2)
            ref = float(b[seeds].mean()) if seeds else math.nan
            row = dict(zip(within, key))
            row.update(policy=row.get("policy", v), ablated_value=v, num_pairs=len(seeds), baseline_mean=ref,
                       value_mean=float(a[seeds].mean()) if seeds else math.nan)
            if seeds and ref != 0:
                row["delta_pct"], row["ci_low_pct"], row["ci_high_pct"] = paired_ci(
                    [100.0 * (a[s] - b[s]) / ref for s in seeds])
            else:
                row["delta_pct"] = row["ci_low_pct"] = row["ci_high_pct"] = math.nan
            row["saturated"] = any_saturated(pd.concat([other[other["seed"].isin(seeds)], base[base["seed"].isin(seeds)]]))
            rows.append(row)
    cols = ["workload", "variant", "rate_rps", "policy", "ablated_value", "num_pairs", "baseline_mean", "value_mean",
            "delta_pct", "ci_low_pct", "ci_high_pct", "saturated"]
    return pd.DataFrame(rows, columns=cols)


def fig_ablation(agg, pairs, ablation: Ablation, out: Path, metric: str = PAIRED_METRIC, label: str = "mean TTFT [s]",
                 filename: str = "ablation.png") -> Path | None:
    """``filename``: one row per workload/variant with the ablated axis, two panels: the values side
    by side (:func:`~experiments.report_figures.draw_series`, one y-axis) and the paired difference
    to the baseline value in % with its 95 % CI; ``None`` when no group has two values."""
    import matplotlib.pyplot as plt

    fig = draw_ablation(agg, pairs, ablation, metric, label)
    if fig is None:
        return None
    fig.savefig(out / filename, dpi=110)
    plt.close(fig)
    return out / filename


def draw_ablation(agg, pairs, ablation: Ablation, metric: str = PAIRED_METRIC, label: str = "mean TTFT [s]"):
    """The figure of :func:`fig_ablation` (a matplotlib Figure; ``None`` when no group has two values)."""
    import matplotlib.pyplot as plt

    groups = [grp for grp in run_groups(agg) if in_group(agg, grp)["ablated_value"].fillna("").nunique() > 1
              or (ablation.axis == POLICY_AXIS and in_group(agg, grp)["policy"].nunique() > 1)]
    if not groups:
        return None
    colors = policy_colors(agg)
    fig, axes = plt.subplots(len(groups), 2, figsize=(12, 4.4 * len(groups)), squeeze=False, layout="constrained")
    for row, group in enumerate(groups):
        sub = in_group(agg, group)
        left, right = axes[row]
        draw_series(left, sub, metric, colors, ablation, ylabel=label)
        _title(left, f"{group_label(*group)}\n{label.split(' [')[0]} by {ablation.axis}{rate_text(sub)} "
                     f"(95% CI over seeds)", width=60)
        values = sub[metric].dropna()
        if len(values) and (values > 0).all() and values.max() > 20 * values.min():
            log_y(left, sub, metric)
        else:
            left.set_ylim(bottom=0.0)
        left.legend(fontsize=7, loc="best")
        _draw_pairs(right, in_group(pairs, group) if len(pairs) else pairs, sub, ablation, colors, label)
    return fig


def _draw_pairs(ax, pairs, agg, ablation: Ablation, colors: dict[str, str], label: str) -> None:
    """Paired difference [%] with its 95 % CI: x = the values (one rate) or the rate, 0 = the baseline."""
    import numpy as np

    ax.axhline(0.0, color="black", linewidth=0.8)
    what = label.split(" [")[0]
    _title(ax, f"{what}: paired difference to {ablation.axis}={ablation.baseline}{rate_text(pairs) if len(pairs) else ''}"
               f"\n(% of the baseline's mean, 95% CI over paired seeds)", width=60)
    ax.set_ylabel(f"Δ {what} vs {ablation.baseline} [%]")
    ax.grid(True, alpha=0.3)
    pairs = pairs[~pairs["delta_pct"].isna()] if len(pairs) else pairs
    if not len(pairs):
        ax.text(0.5, 0.5, "no paired seeds", ha="center", va="center", transform=ax.transAxes)
        return
    one_rate = pairs["rate_rps"].nunique() == 1
    others = [v for v in ablation.values if v != ablation.baseline and v in set(pairs["ablated_value"])]
    style = SeriesStyle.of(agg, colors, ablation)
    any_saturated = False
    keys = ["policy"] if one_rate or ablation.axis == POLICY_AXIS else ["policy", "ablated_value"]
    for key, g in pairs.groupby(keys, sort=True):
        policy = key[0]
        if one_rate:
            x = np.array([others.index(v) for v in g["ablated_value"]], dtype=float) + style.dodge(policy)
            color, label = style.color(policy), policy
        else:
            g = g.sort_values("rate_rps")
            value = g["ablated_value"].iloc[0]
            x, color, label = g["rate_rps"].to_numpy(dtype=float), style.color(policy, value), style.label(policy, value)
        y = g["delta_pct"].to_numpy(dtype=float)
        err = np.vstack([np.nan_to_num(y - g["ci_low_pct"].to_numpy(dtype=float), nan=0.0),
                         np.nan_to_num(g["ci_high_pct"].to_numpy(dtype=float) - y, nan=0.0)])
        any_saturated |= plot_points(ax, x, y, err, saturated_flags(g), color, style.marker(policy),
                                     "none" if one_rate else style.dash(policy), label)
    if any_saturated:
        saturated_legend(ax)
    if one_rate:
        ax.set_xticks(range(len(others)), others)
        ax.set_xlim(-0.5, len(others) - 0.5)
        ax.set_xlabel(ablation.axis)
    else:
        ax.set_xlabel("request rate [requests/s]")
    ax.legend(fontsize=7, loc="best")


def paired_table(pairs, ablation: Ablation) -> list[str]:
    """Markdown lines of one group's paired differences (:func:`paired_differences`)."""
    per_policy = ablation.axis != POLICY_AXIS
    lines = [f"Paired difference of mean TTFT to {ablation.axis}={ablation.baseline} over the seeds both ran "
             "(% of the baseline's mean; 95% Student-t interval; negative = faster):", "",
             "| rate [req/s] | " + "policy | " * per_policy + f"{ablation.axis} | pairs | baseline s | value s | "
             "Δ mean TTFT % | CI low % | CI high % |",
             "|---:|" + "---|" * per_policy + "---|---:|---:|---:|---:|---:|---:|"]
    for _, r in pairs.iterrows():
        mark = " (saturated)" if r["saturated"] is True else ""
        cells = [f"{r['rate_rps']:g}"] + [str(r["policy"])] * per_policy + [f"{r['ablated_value']}{mark}", str(r["num_pairs"]),
                 _num(r["baseline_mean"], 3), _num(r["value_mean"], 3), _num(r["delta_pct"], 1, sign=True),
                 _num(r["ci_low_pct"], 1, sign=True), _num(r["ci_high_pct"], 1, sign=True)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def _num(x: float, digits: int, sign: bool = False) -> str:
    if x is None or x != x:
        return "-"
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


__all__ = ["PAIRED_METRIC", "paired_differences", "fig_ablation", "draw_ablation", "paired_table"]
