"""``cpgym report RUN_DIR``: figures and a Markdown summary of a folder of runs (a sweep's output).

Reads every run folder below ``RUN_DIR`` that has a ``summary.json`` (``cell.json``,
``extras.json``, ``requests.parquet`` when present) and writes into ``RUN_DIR/report/``:

* ``ttft_vs_rate.png`` — mean and P90 TTFT [s] vs request rate [requests/s], one line per policy
  (and per variant: the combination of the other swept axes), 95% CI over seeds as error bars;
* ``ttft_cdf.png`` — empirical CDF of TTFT at the highest rate, seeds pooled;
* ``slo_vs_rate.png`` — token-weighted TTFT SLO attainment (paper §3) vs rate;
* ``composition.png`` — ACTIVE workers per CP degree over time (``extras["composition_series"]``
  of runs with a reconfiguration controller; otherwise the static composition);
* ``cache_transfer.png`` — token-weighted prefix hit rate and KV-transfer volume [GB] vs rate;
* ``report.md`` — those figures and a table per (variant, rate, policy) with mean ± 95% CI over
  seeds, plus the sweep's failed and missing cells.

The request rate of a run is the swept ``workload.target_rps`` when there is one, else the
workload's measured mean rate averaged over the runs that share the rate-setting axes
(``workload.rate_scale``, arrival-process parameters) and the variant. 95% CI = mean ± t(0.975, n-1) · s / sqrt(n) over seeds (Student t;
n = number of seeds, no CI for n = 1).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

RATE_AXIS = "workload.target_rps"
# Student t quantiles t(0.975, df) for df = 1..30 (standard table); df > 30 uses the normal 1.96.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def ci95_halfwidth(values) -> float:
    """Half-width of the 95% Student-t confidence interval of the mean; NaN for fewer than 2 values."""
    import numpy as np

    x = np.asarray([v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))], dtype=float)
    n = len(x)
    if n < 2:
        return math.nan
    t = _T975[n - 2] if n - 1 <= len(_T975) else 1.96
    return float(t * x.std(ddof=1) / math.sqrt(n))


@dataclass
class Report:
    """What :func:`make_report` wrote."""

    out_dir: Path
    markdown_path: Path
    figures: list[Path] = field(default_factory=list)
    num_runs: int = 0
    num_cells_missing: int = 0


def _load_runs(run_dir: Path):
    import pandas as pd

    rows = []
    seen_keys: set[str] = set()
    manifest_dirs = set()
    if (run_dir / "manifest.json").is_file():
        manifest_dirs = {v.get("run_dir") for v in json.loads((run_dir / "manifest.json").read_text()).get("cells", {}).values()}
    paths = sorted(run_dir.rglob("summary.json"), key=lambda p: (p.parent.name not in manifest_dirs, str(p)))
    for summary_path in paths:
        d = summary_path.parent
        if any(part.startswith(".") for part in d.relative_to(run_dir).parts) or "report" in d.relative_to(run_dir).parts:
            continue  # in-progress cells (.tmp) and our own output
        summary = json.loads(summary_path.read_text())
        cell = json.loads((d / "cell.json").read_text()) if (d / "cell.json").is_file() else {}
        extras = json.loads((d / "extras.json").read_text()) if (d / "extras.json").is_file() else {}
        if cell.get("key"):
            if cell["key"] in seen_keys:
                continue  # a duplicate of a finished cell (e.g. a task that outlived a killed driver)
            seen_keys.add(cell["key"])
        axes = dict(cell.get("axes", {}))
        policy = axes.pop("policy", summary.get("policy"))
        seed = axes.pop("seed", cell.get("seed", 0))
        rate = axes.pop(RATE_AXIS, None)
        rate_group = ""
        if rate is None:  # rate set another way (rate_scale, an arrival-process parameter) or not swept
            rate_keys = sorted(k for k in axes if _is_rate_axis(k))
            rate_group = repr([(k, axes.pop(k)) for k in rate_keys])
        label = ""
        if "workload.name" in axes or "workload.trace" in axes:
            axes.pop("workload.name", None)
            axes.pop("workload.trace", None)
            label = (cell.get("workload", {}).get("name") or Path(str(cell.get("workload", {}).get("trace"))).name.split(".")[0])
        variant = ", ".join([label] * bool(label) + [f"{k}={v}" for k, v in sorted(axes.items())])
        rows.append({"run_dir": str(d), "policy": policy, "seed": seed, "rate_rps": rate, "variant": variant,
                     "rate_group": rate_group, "measured_rate_rps": summary.get("workload_rate_rps"),
                     "workload": cell.get("workload", {}).get("name") or summary.get("workload"), "extras": extras,
                     **{k: v for k, v in summary.items() if k not in ("policy",)}})
    df = pd.DataFrame(rows)
    if not df.empty and df["rate_rps"].isna().any():
        # x = the measured mean rate, averaged over the runs sharing variant and rate-setting axes
        # (seeds draw different workloads, so their measured rates differ slightly)
        miss = df["rate_rps"].isna()
        means = df[miss].groupby(["variant", "rate_group"])["measured_rate_rps"].transform("mean")
        df.loc[miss, "rate_rps"] = means.map(lambda r: float(f"{r:.3g}") if r == r else 0.0)
    return df


def _is_rate_axis(path: str) -> bool:
    """Axes that set the request rate: ``workload.rate_scale`` and named-workload parameters
    whose name mentions a rate or an arrival process (e.g. ``workload.params.session_arrivals``)."""
    if path == "workload.rate_scale":
        return True
    return path.startswith("workload.params.") and ("rate" in path or "arrivals" in path)


def _label(policy: str, variant: str) -> str:
    return f"{policy} [{variant}]" if variant else policy


def _aggregate(df):
    import pandas as pd

    metrics = ["mean_ttft_s", "p90_ttft_s", "p99_ttft_s", "slo_attainment_token_weighted", "slo_attainment_requests",
               "prefix_hit_rate", "kv_transfer_bytes", "num_unfinished", "utilization"]
    out = []
    for (variant, rate, policy), g in df.groupby(["variant", "rate_rps", "policy"], dropna=False, sort=True):
        row = {"variant": variant, "rate_rps": rate, "policy": policy, "num_seeds": len(g)}
        for m in metrics:
            vals = g[m].astype(float) if m in g else pd.Series([math.nan] * len(g))
            row[m] = float(vals.mean())
            row[m + "_ci95"] = ci95_halfwidth(vals.tolist())
        out.append(row)
    return pd.DataFrame(out)


def _policy_colors(agg) -> dict[str, str]:
    """One colour per policy, the same in every panel."""
    cmap = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray",
            "tab:olive", "tab:cyan"]
    return {p: cmap[i % len(cmap)] for i, p in enumerate(sorted(agg["policy"].unique()))}


def _lines(ax, agg, metric: str, colors: dict[str, str], scale: float = 1.0, ylabel: str = "") -> None:
    for i, (policy, g) in enumerate(agg.groupby("policy", sort=True)):
        g = g.sort_values("rate_rps")
        err = (g[metric + "_ci95"].fillna(0.0) * scale).to_numpy()
        ax.errorbar(g["rate_rps"], g[metric] * scale, yerr=err, marker="o", capsize=3, label=policy,
                    color=colors[policy], linestyle="-" if i < 10 else "--")
    ax.set_xlabel("request rate [requests/s]")
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)


def _variants(agg) -> list:
    return sorted(agg["variant"].fillna("").unique().tolist())


def _fig_rows(agg, out: Path, filename: str, panels: tuple, log_y: bool) -> Path:
    """One row per workload/variant, one column per ``(metric, scale, ylabel, title)`` panel."""
    import matplotlib.pyplot as plt

    variants = _variants(agg)
    colors = _policy_colors(agg)
    fig, axes = plt.subplots(len(variants), len(panels), figsize=(6 * len(panels), 4.0 * len(variants)), squeeze=False)
    for row, variant in enumerate(variants):
        sub = agg[agg["variant"].fillna("") == variant]
        name = f" — {variant}" if variant else ""
        for col, (metric, scale, ylabel, title) in enumerate(panels):
            ax = axes[row][col]
            _lines(ax, sub, metric, colors, scale=scale, ylabel=ylabel)
            ax.set_title(title + name)
            if log_y:
                ax.set_yscale("log")
        axes[row][-1].legend(fontsize=7, loc="best")
    fig.tight_layout()
    p = out / filename
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p


def _fig_ttft_vs_rate(agg, out: Path) -> Path:
    """Mean and P90 TTFT vs rate per workload/variant (95% CI over seeds)."""
    return _fig_rows(agg, out, "ttft_vs_rate.png", (
        ("mean_ttft_s", 1.0, "mean TTFT [s]", "mean TTFT vs request rate (95% CI over seeds)"),
        ("p90_ttft_s", 1.0, "P90 TTFT [s]", "P90 TTFT vs request rate")), log_y=True)


def _fig_slo(agg, out: Path) -> Path:
    """One panel per workload/variant: token-weighted SLO attainment vs rate."""
    import matplotlib.pyplot as plt

    variants = _variants(agg)
    colors = _policy_colors(agg)
    fig, axes = plt.subplots(1, len(variants), figsize=(6.5 * len(variants), 4.5), squeeze=False)
    for col, variant in enumerate(variants):
        ax = axes[0][col]
        sub = agg[agg["variant"].fillna("") == variant]
        _lines(ax, sub, "slo_attainment_token_weighted", colors, scale=100.0, ylabel="token-weighted SLO attainment [%]")
        ax.set_title("token-weighted TTFT SLO attainment" + (f" — {variant}" if variant else "") + " (95% CI)")
        ax.set_ylim(bottom=min(0.0, ax.get_ylim()[0]), top=102)
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    p = out / "slo_vs_rate.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p


def _fig_cdf(df, out: Path) -> Path:
    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd

    top = df["rate_rps"].max()
    sel = df[df["rate_rps"] == top]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (variant, policy), g in sel.groupby(["variant", "policy"], sort=True):
        ttft = []
        for d in g["run_dir"]:
            f = Path(d) / "requests.parquet"
            if f.is_file():
                t = pd.read_parquet(f, columns=["ttft_s"])["ttft_s"].to_numpy()
                ttft.append(t[~np.isnan(t)])
        if not ttft:
            continue
        t = np.sort(np.concatenate(ttft))
        ax.plot(t, np.arange(1, len(t) + 1) / len(t), label=_label(policy, variant))
    ax.set_xscale("log")
    ax.set_xlabel("TTFT [s]")
    ax.set_ylabel("fraction of finished requests")
    ax.set_title(f"TTFT CDF at {top:g} requests/s (seeds pooled)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    p = out / "ttft_cdf.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p


def _series_of(row) -> tuple[list[float], dict[str, list[int]], bool]:
    """(times, {degree label: workers}, dynamic?) of one run."""
    ex = row["extras"] or {}
    series = ex.get("composition_series") or []
    if series:
        times = [float(e["time_s"]) for e in series]
        degrees = sorted({k for e in series for k in e["num_workers_by_degree"]}, key=lambda s: int(s[2:]))
        counts = {k: [int(e["num_workers_by_degree"].get(k, 0)) for e in series] for k in degrees}
        end = float(row.get("sim_time_s") or times[-1])
        if end > times[-1]:
            times.append(end)
            for k in counts:
                counts[k].append(counts[k][-1])
        return times, counts, True
    init = ex.get("initial_composition") or []
    final = ex.get("composition") or init
    end = float(row.get("sim_time_s") or 1.0)

    def by_deg(c):
        d: dict[str, int] = {}
        for deg, _ in c:
            d[f"cp{deg}"] = d.get(f"cp{deg}", 0) + 1
        return d

    a, b = by_deg(init), by_deg(final)
    keys = sorted(set(a) | set(b), key=lambda s: int(s[2:]))
    return [0.0, end], {k: [a.get(k, 0), b.get(k, 0)] for k in keys}, a != b


def _fig_composition(df, out: Path) -> tuple[Path, bool]:
    import matplotlib.pyplot as plt

    top = df["rate_rps"].max()
    sel = df[df["rate_rps"] == top].sort_values("seed").drop_duplicates(["variant", "policy"])
    n = len(sel)
    cols = min(3, n)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.2 * rows), squeeze=False)
    any_dynamic = False
    for ax, (_, row) in zip(axes.flat, sel.iterrows()):
        times, counts, dynamic = _series_of(row)
        any_dynamic |= dynamic
        for k, v in counts.items():
            ax.step(times, v, where="post", label=k)
        ax.set_ylim(0, max([max(v) for v in counts.values()] or [0]) + 1)
        ax.set_title(_label(row["policy"], row["variant"]) + ("" if dynamic else " (static)"), fontsize=8)
        ax.set_xlabel("time [s]")
        ax.set_ylabel("ACTIVE workers")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle(f"worker composition over time at {top:g} requests/s (seed {int(sel['seed'].min())})")
    fig.tight_layout()
    p = out / "composition.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    return p, any_dynamic


def _fig_cache(agg, out: Path) -> Path:
    """Prefix hit rate and KV-transfer volume vs rate per workload/variant."""
    return _fig_rows(agg, out, "cache_transfer.png", (
        ("prefix_hit_rate", 100.0, "prefix hit rate [% of prompt tokens]", "token-weighted prefix hit rate vs request rate"),
        ("kv_transfer_bytes", 1e-9, "KV transfer [GB]", "KV-transfer volume (replication + reconciliation)")), log_y=False)


def _fmt(v: float, ci: float, scale: float = 1.0, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    s = f"{v * scale:.{digits}f}"
    if ci is not None and not math.isnan(ci):
        s += f" ± {ci * scale:.{digits}f}"
    return s


def make_report(run_dir: str | Path, out_dir: str | Path | None = None) -> Report:
    """Writes the figures and ``report.md`` of the runs under ``run_dir``.

    Raises:
        FileNotFoundError: ``run_dir`` does not exist.
        ValueError: no run folder (with ``summary.json``) under it.
    """
    import matplotlib

    matplotlib.use("Agg")
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run folder {str(run_dir)!r} does not exist")
    df = _load_runs(run_dir)
    if df.empty:
        raise ValueError(f"no runs (folders with summary.json) under {run_dir}")
    if df["rate_rps"].isna().any():
        df["rate_rps"] = df["rate_rps"].fillna(0.0)
    out = Path(out_dir) if out_dir else run_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    agg = _aggregate(df)
    rep = Report(out_dir=out, markdown_path=out / "report.md", num_runs=len(df))
    rep.figures.append(_fig_ttft_vs_rate(agg, out))
    rep.figures.append(_fig_cdf(df, out))
    rep.figures.append(_fig_slo(agg, out))
    comp_path, dynamic = _fig_composition(df, out)
    rep.figures.append(comp_path)
    rep.figures.append(_fig_cache(agg, out))
    agg.to_csv(out / "summary_by_cell_group.csv", index=False)

    manifest = {}
    if (run_dir / "manifest.json").is_file():
        manifest = json.loads((run_dir / "manifest.json").read_text())
    cells = manifest.get("cells", {})
    failed = {k: v for k, v in cells.items() if v.get("status") == "failed"}
    pending = {k: v for k, v in cells.items() if v.get("status") == "pending"}
    rep.num_cells_missing = len(failed) + len(pending)

    lines = [f"# Report: {manifest.get('sweep', run_dir.name)}", ""]
    lines.append(f"{len(df)} runs from `{run_dir}`; policies: {', '.join(sorted(df['policy'].unique()))}; "
                 f"seeds: {', '.join(str(s) for s in sorted(df['seed'].unique()))}; "
                 f"rates [requests/s]: {', '.join(f'{r:g}' for r in sorted(df['rate_rps'].unique()))}.")
    if cells:
        lines.append(f"Sweep cells: {len(cells)} ({len(cells) - rep.num_cells_missing} finished, {len(failed)} failed, {len(pending)} not run).")
    lines += ["", "Values are means over seeds ± the half-width of the 95% Student-t confidence interval "
                  "(no ± when there is one seed). TTFT in seconds; SLO attainment and hit rate in %; "
                  "KV transfer in GB.", ""]
    for variant, g in agg.groupby("variant", sort=True):
        if variant:
            lines += [f"## {variant}", ""]
        lines.append("| rate [req/s] | policy | seeds | mean TTFT s | P90 TTFT s | P99 TTFT s | SLO tok % | SLO req % | hit % | KV GB | unfinished |")
        lines.append("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for _, r in g.sort_values(["rate_rps", "policy"]).iterrows():
            lines.append(f"| {r['rate_rps']:g} | {r['policy']} | {r['num_seeds']} | {_fmt(r['mean_ttft_s'], r['mean_ttft_s_ci95'])} | "
                         f"{_fmt(r['p90_ttft_s'], r['p90_ttft_s_ci95'])} | {_fmt(r['p99_ttft_s'], r['p99_ttft_s_ci95'])} | "
                         f"{_fmt(r['slo_attainment_token_weighted'], r['slo_attainment_token_weighted_ci95'], 100, 1)} | "
                         f"{_fmt(r['slo_attainment_requests'], r['slo_attainment_requests_ci95'], 100, 1)} | "
                         f"{_fmt(r['prefix_hit_rate'], r['prefix_hit_rate_ci95'], 100, 1)} | "
                         f"{_fmt(r['kv_transfer_bytes'], r['kv_transfer_bytes_ci95'], 1e-9, 2)} | {r['num_unfinished']:.1f} |")
        lines.append("")
    lines += ["## Figures", ""]
    captions = {"ttft_vs_rate.png": "TTFT vs request rate", "ttft_cdf.png": "TTFT CDF at the highest rate",
                "slo_vs_rate.png": "token-weighted SLO attainment vs rate",
                "composition.png": "worker composition over time" + ("" if dynamic else " (no run reconfigured: static compositions)"),
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
    rep.markdown_path.write_text("\n".join(lines) + "\n")
    return rep


__all__ = ["make_report", "Report", "ci95_halfwidth"]
