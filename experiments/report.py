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

* ``ttft_vs_rate.png`` — mean and P90 TTFT [s] vs request rate [requests/s], one row of panels
  per workload/variant, one line per policy, 95% CI over seeds as error bars;
* ``ttft_cdf.png`` — empirical CDF of TTFT at each workload/variant's highest rate, seeds pooled;
* ``slo_vs_rate.png`` — token-weighted TTFT SLO attainment (paper §3) vs rate;
* ``composition.png`` — ACTIVE workers per CP degree over time (``extras["composition_series"]``
  of runs with a reconfiguration controller; otherwise the static composition);
* ``cache_transfer.png`` — token-weighted prefix hit rate and KV-transfer volume [GB] vs rate;
  a metric that is 0 (or missing) in every run gets no panel, only a note in ``report.md``;
* ``report.md`` — those figures and a table per workload/variant with a workload column and the
  mean and 95% CI over seeds, plus the sweeps' failed and missing cells;
* ``summary_by_cell_group.csv`` — the numbers behind the tables.

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

import json
import math
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from envs.metrics.stats import ci95_halfwidth, mean_ci95
from envs.metrics.table import metric, metric_names
from experiments.sweep.manifest import manifest_cell_keys

RATE_AXIS = "workload.target_rps"
#: Follows a table's CI bound that clipping to the quantity's range moved (the t interval reached past it).
CLIPPED_MARK = "†"
#: The metrics a report aggregates (names of :mod:`envs.metrics.table`).
METRICS = metric_names("mean_ttft_s", "p90_ttft_s", "p99_ttft_s", "slo_attainment_token_weighted",
                       "slo_attainment_requests", "prefix_hit_rate", "kv_transfer_bytes", "num_unfinished", "utilization")
# sim_config fields that never make two plain runs different experiments
_IGNORED_CONFIG = ("seed", "record_events")


def metric_bounds(name: str) -> tuple[float, float]:
    """The range of a summary metric (:attr:`envs.metrics.table.Metric.bounds`): [0, 1] for shares,
    [0, inf) for the rest (times, bytes, counts).

    Raises:
        KeyError: ``name`` is not in :mod:`envs.metrics.table`.
    """
    return metric(name).bounds


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


# ------------------------------------------------------------------------------------ loading
def _read_json(path: Path) -> dict:
    """A JSON object from ``path`` (``{}`` when missing).

    Raises:
        ValueError: naming the file, when it is not a JSON object.
    """
    if not path.is_file():
        return {}
    try:
        doc = json.loads(path.read_text())
    except ValueError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(doc).__name__}")
    return doc


#: Columns of ``requests.parquet`` the report reads (rate of plain runs, TTFT CDF).
REQUEST_COLUMNS = ("arrival_s", "ttft_s")


def _read_summary(path: Path) -> dict | None:
    """A run's ``summary.json``; ``None`` for another tool's (no ``policy`` key).

    Raises:
        ValueError: naming the file and the field, for a ``policy`` that is not a non-empty string, no
            ``mean_ttft_s``, or a metric of :data:`METRICS` / ``workload_rate_rps`` that is neither null
            nor a number in its range (:func:`metric_bounds`).
    """
    doc = _read_json(path)
    if "policy" not in doc:
        return None
    if not isinstance(doc["policy"], str) or not doc["policy"]:
        raise ValueError(f"{path}: field 'policy': got {doc['policy']!r}; expected a policy name (a non-empty string)")
    if "mean_ttft_s" not in doc:
        raise ValueError(f"{path}: no field 'mean_ttft_s'; expected the summary.json written by a cpgym run")
    for m in (*METRICS, "workload_rate_rps"):
        v = doc.get(m)
        if v is None:
            continue
        lo, hi = metric_bounds(m)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (lo <= v <= hi and math.isfinite(v)):
            rng = f"[{lo:g}, {hi:g}]" if math.isfinite(hi) else f">= {lo:g}"
            raise ValueError(f"{path}: field {m!r}: got {v!r}; expected null or a finite number {rng}")
    return doc


