"""A tiny trained reconfiguration checkpoint loads and evaluates through ``cpgym evaluate`` (the
benchmark protocol on the reconfiguration task, chosen from ``train_config.json``'s kind) and
``policies.reconfig.evaluate``."""

from __future__ import annotations

import json

import pytest

from envs.workloads import WorkloadSource
from experiments.cli import main
from tests.factories import SMALL_POOL


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    from policies.reconfig.train import ReconfigTrainConfig, train_reconfig

    out = tmp_path_factory.mktemp("reconfig_ckpt")
    cfg = ReconfigTrainConfig(workload=WorkloadSource(name="phases"), workload_seeds=(0,), episode_window_s=100.0,
                              total_timesteps=16,
                              n_steps=16, batch_size=16, n_epochs=1, wandb_mode="disabled",
                              capacity_features=False)
    train_reconfig(cfg, out, log=lambda s: None)
    return out


def test_train_config_records_kind_and_seeds(tiny_checkpoint):
    from policies.reconfig.evaluate import is_reconfig_checkpoint

    meta = json.loads((tiny_checkpoint / "train_config.json").read_text())
    assert meta["kind"] == "reconfig" and meta["timesteps"] >= 16
    assert is_reconfig_checkpoint(str(tiny_checkpoint)) and is_reconfig_checkpoint(str(tiny_checkpoint / "model.zip"))
    assert meta["train_config"]["workload_seeds"] == [0]


def test_evaluate_reconfig_checkpoint_through_cli(tiny_checkpoint, capsys):
    rc = main(["evaluate", "--policy", str(tiny_checkpoint), "--against", "vertumnus-router", "--max-episodes", "1",
               "--format", "json", "--quiet"])
    assert rc == 0
    table = {r["policy"]: r for r in json.loads(capsys.readouterr().out)}
    # the task's reference: tuned:vertumnus (the stored controller tuning), `vertumnus (untuned)` without one
    assert set(table) == {str(tiny_checkpoint), "vertumnus-router", "tuned:vertumnus"}
    for r in table.values():
        assert r["task"] == "reconfig/matched-phases-v1" and r["num_episodes"] == 1
        assert r["mean_ttft_s"] > 0 and r["p90_ttft_s"] >= r["mean_ttft_s"] * 0.5
        assert 0.0 <= r["slo_attainment_token_weighted"] <= 1.0
    assert table["tuned:vertumnus"]["delta_mean_ttft_pct"] == 0.0  # paired difference against the reference itself


@pytest.mark.slow
def test_learned_run_is_seed_deterministic(tiny_checkpoint):
    from envs import workloads
    from envs.sim import SimConfig
    from policies.reconfig.evaluate import LearnedReconfig

    pol = LearnedReconfig(tiny_checkpoint)
    wl = workloads.window(workloads.get_workload("phases", seed=5), 0.0, 200.0)
    r1, a1 = pol.run(wl, SimConfig(), seed=5)
    r2, a2 = pol.run(wl, SimConfig(), seed=5)
    assert a1 == a2 and len(a1) >= 10
    assert (r1.records["ttft_s"] == r2.records["ttft_s"]).all()
    # every action taken was allowed by the mask: operations started = non-no-op actions
    assert len(r1.extras.get("reconfig_operations") or []) == sum(a != 0 for a in a1)


def test_reconfig_mode_rejects_unknown_comparison(tiny_checkpoint, capsys):
    assert main(["evaluate", "--policy", str(tiny_checkpoint), "--against", "no-such", "--quick", "--quiet"]) == 2
    assert "unknown policy 'no-such'" in capsys.readouterr().err


def test_validation_keeps_the_best_model_and_capacity_features_reach_the_checkpoint(tmp_path):
    import csv

    from envs.sim import SimConfig
    from policies.reconfig.evaluate import LearnedReconfig
    from policies.reconfig.train import ReconfigTrainConfig, train_reconfig

    small = SimConfig(pool=SMALL_POOL)
    params = (("duration_s", 60.0), ("load_fraction_range", (0.05, 0.1)))
    cfg = ReconfigTrainConfig(workload=WorkloadSource(name="matched-phases", params=params), workload_seeds=(0,),
                              validation_seeds=(9,),
                              validate_every_steps=4, total_timesteps=8, n_steps=4, batch_size=4, n_epochs=1,
                              wandb_mode="disabled")
    assert cfg.capacity_features
    train_reconfig(cfg, tmp_path, sim_config=small, log=lambda s: None)
    rows = list(csv.DictReader(open(tmp_path / "validation.csv")))
    assert [int(r["timesteps"]) for r in rows] == [4, 8]
    best = min(rows, key=lambda r: float(r["mean_ttft_s"]))
    meta = json.loads((tmp_path / "train_config.json").read_text())
    assert meta["best_validation"]["timesteps"] == int(best["timesteps"])
    assert (tmp_path / "model.zip").read_bytes() == (tmp_path / "best_model.zip").read_bytes()
    assert (tmp_path / "last_model.zip").is_file() and (tmp_path / "last_vecnormalize.pkl").is_file()
    learned = LearnedReconfig(tmp_path)
    assert learned.capacity_features
    assert learned.model.observation_space["window"].shape[0] > 10  # the capacity features


