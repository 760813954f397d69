"""Resumable sweeps: run every cell of an :class:`~experiments.spec.ExperimentSpec` on a local
process pool or on Ray, skipping cells that already finished.

Output layout (``out_dir``)::

    sweep.json                      the spec (file text) and the resolved cell list
    manifest.json                   cell key -> status (done / failed), run folder, error, wall time
    {workload}[-{grid values}]__{policy}__{seed}__{time}/   one folder per finished cell (cell_folder_name,
                                    e.g. mixed-default-10rps-cache_capacity_scale=0.5__least-work__0__1796044908):
        requests.parquet, summary.json, config.json   (baselines.runner.write_run)
        cell.json                   cell key, axes, resolved config (written last)
        extras.json                 KV-transfer totals, final composition, any timelines
    .tmp/<key>/                     a cell in progress (never counted as finished)

Resumability: a cell is finished iff a run folder holds a ``cell.json`` with its key (or, for a
folder written before keys left out file paths, its ``legacy_key``: :func:`match_finished`). A cell is
written completely under ``.tmp/<key>/`` and then moved into place by one ``os.rename`` (atomic on
one file system), so an interrupted cell never looks finished; the manifest is rewritten
atomically (tmp + rename) after every cell and rebuilt from the run folders on every start, so a
lost or stale manifest loses nothing. A cell that raises is recorded as ``failed`` with its error
and traceback; the other cells go on (also when a cell's worker process dies: :func:`_run_local`),
and failed cells are retried on the next run.

Only the driver writes ``manifest.json`` and talks to wandb; cells write only their own folders.
With Ray on several machines ``out_dir`` must be on a file system all of them share.

Interrupts: Ctrl-C stops the pool's workers (they ignore SIGINT themselves) and ends with one
line and exit status 130 (``cpgym sweep``); a killed driver (SIGKILL, OOM) takes its workers
with it (``PR_SET_PDEATHSIG`` on Linux, a parent-pid watch elsewhere), so no cell runs without
a driver to record it. One driver per folder (``.lock``). A resume runs each unfinished cell
once and logs to wandb the finished cells that an earlier driver never logged.

Side effects: wandb files stay under ``out_dir/wandb`` (:mod:`policies.common.wandb_log`); a local
Ray instance keeps its session folder under ``out_dir/.ray`` (:func:`_ray_temp_dir`) and its
auth token in the environment of this process only.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from baselines.capacity import code_fingerprint
from baselines.registry import get_policy
from baselines.runner import config_dict, run_policy, write_run
from envs.metrics import summarize
from envs.progress import Progress, progress_mode
from experiments.common import write_text_atomic
from experiments.spec import Cell, ExperimentSpec
from policies.common.wandb_log import WandbLogger

MANIFEST = "manifest.json"
CELL_FILE = "cell.json"
TMP_DIR = ".tmp"
BACKENDS = ("local", "ray")


def _json_safe(x):
    import math

    import numpy as np

    if isinstance(x, dict):
        return {str(k): _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating, float)):
        return float(x) if math.isfinite(float(x)) else None
    if isinstance(x, np.ndarray):
        return _json_safe(x.tolist())
    if x is None or isinstance(x, (bool, int, str)):
        return x
    return str(x)


def write_json_atomic(path: Path, obj) -> None:
    """Writes JSON to ``path`` atomically (:func:`experiments.common.write_text_atomic`: readers never
    see half a file)."""
    write_text_atomic(path, json.dumps(_json_safe(obj), indent=2) + "\n")


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
        keep = ("mean_ttft_s", "p90_ttft_s", "slo_attainment_token_weighted", "prefix_hit_rate", "num_requests")
        return {"key": cell.key, "status": "done", "run_dir": final.name, "wall_s": time.perf_counter() - t0,
                "error": None, "traceback": None, "summary": {k: summary.get(k) for k in keep}}
    except Exception as exc:  # a failed cell is reported and does not stop the others
        shutil.rmtree(tmp, ignore_errors=True)
        return {"key": cell.key, "status": "failed", "run_dir": None, "wall_s": time.perf_counter() - t0,
                "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(), "summary": None}


#: The sources a cell's numbers depend on besides its key (simulator, policies, the run path).
CELL_CODE = ("envs", "baselines", "baselines/runner.py")


def cell_code_fingerprint() -> str:
    """SHA-256 of the sources of :data:`CELL_CODE` (``baselines.capacity.code_fingerprint``),
    recorded in each ``cell.json`` as ``code_sha256``: not part of the cell key (a resumed sweep
    reuses its cells), but compared on resume (:func:`outdated_cells`)."""
    return code_fingerprint(CELL_CODE)


def outdated_cells(out_dir: str | Path, keys) -> list[str]:
    """Run folders under ``out_dir`` of the finished cells among ``keys`` that other code computed
    (their ``cell.json`` records another ``code_sha256``; a cell from before that field counts as
    current), in folder order."""
    code = cell_code_fingerprint()
    keys = set(keys)
    return [d.name for d, doc in finished_cells(out_dir) if doc["key"] in keys and doc.get("code_sha256") not in (None, code)]


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


def _manifest_cells(out_dir: str | Path) -> dict | None:
    """The ``cells`` object of ``out_dir``'s ``manifest.json``, or ``None`` when it has no readable
    manifest of that shape (a sweep rebuilds it from the run folders)."""
    try:
        doc = json.loads((Path(out_dir) / MANIFEST).read_text())
    except (ValueError, OSError):
        return None
    cells = (doc.get("cells") or {}) if isinstance(doc, dict) else None
    return cells if isinstance(cells, dict) else None


def _manifest_legacy_keys(cells: dict) -> dict[str, str]:
    """``{cell key: legacy key}`` of the manifest ``cells`` found under a legacy key (:func:`match_finished`)."""
    return {k: e["legacy_key"] for k, e in cells.items() if isinstance(e, dict) and isinstance(e.get("legacy_key"), str)}


def manifest_cell_keys(out_dir: str | Path) -> set[str] | None:
    """The cell keys that ``out_dir``'s ``manifest.json`` lists (``cpgym sweep`` rewrites it with
    the cells of the spec it runs), or ``None`` when it has no readable manifest. A spec edited
    and run again into the same ``--out`` leaves the old cells' folders there; they are not cells
    of the sweep any more (``cpgym report`` and the sweep analyses leave them out). A cell found
    under its legacy key (:func:`match_finished`) is listed by that key too: its ``cell.json`` holds it."""
    cells = _manifest_cells(out_dir)
    if cells is None:
        return None
    return set(cells) | set(_manifest_legacy_keys(cells).values())


def finished_cells(out_dir: str | Path, strict: bool = False, current_only: bool = False) -> Iterator[tuple[Path, dict]]:
    """``(run folder, cell document)`` of every finished cell directly under ``out_dir``, in
    folder-name order: the one reader of a sweep's output folder (``cell.json`` is written last,
    so its presence marks a finished cell; dot-folders are cells still running).

    A ``cell.json`` that is not a JSON object with a ``key`` string is skipped (a stray file, not a cell
    of this harness; the sweep then runs that cell again), or with ``strict`` (analyses of the
    results, which must not silently drop a run) an error. With ``current_only`` (analyses) the
    cells that the folder's manifest no longer lists (:func:`manifest_cell_keys`) are left out.
    A missing ``out_dir`` yields nothing.

    Raises:
        ValueError: with ``strict``, naming the ``cell.json`` that is not a cell document.
    """
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        return
    keys = manifest_cell_keys(out_dir) if current_only else None
    for d in sorted(out_dir.iterdir()):
        if d.name.startswith(".") or not d.is_dir():
            continue
        f = d / CELL_FILE
        if not f.is_file():
            continue
        try:
            doc = json.loads(f.read_text())
        except (ValueError, OSError) as exc:
            if strict:
                raise ValueError(f"{f}: not a readable JSON cell document ({exc})") from None
            continue
        if isinstance(doc, dict) and isinstance(doc.get("key"), str) and doc["key"]:
            if keys is None or doc["key"] in keys:
                yield d, doc
        elif strict:
            raise ValueError(f"{f}: expected a JSON object with a \"key\" string (the cell document `cpgym sweep` writes)")


def scan_finished(out_dir: Path) -> dict[str, str]:
    """``{cell key: run folder name}`` of the finished cells under ``out_dir``
    (:func:`finished_cells`)."""
    return {doc["key"]: d.name for d, doc in finished_cells(out_dir)}


def match_finished(cells: list[Cell], out_dir: str | Path) -> tuple[dict[str, str], dict[str, str]]:
    """The finished cells under ``out_dir`` as the cells of a spec see them: ``({key: run folder
    name}, {cell key: legacy key})``. A folder written before cell keys left out file paths holds
    the cell's :attr:`~experiments.spec.model.Cell.legacy_key` (hashed with this checkout's
    absolute paths); it counts as that cell, under the cell's key, and the second mapping says
    which cells were found so. The other keys of the first mapping are finished cells of no cell
    (stale folders).

    A folder's manifest remembers the legacy key under which a resume at the old location found a
    cell (``legacy_key`` of its entry), so the folder moved later (another checkout or traces
    folder: other absolute paths, another ``Cell.legacy_key``) still counts as that cell."""
    finished = scan_finished(Path(out_dir))
    recorded = _manifest_legacy_keys(_manifest_cells(out_dir) or {})
    legacy: dict[str, str] = {}
    for c in cells:
        if c.key in finished:
            continue
        for old in (c.legacy_key, recorded.get(c.key)):
            if old is not None and old in finished:
                finished[c.key] = finished.pop(old)
                legacy[c.key] = old
                break
    return finished, legacy


@dataclass
class SweepOutcome:
    """What a sweep did.

    Args:
        out_dir: output folder.
        num_cells: cells in the spec.
        num_skipped: cells already finished before this run (not recomputed).
        num_run: cells executed in this run (done + failed).
        num_done / num_failed: of those.
        wall_s: wall time of this run [s].
        failures: ``[(key, error)]``.
        stale_dirs: run folders in ``out_dir`` holding finished cells that are not cells of the spec
            (an earlier version of it run into the same folder): neither reused nor removed, and left
            out by ``cpgym report`` (the manifest lists the spec's cells only).
        outdated_dirs: run folders of the reused cells that other simulator / policy code computed
            (:func:`outdated_cells`): reused as they are (the code is not part of the cell key).
    """

    out_dir: Path
    num_cells: int
    num_skipped: int = 0
    num_run: int = 0
    num_done: int = 0
    num_failed: int = 0
    wall_s: float = 0.0
    failures: list[tuple[str, str]] = field(default_factory=list)
    stale_dirs: list[str] = field(default_factory=list)
    outdated_dirs: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------------------ backends
def _run_inline(cells: list[Cell], out_dir: str, jobs: int) -> Iterator[dict]:
    for c in cells:
        yield execute_cell(c, out_dir)


def _die_with_parent(parent_pid: int) -> None:
    """Makes this process end when ``parent_pid`` (the sweep driver) ends, even by SIGKILL.

    Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (man 2 prctl) through ctypes; elsewhere a daemon
    thread polls ``os.getppid()`` every 0.5 s. Either way a worker whose driver is already gone
    exits at once (the driver may die between the fork and this call).
    """
    import ctypes
    import signal
    import threading

    armed = False
    if sys.platform.startswith("linux"):
        try:
            pr_set_pdeathsig = 1  # <linux/prctl.h>
            armed = ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
    if os.getppid() != parent_pid:
        os._exit(1)
    if not armed:
        def _watch() -> None:
            while os.getppid() == parent_pid:
                time.sleep(0.5)
            os._exit(1)

        threading.Thread(target=_watch, name="cpgym-driver-watch", daemon=True).start()


def _pool_worker_init(driver_pid: int) -> None:
    """Set-up of a local pool worker: it ignores SIGINT (Ctrl-C in a terminal reaches the whole
    process group; the driver alone handles it and stops the workers) and dies with the driver."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(driver_pid)


def _stop_workers(ex, grace_s: float = 2.0) -> None:
    """Terminates the worker processes of a ``ProcessPoolExecutor`` (cells in flight are lost:
    they never count as finished and run again on resume). ``terminate_workers`` is public from
    Python 3.14; before it the executor's ``_processes`` map (pid -> Process, stable since 3.2)."""
    terminate = getattr(ex, "terminate_workers", None)
    if terminate is not None:
        terminate()
        return
    procs = list((getattr(ex, "_processes", None) or {}).values())
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + grace_s
    for p in procs:
        p.join(max(deadline - time.monotonic(), 0.0))
        if p.is_alive():
            p.kill()
            p.join(1.0)


def _pool_results(cells: list[Cell], out_dir: str, jobs: int) -> Iterator[tuple[Cell, dict | None]]:
    """``(cell, result)`` of each cell run on a fresh ``concurrent.futures`` process pool (spawned
    workers: the driver may hold threads); ``result`` is ``None`` for a cell that the pool could not
    finish because a worker process died (the pool is then broken: every cell still in it ends so).

    Interrupted (Ctrl-C, an exception in the consumer, the generator closed early), it terminates
    its workers before returning; killed outright (SIGKILL), the workers die with it
    (:func:`_pool_worker_init`).
    """
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    for c in cells:  # a cell's .tmp folder marks it started (execute_cell): none is left from an earlier driver
        shutil.rmtree(Path(out_dir) / TMP_DIR / c.key, ignore_errors=True)
    ex = ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn"),
                             initializer=_pool_worker_init, initargs=(os.getpid(),))
    completed = False
    try:
        futures = {ex.submit(execute_cell, c, out_dir): c for c in cells}
        for fut in as_completed(futures):
            c = futures[fut]
            try:
                res = fut.result()
            except BrokenProcessPool:  # a worker process died (this cell's or another's)
                res = None
            except Exception as exc:  # e.g. a result that cannot be sent back
                res = {"key": c.key, "status": "failed", "run_dir": None, "wall_s": 0.0,
                       "error": f"{type(exc).__name__}: {exc}", "traceback": None, "summary": None}
            yield c, res
        completed = True
    finally:
        if not completed:
            _stop_workers(ex)
        ex.shutdown(wait=True, cancel_futures=True)


