"""Weights & Biases logging of sweep cells: one wandb run per cell, named like its run folder,
grouped by sweep, with the cell's resolved config and its summary metrics.

Modes (``--wandb``): ``offline`` (default of ``cpgym sweep``: runs are written under
``<out_dir>/wandb`` and can be uploaded later with ``wandb sync``; never touches the network),
``online`` (needs an account and ``wandb login``), ``disabled`` (no wandb import at all; tests).
"""

from __future__ import annotations

import json
from pathlib import Path

WANDB_MODES = ("offline", "online", "disabled")


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
            self.dir.mkdir(parents=True, exist_ok=True)
            run = wandb.init(mode=self.mode, project=self.project, group=self.group, name=run_dir.name, id=cell.key,
                             dir=str(self.dir), config=config, job_type="sweep-cell", reinit="finish_previous",
                             settings=wandb.Settings(silent=True, console="off"))
            metrics = {k: v for k, v in summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
            run.summary.update(metrics)
            run.finish()
            self.num_logged += 1
            return True
        except Exception as exc:  # logging must not lose results
            print(f"warning: wandb logging of {run_dir.name} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            return False


__all__ = ["WandbLogger", "WANDB_MODES"]