def _check_requests(path: Path) -> None:
    """A run's ``requests.parquet`` (if any) is a Parquet file with :data:`REQUEST_COLUMNS`
    (its footer is read, not its data).

    Raises:
        ValueError: naming the file, when it is not readable as Parquet or lacks a column.
    """
    if not path.is_file():
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        names = pq.read_schema(path).names
    except (pa.ArrowException, OSError) as exc:
        raise ValueError(f"{path}: not a readable Parquet file ({' '.join(str(exc).split())[:200]}); "
                         "expected the requests.parquet written by a cpgym run") from None
    missing = [c for c in REQUEST_COLUMNS if c not in names]
    if missing:
        raise ValueError(f"{path}: no column(s) {', '.join(missing)}; expected the requests.parquet written by a cpgym run")


def _read_requests(path: Path, column: str):
    """One column of a run's ``requests.parquet`` (a Series).

    Raises:
        ValueError: naming the file, when it cannot be read (e.g. corrupt data pages).
    """
    import pandas as pd
    import pyarrow as pa

    try:
        return pd.read_parquet(path, columns=[column])[column]
    except (pa.ArrowException, OSError, KeyError) as exc:
        detail = " ".join(str(exc).split())[:200]
        raise ValueError(f"{path}: not a readable Parquet file with column {column!r} ({detail}); "
                         "expected the requests.parquet written by a cpgym run") from None


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = json.dumps(v) if isinstance(v, list) else v
    return out


def _measured_rate(d: Path, summary: dict) -> float:
    """Mean arrival rate [requests/s] of a run: ``summary.json`` when it has it, else ``requests.parquet``."""
    if summary.get("workload_rate_rps") is not None:
        return float(summary["workload_rate_rps"])
    f = d / "requests.parquet"
    if not f.is_file():
        raise ValueError(f"{d}: cannot tell the request rate (no workload_rate_rps in summary.json, no requests.parquet)")
    t = _read_requests(f, "arrival_s")
    span = float(t.max() - t.min()) if len(t) > 1 else 0.0
    return (len(t) - 1) / span if span > 0 else 0.0


def _workload_label(cell: dict, summary: dict) -> str:
    wl = cell.get("workload") or {}
    if wl.get("name"):
        return str(wl["name"])
    if wl.get("trace"):
        return Path(str(wl["trace"])).name.split(".")[0]
    return str(summary.get("workload") or "?")


def _cell_row(d: Path, summary: dict, cell: dict) -> dict:
    """A sweep cell: policy, seed, rate and variant from its axes."""
    axes = dict(cell.get("axes", {}))
    policy = axes.pop("policy", summary.get("policy"))
    seed = axes.pop("seed", cell.get("seed", 0))
    rate = axes.pop(RATE_AXIS, None)
    axes.pop("workload.name", None)
    axes.pop("workload.trace", None)
    rate_group = ""
    if rate is None:  # rate set another way (rate_scale, an arrival-process parameter) or not swept
        rate_keys = sorted(k for k in axes if _is_rate_axis(k))
        rate_group = repr([(k, axes.pop(k)) for k in rate_keys])
    return {"kind": "cell", "dedupe_key": cell["key"], "sweep": cell.get("sweep") or "", "policy": policy, "seed": seed,
            "rate_rps": rate, "rate_group": rate_group, "axes": {k: v for k, v in sorted(axes.items())},
            "measured_rate_rps": summary.get("workload_rate_rps")}


def _plain_row(d: Path, summary: dict, config: dict) -> dict:
    """A run written by ``cpgym simulate --out`` (or any run folder without cell.json)."""
    sim = _flatten(config.get("sim_config") or {})
    if config.get("calibration"):
        sim["calibration.model"] = config["calibration"].get("model")
        sim["calibration.gpu_type"] = config["calibration"].get("gpu_type")
    return {"kind": "run", "dedupe_key": None, "sweep": "", "policy": summary.get("policy") or config.get("policy"),
            "seed": int(sim.get("seed", 0) or 0), "rate_rps": None, "rate_group": "", "axes": {},
            "config_fields": {k: v for k, v in sim.items() if k not in _IGNORED_CONFIG},
            "measured_rate_rps": _measured_rate(d, summary)}