def _run_local(cells: list[Cell], out_dir: str, jobs: int) -> Iterator[dict]:
    """A local process pool of ``jobs`` workers; a cell whose worker process dies (killed by the
    out-of-memory killer, a crash in native code, ``os._exit``) fails alone.

    A dead worker breaks a ``concurrent.futures`` pool: every cell still queued or running in it
    ends with ``BrokenProcessPool``. The cells that had not started go on in a fresh pool; those
    that had (their ``.tmp`` folder exists, see :func:`execute_cell`) run again one at a time, each
    in its own pool, and the one whose worker dies again fails with that error. (A cell in two
    broken pools runs alone too, so a sweep always ends.) So no cell ever runs without a driver
    that records it, and one crashing cell fails only itself.
    """
    pending, alone = list(cells), []
    broken_pools: dict[str, int] = {}
    while pending or alone:
        isolated = bool(alone)
        batch = [alone.pop(0)] if isolated else pending
        pending = [] if not isolated else pending
        gen = _pool_results(batch, out_dir, 1 if isolated else jobs)
        try:
            for c, res in gen:
                if res is not None:
                    yield res
                    continue
                tmp = Path(out_dir) / TMP_DIR / c.key
                started = tmp.exists()
                shutil.rmtree(tmp, ignore_errors=True)
                broken_pools[c.key] = broken_pools.get(c.key, 0) + 1
                if isolated:
                    yield {"key": c.key, "status": "failed", "run_dir": None, "wall_s": 0.0,
                           "error": "WorkerDied: the worker process running this cell ended abruptly (killed by a "
                                    "signal, e.g. the out-of-memory killer, or a crash in native code)",
                           "traceback": None, "summary": None}
                elif started or broken_pools[c.key] >= 2:
                    alone.append(c)
                else:
                    pending.append(c)
        finally:
            gen.close()


