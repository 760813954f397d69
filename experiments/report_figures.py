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


#: Legend entry of the open markers (:func:`draw_series`).
SATURATED_LABEL = "open marker: saturated in >= 1 seed\n(backlog grows and SLO < 90 %)"
_MARKERS = ("o", "s", "^", "D", "v", "P", "X")
_DASHES = ("-", "--", ":", "-.")


def plain_log_ticks(axis) -> None:
    """Tick labels of a log-scaled ``axis`` (``ax.xaxis`` / ``ax.yaxis``) as plain numbers
    (``0.2``, ``1.8``, ``2``, ``100``), not matplotlib's ``1.8×10⁰``; which ticks get a label
    is matplotlib's choice (:class:`matplotlib.ticker.LogFormatter`)."""
    from matplotlib.ticker import LogFormatter

    class Plain(LogFormatter):
        def __call__(self, x, pos=None):
            return plain_number(x) if super().__call__(x, pos) else ""

    axis.set_major_formatter(Plain())
    axis.set_minor_formatter(Plain(labelOnlyBase=False))


def log_y(ax, agg, metric: str, scale: float = 1.0) -> None:
    """A log y-axis with plain tick labels (:func:`plain_log_ticks`) reaching down to the lowest mean
    or positive CI bound of ``metric`` (a CI clipped to 0 would otherwise set no lower end)."""
    import numpy as np

    v = np.concatenate([agg[metric].to_numpy(dtype=float), agg[metric + "_ci95_low"].to_numpy(dtype=float)]) * scale
    v = v[np.isfinite(v) & (v > 0)]
    ax.set_yscale("log")
    plain_log_ticks(ax.yaxis)
    if len(v):
        ax.set_ylim(bottom=float(v.min()) / 1.25)


def plain_number(x: float) -> str:
    """``x`` to 6 significant digits without an exponent or trailing zeros (``0.001``, ``1.8``, ``20000``)."""
    import numpy as np

    return np.format_float_positional(float(f"{x:.6g}"), trim="-")


def categories(agg, ablation) -> list[str]:
    """The x categories of a one-rate group: the ablated values present (spec order), then the
    policies of rows without the axis."""
    present = set(agg["ablated_value"].fillna(""))
    cats = [v for v in ablation.values if v in present] if ablation is not None else []
    return cats + sorted(set(agg.loc[agg["ablated_value"].fillna("") == "", "policy"]))


def series_label(policy: str, value: str, ablation, num_policies: int) -> str:
    if not value or ablation is None or ablation.axis == "policy":
        return policy
    return f"{ablation.axis}={value}" if num_policies == 1 else f"{policy}, {ablation.axis}={value}"


_VALUE_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray",
                 "tab:olive", "tab:cyan")


@dataclass(frozen=True)
class SeriesStyle:
    """How the series of one panel are told apart: by colour the ablated value when a group has
    several (a non-policy axis), else the policy; by line style and marker the policy."""

    policies: tuple[str, ...]
    colors: dict
    ablation: object = None
    by_value: bool = False

    @classmethod
    def of(cls, agg, colors: dict[str, str], ablation=None) -> SeriesStyle:
        values = set(agg["ablated_value"].fillna("")) - {""}
        by_value = ablation is not None and ablation.axis != "policy" and len(values) > 1
        return cls(tuple(sorted(agg["policy"].unique())), colors, ablation, by_value)

    def color(self, policy: str, value: str = "") -> str:
        if self.by_value and value:
            return _VALUE_COLORS[self.ablation.values.index(value) % len(_VALUE_COLORS)]
        return self.colors[policy]

    def marker(self, policy: str) -> str:
        return _MARKERS[self.policies.index(policy) % len(_MARKERS)] if self.by_value else "o"

    def dash(self, policy: str) -> str:
        i = self.policies.index(policy)
        return _DASHES[i % len(_DASHES)] if self.by_value else ("-" if i < 10 else "--")

    def dodge(self, policy: str) -> float:
        """x offset of ``policy``'s points at one category (several policies per ablated value)."""
        n = len(self.policies)
        return (self.policies.index(policy) - (n - 1) / 2) * min(0.6 / n, 0.2) if self.by_value else 0.0

    def label(self, policy: str, value: str = "") -> str:
        return series_label(policy, value, self.ablation, len(self.policies))


def plot_points(ax, x, y, err, saturated, color: str, marker: str, linestyle: str, label: str) -> bool:
    """One series: line and error bars, filled markers, open markers where ``saturated`` (bool
    array; shapes (n,), err (2, n)); the legend entry ``label``. Returns whether a point is open."""
    import numpy as np

    x, y, sat = np.asarray(x, float), np.asarray(y, float), np.asarray(saturated, bool)
    ax.errorbar(x, y, yerr=err, color=color, linestyle=linestyle, marker="none", capsize=3, zorder=2)
    ax.plot(x[~sat], y[~sat], linestyle="none", marker=marker, color=color, zorder=3)
    ax.plot(x[sat], y[sat], linestyle="none", marker=marker, markersize=8, markerfacecolor="white",
            markeredgecolor=color, markeredgewidth=1.5, zorder=4)
    ax.plot([], [], color=color, linestyle=linestyle, marker=marker, label=label)
    return bool(sat.any())


