"""Validation-based model selection when no validation can measure anything (every validation
episode ends before a request finishes, e.g. a ``--horizon-s`` within the warm-up): routing fails
at its first validation, before any PPO update, with one line saying why; reconfiguration (whose
first validation comes after training steps) keeps the last model and says so. Both used to
train to the end and then fail copying a ``best_model.zip`` that was never written."""

from __future__ import annotations

import json

from envs.workloads import WorkloadSource, default_traces_dir
from experiments.cli import main

TRACE = str(default_traces_dir() / "conversation_trace.jsonl")


def test_routing_validation_without_a_finished_request_fails_before_training(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(["train", "routing", "--trace", TRACE, "--target-rps", "12", "--episode-window-s", "10", "--warmup-s", "5",
               "--horizon-s", "2", "--validate-every", "64", "--num-validation-windows", "1", "--timesteps", "64",
               "--n-steps", "64", "--batch-size", "32", "--n-envs", "1", "--wandb", "disabled", "--quiet",
               "--out", str(out)])
    captured = capsys.readouterr()
    assert rc == 2
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("cpgym train routing: error: validation at 0 steps: no request of the "
                                               "1 validation window(s) finished"), err
    assert "--horizon-s 2 ends each episode" in err[0]
    assert "RuntimeWarning" not in captured.err + captured.out  # numpy's "Mean of empty slice" is not shown
    assert not (out / "model.zip").exists() and not (out / "last_model.zip").exists()  # stopped before any update


def test_reconfig_validation_without_a_finished_request_keeps_the_last_model(tmp_path):
    from envs.sim import SimConfig
    from policies.reconfig.train import ReconfigTrainConfig, train_reconfig

    cfg = ReconfigTrainConfig(workload=WorkloadSource(name="phases", params=(("phase_duration_s", 15.0),)),
                              workload_seeds=(0,),
                              episode_window_s=60.0, total_timesteps=8, n_steps=8, batch_size=8, n_epochs=1,
                              validation_seeds=(5,), validate_every_steps=8, capacity_features=False,
                              wandb_mode="disabled")
    lines: list[str] = []
    path = train_reconfig(cfg, tmp_path, sim_config=SimConfig(horizon_s=0.001), log=lines.append, progress="off")
    assert path == tmp_path / "model.zip" and path.is_file()
    assert path.read_bytes() == (tmp_path / "last_model.zip").read_bytes()
    assert (tmp_path / "vecnormalize.pkl").read_bytes() == (tmp_path / "last_vecnormalize.pkl").read_bytes()
    assert not (tmp_path / "best_model.zip").exists()
    meta = json.loads((tmp_path / "train_config.json").read_text())
    assert meta["best_validation"] is None and meta["model_selection"].startswith("last model")
    assert any("no request finished in the episode of seed(s) [5]" in s for s in lines)
    assert any(s.startswith("warning: none of the 1 validations had a finite mean TTFT") for s in lines)