# AF_UNIX socket paths are limited to 107 bytes (Linux sun_path); Ray puts its sockets at
# <temp dir>/session_<date>_<time>_<pid>/sockets/<name> (about 75 bytes below the temp dir).
_RAY_SOCKET_TAIL_CHARS = 75
_UNIX_PATH_MAX = 107


def _ray_temp_dir(out_dir: str) -> tuple[Path, bool]:
    """Where a local Ray instance keeps its session folder (logs, sockets, object spill):
    ``OUT/.ray`` when that path is short enough for Ray's Unix sockets, else a fresh temporary
    folder (under ``$TMPDIR``, or ``/tmp`` when that is too long as well) that the sweep removes
    at the end. Returns ``(folder, remove_at_end)``."""
    import tempfile

    def fits(p: Path) -> bool:
        return len(str(p)) + _RAY_SOCKET_TAIL_CHARS <= _UNIX_PATH_MAX

    inside = Path(out_dir).resolve() / ".ray"
    if fits(inside):
        inside.mkdir(parents=True, exist_ok=True)
        return inside, False
    base = tempfile.gettempdir() if fits(Path(tempfile.gettempdir()) / "cpgym-ray-xxxxxxxx") else "/tmp"
    return Path(tempfile.mkdtemp(prefix="cpgym-ray-", dir=base)), True