def saturated_legend(ax) -> None:
    """The legend entry of the open markers (:data:`SATURATED_LABEL`)."""
    ax.plot([], [], linestyle="none", marker="o", markerfacecolor="white", markeredgecolor="black",
            label=SATURATED_LABEL)


def saturated_flags(g):
    """``g["saturated"] is True`` per row (None / NaN: not known, not marked)."""
    import numpy as np

    return np.array([v is True or v == 1 for v in g["saturated"]], bool) if "saturated" in g else np.zeros(len(g), bool)


def draw_series(ax, agg, metric: str, colors: dict[str, str], ablation=None, scale: float = 1.0,
                ylabel: str = "") -> bool:
    """Mean ± clipped 95% CI of ``metric`` in one panel; returns whether anything was drawn.

    More than one rate: x is the rate, one line per policy and ablated value
    (:class:`SeriesStyle`). One rate: no rate axis; x is categorical (:func:`categories`: the
    ablated values side by side, dodged per policy). A point saturated in any seed
    (``agg["saturated"]``) is an open marker, with a legend entry (:data:`SATURATED_LABEL`)."""
    import numpy as np

    agg = agg[~agg[metric].isna()]
    if agg.empty:
        return False
    agg = agg.assign(ablated_value=agg["ablated_value"].fillna(""))
    style = SeriesStyle.of(agg, colors, ablation)
    rank = {v: i for i, v in enumerate(ablation.values)} if ablation is not None else {}
    one_rate = agg["rate_rps"].nunique() == 1
    cats = categories(agg, ablation) if one_rate else []
    any_saturated = False
    keys = ["policy"] if one_rate else ["policy", "ablated_value"]
    for key, g in sorted(agg.groupby(keys, sort=False),
                         key=lambda kg: (rank.get(kg[1]["ablated_value"].iloc[0], -1), style.policies.index(kg[0][0]))):
        policy = key[0]
        if one_rate:
            g = g.assign(x=[cats.index(v or p) for v, p in zip(g["ablated_value"], g["policy"])]).sort_values("x")
            x, color, label = g["x"].to_numpy(dtype=float) + style.dodge(policy), style.color(policy), policy
        else:
            g = g.sort_values("rate_rps")
            value = g["ablated_value"].iloc[0]
            x, color, label = g["rate_rps"].to_numpy(dtype=float), style.color(policy, value), style.label(policy, value)
        y = g[metric].to_numpy(dtype=float) * scale
        lo = np.nan_to_num(y - g[metric + "_ci95_low"].to_numpy(dtype=float) * scale, nan=0.0)
        hi = np.nan_to_num(g[metric + "_ci95_high"].to_numpy(dtype=float) * scale - y, nan=0.0)
        any_saturated |= plot_points(ax, x, y, np.vstack([lo, hi]), saturated_flags(g), color, style.marker(policy),
                                     "none" if one_rate else style.dash(policy), label)
    if any_saturated:
        saturated_legend(ax)
    if one_rate:
        ax.set_xticks(range(len(cats)), cats)
        ax.set_xlim(-0.5, len(cats) - 0.5)
        ax.set_xlabel(ablation.axis if ablation is not None and len(cats) > 1 else "policy")
    else:
        ax.set_xlabel("request rate [requests/s]")
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    return True


def rate_text(agg) -> str:
    """`` at R requests/s`` when every row has one rate R (the categorical panels' titles), else ``""``."""
    rates = agg["rate_rps"].unique()
    return f" at {rates[0]:g} requests/s" if len(rates) == 1 else ""


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


def fig_rows(agg, out: Path, filename: str, panels: list[Panel], ablation=None) -> Path | None:
    """One row per workload/variant, one column per panel (:func:`draw_series`: the ablated values
    side by side); ``None`` when no panel has data."""
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
            if not draw_series(ax, sub, p.metric, colors, ablation, scale=p.scale, ylabel=p.ylabel):
                ax.axis("off")
                ax.text(0.5, 0.5, f"{group_label(*group)}:\nno {p.ylabel} in these runs", ha="center", va="center",
                        transform=ax.transAxes, fontsize=9)
                continue
            _title(ax, f"{group_label(*group)}\n{p.title}{rate_text(sub)}")
            if p.log_y and (sub[p.metric] > 0).all():
                log_y(ax, sub, p.metric, p.scale)
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
        plain_log_ticks(ax.xaxis)
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