def test_history_features_reach_the_checkpoint_and_its_evaluation(tmp_path):
    from envs import workloads
    from envs.reconfig_env import CAPACITY_WINDOW_FEATURES, HISTORY_WINDOW_FEATURES, WINDOW_FEATURES
    from envs.sim import SimConfig
    from policies.reconfig.evaluate import LearnedReconfig
    from policies.reconfig.train import ReconfigTrainConfig, train_reconfig

    small = SimConfig(pool=SMALL_POOL)
    params = (("duration_s", 60.0), ("load_fraction_range", (0.05, 0.1)))
    cfg = ReconfigTrainConfig(workload=WorkloadSource(name="matched-phases", params=params), workload_seeds=(0,),
                              total_timesteps=4, n_steps=4,
                              batch_size=4, n_epochs=1, wandb_mode="disabled", history_features=True)
    train_reconfig(cfg, tmp_path, sim_config=small, log=lambda s: None)
    learned = LearnedReconfig(tmp_path)
    assert learned.env_kwargs["history_features"] is True
    width = len(WINDOW_FEATURES) + len(CAPACITY_WINDOW_FEATURES) + 3 + len(HISTORY_WINDOW_FEATURES)  # 3 degrees
    assert learned.model.observation_space["window"].shape == (width,)
    wl = workloads.build_workload(name="matched-phases", seed=4, params=dict(params))
    result, actions = learned.run(wl, small, seed=4)  # the evaluation builds the same observation
    assert len(actions) >= 3 and result.records["ttft_s"].size == wl.num_requests


def test_validation_seeds_must_differ_from_training_seeds():
    from policies.reconfig.train import ReconfigTrainConfig

    with pytest.raises(ValueError, match="validation_seeds must be disjoint"):
        ReconfigTrainConfig(workload=WorkloadSource(name="matched-phases"), workload_seeds=(0, 1), validation_seeds=(1, 5))


def test_shipped_reconfig_alias_names_the_shipped_checkpoint():
    from policies.common.checkpoint import SHIPPED_RECONFIG, checkpoint_path
    from policies.common.policy_args import is_checkpoint

    assert checkpoint_path("shipped-reconfig") == SHIPPED_RECONFIG and is_checkpoint("shipped-reconfig")


def test_target_mode_oracle_warm_start_trains_validates_and_loads(tmp_path):
    import csv

    from envs.sim import SimConfig
    from policies.reconfig.evaluate import LearnedReconfig
    from policies.reconfig.train import ReconfigTrainConfig, train_reconfig

    small = SimConfig(pool=SMALL_POOL)
    params = (("duration_s", 80.0), ("load_fraction_range", (0.05, 0.1)), ("num_phases_range", (2, 2)))
    cfg = ReconfigTrainConfig(workload=WorkloadSource(name="matched-phases", params=params), workload_seeds=(0, 1),
                              validation_seeds=(9,),
                              validate_every_steps=4, total_timesteps=8, n_steps=4, batch_size=4, n_epochs=1,
                              action_mode="target", target_degrees=(2, 4), warm_start="oracle", bc_epochs=3,
                              wandb_mode="disabled")
    logs = []
    train_reconfig(cfg, tmp_path, sim_config=small, log=logs.append)
    rows = list(csv.DictReader(open(tmp_path / "validation.csv")))
    assert [int(r["timesteps"]) for r in rows] == [0, 4, 8]  # the warm-started policy is validated too
    bc = list(csv.DictReader(open(tmp_path / "bc.csv")))
    assert len(bc) == 3 and all(float(r["loss"]) > 0 for r in bc)
    targets = json.loads((tmp_path / "oracle_targets.json").read_text())
    assert set(targets) == {"0", "1"} and all(len(v) == 2 for v in targets.values())  # one composition per phase
    assert all(c in ("cp4x2", "cp4x1,cp2x2", "cp2x4") for v in targets.values() for c in v)
    meta = json.loads((tmp_path / "train_config.json").read_text())
    assert meta["warm_start"]["num_demonstration_steps"] >= 8
    assert any(s.startswith("warm start:") for s in logs)
    learned = LearnedReconfig(tmp_path)
    assert learned.env_kwargs["action_mode"] == "target" and learned.model.action_space.n == 3
    wl = cfg.workload_source(9).build()
    result, actions = learned.run(wl, small, seed=9)
    assert len(actions) >= 4 and all(0 <= a < 3 for a in actions)
    assert result.records["ttft_s"].size == wl.num_requests
    import numpy as np

    after = LearnedReconfig(tmp_path)
    after.run(cfg.workload_source(1).build(), small, seed=1)
    again, actions_again = after.run(wl, small, seed=9)
    assert actions_again == actions
    assert np.array_equal(again.records["ttft_s"], result.records["ttft_s"], equal_nan=True)