def _manifest_cells(path: Path) -> dict[str, dict]:
    """The ``cells`` of a sweep's ``manifest.json`` (``{}`` when missing).

    Raises:
        ValueError: naming the file and field, when it is not the manifest ``cpgym sweep`` writes
            (``cells`` not an object of objects, a ``run_dir`` that is not a folder name).
    """
    cells = _read_json(path).get("cells") or {}
    if not isinstance(cells, dict):
        raise ValueError(f"{path}: field 'cells': expected a JSON object {{cell key: entry}} (as `cpgym sweep` writes "
                         f"it), got {type(cells).__name__}")
    for k, e in cells.items():
        if not isinstance(e, dict):
            raise ValueError(f"{path}: cells[{k!r}]: expected a JSON object (the cell's entry), got {e!r}")
        if e.get("run_dir") is not None and not isinstance(e["run_dir"], str):
            raise ValueError(f"{path}: cells[{k!r}].run_dir: expected the cell's folder name, got {e['run_dir']!r}")
    return cells


def _run_dirs(run_dir: Path) -> list[Path]:
    manifest_dirs = set()
    for m in run_dir.rglob("manifest.json"):
        base = m.parent
        for v in _manifest_cells(m).values():
            if v.get("run_dir"):
                manifest_dirs.add(base / v["run_dir"])
    dirs = set()
    for p in (*run_dir.rglob("summary.json"), *run_dir.rglob("cell.json")):  # cell.json: a sweep cell lacking its summary
        rel = p.parent.relative_to(run_dir).parts
        if any(part.startswith(".") for part in rel) or "report" in rel or "wandb" in rel:
            continue  # in-progress cells (.tmp), our own output, wandb's files
        dirs.add(p.parent)
    return sorted(dirs, key=lambda d: (d not in manifest_dirs, str(d)))


def _variants(rows: list[dict]) -> None:
    """Sets ``row["variant"]``: a sweep's remaining axes (and the sweep's name when there are
    several sweeps); for plain runs the sim_config fields that differ among the plain runs."""
    cells = [r for r in rows if r["kind"] == "cell"]
    # sweeps of one name in several folders whose cells differ under the same label (e.g. a spec
    # edited between two --out folders) are told apart by folder, never pooled as extra seeds
    labels: dict[tuple, set] = {}
    for r in cells:
        label = (r["sweep"], r["workload"], json.dumps(r["axes"], sort_keys=True, default=str), r["policy"], r["seed"],
                 r["rate_rps"], r["rate_group"])
        labels.setdefault(label, set()).add(r["dedupe_key"])
    clashing = {label[0] for label, keys in labels.items() if len(keys) > 1}
    for r in cells:
        if r["sweep"] in clashing:
            r["sweep"] = f"{r['sweep']} ({r['sweep_dir']})"
    sweeps = {r["sweep"] for r in cells}
    plain = [r for r in rows if r["kind"] == "run"]
    keys = sorted({k for r in plain for k in r["config_fields"]})
    differing = [k for k in keys if len({json.dumps(r["config_fields"].get(k), default=str) for r in plain}) > 1]
    for r in rows:
        if r["kind"] == "cell":
            parts = [f"sweep={r['sweep']}"] * (len(sweeps) > 1) + [f"{k}={v}" for k, v in r["axes"].items()]
        else:
            parts = [f"{k}={r['config_fields'].get(k)}" for k in differing]
        r["variant"] = ", ".join(parts)


