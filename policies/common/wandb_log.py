"""Weights & Biases logging of sweep cells: one wandb run per cell, named like its run folder,
grouped by sweep, with the cell's resolved config and its summary metrics.

Modes (``--wandb``): ``offline`` (default of ``cpgym sweep``: runs are written under
``<out_dir>/wandb`` and can be uploaded later with ``wandb sync``; never touches the network),
``online`` (needs an account and ``wandb login``), ``disabled`` (no wandb import at all; tests).

Where wandb writes (:func:`wandb_init`): run folders under ``<out_dir>/wandb`` (``dir=``); the
``wandb-core`` service's debug logs, which it otherwise puts in ``~/.cache/wandb/logs``, under
``<out_dir>/wandb/cache`` (``WANDB_CACHE_DIR``, set for the service's start only; the service
is one per process, so a second run folder in the same process shares the first one's service
logs). What cannot be moved: ``wandb login`` keeps its API key in ``~/.netrc`` and
``~/.config/wandb/settings`` (online mode only; offline never writes them).
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path

WANDB_MODES = ("offline", "online", "disabled")


@contextmanager
def _scoped_env(**values: str):
    """Sets environment variables for the duration of the block and restores them after (wandb
    starts its service process, which reads them, inside the block)."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def wandb_init(dir: str | Path, quiet: bool = False, **kwargs):
    """``wandb.init(dir=dir, **kwargs)`` that keeps wandb's files under ``dir`` (see the module
    docstring); ``dir`` is created. With ``quiet`` (``cpgym train --quiet``) wandb prints nothing
    (``wandb.Settings(silent=True)``; its banner went to stderr). Returns the wandb run."""
    import wandb

    if quiet:
        kwargs["settings"] = wandb.Settings(silent=True)
    d = Path(dir)
    (d / "wandb" / "cache").mkdir(parents=True, exist_ok=True)
    with _scoped_env(WANDB_CACHE_DIR=str((d / "wandb" / "cache").resolve())):
        return wandb.init(dir=str(d), **kwargs)


class WandbLogger:
    """Logs finished cells to wandb.

    Args:
        mode: one of :data:`WANDB_MODES`.
        project: wandb project.
        group: wandb group (the sweep name).
        dir: folder holding the ``wandb/`` run directories (the sweep's output folder).

    Raises:
        ValueError: on an unknown mode.
    """

    def __init__(self, mode: str = "offline", project: str = "cpgym", group: str | None = None, dir: str | Path = ".") -> None:
        if mode not in WANDB_MODES:
            raise ValueError(f"--wandb must be one of {', '.join(WANDB_MODES)}, got {mode!r}")
        self.mode = mode
        self.project = project
        self.group = group
        self.dir = Path(dir)
        self.num_logged = 0

    @property
    def enabled(self) -> bool:
        return self.mode != "disabled"

    def log_cell(self, cell, run_dir: str | Path) -> bool:
        """Logs one finished cell from its run folder (``summary.json`` and ``cell.json``).

        Returns:
            whether the cell was logged. A wandb failure is reported on stderr and never fails the
            sweep (results are on disk); the sweep retries the logging on its next start.
        """
        if not self.enabled:
            return False
        import sys

        run_dir = Path(run_dir)
        try:
            import wandb

            summary = json.loads((run_dir / "summary.json").read_text())
            cell_doc = json.loads((run_dir / "cell.json").read_text())
            config = {"cell_key": cell.key, "sweep": cell.sweep, "policy": cell.policy, "seed": cell.config.seed,
                      **{f"axis/{k}": v for k, v in cell_doc.get("axes", {}).items()},
                      "workload": cell_doc.get("workload"), "sim_config": cell_doc.get("sim_config"),
                      "policy_params": cell_doc.get("policy_params")}
            run = wandb_init(self.dir, mode=self.mode, project=self.project, group=self.group, name=run_dir.name,
                             id=cell.key, config=config, job_type="sweep-cell", reinit="finish_previous",
                             settings=wandb.Settings(silent=True, console="off"))
            metrics = {k: v for k, v in summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            run.summary.update(metrics)
            run.finish()
            self.num_logged += 1
            return True
        except Exception as exc:  # logging must not lose results
            print(f"warning: wandb logging of {run_dir.name} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            return False


__all__ = ["WandbLogger", "WANDB_MODES", "wandb_init"]
