"""Running one cell of a sweep: the simulation, its summary, and its run folder (written under
``.tmp/<key>/`` and moved into place by one rename, :mod:`experiments.sweep`), named by
:func:`cell_folder_name`."""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
import traceback
from dataclasses import replace
from pathlib import Path

from baselines.registry import get_policy
from baselines.runner import config_dict, run_policy, write_run
from envs.metrics import summarize
from envs.metrics.table import metric_names
from experiments.spec import Cell
from experiments.sweep.manifest import CELL_FILE, TMP_DIR, _json_safe, cell_code_fingerprint

#: The summary numbers of a cell's result dict (:func:`execute_cell`; names of :mod:`envs.metrics.table`).
RESULT_METRICS = metric_names("mean_ttft_s", "p90_ttft_s", "slo_attainment_token_weighted", "prefix_hit_rate", "num_requests")


def _policy_for(cell: Cell):
    """The registry's PolicySpec, with the cell's parameters applied when it has any (the registry
    declares them as ``PolicySpec.params`` and builds with ``PolicySpec.with_params(**kw)``)."""
    spec = get_policy(cell.policy)
    if not cell.policy_params:
        return spec
    params = dict(cell.policy_params)
    if hasattr(spec, "with_params"):
        return spec.with_params(**params)
    return replace(spec, params={**spec.params, **params})


def execute_cell(cell: Cell, out_dir: str) -> dict:
    """Runs one cell and moves its finished folder into ``out_dir``; never raises for a failing
    run (the error is returned). Top-level so that process pools and Ray can ship it.

    Returns:
        ``{"key", "status": "done"|"failed", "run_dir" (folder name), "wall_s", "error",
        "traceback", "summary"}``.
    """
    t0 = time.perf_counter()
    out = Path(out_dir)
    tmp = out / TMP_DIR / cell.key
    try:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        workload = cell.workload.build()

        result = run_policy(_policy_for(cell), workload, cell.config)
        summary = summarize(result)
        extras = result.extras
        summary.update({
            "workload_rate_rps": float(workload.mean_rate_rps),
            "kv_transfer_bytes": float(extras.get("kv_transfer_bytes", 0)),
            "num_kv_transfers": int(extras.get("num_kv_transfers", 0)),
            "num_workers_final": int(extras.get("num_workers", 0)),
            "cell_key": cell.key,
        })
        cell_doc = cell.to_dict()
        cell_doc["sim_config"] = config_dict(cell.config)
        run_tmp = write_run(tmp, result, summary, {"workload_source": workload.source, "cell_key": cell.key,
                                                   "sweep": cell.sweep, "axes": cell_doc["axes"],
                                                   "policy_params": cell_doc["policy_params"],
                                                   "workload_spec": cell_doc["workload"]})
        initial = [list(p) for p in replace(cell.config.pool, composition=_effective_composition(cell)).placements()]
        (run_tmp / "extras.json").write_text(
            json.dumps(_json_safe({"initial_composition": initial, **extras}), indent=2) + "\n")
        cell_doc["wall_s"] = time.perf_counter() - t0
        cell_doc["code_sha256"] = cell_code_fingerprint()
        (run_tmp / CELL_FILE).write_text(json.dumps(_json_safe(cell_doc), indent=2) + "\n")
        name = cell_folder_name(run_tmp.name, cell)
        final = out / name
        for i in range(2, 10_000):  # claim a free name atomically (rename fails onto a non-empty folder)
            try:
                if final.exists():
                    raise FileExistsError(final)
                os.rename(run_tmp, final)
                break
            except OSError as exc:  # only a taken name is retried: any other error (a name too long) fails the cell
                if not isinstance(exc, FileExistsError) and exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                final = out / f"{name}-{i}"
        else:
            raise FileExistsError(f"{out}: no free run folder name {name}[-N]")
        shutil.rmtree(tmp, ignore_errors=True)
        return {"key": cell.key, "status": "done", "run_dir": final.name, "wall_s": time.perf_counter() - t0,
                "error": None, "traceback": None, "summary": {k: summary.get(k) for k in RESULT_METRICS}}
    except Exception as exc:  # a failed cell is reported and does not stop the others
        shutil.rmtree(tmp, ignore_errors=True)
        return {"key": cell.key, "status": "failed", "run_dir": None, "wall_s": time.perf_counter() - t0,
                "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(), "summary": None}



# axes already in the run name (workload name with its rate, policy, seed)
_NAMED_AXES = ("policy", "seed", "workload.target_rps", "workload.name", "workload.trace")


#: Longest cell folder name [bytes]: file systems allow 255 per name; the rest leaves room for the
#: ``-N`` suffix of a name taken in the same second.
MAX_FOLDER_NAME_BYTES = 248


def cell_folder_name(run_name: str, cell: Cell, max_tag_chars: int = 100) -> str:
    """The run folder name of a cell: ``{workload}-{grid values}__{policy}__{seed}__{time}``, the
    CleanRL-style run name with the cell's other grid values added to the workload part (last
    path component of each axis, e.g. ``cache_capacity_scale=0.5``, ``beta=1``), so that the
    cells of one grid never get identical-looking folders. Characters awkward in file names
    become ``-``; a grid part longer than ``max_tag_chars`` (or than what keeps the name within
    :data:`MAX_FOLDER_NAME_BYTES`, e.g. beside a long trace name) is cut and ends in ``~`` and 8
    hex digits of the SHA-256 of the whole part, so cells that differ only in a late axis still
    get different names (``cell.json`` holds every axis)."""
    import hashlib
    import re

    parts = [f"{k.rsplit('.', 1)[-1]}={_axis_value_text(v)}" for k, v in cell.axes if k not in _NAMED_AXES]
    if not parts:
        return run_name
    tag = re.sub(r"[^A-Za-z0-9._+=,-]+", "-", "-".join(parts)).strip("-")
    workload, rest = run_name.split("__", 1)
    room = MAX_FOLDER_NAME_BYTES - len(f"{workload}-__{rest}".encode())
    limit = max(9, min(max_tag_chars, room))
    if len(tag) > limit:
        tag = f"{tag[:limit - 9]}~{hashlib.sha256(tag.encode()).hexdigest()[:8]}"
    return f"{workload}-{tag}__{rest}"


def _axis_value_text(v) -> str:
    """A grid value in a folder name: a tuple / list as its comma-joined items (``2,4``; the
    ``(2, 4)`` text became ``-2,-4-``, read as negative numbers), ``empty`` for none, a mapping as
    compact JSON, anything else as ``str``."""
    if isinstance(v, (tuple, list)):
        return ",".join(_axis_value_text(x) for x in v) if v else "empty"
    if isinstance(v, dict):
        return json.dumps(v, separators=(",", ":"))
    return str(v)


def _effective_composition(cell: Cell) -> str:
    try:
        spec = get_policy(cell.policy)
    except ValueError:
        return cell.config.pool.composition
    resolve = getattr(spec, "resolve_composition", None)
    comp = resolve(cell.config.pool) if resolve is not None else spec.composition
    return comp or cell.config.pool.composition