def _load_runs(run_dir: Path):
    """One row per distinct run under ``run_dir`` (see the module docstring); the DataFrame's
    ``attrs["num_duplicates"]`` counts the runs left out as repeats of another, ``attrs["stale_runs"]``
    lists the sweep cells left out as not in their folder's ``manifest.json``."""
    import pandas as pd

    rows, seen, num_dup = [], set(), 0
    current: dict[Path, set | None] = {}  # sweep folder -> the cell keys of its manifest (None: no manifest)
    listed: dict[Path, dict] = {}  # sweep folder -> {cell.json key: its manifest entry}
    stale: list[Path] = []
    for d in _run_dirs(run_dir):
        key = _read_json(d / "cell.json").get("key")
        if key is not None and not isinstance(key, str):
            raise ValueError(f"{d / 'cell.json'}: field 'key': expected the cell key (a string, as `cpgym sweep` writes "
                             f"it), got {key!r}")
        if key and not _in_current_sweep(d, key, current):
            stale.append(d)  # a cell of an earlier version of the spec, run into the same --out
            continue
        if not (d / "summary.json").is_file():
            if not key:
                continue  # some other tool's cell.json
            raise ValueError(f"{d / 'summary.json'}: missing, but cell.json marks {d.name} as a finished sweep cell; "
                             f"expected its summary.json (remove the folder and rerun the sweep to recompute the cell)")
        summary = _read_summary(d / "summary.json")
        if summary is None:
            continue  # some other tool's summary.json
        _check_requests(d / "requests.parquet")
        cell = _read_json(d / "cell.json")
        entry = _manifest_entry(d, cell["key"], listed) if cell.get("key") else {}
        if isinstance(entry.get("axes"), dict):
            cell = {**cell, "axes": entry["axes"]}
        if not isinstance(cell.get("axes", {}), dict):
            raise ValueError(f"{d / 'cell.json'}: field 'axes': expected a JSON object {{axis: value}} (as `cpgym sweep` "
                             f"writes it), got {cell['axes']!r}")
        label = entry.get("workload") if isinstance(entry.get("workload"), str) and entry.get("workload") else None
        row = _cell_row(d, summary, cell) if cell.get("key") else _plain_row(d, summary, _read_json(d / "config.json"))
        row.update({"run_dir": str(d), "workload": label or _workload_label(cell, summary),
                    "extras": _read_json(d / "extras.json"),
                    **{k: v for k, v in summary.items() if k not in ("policy", "workload")}})
        if row["kind"] == "cell":
            row["sweep_dir"] = str(d.parent.relative_to(run_dir))  # "." for the folder itself
        rows.append(row)
    _variants(rows)
    kept = []
    for r in rows:
        key = r["dedupe_key"] or (r["workload"], r["variant"], r["policy"], r["seed"], round(r["measured_rate_rps"], 6))
        if key in seen:
            num_dup += 1  # e.g. a task that outlived a killed driver, or the same simulate command run twice
            continue
        seen.add(key)
        kept.append(r)
    df = pd.DataFrame(kept).drop(columns=["axes", "config_fields", "dedupe_key", "sweep_dir"], errors="ignore")
    df.attrs["num_duplicates"] = num_dup
    df.attrs["stale_runs"] = stale
    if not df.empty and df["rate_rps"].isna().any():
        # x = the measured mean rate, averaged over the runs sharing workload, variant and rate-setting
        # axes (seeds draw different workloads, so their measured rates differ slightly)
        miss = df["rate_rps"].isna()
        means = df[miss].groupby(["workload", "variant", "rate_group"])["measured_rate_rps"].transform("mean")
        df.loc[miss, "rate_rps"] = means.map(lambda r: float(f"{r:.3g}"))
    return df


def _in_current_sweep(d: Path, key: str, current: dict[Path, set | None]) -> bool:
    """Whether the sweep cell ``key`` in run folder ``d`` is a cell of the spec that last ran in
    ``d``'s sweep folder: listed in its ``manifest.json`` (which ``cpgym sweep`` rewrites with the
    cells of the spec it runs). A spec edited and run again into the same ``--out`` leaves the
    old cells' folders there; they are not cells of the sweep any more. No manifest: every cell
    counts."""
    base = d.parent
    if base not in current:
        current[base] = manifest_cell_keys(base)
    keys = current[base]
    return keys is None or key in keys


def _manifest_entry(d: Path, key: str, listed: dict[Path, dict]) -> dict:
    """The entry of sweep cell ``key`` (run folder ``d``) in its sweep folder's ``manifest.json``
    (``{}`` if none), whose ``axes`` and ``workload`` label the report uses: the cell key leaves
    out where the trace and calibration files live, so a sweep folder resumed after a move holds
    cells whose ``cell.json`` names the old paths (a ``calibration_path`` or ``workload.trace``
    axis, the trace's file name) beside cells naming the new ones, while the manifest names them
    all as the spec that ran last does."""
    base = d.parent
    if base not in listed:
        listed[base] = {}
        for k, e in _manifest_cells(base / "manifest.json").items():
            listed[base].update({name: e for name in (k, e.get("legacy_key")) if isinstance(name, str)})
    return listed[base].get(key) or {}


def _is_rate_axis(path: str) -> bool:
    """Axes that set the request rate: ``workload.rate_scale`` and named-workload parameters
    whose name mentions a rate or an arrival process (e.g. ``workload.params.session_arrivals``)."""
    if path == "workload.rate_scale":
        return True
    return path.startswith("workload.params.") and ("rate" in path or "arrivals" in path)


def _label(policy: str, variant: str) -> str:
    return f"{policy} [{variant}]" if variant else policy


