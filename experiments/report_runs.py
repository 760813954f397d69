"""Reading the run folders of ``cpgym report``: summaries, cells, manifests and requests, each file
checked and named on error (the rules are in :mod:`experiments.report`)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from envs.metrics.table import metric, metric_names
from envs.planning.capacity_definitions import CapacityDefinition, isolated_ttft_s, thirds_growth
from envs.sim import Calibration, LatencyConfig, SimConfig
from experiments.sweep.manifest import manifest_cell_keys

# sim_config fields that never make two plain runs different experiments
_IGNORED_CONFIG = ("seed", "record_events")


# ------------------------------------------------------------------------------------ loading
def read_json(path: Path) -> dict:
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
    doc = read_json(path)
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


def read_requests(path: Path, column: str):
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
    t = read_requests(f, "arrival_s")
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
        rate_keys = sorted(k for k in axes if is_rate_axis(k))
        rate_group = repr([(k, axes.pop(k)) for k in rate_keys])
    return {"kind": "cell", "dedupe_key": cell["key"], "sweep": cell.get("sweep") or "", "policy": policy, "seed": seed,
            "rate_rps": rate, "rate_group": rate_group, "axes": {k: v for k, v in sorted(axes.items())},
            "axis_order": list(axes),
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


def manifest_cells(path: Path) -> dict[str, dict]:
    """The ``cells`` of a sweep's ``manifest.json`` (``{}`` when missing).

    Raises:
        ValueError: naming the file and field, when it is not the manifest ``cpgym sweep`` writes
            (``cells`` not an object of objects, a ``run_dir`` that is not a folder name).
    """
    cells = read_json(path).get("cells") or {}
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
        for v in manifest_cells(m).values():
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
    axis, _ = ablated_axis(rows)
    for r in rows:
        if r["kind"] == "cell":
            parts = [f"sweep={r['sweep']}"] * (len(sweeps) > 1) + [f"{k}={v}" for k, v in r["axes"].items() if k != axis]
            own = value_label(r["axes"][axis]) if axis in r["axes"] else ""  # "": a policy without the parameter
            r["ablated_value"] = r["policy"] if axis == POLICY_AXIS else own
        else:
            parts = [f"{k}={r['config_fields'].get(k)}" for k in differing]
            r["ablated_value"] = ""
        r["variant"] = ", ".join(parts)


#: The ablated axis of sweeps that vary no other axis but run several policies.
POLICY_AXIS = "policy"


@dataclass(frozen=True)
class Ablation:
    """The ablated axis of a report: its name (a spec axis path or :data:`POLICY_AXIS`), its values
    (labels of :func:`value_label`, in spec order) and the value the paired differences refer to.

    Raises:
        ValueError: fewer than two values, or a ``baseline`` that is not one of them.
    """

    axis: str
    values: tuple[str, ...]
    baseline: str

    def __post_init__(self):
        if len(self.values) < 2:
            raise ValueError(f"ablated axis {self.axis!r}: needs two or more values, got {list(self.values)}")
        if self.baseline not in self.values:
            raise ValueError(f"--baseline {self.baseline}: not a value of the ablated axis {self.axis} "
                             f"({', '.join(self.values)})")

    @classmethod
    def of(cls, df, baseline: str | None = None) -> Ablation | None:
        """The ablation of :func:`load_runs`' frame (its ``attrs``); ``baseline`` default: the first
        value; a number matches a value equal to it (``1`` is ``1.0``). ``None``: no ablated axis.

        Raises:
            ValueError: ``baseline`` given but no axis is ablated, or not one of its values.
        """
        axis, values = df.attrs.get("ablated_axis"), tuple(df.attrs.get("ablated_values") or ())
        if axis is None:
            if baseline is not None:
                raise ValueError(f"--baseline {baseline}: these runs ablate no axis (no setting takes two or more "
                                 "values and there is one policy); leave --baseline out")
            return None
        if baseline is None:
            return cls(axis, values, values[0])
        same = [v for v in values if v == baseline or _number_first(v)[:2] == _number_first(baseline)[:2] != (1, 0.0)]
        return cls(axis, values, same[0] if same else baseline)


def value_label(value) -> str:
    """How a value of the ablated axis is written in tables, legends and ``--baseline`` (``str``, as in
    the variant ``axis=value``)."""
    return str(value)


def ablated_axis(rows: list[dict]) -> tuple[str | None, list[str]]:
    """``(axis, its values in spec order)`` of the sweep cells among ``rows``; ``(None, [])`` when none.

    The ablated axis is the first axis, in the order the spec declares them, that takes two or more
    values among the cells (a grid or listed setting, or a ``<policy>.<param>``), leaving out the
    rate, policy and seed; with no such axis and two or more policies it is :data:`POLICY_AXIS`. The
    values are ordered as the sweep's ``sweep.json`` lists its cells (the spec's order: the first
    is the default baseline), then any others sorted."""
    cells = [r for r in rows if r["kind"] == "cell"]
    spec_order: dict[str, list[str]] = {}
    for base in sorted({Path(r["run_dir"]).parent for r in cells}):
        for c in _spec_cells(base / "sweep.json"):
            for k, v in [*(c.get("axes") or {}).items(), (POLICY_AXIS, c.get("policy"))]:
                spec_order.setdefault(k, [])
                if value_label(v) not in spec_order[k]:
                    spec_order[k].append(value_label(v))
    values: dict[str, set[str]] = {}
    for r in cells:
        for k in r["axis_order"]:
            if k in r["axes"]:
                values.setdefault(k, set()).add(value_label(r["axes"][k]))
        values.setdefault(POLICY_AXIS, set()).add(value_label(r["policy"]))
    varying = [k for k in values if k != POLICY_AXIS and len(values[k]) > 1]
    axis = varying[0] if varying else (POLICY_AXIS if len(values.get(POLICY_AXIS, ())) > 1 else None)
    if axis is None:
        return None, []
    known = [v for v in spec_order.get(axis, []) if v in values[axis]]
    return axis, known + sorted(values[axis] - set(known), key=_number_first)


def _number_first(label: str) -> tuple:
    try:
        return (0, float(label), label)
    except ValueError:
        return (1, 0.0, label)


def _spec_cells(path: Path) -> list[dict]:
    """The ``cells`` list of a sweep's ``sweep.json`` (``[]`` when missing or not a list of objects)."""
    cells = read_json(path).get("cells")
    return [c for c in cells if isinstance(c, dict)] if isinstance(cells, list) else []


