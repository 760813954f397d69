"""The reconfiguration trainer never normalises the observation's 0/1 flags (issue #43 item 5): its
``VecNormalize`` standardised ``present`` / ``is_active`` / ``is_reconfiguring`` with everything
else, and a flag constant in training (variance ~1e-8) read as the clip value 10 once it was 1."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from envs.reconfig_env import RECONFIG_WORKER_FEATURES, TARGET_FEATURES
from envs.workloads import WorkloadSource
from tests.factories import SMALL_POOL

WORKER_COLS = [n for n, _ in RECONFIG_WORKER_FEATURES]
TARGET_COLS = [n for n, _ in TARGET_FEATURES]


def _small_pool_config():
    from envs.sim import SimConfig

    return SimConfig(pool=SMALL_POOL)


def _venv(cls, **kw):
    from stable_baselines3.common.vec_env import DummyVecEnv

    from baselines.envs import make_reconfig_env
    from envs.reconfig_env import observation_flag_columns
    from envs.workloads import WorkloadSource

    params = (("duration_s", 60.0), ("load_fraction_range", (0.05, 0.1)))
    wl = WorkloadSource(name="matched-phases", seed=0, params=params).build()
    envs = DummyVecEnv([lambda: make_reconfig_env([wl], _small_pool_config(), capacity_features=True,
                                                  action_mode="target", target_degrees=(2, 4))])
    if cls.__name__ == "VecNormalize":
        return cls(envs, **kw)
    return cls(envs, observation_flag_columns(envs.observation_space), **kw)


def _as_in_the_shipped_stats(venv) -> dict:
    """Statistics as the shipped reconfig_target's: is_reconfiguring always 0 in training (mean 0,
    variance 1e-8), other columns spread; returns an observation with every flag set to 1."""
    venv.reset()
    rms = venv.obs_rms["workers"]
    rms.mean[:] = 0.5
    rms.var[:] = 0.25
    rms.mean[:, WORKER_COLS.index("is_reconfiguring")] = 0.0
    rms.var[:, WORKER_COLS.index("is_reconfiguring")] = 1e-8
    obs = {k: np.zeros((1, *s.shape), dtype=np.float32) for k, s in venv.observation_space.spaces.items()}
    for name in ("present", "is_active", "is_reconfiguring"):
        obs["workers"][..., WORKER_COLS.index(name)] = 1.0
    obs["workers"][..., WORKER_COLS.index("kv_usage")] = 0.9
    obs["targets"][..., TARGET_COLS.index("is_projected")] = 1.0
    return obs


def test_flags_pass_through_and_the_rest_is_normalised():
    from stable_baselines3.common.vec_env import VecNormalize

    from policies.reconfig.flag_normalize import FlagPreservingVecNormalize

    plain = _venv(VecNormalize, norm_reward=False)
    obs = _as_in_the_shipped_stats(plain)
    # what the trainer did: a 1 in a flag that was 0 throughout training reads as the clip value
    assert (plain.normalize_obs(obs)["workers"][..., WORKER_COLS.index("is_reconfiguring")] == 10.0).all()

    venv = _venv(FlagPreservingVecNormalize, norm_reward=False)
    obs = _as_in_the_shipped_stats(venv)
    out = venv.normalize_obs(obs)
    for name in ("present", "is_active", "is_reconfiguring"):
        assert (out["workers"][..., WORKER_COLS.index(name)] == 1.0).all(), name
    assert (out["targets"][..., TARGET_COLS.index("is_projected")] == 1.0).all()
    assert np.allclose(out["workers"][..., WORKER_COLS.index("kv_usage")], 0.8)  # (0.9 - 0.5) / 0.5
    assert (venv.unnormalize_obs(out)["workers"][..., WORKER_COLS.index("is_reconfiguring")] == 1.0).all()
    assert obs["workers"][0, 0, WORKER_COLS.index("kv_usage")] == np.float32(0.9)  # the input is not modified
    # pickled with its columns (vecnormalize.pkl), as a checkpoint loads it
    again = pickle.loads(pickle.dumps(venv))
    assert type(again) is FlagPreservingVecNormalize and again.flag_columns == venv.flag_columns
    assert (again.normalize_obs(obs)["workers"][..., WORKER_COLS.index("is_reconfiguring")] == 1.0).all()


def test_flag_columns_are_checked():
    from stable_baselines3.common.vec_env import DummyVecEnv

    from baselines.envs import make_reconfig_env
    from envs.reconfig_env import observation_flag_columns
    from envs.workloads import WorkloadSource
    from policies.reconfig.flag_normalize import FlagPreservingVecNormalize

    wl = WorkloadSource(name="matched-phases", seed=0, params=(("duration_s", 60.0),)).build()
    envs = DummyVecEnv([lambda: make_reconfig_env([wl], _small_pool_config())])
    assert observation_flag_columns(envs.observation_space) == {"workers": (0, 2, 3)}  # no targets in operation mode
    with pytest.raises(ValueError, match="no such observation key"):
        FlagPreservingVecNormalize(envs, {"targets": (3,)})
    with pytest.raises(ValueError, match="its last axis has 7 columns"):
        FlagPreservingVecNormalize(envs, {"workers": (7,)})


def test_a_trained_checkpoint_keeps_its_flags_unnormalised(tmp_path):
    from policies.common.checkpoint import load_vecnormalize
    from policies.reconfig.train import ReconfigTrainConfig, train_reconfig

    params = (("duration_s", 60.0), ("load_fraction_range", (0.05, 0.1)))
    cfg = ReconfigTrainConfig(workload=WorkloadSource(name="matched-phases", params=params), workload_seeds=(0,),
                              total_timesteps=4, n_steps=4,
                              batch_size=4, n_epochs=1, wandb_mode="disabled", action_mode="target", target_degrees=(2, 4))
    train_reconfig(cfg, tmp_path, sim_config=_small_pool_config(), log=lambda s: None)
    stats = load_vecnormalize(tmp_path / "vecnormalize.pkl")
    stats.training = False
    obs = {k: np.zeros((1, *rms.mean.shape), dtype=np.float32) for k, rms in stats.obs_rms.items()}
    for name in ("present", "is_active", "is_reconfiguring"):
        obs["workers"][..., WORKER_COLS.index(name)] = 1.0
    obs["targets"][..., TARGET_COLS.index("is_last_action")] = 1.0
    out = stats.normalize_obs(obs)
    assert (out["workers"][..., [WORKER_COLS.index(n) for n in ("present", "is_active", "is_reconfiguring")]] == 1.0).all()
    assert (out["targets"][..., TARGET_COLS.index("is_last_action")] == 1.0).all()


def test_old_checkpoints_load_and_normalise_as_they_were_trained():
    """The shipped reconfig_target statistics (a plain VecNormalize) load unchanged: its policy was
    trained on normalised flags, so it is evaluated on them."""
    from stable_baselines3.common.vec_env import VecNormalize

    from policies.common.checkpoint import SHIPPED_RECONFIG, load_vecnormalize

    stats = load_vecnormalize(SHIPPED_RECONFIG / "vecnormalize.pkl")
    assert type(stats) is VecNormalize
    stats.training = False
    rms = stats.obs_rms["workers"]
    col = WORKER_COLS.index("is_reconfiguring")
    assert (rms.var[:, col] < 1e-7).all()  # never 1 in training: the measured issue
    obs = {k: np.zeros((1, *r.mean.shape), dtype=np.float32) for k, r in stats.obs_rms.items()}
    obs["workers"][..., col] = 1.0
    assert (stats.normalize_obs(obs)["workers"][..., col] == 10.0).all()


def test_old_statistics_can_be_measured_with_their_flags_passed_through():
    """``FlagPreservingVecNormalize.from_stats`` (measuring a checkpoint trained on normalised flags
    with the flags left as they are) changes the flag columns and nothing else."""
    from envs.reconfig_env import observation_flag_columns
    from policies.common.checkpoint import SHIPPED_RECONFIG, load_vecnormalize
    from policies.reconfig.flag_normalize import FlagPreservingVecNormalize

    stats = load_vecnormalize(SHIPPED_RECONFIG / "vecnormalize.pkl")
    stats.training = False
    flags = observation_flag_columns(stats.observation_space)
    assert flags == {"workers": (0, 2, 3), "targets": (3, 4)}
    raw = FlagPreservingVecNormalize.from_stats(stats, flags)
    rng = np.random.default_rng(0)
    obs = {k: rng.integers(0, 2, (1, *r.mean.shape)).astype(np.float32) for k, r in stats.obs_rms.items()}
    a, b = stats.normalize_obs(obs), raw.normalize_obs(obs)
    for key, cols in flags.items():
        other = [i for i in range(obs[key].shape[-1]) if i not in cols]
        assert (b[key][..., list(cols)] == obs[key][..., list(cols)]).all()
        assert (a[key][..., other] == b[key][..., other]).all()
        assert (a[key][..., list(cols)] != obs[key][..., list(cols)]).any()
    assert (a["window"] == b["window"]).all()


def test_routing_flags_and_mask_stay_0_or_1_in_the_policy_normalisation():
    """Routing has no running statistics (``policies.extractor`` scales fixed): its flags and its
    action mask (``eligible``) enter the network as 0 / 1 (a guard: this already held)."""
    import torch as th

    from envs.routing_env import WORKER_FEATURES
    from policies.common.extractor import _normalise, _scales

    div, use_log, lin = _scales(WORKER_FEATURES)
    names = [n for n, _ in WORKER_FEATURES]
    x = th.ones((1, len(names)))
    y = _normalise(x, div, use_log, lin)
    for flag in ("present", "eligible", "is_reconfiguring"):
        assert y[0, names.index(flag)].item() == 1.0, flag
