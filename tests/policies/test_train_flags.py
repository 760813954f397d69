"""``cpgym train`` flags are generated from the config dataclasses: every flag acts, unsupported
flags are errors, sizes are honoured (never clamped)."""

from __future__ import annotations

import re

import pytest

from experiments.cli import build_parser, main


def _cfg(*argv):
    from experiments.commands.train import configs_from_args

    return configs_from_args(build_parser().parse_args(["train", *argv, "--out", "unused"]))


@pytest.mark.parametrize("kind", ["routing", "reconfig"])
def test_every_training_flag_reaches_the_config(kind):
    from envs.sim.options import config_flags
    from policies.reconfig.train import ReconfigTrainConfig
    from policies.routing.train import TrainConfig

    cls = TrainConfig if kind == "routing" else ReconfigTrainConfig
    cfg = _cfg(kind)
    # flags of --action-mode target only (an error with the default per-operation mode)
    target_only = {"target_degrees", "max_operation_gpus_per_window", "warm_start"} if kind == "reconfig" else set()
    # flags of --warm-start oracle only, and the partner flag some of them need
    oracle_only = set(ReconfigTrainConfig.ORACLE_FLAGS) if kind == "reconfig" else set()
    partner = {"oracle_noisy_rollouts": ["--oracle-action-noise", "0.5"],
               "oracle_action_noise": ["--oracle-noisy-rollouts", "1"]}
    for name, flag in config_flags(cls).items():
        value = getattr(cfg, name)
        extra = ["--action-mode", "target"] if name in target_only else []
        if name in oracle_only:
            extra = ["--action-mode", "target", "--warm-start", "oracle", *partner.get(name, [])]
        if isinstance(value, bool):
            needs = ["--gamma-per-s", "0.9"] if name == "input_baseline" else []
            changed = _cfg(kind, f"--{'no-' if value else ''}{flag[2:]}", *needs)
        elif isinstance(value, str):
            choices = {"vec_env": "subproc", "reward": "slo_miss_tokens", "wandb_mode": "disabled", "bc_policy": "vertumnus",
                       "action_mode": "target", "warm_start": "oracle"}
            changed = _cfg(kind, flag, choices[name], *extra)
        elif isinstance(value, tuple):
            changed = _cfg(kind, flag, "5,6", *extra)
        elif value is None:
            new = {"residual_tau_s": ["0.5"], "num_slots": ["64"], "warmup_s": ["30"], "gamma_per_s": ["0.9"],
                   "validate_every_steps": ["100", "--warmup-s", "30"], "max_operation_gpus_per_window": ["16"]
                   }.get(name, ["vertumnus"])
            changed = _cfg(kind, flag, *new, *extra)
        else:  # numbers: a value that every validator accepts and differs from the default
            new = {"gamma": 0.5, "gae_lambda": 0.5, "batch_size": 8, "n_steps": 4096}.get(name, value * 2 if value else 1)
            changed = _cfg(kind, flag, str(new), *extra)
        assert getattr(changed, name) != value, f"{flag} did not change {cls.__name__}.{name}"


def test_train_reconfig_flags_change_the_trained_model(tmp_path):
    from sb3_contrib import MaskablePPO

    rc = main(["train", "reconfig", "--gamma", "0.5", "--ent-coef", "0.03", "--learning-rate", "0.002", "--n-epochs", "2",
               "--n-steps", "8", "--batch-size", "4", "--timesteps", "8", "--episode-window-s", "100",
               "--noop-logit-bias", "3", "--no-capacity-features", "--wandb", "disabled", "--out", str(tmp_path)])
    assert rc == 0
    model = MaskablePPO.load(tmp_path / "model.zip")
    assert model.gamma == 0.5 and model.ent_coef == 0.03 and model.n_epochs == 2
    assert model.n_steps == 8 and model.batch_size == 4  # honoured, not clamped
    assert model.learning_rate == 0.002
    bias = model.policy.action_net.bias.detach()
    assert bias[0] - bias[1:].mean() > 2.5  # the no-op starts favoured (one 8-step update moves it little)
    assert model.observation_space["window"].shape == (10,)  # --no-capacity-features
    assert (tmp_path / "provenance.json").is_file()