def _group_label(workload: str, variant: str) -> str:
    return f"{workload} — {variant}" if variant else workload


def _aggregate(df):
    """Mean, unclipped CI half-width and clipped CI bounds per (workload, variant, rate, policy)."""
    import pandas as pd

    out = []
    keys = ["workload", "variant", "rate_rps", "policy"]
    for (workload, variant, rate, policy), g in df.groupby(keys, dropna=False, sort=True):
        row = {"workload": workload, "variant": variant, "rate_rps": rate, "policy": policy, "num_seeds": len(g)}
        for m in METRICS:
            vals = g[m].astype(float) if m in g else pd.Series([math.nan] * len(g))
            row[m] = float(vals.mean())
            row[m + "_ci95"] = ci95_halfwidth(vals.tolist())
            row[m + "_ci95_low"], row[m + "_ci95_high"] = ci95_interval(vals.tolist(), *metric_bounds(m))
        out.append(row)
    return pd.DataFrame(out)


# ------------------------------------------------------------------------------------ figures
def _policy_colors(agg) -> dict[str, str]:
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


def _groups(agg) -> list[tuple[str, str]]:
    return sorted({(w, v) for w, v in zip(agg["workload"], agg["variant"].fillna(""))})


def _in_group(agg, group: tuple[str, str]):
    return agg[(agg["workload"] == group[0]) & (agg["variant"].fillna("") == group[1])]


@dataclass(frozen=True)
class _Panel:
    metric: str
    scale: float
    ylabel: str
    title: str
    log_y: bool = False
    top: float | None = None  # fixed upper y limit (e.g. 102 % for shares)


def _has_data(agg, metric: str) -> bool:
    import numpy as np

    v = agg[metric].to_numpy(dtype=float) if metric in agg else np.array([])
    return bool(len(v)) and not np.isnan(v).all() and bool(np.nanmax(np.abs(v)) > 0)


def _fig_rows(agg, out: Path, filename: str, panels: list[_Panel]) -> Path | None:
    """One row per workload/variant, one column per panel; ``None`` when no panel has data."""
    import matplotlib.pyplot as plt

    panels = [p for p in panels if _has_data(agg, p.metric)]
    if not panels:
        return None
    groups = _groups(agg)
    colors = _policy_colors(agg)
    fig, axes = plt.subplots(len(groups), len(panels), figsize=(6 * len(panels), 4.2 * len(groups)), squeeze=False,
                             layout="constrained")
    for row, group in enumerate(groups):
        sub = _in_group(agg, group)
        for col, p in enumerate(panels):
            ax = axes[row][col]
            if not _lines(ax, sub, p.metric, colors, scale=p.scale, ylabel=p.ylabel):
                ax.axis("off")
                ax.text(0.5, 0.5, f"{_group_label(*group)}:\nno {p.ylabel} in these runs", ha="center", va="center",
                        transform=ax.transAxes, fontsize=9)
                continue
            _title(ax, f"{_group_label(*group)}\n{p.title}")
            if p.log_y and (sub[p.metric] > 0).all():
                ax.set_yscale("log")
            else:
                ax.set_ylim(bottom=0.0, top=p.top)
            ax.legend(fontsize=7, loc="best")
    fig.savefig(out / filename, dpi=110)
    plt.close(fig)
    return out / filename


