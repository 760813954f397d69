"""A tiny trained reconfiguration checkpoint loads and evaluates through ``cpgym evaluate``
(``--kind`` auto-detected from ``train_config.json``) and ``policies.evaluate_reconfig``."""

from __future__ import annotations

import json

import pytest

from experiments.cli import main


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    from policies.train_reconfig import ReconfigTrainConfig, train_reconfig

    out = tmp_path_factory.mktemp("reconfig_ckpt")
    cfg = ReconfigTrainConfig(workload="phases", workload_seeds=(0,), episode_window_s=100.0, total_timesteps=16,
                              n_steps=16, batch_size=16, n_epochs=1, wandb_mode="disabled")
    train_reconfig(cfg, out, log=lambda s: None)
    return out


def test_train_config_records_kind_and_seeds(tiny_checkpoint):
    from policies.evaluate_reconfig import is_reconfig_checkpoint, training_seeds

    meta = json.loads((tiny_checkpoint / "train_config.json").read_text())
    assert meta["kind"] == "reconfig" and meta["timesteps"] >= 16
    assert is_reconfig_checkpoint(str(tiny_checkpoint)) and is_reconfig_checkpoint(str(tiny_checkpoint / "model.zip"))
    assert training_seeds(str(tiny_checkpoint)) == [0]


def test_evaluate_reconfig_checkpoint_through_cli(tiny_checkpoint, capsys):
    rc = main(["evaluate", "--policy", str(tiny_checkpoint), "--against", "vertumnus-router", "--seeds", "5",
               "--format", "json", "--quiet"])
    assert rc == 0
    table = {r["policy"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(table) == {"learned", "vertumnus-router"}
    for r in table.values():
        assert r["num_episodes"] == 1
        assert r["mean_ttft_s"] > 0 and r["p90_ttft_s"] >= r["mean_ttft_s"] * 0.5
        assert 0.0 <= r["slo_attainment_token_weighted"] <= 1.0
        assert r["num_unfinished"] == 0
    assert table["vertumnus-router"]["num_operations"] == 0  # no reconfiguration


def test_learned_run_is_seed_deterministic(tiny_checkpoint):
    from envs import workloads
    from envs.sim import SimConfig
    from policies.evaluate_reconfig import LearnedReconfig

    pol = LearnedReconfig(tiny_checkpoint)
    wl = workloads.window(workloads.get_workload("phases", seed=5), 0.0, 200.0)
    r1, a1 = pol.run(wl, SimConfig(), seed=5)
    r2, a2 = pol.run(wl, SimConfig(), seed=5)
    assert a1 == a2 and len(a1) >= 10
    assert (r1.records["ttft_s"] == r2.records["ttft_s"]).all()
    # every action taken was allowed by the mask: operations started = non-no-op actions
    assert len(r1.extras.get("reconfig_operations") or []) == sum(a != 0 for a in a1)


def test_reconfig_mode_rejects_unknown_comparison(tiny_checkpoint, capsys):
    assert main(["evaluate", "--policy", str(tiny_checkpoint), "--against", "no-such", "--seeds", "5", "--quiet"]) == 2