def test_reconfig_checkpoint_labels_follow_the_routing_convention(tiny_checkpoint):
    """``learned:<folder name>`` for a folder, ``learned:<zip stem>`` for another zip, as
    ``LearnedPolicy`` labels routing checkpoints; the shipped alias keeps its own name (the
    shipped results' rows are ``shipped-reconfig``), its folder path gets the folder name."""
    from pathlib import Path

    from policies.common.checkpoint import SHIPPED_RECONFIG, LearnedPolicy, learned_label
    from policies.reconfig.evaluate import LearnedReconfig

    assert LearnedReconfig(tiny_checkpoint).name == f"learned:{tiny_checkpoint.name}"
    assert LearnedReconfig(tiny_checkpoint / "model.zip").name == f"learned:{tiny_checkpoint.name}"
    assert LearnedReconfig("shipped-reconfig").name == "shipped-reconfig"
    assert LearnedReconfig(SHIPPED_RECONFIG).name == f"learned:{SHIPPED_RECONFIG.name}"
    assert learned_label(Path("runs/x/best_model.zip")) == "learned:best_model"
    assert LearnedPolicy("shipped-residual").name == "learned:routing_conversation_residual"  # the routing convention


def test_learned_reconfig_gives_each_episode_its_own_capacity_table(monkeypatch):
    """A seed's episode must not depend on the seeds the same object ran before it: a capacity
    table's reference mixes follow the order in which it met them (a table shared across seeds
    changed seed 1001 of the matched-phases evaluation from 0.384 s alone to 0.427 s after seed
    1000), so each episode gets a new table; only the pure profile cache is shared."""
    import policies.reconfig.evaluate as er
    from envs.sim import SimConfig

    seen = []
    monkeypatch.setattr(er, "rollout_reconfig", lambda act, wl, config, seed, decision_window_s, capacity_features, table,
                        make_router, **kw: (seen.append(table) or (type("R", (), {})(), [])))
    learned = er.LearnedReconfig("shipped-reconfig")
    assert learned.capacity_features
    learned.run(None, SimConfig(), seed=0)
    learned.run(None, SimConfig(), seed=1)
    assert len(seen) == 2 and seen[0] is not seen[1]
    assert seen[0].cache is seen[1].cache


def test_behaviour_cloning_fits_the_demonstrated_actions():
    import gymnasium as gym
    import numpy as np
    from gymnasium import spaces
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.env_util import make_vec_env

    from policies.reconfig.oracle import behaviour_clone

    class Env(gym.Env):  # a minimal Dict-observation env for the model's spaces: BC never steps it
        observation_space = spaces.Dict({"x": spaces.Box(-1.0, 1.0, (2,), np.float32)})
        action_space = spaces.Discrete(3)

        def reset(self, *, seed=None, options=None):
            return {"x": np.zeros(2, np.float32)}, {}

        def step(self, a):
            return {"x": np.zeros(2, np.float32)}, 0.0, True, False, {}

    model = MaskablePPO("MultiInputPolicy", make_vec_env(Env, n_envs=1), n_steps=8, batch_size=8, seed=0)
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (256, 2)).astype(np.float32)
    actions = np.where(x[:, 0] > 0.3, 2, np.where(x[:, 0] < -0.3, 0, 1))  # a rule of the observation
    losses = behaviour_clone(model, {"x": x}, actions, epochs=40, batch_size=32, learning_rate=3e-3)
    assert losses[-1] < 0.5 * losses[0]
    pred, _ = model.predict({"x": x}, deterministic=True)
    assert (pred == actions).mean() > 0.9
    with pytest.raises(ValueError, match="behaviour cloning needs demonstrations"):
        behaviour_clone(model, {"x": x[:0]}, actions[:0], epochs=1)


