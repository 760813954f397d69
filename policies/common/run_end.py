"""How a ``cpgym train routing|reconfig`` run ends when it does not finish: Ctrl-C or an error.

:class:`TrainingRun` wraps a training function's model building and ``model.learn``:

* **Ctrl-C** (``KeyboardInterrupt``): training stops at once (no final validation). The model at
  that moment is saved as ``interrupted_model.zip`` (:data:`INTERRUPTED_MODEL`; a reconfiguration
  run also saves its observation statistics as ``interrupted_vecnormalize.pkl``, the
  ``X_model.zip`` / ``X_vecnormalize.pkl`` pairing of ``best_`` and ``last_``, so ``--init-from``
  and ``cpgym evaluate --policy DIR/interrupted_model.zip`` take it), ``train_config.json``
  records ``"interrupted": {"timesteps", "total_timesteps", "model"}``, and
  :class:`TrainingInterrupted` (a ``KeyboardInterrupt``) is raised, naming what the folder holds.
  ``model.zip`` is *not* written: in a run folder it means "training finished" (RL Zoo saves the
  interrupted model under the final name; cpgym keeps the two apart so that a script or
  ``cpgym evaluate --policy DIR`` never mistakes a stopped run for a finished one;
  :func:`policies.common.checkpoint.resolve_checkpoint` names the files to use instead).
* **Any other exception**: it propagates unchanged after the cleanup below.

Either way, and after a finished run, the vector environment is closed (a ``SubprocVecEnv``
whose workers died of the same Ctrl-C is tolerated), the episode log and progress display are
closed, the SB3 CSV logger is closed and the wandb run is finished (``exit_code`` 130 after
Ctrl-C, 1 after an error, so wandb marks it failed).
"""

from __future__ import annotations

from pathlib import Path

from policies.common.checkpoint import vecnormalize_path

#: File name of the model saved when training is interrupted (Ctrl-C).
INTERRUPTED_MODEL = "interrupted_model.zip"


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C during ``cpgym train``: the run's folder keeps the model at that moment
    (``model_path``) and what was written before; ``str(exc)`` says where things are.

    Attributes:
        out_dir: the run folder.
        timesteps: environment steps done when it stopped.
        total_timesteps: the run's budget.
        model_path: the saved model (``out_dir / INTERRUPTED_MODEL``).
    """

    def __init__(self, out_dir: Path, timesteps: int, total_timesteps: int, model_path: Path) -> None:
        self.out_dir = Path(out_dir)
        self.timesteps = int(timesteps)
        self.total_timesteps = int(total_timesteps)
        self.model_path = Path(model_path)
        super().__init__(self.describe())

    def describe(self) -> str:
        """One line: the steps done and the files to use (no model.zip)."""
        out = self.out_dir
        parts = [f"training interrupted at {self.timesteps} of {self.total_timesteps} steps; no model.zip (the run "
                 f"did not finish); the model when it stopped: {self.model_path}"]
        if (out / "best_model.zip").is_file():
            parts.append(f"best validated so far: {out / 'best_model.zip'}")
        ckpts = sorted((out / "checkpoints").glob("*.zip")) if (out / "checkpoints").is_dir() else []
        if ckpts:
            parts.append(f"{len(ckpts)} periodic checkpoint(s) in {out / 'checkpoints'}")
        parts.append(f"logs in {out}")
        return "; ".join(parts)


class TrainingRun:
    """Context manager around a training run (see the module docstring). Set :attr:`model`
    once built (without it a Ctrl-C saves nothing), :attr:`run` once the wandb run exists, and
    add the callbacks to close (their ``close()``) to :attr:`closers`.

    Args:
        out: the run folder.
        meta: the ``train_config.json`` content; ``"interrupted"`` and ``"timesteps"`` are added on Ctrl-C.
        write_meta: writes ``meta`` to ``out / "train_config.json"`` (each trainer's JSON encoding).
        total_timesteps: the run's budget (for the message).
        venv: the training vector environment (closed on exit).
        vecnormalize: a ``VecNormalize`` whose statistics go with the interrupted model.
    """

    def __init__(self, out: Path, meta: dict, write_meta, total_timesteps: int, venv, vecnormalize=None) -> None:
        self.out = Path(out)
        self.meta = meta
        self.write_meta = write_meta
        self.total_timesteps = int(total_timesteps)
        self.venv = venv
        self.vecnormalize = vecnormalize
        self.model = None
        self.run = None
        self.closers: list = []

    def __enter__(self) -> TrainingRun:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        interrupted = None
        try:
            if exc_type is not None and issubclass(exc_type, KeyboardInterrupt) and self.model is not None:
                interrupted = self._save_interrupted()
        finally:
            self._release(None if exc_type is None else 130 if issubclass(exc_type, KeyboardInterrupt) else 1)
        if interrupted is not None:
            raise interrupted from None
        return False

    def _save_interrupted(self) -> TrainingInterrupted:
        path = self.out / INTERRUPTED_MODEL
        self.model.save(path)
        if self.vecnormalize is not None:
            self.vecnormalize.save(str(vecnormalize_path(path)))
        steps = int(self.model.num_timesteps)
        self.meta["interrupted"] = {"timesteps": steps, "total_timesteps": self.total_timesteps, "model": path.name}
        self.meta["timesteps"] = steps
        self.write_meta(self.meta)
        return TrainingInterrupted(self.out, steps, self.total_timesteps, path)

    def _release(self, exit_code: int | None) -> None:
        """Closes everything the run opened; ``exit_code`` None after a finished run."""
        for close in self.closers:
            close()
        try:
            self.venv.close()
        except (EOFError, OSError):  # SubprocVecEnv workers that the same Ctrl-C ended: pipes already closed
            pass
        if self.model is not None and getattr(self.model, "_logger", None) is not None:
            self.model.logger.close()
        if self.run is not None:
            self.run.finish(exit_code=exit_code)


__all__ = ["INTERRUPTED_MODEL", "TrainingInterrupted", "TrainingRun"]
