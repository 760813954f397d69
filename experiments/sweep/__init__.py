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
folder written before keys left out file paths, its ``legacy_key``:
:func:`~experiments.sweep.manifest.match_finished`). A cell is written completely under
``.tmp/<key>/`` and then moved into place by one ``os.rename`` (atomic on one file system), so
an interrupted cell never looks finished; the manifest is rewritten atomically (tmp + rename)
after every cell and rebuilt from the run folders on every start, so a lost or stale manifest
loses nothing. A cell that raises is recorded as ``failed`` with its error and traceback; the
other cells go on (also when a cell's worker process dies:
:func:`experiments.sweep.backends._run_local`), and failed cells are retried on the next run.

Only the driver writes ``manifest.json`` and talks to wandb; cells write only their own folders.
With Ray on several machines ``out_dir`` must be on a file system all of them share.

Interrupts: Ctrl-C stops the pool's workers (they ignore SIGINT themselves) and ends with one
line and exit status 130 (``cpgym sweep``); a killed driver (SIGKILL, OOM) takes its workers
with it (``PR_SET_PDEATHSIG`` on Linux, a parent-pid watch elsewhere), so no cell runs without
a driver to record it. One driver per folder (``.lock``). A resume runs each unfinished cell
once and logs to wandb the finished cells that an earlier driver never logged.

Side effects: wandb files stay under ``out_dir/wandb`` (:mod:`policies.common.wandb_log`); a local
Ray instance keeps its session folder under ``out_dir/.ray`` (:func:`experiments.sweep.backends._ray_temp_dir`) and its
auth token in the environment of this process only.

The package is split along its concerns: :mod:`~experiments.sweep.manifest` (the output folder:
file names, manifest, finished cells, resume bookkeeping, the driver's lock),
:mod:`~experiments.sweep.execute` (running one cell and writing its run folder),
:mod:`~experiments.sweep.backends` (where cells run: inline, local process pool, Ray) and
:mod:`~experiments.sweep.run` (the driver). Expanding a spec into cells and their keys is
:mod:`experiments.spec.cells`. The public names are re-exported here.
"""

from experiments.sweep.backends import BACKENDS
from experiments.sweep.execute import MAX_FOLDER_NAME_BYTES, cell_folder_name, execute_cell
from experiments.sweep.manifest import (
    CELL_FILE,
    MANIFEST,
    TMP_DIR,
    cell_code_fingerprint,
    finished_cells,
    manifest_cell_keys,
    match_finished,
    outdated_cells,
    scan_finished,
    write_json_atomic,
)
from experiments.sweep.run import SweepOutcome, check_sweep_target, default_out_dir, run_sweep

__all__ = ["run_sweep", "check_sweep_target", "outdated_cells", "cell_code_fingerprint", "execute_cell", "scan_finished",
           "match_finished", "SweepOutcome", "write_json_atomic", "default_out_dir", "BACKENDS", "MANIFEST", "CELL_FILE",
           "TMP_DIR", "MAX_FOLDER_NAME_BYTES", "cell_folder_name", "finished_cells", "manifest_cell_keys"]