def _run_ray(cells: list[Cell], out_dir: str, jobs: int, address: str | None = None) -> Iterator[dict]:
    """Ray tasks (one CPU each). Starts a local instance (``num_cpus=jobs``, no dashboard) unless
    Ray is already initialised or ``address`` names a cluster.

    A local instance keeps its files with the sweep: its session folder under ``OUT/.ray``
    (:func:`_ray_temp_dir`), and its authentication token (Ray >= 2.5x enables token auth for
    local clusters and would otherwise save a token to ``~/.ray/auth_token``) in the environment
    of this process and the instance's processes only, for the sweep's duration.
    """
    import shutil as _shutil

    import ray

    started = False
    temp_dir, remove_temp = None, False
    env_before = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    if not ray.is_initialized():
        if address:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        else:
            import secrets

            temp_dir, remove_temp = _ray_temp_dir(out_dir)
            if env_before["RAY_AUTH_MODE"] is None and env_before["RAY_AUTH_TOKEN"] is None:
                os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)  # Ray enables token mode itself
            ray.init(num_cpus=jobs, include_dashboard=False, log_to_driver=False, _temp_dir=str(temp_dir))
        started = True
    pending: dict = {}
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(execute_cell)
        pending = {remote.remote(c, out_dir): c for c in cells}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                c = pending.pop(ref)
                try:
                    yield ray.get(ref)
                except Exception as exc:  # the task's worker died
                    yield {"key": c.key, "status": "failed", "run_dir": None, "wall_s": 0.0,
                           "error": f"{type(exc).__name__}: {exc}", "traceback": None, "summary": None}
    finally:
        for ref in list(pending):  # interrupted: cancel what has not finished
            ray.cancel(ref, force=True)
        if started:
            ray.shutdown()
        for k, v in env_before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if remove_temp:
            _shutil.rmtree(temp_dir, ignore_errors=True)