@pytest.mark.slow
def test_init_from_starts_from_the_given_model_and_rejects_another_space(tiny_checkpoint, tmp_path):
    import torch as th
    from sb3_contrib import MaskablePPO

    from policies.reconfig.train import ReconfigTrainConfig, train_reconfig

    base = dict(workload=WorkloadSource(name="phases"), workload_seeds=(0,), episode_window_s=100.0, total_timesteps=16,
                n_steps=16,
                batch_size=16, n_epochs=1, wandb_mode="disabled", capacity_features=False)
    cfg = ReconfigTrainConfig(**base, learning_rate=1e-12, init_from=str(tiny_checkpoint / "model.zip"))
    train_reconfig(cfg, tmp_path / "a", log=lambda s: None)
    init = MaskablePPO.load(tiny_checkpoint / "model.zip").policy.state_dict()
    got = MaskablePPO.load(tmp_path / "a" / "model.zip").policy.state_dict()
    assert all(th.allclose(init[k], got[k], atol=1e-6) for k in init)  # lr ~0: the initial weights are kept
    fresh = ReconfigTrainConfig(**base, learning_rate=1e-12)
    train_reconfig(fresh, tmp_path / "b", log=lambda s: None)
    other = MaskablePPO.load(tmp_path / "b" / "model.zip").policy.state_dict()
    assert not all(th.allclose(init[k], other[k], atol=1e-6) for k in init)  # without it: a new policy
    with pytest.raises(ValueError, match="observation/action space differs"):
        mismatched = ReconfigTrainConfig(**{**base, "capacity_features": True}, init_from=str(tiny_checkpoint / "model.zip"))
        train_reconfig(mismatched, tmp_path / "c", log=lambda s: None)
    with pytest.raises(ValueError, match="excludes --warm-start"):
        ReconfigTrainConfig(**{**base, "capacity_features": True}, action_mode="target", warm_start="oracle",
                            init_from="x/model.zip")


@pytest.mark.slow
def test_shipped_reconfig_checkpoint_loads_and_acts_on_the_target_menu():
    from envs import workloads
    from envs.sim import SimConfig
    from policies.reconfig.evaluate import LearnedReconfig

    pol = LearnedReconfig("shipped-reconfig")
    assert pol.env_kwargs == {"capacity_features": True, "action_mode": "target", "target_degrees": (2, 4, 8),
                              "max_operation_gpus_per_window": 16.0}
    wl = workloads.window(workloads.build_workload(name="matched-phases", seed=1000), 0.0, 100.0)
    result, actions = pol.run(wl, SimConfig(seed=1000), seed=1000)
    assert len(actions) >= 5 and all(0 <= a < 36 for a in actions)
    assert result.records["ttft_s"].size == wl.num_requests


@pytest.mark.slow
def test_train_reconfig_interrupted_midway_keeps_its_checkpoints(tmp_path, capsys, monkeypatch):
    """model.zip and vecnormalize.pkl were written at the end only, and there were no periodic
    checkpoints: a reconfiguration training stopped midway (without validation) kept no model.
    Now checkpoints/reconfig_STEPS_model.zip + _vecnormalize.pkl every --checkpoint-every steps."""
    from envs.reconfig_env import PrefillReconfigEnv
    from policies.reconfig.train import read_initial_model
    from tests.interrupt import fail_on_call

    monkeypatch.setattr(PrefillReconfigEnv, "step", fail_on_call(PrefillReconfigEnv.step, 40, exception=KeyboardInterrupt))
    out = tmp_path / "run"
    assert main(["train", "reconfig", "--workload", "phases", "--workload-seeds", "0", "--episode-window-s", "100",
                 "--timesteps", "64", "--n-steps", "16", "--batch-size", "16", "--n-epochs", "1", "--no-capacity-features",
                 "--checkpoint-every", "16", "--wandb", "disabled", "--quiet", "--out", str(out)]) == 130
    assert "training interrupted at 39 of 64 steps; no model.zip" in capsys.readouterr().err
    assert not (out / "model.zip").exists() and (out / "interrupted_model.zip").exists()
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [
        "reconfig_16_model.zip", "reconfig_16_vecnormalize.pkl", "reconfig_32_model.zip", "reconfig_32_vecnormalize.pkl"]
    model, stats = read_initial_model(str(out / "checkpoints" / "reconfig_32_model.zip"))  # an --init-from model
    assert model.num_timesteps == 32 and stats.obs_rms is not None
    assert json.loads((out / "train_config.json").read_text())["train_config"]["checkpoint_every_steps"] == 16


def test_a_train_config_that_is_not_an_object_is_one_line(tiny_checkpoint, tmp_path, capsys):
    import shutil

    copy = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint, copy)
    (copy / "train_config.json").write_text("[1, 2]")
    assert main(["evaluate", "--policy", str(copy), "--against", "vertumnus-router", "--quick", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "train_config.json: expected a JSON object, got a JSON list" in err
