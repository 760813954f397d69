"""A ``cpgym train`` run that is stopped leaves a usable folder (``policies.common.run_end``): Ctrl-C saves
the model at that moment as ``interrupted_model.zip`` (never ``model.zip``), marks
``train_config.json``, exits 130 with one line naming the files, and ``cpgym evaluate --policy
DIR`` names the zips to use; after Ctrl-C or an error the environments are closed and the wandb
run is finished. (Ctrl-C used to exit 130 without any final model, and an error left the vector
env open and the wandb run unfinished.)"""

from __future__ import annotations

import json

import pytest

from envs.workloads import WorkloadSource, default_traces_dir
from experiments.cli import main
from tests.interrupt import patch_everywhere

TRACE = str(default_traces_dir() / "conversation_trace.jsonl")


class _FakeRun:
    """Stands in for a wandb run: records ``finish``."""

    def __init__(self) -> None:
        self.finished = []

    def log(self, *_a, **_k) -> None:
        pass

    def finish(self, exit_code=None) -> None:
        self.finished.append(exit_code)


@pytest.fixture
def stopped_at(monkeypatch):
    """``stop(exc, steps)``: training raises ``exc`` at the first step at or after ``steps``; returns
    the fake wandb run and the list of closed vector environments."""
    from stable_baselines3.common.vec_env import DummyVecEnv

    import policies.common.wandb_log
    from policies.common.callbacks import TrainingProgress

    run, closed = _FakeRun(), []
    patch_everywhere(monkeypatch, policies.common.wandb_log, "wandb_init", lambda *a, **k: run)
    real_close = DummyVecEnv.close
    patch_everywhere(monkeypatch, DummyVecEnv, "close", lambda self: closed.append(self) or real_close(self))

    def stop(exc: BaseException, steps: int):
        real_step = TrainingProgress._on_step

        def on_step(self):
            if self.num_timesteps >= steps:
                raise exc
            return real_step(self)

        patch_everywhere(monkeypatch, TrainingProgress, "_on_step", on_step)
        return run, closed

    return stop


def _routing_argv(out) -> list[str]:
    return ["train", "routing", "--trace", TRACE, "--target-rps", "12", "--episode-window-s", "10", "--warmup-s", "5",
            "--validate-every", "100000", "--num-validation-windows", "1", "--timesteps", "256", "--n-steps", "32",
            "--batch-size", "32", "--n-epochs", "1", "--n-envs", "1", "--checkpoint-every", "32", "--quiet",
            "--wandb", "offline", "--out", str(out)]


def test_ctrl_c_in_train_routing_saves_the_model_and_evaluate_names_it(tmp_path, stopped_at, capsys):
    run, closed = stopped_at(KeyboardInterrupt(), 64)
    out = tmp_path / "run"
    assert main(_routing_argv(out)) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("cpgym train routing: training interrupted at 64 of 256 steps"), err
    assert str(out / "interrupted_model.zip") in err[0] and str(out / "best_model.zip") in err[0]
    assert "checkpoints" in err[0]
    assert (out / "interrupted_model.zip").is_file() and not (out / "model.zip").exists()
    meta = json.loads((out / "train_config.json").read_text())
    assert meta["interrupted"] == {"timesteps": 64, "total_timesteps": 256, "model": "interrupted_model.zip"}
    assert meta["timesteps"] == 64
    assert (out / "episodes.csv").is_file() and (out / "progress.csv").is_file()
    assert run.finished == [130] and len(closed) == 1  # wandb run finished (failed), environments closed

    # the folder is not a finished checkpoint: one line naming the zips to use
    assert main(["evaluate", "--policy", str(out), "--quiet"]) == 2
    msg = capsys.readouterr().err
    assert "interrupted at 64 of 256 steps" in msg and str(out / "interrupted_model.zip") in msg
    assert str(out / "best_model.zip") in msg
    from policies.common.checkpoint import LearnedPolicy

    pol = LearnedPolicy(out / "interrupted_model.zip")  # the named zip loads with the run's train_config.json
    assert pol.name == "learned:interrupted_model" and pol.meta["interrupted"]["timesteps"] == 64


def test_error_in_train_routing_closes_the_environments_and_finishes_wandb(tmp_path, stopped_at):
    from experiments.cli import parse_args
    from experiments.commands.train import configs_from_args
    from policies.routing.train import train_routing

    run, closed = stopped_at(RuntimeError("boom"), 32)
    out = tmp_path / "run"
    cfg = configs_from_args(parse_args(_routing_argv(out)))
    with pytest.raises(RuntimeError, match="boom"):
        train_routing(cfg, out, log=lambda s: None, progress="off")
    assert run.finished == [1] and len(closed) == 1
    assert not (out / "interrupted_model.zip").exists() and not (out / "model.zip").exists()


def test_ctrl_c_in_train_reconfig_saves_model_and_statistics(tmp_path, stopped_at):
    from policies.common.run_end import TrainingInterrupted
    from policies.reconfig.evaluate import LearnedReconfig
    from policies.reconfig.train import ReconfigTrainConfig, read_initial_model, train_reconfig

    run, closed = stopped_at(KeyboardInterrupt(), 8)
    cfg = ReconfigTrainConfig(workload=WorkloadSource(name="phases"), workload_seeds=(0,), episode_window_s=100.0,
                              total_timesteps=32,
                              n_steps=8, batch_size=8, n_epochs=1, wandb_mode="offline", capacity_features=False)
    with pytest.raises(TrainingInterrupted) as info:
        train_reconfig(cfg, tmp_path, log=lambda s: None, progress="off")
    assert isinstance(info.value, KeyboardInterrupt) and info.value.timesteps == 8
    assert (tmp_path / "interrupted_model.zip").is_file() and (tmp_path / "interrupted_vecnormalize.pkl").is_file()
    assert not (tmp_path / "model.zip").exists()
    assert json.loads((tmp_path / "train_config.json").read_text())["interrupted"]["timesteps"] == 8
    assert run.finished == [130] and len(closed) == 1
    with pytest.raises(FileNotFoundError, match="interrupted at 8 of 32 steps.*interrupted_model.zip"):
        LearnedReconfig(tmp_path)
    learned = LearnedReconfig(tmp_path / "interrupted_model.zip")  # with its statistics
    assert learned.vecnormalize is not None
    read_initial_model(str(tmp_path / "interrupted_model.zip"))  # --init-from takes it (resume)