def _fig_cdf(df, out: Path) -> Path | None:
    """TTFT CDF at each workload/variant's highest rate (seeds pooled); one panel per group."""
    import matplotlib.pyplot as plt
    import numpy as np

    curves: dict[tuple[str, str], list] = {}
    tops: dict[tuple[str, str], float] = {}
    for group, gdf in df.groupby(["workload", "variant"], sort=True):
        top = gdf["rate_rps"].max()
        for policy, g in gdf[gdf["rate_rps"] == top].groupby("policy", sort=True):
            ttft = [_read_requests(Path(d) / "requests.parquet", "ttft_s").to_numpy()
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
        _title(ax, f"{_group_label(*group)}\nTTFT CDF at {tops[group]:g} requests/s (seeds pooled)", width=60)
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


def _fig_composition(df, out: Path) -> tuple[Path | None, bool]:
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
        _title(ax, f"{_group_label(row['workload'], row['variant'])}\n{row['policy']} at {row['rate_rps']:g} requests/s, "
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


def _table(g) -> list[str]:
    lines = ["| workload | rate [req/s] | policy | seeds | mean TTFT s | P90 TTFT s | P99 TTFT s | SLO tok % | SLO req % "
             "| hit % | KV GB | unfinished |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for _, r in g.sort_values(["rate_rps", "policy"]).iterrows():
        lines.append(f"| {r['workload']} | {r['rate_rps']:g} | {r['policy']} | {r['num_seeds']} | {_fmt(r, 'mean_ttft_s')} | "
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
        doc = _read_json(m)
        names.append(str(doc.get("sweep", m.parent.name)))
        cells.update(_manifest_cells(m))
    return names, cells


def make_report(run_dir: str | Path, out_dir: str | Path | None = None) -> Report:
    """Writes the figures, ``summary_by_cell_group.csv`` and ``report.md`` of the runs under ``run_dir``.

    Raises:
        FileNotFoundError: ``run_dir`` does not exist.
        NotADirectoryError: ``run_dir`` is a file.
        ValueError: no run folder (with a cpgym ``summary.json``) under it, a run whose request
            rate cannot be told, or a broken ``summary.json`` / ``requests.parquet`` / JSON file
            (naming it; see the module docstring), all before anything is written.
    """
    import matplotlib

    matplotlib.use("Agg")
    run_dir = Path(run_dir)
    if not run_dir.exists():
        raise FileNotFoundError(f"run folder {str(run_dir)!r} does not exist")
    if not run_dir.is_dir():
        raise NotADirectoryError(f"run folder {str(run_dir)!r} is not a folder; give a sweep's --out folder "
                                 f"or a folder of `cpgym simulate --out` runs")
    df = _load_runs(run_dir)
    if df.empty:
        stale = df.attrs.get("stale_runs") or []
        why = f" ({len(stale)} folder(s) hold cells that their sweep's manifest.json no longer lists)" * bool(stale)
        raise ValueError(f"no runs (folders with summary.json) under {run_dir}{why}; give a sweep's --out folder "
                         f"or a folder of `cpgym simulate --out` runs")
    out = Path(out_dir) if out_dir else run_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    agg = _aggregate(df)
    rep = Report(out_dir=out, markdown_path=out / "report.md", num_runs=len(df))
    figures = [
        _fig_rows(agg, out, "ttft_vs_rate.png", [
            _Panel("mean_ttft_s", 1.0, metric("mean_ttft_s").label, "mean TTFT vs request rate (95% CI over seeds)",
                   log_y=True),
            _Panel("p90_ttft_s", 1.0, metric("p90_ttft_s").label, "P90 TTFT vs request rate", log_y=True)]),
        _fig_cdf(df, out),
        _fig_rows(agg, out, "slo_vs_rate.png", [
            _Panel("slo_attainment_token_weighted", 100.0, "token-weighted SLO attainment [%]",
                   "token-weighted TTFT SLO attainment (95% CI)", top=102.0)]),
    ]
    comp_path, dynamic = _fig_composition(df, out)
    figures.append(comp_path)
    figures.append(_fig_rows(agg, out, "cache_transfer.png", [
        _Panel("prefix_hit_rate", 100.0, "prefix hit rate [% of prompt tokens]",
               "token-weighted prefix hit rate vs request rate", top=102.0),
        _Panel("kv_transfer_bytes", 1e-9, "KV transfer [GB]", "KV-transfer volume (replication + reconciliation)")]))
    rep.figures = [f for f in figures if f is not None]
    for m, what in (("kv_transfer_bytes", "KV transfers"), ("prefix_hit_rate", "prefix hits")):
        if not _has_data(agg, m):
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
    rep.markdown_path.write_text("\n".join(_markdown(run_dir, df, agg, rep, sweeps, cells, failed, pending, dynamic)) + "\n")
    return rep


def _markdown(run_dir: Path, df, agg, rep: Report, sweeps: list[str], cells: dict, failed: dict, pending: dict,
              dynamic: bool) -> list[str]:
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
    for group in _groups(agg):
        lines += [f"## {_group_label(*group)}", ""] + _table(_in_group(agg, group))
    lines += ["## Figures", ""]
    captions = {"ttft_vs_rate.png": "TTFT vs request rate", "ttft_cdf.png": "TTFT CDF at the highest rate",
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