# ------------------------------------------------------------------------------------ driver
def default_out_dir(spec: ExperimentSpec) -> Path:
    """``runs/sweeps/<spec name>`` under the current directory."""
    return Path("runs") / "sweeps" / spec.name


def _lock_out_dir(out: Path):
    """Takes an exclusive lock on ``out/.lock`` for this driver's lifetime (released by the OS when
    the driver ends, however it ends), so two drivers never run cells of one folder at once.

    Returns:
        the open lock file (keep it open), or ``None`` where ``fcntl`` is missing (Windows).

    Raises:
        ValueError: another driver holds the folder.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return None
    fh = open(out / ".lock", "a+")
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.seek(0)
        holder = fh.read().strip() or "?"
        fh.close()
        raise ValueError(f"{out} is in use by another sweep driver (pid {holder}); wait for it or stop it first") from None
    fh.seek(0)
    fh.truncate()
    fh.write(f"{os.getpid()}\n")
    fh.flush()
    return fh


def _read_manifest(path: Path, sweep: str) -> dict:
    """The previous manifest (``{}`` if missing or unreadable, e.g. not a JSON object: it is rebuilt
    from the run folders); its ``cells`` entries that are not objects are left out.

    Raises:
        ValueError: it belongs to another sweep.
    """
    if not path.is_file():
        return {}
    try:
        old = json.loads(path.read_text())
    except ValueError:
        return {}
    if not isinstance(old, dict):
        return {}
    cells = old.get("cells")
    old["cells"] = {k: e for k, e in cells.items() if isinstance(e, dict)} if isinstance(cells, dict) else {}
    if old.get("sweep") not in (None, sweep):
        raise ValueError(f"{path.parent} holds sweep {old.get('sweep')!r}, not {sweep!r}; choose another --out")
    return old


def _initial_entries(cells: list[Cell], old: dict, finished: dict[str, str],
                     legacy: dict[str, str] | None = None) -> dict[str, dict]:
    """Manifest entries at start: finished cells from the run folders (the source of truth), failed
    ones from the old manifest (retried), the rest pending; wandb bookkeeping is carried over. A
    cell found under its legacy key (``legacy``, :func:`match_finished`) records it as
    ``legacy_key`` (what its ``cell.json`` holds, :func:`manifest_cell_keys`)."""
    entries: dict[str, dict] = {}
    old_cells = old.get("cells") or {}
    for c in cells:
        prev = old_cells.get(c.key) or old_cells.get(c.legacy_key) or {}
        base = {"axes": dict(c.axes), "policy": c.policy, "seed": c.config.seed, "workload": c.workload.label}
        if c.key in finished:
            logged = prev.get("wandb_logged", False) and prev.get("run_dir") == finished[c.key]
            entries[c.key] = {**base, "status": "done", "run_dir": finished[c.key], "error": None,
                              "wall_s": prev.get("wall_s"), "wandb_logged": bool(logged)}
            if legacy and c.key in legacy:
                entries[c.key]["legacy_key"] = legacy[c.key]
        elif prev.get("status") == "failed":
            entries[c.key] = {**base, "status": "failed", "run_dir": None, "error": prev.get("error"),
                              "wall_s": prev.get("wall_s")}
        else:
            entries[c.key] = {**base, "status": "pending", "run_dir": None, "error": None, "wall_s": None}
    return entries


def _start_stream(backend: str, todo: list[Cell], out: Path, n_jobs: int, ray_address: str | None) -> Iterator[dict]:
    if backend == "ray":
        return _run_ray(todo, str(out), n_jobs, ray_address)
    if n_jobs == 1:
        return _run_inline(todo, str(out), n_jobs)
    return _run_local(todo, str(out), n_jobs)


def check_sweep_target(spec: ExperimentSpec, out_dir: str | Path | None, backend: str, jobs: int | None) -> None:
    """What :func:`run_sweep` refuses before it runs anything, checked without writing anything (so
    that a caller can check before it writes into ``out_dir``, e.g. ``provenance.json``).

    Raises:
        ValueError: an unknown backend, ``--backend ray`` without Ray installed, jobs < 1, an
            ``out_dir`` holding a different sweep, or one holding files that are not a sweep's
            (:func:`_foreign_entries`).
    """
    if backend not in BACKENDS:
        raise ValueError(f"--backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if jobs is not None and jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {jobs}")
    if backend == "ray":
        try:
            import ray  # noqa: F401
        except ImportError as exc:
            raise ValueError(f"--backend ray needs Ray, which cannot be imported ({exc}); install it with "
                             "pip install 'cpgym[ray]' (or 'ray[default]>=2.9'), or use --backend local") from None
    out = Path(out_dir) if out_dir is not None else default_out_dir(spec)
    _read_manifest(out / MANIFEST, spec.name)
    foreign = _foreign_entries(out)
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise ValueError(f"{out} holds files that are not a sweep's ({shown}); choose a new or empty --out "
                         f"(a sweep writes {MANIFEST}, sweep.json, provenance.json and one folder per cell there)")


#: What a sweep writes directly in its folder besides the cell folders (``report``: ``cpgym report``).
_SWEEP_ENTRIES = (MANIFEST, "sweep.json", "provenance.json", TMP_DIR, "wandb", "report")


def _foreign_entries(out: Path) -> list[str]:
    """Names in ``out`` that no sweep wrote, when ``out`` is not a sweep's folder (no manifest.json,
    no sweep.json): a sweep there would overwrite e.g. another command's ``provenance.json`` and mix
    its cells with whatever runs the folder holds. Hidden names (``.lock``, ``.ray``, temporary
    files) and cell folders (a ``cell.json``: a sweep whose manifest was lost) are a sweep's."""
    if not out.is_dir() or (out / MANIFEST).exists() or (out / "sweep.json").exists():
        return []
    return sorted(p.name for p in out.iterdir()
                  if not (p.name in _SWEEP_ENTRIES or p.name.startswith(".") or (p / CELL_FILE).is_file()))


