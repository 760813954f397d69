"""Where a sweep's cells run: in this process, on a local process pool (workers that die with
the driver; a cell whose worker dies fails alone) or on Ray. Each backend is an iterator of the
result dicts of :func:`experiments.sweep.execute.execute_cell`, in finishing order."""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from experiments.spec import Cell
from experiments.sweep.execute import execute_cell
from experiments.sweep.manifest import TMP_DIR

BACKENDS = ("local", "ray")


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
    that had (their ``.tmp`` folder exists, see :func:`~experiments.sweep.execute.execute_cell`) run
    again one at a time, each in its own pool, and the one whose worker dies again fails with that error. (A cell in two
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



def start_stream(backend: str, todo: list[Cell], out: Path, n_jobs: int, ray_address: str | None) -> Iterator[dict]:
    """The results of ``todo`` from ``backend`` (``jobs == 1`` on the local backend: in this process)."""
    if backend == "ray":
        return _run_ray(todo, str(out), n_jobs, ray_address)
    if n_jobs == 1:
        return _run_inline(todo, str(out), n_jobs)
    return _run_local(todo, str(out), n_jobs)

