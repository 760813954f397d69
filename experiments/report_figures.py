"""The figures of ``cpgym report`` (matplotlib; the list is in :mod:`experiments.report`)."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

from experiments.report_runs import read_requests


def policy_label(policy: str, variant: str) -> str:
    return f"{policy} [{variant}]" if variant else policy


def group_label(workload: str, variant: str) -> str:
    return f"{workload} — {variant}" if variant else workload


# ------------------------------------------------------------------------------------ figures
def policy_colors(agg) -> dict[str, str]:
    """One colour per policy, the same in every panel."""
    cmap = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray",
            "tab:olive", "tab:cyan"]
    return {p: cmap[i % len(cmap)] for i, p in enumerate(sorted(agg["policy"].unique()))}


def _title(ax, text: str, width: int = 48) -> None:
    """A panel title wrapped to the panel's width (long workload/variant labels never run off)."""
    ax.set_title("\n".join(textwrap.fill(line, width) for line in text.split("\n")), fontsize=9)


def _lines(ax, agg, metric: str, colors: dict[str, str], scale: float = 1.0, ylabel: str = "") -> bool:
    """Mean ± clipped 95% CI vs rate, one line per policy; returns whether anything was drawn."""
    import numpy as np

    drawn = False
    for i, (policy, g) in enumerate(agg.groupby("policy", sort=True)):
        g = g.sort_values("rate_rps")
        y = g[metric].to_numpy(dtype=float)
        if np.isnan(y).all():
            continue
        lo = np.nan_to_num(y - g[metric + "_ci95_low"].to_numpy(dtype=float), nan=0.0)
        hi = np.nan_to_num(g[metric + "_ci95_high"].to_numpy(dtype=float) - y, nan=0.0)
        ax.errorbar(g["rate_rps"], y * scale, yerr=np.vstack([lo, hi]) * scale, marker="o", capsize=3, label=policy,
                    color=colors[policy], linestyle="-" if i < 10 else "--")
        drawn = True
    ax.set_xlabel("request rate [requests/s]")
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    return drawn


def run_groups(agg) -> list[tuple[str, str]]:
    return sorted({(w, v) for w, v in zip(agg["workload"], agg["variant"].fillna(""))})


def in_group(agg, group: tuple[str, str]):
    return agg[(agg["workload"] == group[0]) & (agg["variant"].fillna("") == group[1])]


@dataclass(frozen=True)
class Panel:
    metric: str
    scale: float
    ylabel: str
    title: str
    log_y: bool = False
    top: float | None = None  # fixed upper y limit (e.g. 102 % for shares)


def has_data(agg, metric: str) -> bool:
    import numpy as np

    v = agg[metric].to_numpy(dtype=float) if metric in agg else np.array([])
    return bool(len(v)) and not np.isnan(v).all() and bool(np.nanmax(np.abs(v)) > 0)


def fig_rows(agg, out: Path, filename: str, panels: list[Panel]) -> Path | None:
    """One row per workload/variant, one column per panel; ``None`` when no panel has data."""
    import matplotlib.pyplot as plt

    panels = [p for p in panels if has_data(agg, p.metric)]
    if not panels:
        return None
    groups = run_groups(agg)
    colors = policy_colors(agg)
    fig, axes = plt.subplots(len(groups), len(panels), figsize=(6 * len(panels), 4.2 * len(groups)), squeeze=False,
                             layout="constrained")
    for row, group in enumerate(groups):
        sub = in_group(agg, group)
        for col, p in enumerate(panels):
            ax = axes[row][col]
            if not _lines(ax, sub, p.metric, colors, scale=p.scale, ylabel=p.ylabel):
                ax.axis("off")
                ax.text(0.5, 0.5, f"{group_label(*group)}:\nno {p.ylabel} in these runs", ha="center", va="center",
                        transform=ax.transAxes, fontsize=9)
                continue
            _title(ax, f"{group_label(*group)}\n{p.title}")
            if p.log_y and (sub[p.metric] > 0).all():
                ax.set_yscale("log")
            else:
                ax.set_ylim(bottom=0.0, top=p.top)
            ax.legend(fontsize=7, loc="best")
    fig.savefig(out / filename, dpi=110)
    plt.close(fig)
    return out / filename


def fig_cdf(df, out: Path) -> Path | None:
    """TTFT CDF at each workload/variant's highest rate (seeds pooled); one panel per group."""
    import matplotlib.pyplot as plt
    import numpy as np

    curves: dict[tuple[str, str], list] = {}
    tops: dict[tuple[str, str], float] = {}
    for group, gdf in df.groupby(["workload", "variant"], sort=True):
        top = gdf["rate_rps"].max()
        for policy, g in gdf[gdf["rate_rps"] == top].groupby("policy", sort=True):
            ttft = [read_requests(Path(d) / "requests.parquet", "ttft_s").to_numpy()
                    for d in g["run_dir"] if (Path(d) / "requests.parquet").is_file()]
            t = np.sort(np.concatenate(ttft)) if ttft else np.array([])
            t = t[~np.isnan(t)]
            if len(t):
                curves.setdefault(group, []).append((policy, t))
                tops[group] = top
    if not curves:
        return None
    n = len(curves)
    cols = min(2, n)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(7 * cols, 4.5 * rows), squeeze=False, layout="constrained")
    for ax, (group, lines) in zip(axes.flat, curves.items()):
        for policy, t in lines:
            ax.plot(t, np.arange(1, len(t) + 1) / len(t), label=policy)
        ax.set_xscale("log")
        ax.set_xlabel("TTFT [s]")
        ax.set_ylabel("fraction of finished requests")
        _title(ax, f"{group_label(*group)}\nTTFT CDF at {tops[group]:g} requests/s (seeds pooled)", width=60)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    for ax in list(axes.flat)[n:]:
        ax.remove()
    fig.savefig(out / "ttft_cdf.png", dpi=110)
    plt.close(fig)
    return out / "ttft_cdf.png"


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


def fig_composition(df, out: Path) -> tuple[Path | None, bool]:
    """Workers per CP degree over time at each group's highest rate (lowest seed); runs without a
    recorded composition (plain ``simulate`` runs) are left out; ``None`` when none has one."""
    import matplotlib.pyplot as plt

    picks = []
    for _, gdf in df.groupby(["workload", "variant"], sort=True):
        top = gdf["rate_rps"].max()
        sel = gdf[gdf["rate_rps"] == top].sort_values("seed").drop_duplicates(["policy"])
        picks += [r for _, r in sel.iterrows() if _series_of(r)[1]]
    if not picks:
        return None, False
    n = len(picks)
    cols = min(3, n)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.8 * cols, 3.6 * rows), squeeze=False, layout="constrained")
    any_dynamic = False
    for ax, row in zip(axes.flat, picks):
        times, counts, dynamic = _series_of(row)
        any_dynamic |= dynamic
        for k, v in counts.items():
            ax.step(times, v, where="post", label=k)
        ax.set_ylim(0, max(max(v) for v in counts.values()) + 1)
        _title(ax, f"{group_label(row['workload'], row['variant'])}\n{row['policy']} at {row['rate_rps']:g} requests/s, "
                   f"seed {row['seed']}" + ("" if dynamic else " (static)"), width=40)
        ax.set_xlabel("time [s]")
        ax.set_ylabel("ACTIVE workers")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[n:]:
        ax.remove()
    fig.savefig(out / "composition.png", dpi=110)
    plt.close(fig)
    return out / "composition.png", any_dynamic