def run_sweep(spec: ExperimentSpec, out_dir: str | Path | None = None, backend: str = "local", jobs: int | None = None,
              wandb_mode: str = "disabled", wandb_project: str = "cpgym", progress: bool | str | None = None,
              ray_address: str | None = None, on_result: Callable[[dict], None] | None = None) -> SweepOutcome:
    """Runs the unfinished cells of ``spec`` and records them.

    Args:
        out_dir: output folder (default :func:`default_out_dir`); created if needed.
        backend: ``"local"`` (process pool; ``jobs == 1`` runs in this process) or ``"ray"``.
        jobs: parallel cells (default: CPU count, at most the number of cells to run).
        wandb_mode: ``"disabled"``, ``"offline"`` or ``"online"`` (one wandb run per cell, grouped by
            sweep). Finished cells not yet logged (e.g. by a driver that was killed) are logged first.
        progress: progress on stderr, see :func:`envs.progress.progress_mode` (default: a bar on
            a terminal, a line every 10 s otherwise; ``False`` = silent).
        ray_address: Ray cluster address; ``None`` starts a local instance.
        on_result: called with each cell's result dict as it arrives (tests).

    Returns:
        :class:`SweepOutcome`.

    Raises:
        ValueError: unknown backend, ``ray`` not installed, jobs < 1, an out_dir holding a different
            sweep, or an out_dir in use by another running driver.
        KeyboardInterrupt: passed on after the workers are stopped and the manifest is saved (cells
            in flight stay unfinished and run again on resume).
    """
    check_sweep_target(spec, out_dir, backend, jobs)

    mode = progress_mode(progress)
    t0 = time.perf_counter()
    out = Path(out_dir) if out_dir is not None else default_out_dir(spec)
    out.mkdir(parents=True, exist_ok=True)
    lock = _lock_out_dir(out)
    cells = spec.resolve()
    by_key = {c.key: c for c in cells}
    manifest_path = out / MANIFEST
    finished, legacy = match_finished(cells, out)
    entries = _initial_entries(cells, _read_manifest(manifest_path, spec.name), finished, legacy)

    def save() -> None:
        write_json_atomic(manifest_path, {"sweep": spec.name, "spec_path": spec.path, "num_cells": len(cells),
                                          "updated_unix_s": time.time(), "cells": entries})

    spec_text = Path(spec.path).read_text() if Path(spec.path).is_file() else ""
    write_json_atomic(out / "sweep.json", {"name": spec.name, "description": spec.description, "spec_path": spec.path,
                                           "spec_text": spec_text, "cells": [c.to_dict() for c in cells]})
    todo = [c for c in cells if c.key not in finished]
    outcome = SweepOutcome(out_dir=out, num_cells=len(cells), num_skipped=len(cells) - len(todo),
                           stale_dirs=sorted(d for k, d in finished.items() if k not in by_key),
                           outdated_dirs=outdated_cells(out, [*by_key, *legacy.values()]))
    logger = WandbLogger(wandb_mode, project=wandb_project, group=spec.name, dir=out)
    if logger.enabled:  # cells finished by an earlier driver that never logged them (killed, or wandb was off)
        for key, e in entries.items():
            if e["status"] == "done" and not e["wandb_logged"]:
                e["wandb_logged"] = logger.log_cell(by_key[key], out / e["run_dir"])
    save()
    if not todo:
        outcome.wall_s = time.perf_counter() - t0
        if lock is not None:
            lock.close()
        return outcome
    n_jobs = min(jobs or os.cpu_count() or 1, len(todo))
    stream = _start_stream(backend, todo, out, n_jobs, ray_address)
    bar = Progress(len(cells), spec.name, "cell", mode=mode, initial=outcome.num_skipped)
    try:
        for res in stream:
            key = res["key"]
            e = entries[key]
            e.update(status=res["status"], run_dir=res["run_dir"], error=res["error"], wall_s=res["wall_s"])
            outcome.num_run += 1
            if res["status"] == "done":
                outcome.num_done += 1
                e["wandb_logged"] = logger.log_cell(by_key[key], out / res["run_dir"]) if logger.enabled else False
            else:
                outcome.num_failed += 1
                outcome.failures.append((key, res["error"]))
                e["traceback"] = res.get("traceback")
                bar.write(f"cell {key} ({by_key[key].policy}, seed {by_key[key].config.seed}, "
                          f"{dict(by_key[key].axes)}) failed: {res['error']}")
            save()
            bar.set_postfix(done=outcome.num_done, failed=outcome.num_failed)
            bar.update(1)
            if on_result is not None:
                on_result(res)
    finally:
        bar.close()
        stream.close()
        save()
        if lock is not None:
            lock.close()
    outcome.wall_s = time.perf_counter() - t0
    return outcome


__all__ = ["run_sweep", "check_sweep_target", "outdated_cells", "cell_code_fingerprint", "execute_cell", "scan_finished",
           "match_finished", "SweepOutcome", "write_json_atomic", "default_out_dir", "BACKENDS"]