def test_shared_workload_flags_reach_the_episode_source():
    cfg = _cfg("routing", "--workload", "tool-agent", "--rate-scale", "2", "--arrival-window-s", "0", "120",
               "--episode-window-s", "30", "--eval-every", "3", "--workload-param", "duration_s=200")
    w = cfg.source.workload
    assert (w.name, w.seed, w.target_rps, w.rate_scale, w.arrival_window_s, w.skip_invalid, w.params) == \
        ("tool-agent", 0, None, 2.0, (0.0, 120.0), False, (("duration_s", 200),))
    assert (cfg.source.episode_window_s, cfg.source.eval_every) == (30.0, 3)
    assert cfg.source.workload.trace is None
    assert _cfg("routing", "--trace", "t.jsonl", "--skip-invalid").source.workload.skip_invalid  # a trace-only flag


@pytest.mark.parametrize("seed", [-1, 2**32, 1.5, True])
def test_train_configs_reject_a_bad_seed_in_library_use(seed):
    from policies.common.train_checks import MAX_TRAIN_SEED
    from policies.reconfig.train import ReconfigTrainConfig
    from policies.routing.train import TrainConfig

    assert MAX_TRAIN_SEED == 2**32 - 1
    for cls in (TrainConfig, ReconfigTrainConfig):
        with pytest.raises(ValueError, match=r"^seed must be an integer in \[0, 4294967295\], got "):
            cls(seed=seed)
        assert cls(seed=MAX_TRAIN_SEED).seed == MAX_TRAIN_SEED


def test_train_without_out_writes_a_cleanrl_named_run_folder(tmp_path, monkeypatch, capsys):
    """``--out`` omitted: ``runs/train/{workload}__{kind}__{train seed}__{unix time}`` (the run name
    of ``baselines.runner.run_name``, as ``cpgym simulate`` names its runs; it was a required flag)."""
    monkeypatch.chdir(tmp_path)
    assert main(["train", "reconfig", "--n-steps", "8", "--batch-size", "8", "--n-epochs", "1", "--timesteps", "8",
                 "--episode-window-s", "100", "--no-capacity-features", "--train-seed", "3", "--wandb", "disabled",
                 "--quiet"]) == 0
    (run,) = (tmp_path / "runs" / "train").iterdir()
    assert re.fullmatch(r"matched-phases__reconfig__3__\d{10}", run.name), run.name  # the default workload
    assert (run / "model.zip").is_file() and (run / "provenance.json").is_file()
    assert f"run folder runs/train/{run.name} (--out not given)" in capsys.readouterr().out


ARMS_WORKLOADS = "conversation_trace+leval-like+tool-agent"  # train arms' default --sources, file suffixes dropped


def test_default_run_folder_names_of_every_kind(tmp_path, monkeypatch):
    from envs.sim.options import config_from_args
    from experiments.cli import parse_args
    from experiments.commands.train import configs_from_args, default_out_dir
    from policies.routing.train_arms import ArmTrainConfig

    monkeypatch.chdir(tmp_path)
    t = 1_700_000_000
    routing = configs_from_args(parse_args(["train", "routing", "--target-rps", "12", "--train-seed", "2"]))
    first = default_out_dir("routing", routing, when=t)
    assert first.as_posix() == f"runs/train/conversation_trace-12rps__routing__2__{t}"
    first.mkdir(parents=True)
    assert default_out_dir("routing", routing, when=t).name == f"{first.name}-2"  # never an earlier run's folder
    reconfig = configs_from_args(parse_args(["train", "reconfig", "--workload", "matched-phases"]))
    assert default_out_dir("reconfig", reconfig, when=t).as_posix() == f"runs/train/matched-phases__reconfig__0__{t}"
    arms = config_from_args(ArmTrainConfig, parse_args(["train", "arms", "--seed", "1"]))
    assert default_out_dir("arms", arms, when=t).as_posix() == f"runs/train/{ARMS_WORKLOADS}__arms__1__{t}"
    explicit = parse_args(["train", "routing", "--out", "mine"])
    assert explicit.out == "mine"  # an explicit --out is kept as given