def load_runs(run_dir: Path):
    """One row per distinct run under ``run_dir`` (see the module docstring); the DataFrame's
    ``attrs["num_duplicates"]`` counts the runs left out as repeats of another, ``attrs["stale_runs"]``
    lists the sweep cells left out as not in their folder's ``manifest.json``."""
    import pandas as pd

    rows, seen, num_dup = [], set(), 0
    current: dict[Path, set | None] = {}  # sweep folder -> the cell keys of its manifest (None: no manifest)
    listed: dict[Path, dict] = {}  # sweep folder -> {cell.json key: its manifest entry}
    stale: list[Path] = []
    calibrations: dict[str, Calibration] = {}
    for d in _run_dirs(run_dir):
        key = read_json(d / "cell.json").get("key")
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
        cell = read_json(d / "cell.json")
        entry = _manifest_entry(d, cell["key"], listed) if cell.get("key") else {}
        if isinstance(entry.get("axes"), dict):
            cell = {**cell, "axes": entry["axes"]}
        if not isinstance(cell.get("axes", {}), dict):
            raise ValueError(f"{d / 'cell.json'}: field 'axes': expected a JSON object {{axis: value}} (as `cpgym sweep` "
                             f"writes it), got {cell['axes']!r}")
        label = entry.get("workload") if isinstance(entry.get("workload"), str) and entry.get("workload") else None
        row = _cell_row(d, summary, cell) if cell.get("key") else _plain_row(d, summary, read_json(d / "config.json"))
        row.update({"run_dir": str(d), "workload": label or _workload_label(cell, summary),
                    "extras": read_json(d / "extras.json"), "saturated": run_saturated(d, summary, calibrations),
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
    axis, values = ablated_axis(kept)
    df = pd.DataFrame(kept).drop(columns=["axes", "axis_order", "config_fields", "dedupe_key", "sweep_dir"],
                                 errors="ignore")
    df.attrs["num_duplicates"] = num_dup
    df.attrs["ablated_axis"], df.attrs["ablated_values"] = axis, values
    df.attrs["stale_runs"] = stale
    if not df.empty and df["rate_rps"].isna().any():
        # x = the measured mean rate, averaged over the runs sharing workload, variant and rate-setting
        # axes (seeds draw different workloads, so their measured rates differ slightly)
        miss = df["rate_rps"].isna()
        means = df[miss].groupby(["workload", "variant", "rate_group"])["measured_rate_rps"].transform("mean")
        df.loc[miss, "rate_rps"] = means.map(lambda r: float(f"{r:.3g}"))
    return df


#: Columns of ``requests.parquet`` the saturation verdict reads (:func:`run_saturated`).
SATURATION_COLUMNS = ("arrival_s", "ttft_s", "num_prompt_tokens")


def run_saturated(d: Path, summary: dict, calibrations: dict[str, Calibration] | None = None) -> bool | None:
    """Whether the run in folder ``d`` is past saturation, by both tests of
    :func:`baselines.capacity.saturated` (the verdict of ``cpgym simulate``'s "overloaded" warning
    and ``cpgym compare``'s ``saturated`` column, default
    :class:`~envs.planning.capacity_definitions.CapacityDefinition`): the last third's mean TTFT
    slowdown over the isolated TTFT is more than ``drain_ratio`` (1.2) x the first third's (the
    backlog grows) *and* token-weighted SLO attainment is below ``min_slo_attainment`` (0.9).

    Reads ``requests.parquet`` (:data:`SATURATION_COLUMNS`) and ``config.json`` (the latency
    settings and the calibration of the isolated TTFT). ``calibrations`` caches the calibrations
    read, by their JSON text.

    Returns:
        ``None`` (not known) when the run lacks one of those files, columns or fields, or its
        ``config.json`` does not hold a calibration this version reads.
    """
    f = d / "requests.parquet"
    config = read_json(d / "config.json")
    slo = summary.get("slo_attainment_token_weighted")
    if not f.is_file() or slo is None or not isinstance(config.get("calibration"), dict):
        return None
    import pyarrow.parquet as pq

    if any(c not in pq.read_schema(f).names for c in SATURATION_COLUMNS):
        return None
    text = json.dumps(config["calibration"], sort_keys=True)
    cache = calibrations if calibrations is not None else {}
    try:
        if text not in cache:
            cache[text] = Calibration.from_dict(config["calibration"], source=str(d / "config.json"))
        latency = LatencyConfig(**((config.get("sim_config") or {}).get("latency") or {}))
    except (TypeError, ValueError, KeyError):
        return None  # another version's config.json: no verdict, not an error (the report does not need it)
    import pandas as pd

    rec = pd.read_parquet(f, columns=list(SATURATION_COLUMNS))
    iso = isolated_ttft_s(SimConfig(latency=latency), cache[text], rec["num_prompt_tokens"].to_numpy(dtype=float))
    growth = thirds_growth(rec["arrival_s"].to_numpy(dtype=float), rec["ttft_s"].to_numpy(dtype=float), iso)
    definition = CapacityDefinition()
    return bool(growth > definition.drain_ratio and slo < definition.min_slo_attainment)


def any_saturated(runs) -> bool | None:
    """True when a run of ``runs`` (rows of :func:`load_runs`) is saturated (:func:`run_saturated`),
    False when every run is known not to be, else None."""
    flags = list(runs["saturated"]) if "saturated" in runs else []
    if any(f is True or f == 1 for f in flags if f is not None and f == f):
        return True
    return False if flags and all(f is not None and f == f for f in flags) else None



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
        for k, e in manifest_cells(base / "manifest.json").items():
            listed[base].update({name: e for name in (k, e.get("legacy_key")) if isinstance(name, str)})
    return listed[base].get(key) or {}


RATE_AXIS = "workload.target_rps"


#: The metrics a report aggregates (names of :mod:`envs.metrics.table`).
METRICS = metric_names("mean_ttft_s", "p90_ttft_s", "p99_ttft_s", "slo_attainment_token_weighted",
                       "slo_attainment_requests", "prefix_hit_rate", "kv_transfer_bytes", "num_unfinished", "utilization")


def metric_bounds(name: str) -> tuple[float, float]:
    """The range of a summary metric (:attr:`envs.metrics.table.Metric.bounds`): [0, 1] for shares,
    [0, inf) for the rest (times, bytes, counts).

    Raises:
        KeyError: ``name`` is not in :mod:`envs.metrics.table`.
    """
    return metric(name).bounds


def is_rate_axis(path: str) -> bool:
    """Axes that set the request rate: ``workload.rate_scale`` and named-workload parameters
    whose name mentions a rate or an arrival process (e.g. ``workload.params.session_arrivals``)."""
    if path == "workload.rate_scale":
        return True
    return path.startswith("workload.params.") and ("rate" in path or "arrivals" in path)
