"""The sweep driver: checks the target folder, resolves the cells, skips the finished ones, runs
the rest on a backend and records each result in the manifest (and wandb) as it arrives."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from envs.progress import Progress, progress_mode
from experiments.spec import ExperimentSpec
from experiments.sweep.backends import BACKENDS, start_stream
from experiments.sweep.manifest import (
    MANIFEST,
    foreign_entries,
    initial_entries,
    lock_out_dir,
    match_finished,
    outdated_cells,
    read_manifest,
    write_json_atomic,
)
from policies.common.wandb_log import WandbLogger


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
            (:func:`~experiments.sweep.manifest.outdated_cells`): reused as they are (the code is not part of the cell key).
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



def default_out_dir(spec: ExperimentSpec) -> Path:
    """``runs/sweeps/<spec name>`` under the current directory."""
    return Path("runs") / "sweeps" / spec.name



def check_sweep_target(spec: ExperimentSpec, out_dir: str | Path | None, backend: str, jobs: int | None) -> None:
    """What :func:`run_sweep` refuses before it runs anything, checked without writing anything (so
    that a caller can check before it writes into ``out_dir``, e.g. ``provenance.json``).

    Raises:
        ValueError: an unknown backend, ``--backend ray`` without Ray installed, jobs < 1, an
            ``out_dir`` holding a different sweep, or one holding files that are not a sweep's
            (:func:`~experiments.sweep.manifest.foreign_entries`).
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
    read_manifest(out / MANIFEST, spec.name)
    foreign = foreign_entries(out)
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise ValueError(f"{out} holds files that are not a sweep's ({shown}); choose a new or empty --out "
                         f"(a sweep writes {MANIFEST}, sweep.json, provenance.json and one folder per cell there)")



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
    lock = lock_out_dir(out)
    cells = spec.resolve()
    by_key = {c.key: c for c in cells}
    manifest_path = out / MANIFEST
    finished, legacy = match_finished(cells, out)
    entries = initial_entries(cells, read_manifest(manifest_path, spec.name), finished, legacy)

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
    stream = start_stream(backend, todo, out, n_jobs, ray_address)
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

