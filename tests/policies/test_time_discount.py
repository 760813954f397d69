"""Discounting per simulated second (policies.common.time_discount) and prediction noise in training."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th
from gymnasium import spaces

from envs.routing_env import PrefillRoutingEnv
from envs.sim import SimConfig
from envs.workloads import WorkloadSource
from tests.factories import SMALL_POOL, random_workload, toy_calibration

_OBS = spaces.Dict({"x": spaces.Box(0.0, 1.0, (2,), dtype=np.float32)})


class _Durations:
    def __init__(self) -> None:
        self.last_step_duration_s = np.zeros(2)


def _fill(buf, rewards, values, starts, durations) -> _Durations:
    src = _Durations()
    buf.durations = src
    buf.reset()
    for t in range(len(rewards)):
        src.last_step_duration_s = np.asarray(durations[t], dtype=float)
        buf.add({"x": np.zeros((2, 2), np.float32)}, np.zeros((2, 1)), np.asarray(rewards[t], np.float32),
                np.asarray(starts[t], np.float32), th.as_tensor(values[t], dtype=th.float32), th.zeros(2),
                action_masks=np.ones((2, 3), np.float32))
    return src


def _buffer(n, **kw):
    from policies.common.time_discount import TimeDiscountedRolloutBuffer

    return TimeDiscountedRolloutBuffer(n, _OBS, spaces.Discrete(3), device="cpu", n_envs=2, **kw)


def test_one_second_steps_equal_sb3_per_step_gamma():
    """With every step lasting 1 s, gamma_per_s acts exactly like SB3's per-step gamma."""
    from sb3_contrib.common.maskable.buffers import MaskableDictRolloutBuffer

    rng = np.random.default_rng(0)
    n = 7
    rewards, values = rng.normal(size=(n, 2)), rng.normal(size=(n, 2))
    starts = np.zeros((n, 2))
    starts[0] = 1
    starts[4, 1] = 1
    ref = MaskableDictRolloutBuffer(n, _OBS, spaces.Discrete(3), device="cpu", gae_lambda=0.9, gamma=0.8, n_envs=2)
    ref.reset()
    for t in range(n):
        ref.add({"x": np.zeros((2, 2), np.float32)}, np.zeros((2, 1)), rewards[t].astype(np.float32),
                starts[t].astype(np.float32), th.as_tensor(values[t], dtype=th.float32), th.zeros(2),
                action_masks=np.ones((2, 3), np.float32))
    buf = _buffer(n, gae_lambda=0.9, gamma=0.123, gamma_per_s=0.8)
    _fill(buf, rewards, values, starts, np.ones((n, 2)))
    last, dones = th.tensor([0.5, -0.2]), np.array([False, True])
    ref.compute_returns_and_advantage(last, dones)
    buf.compute_returns_and_advantage(last, dones)
    np.testing.assert_allclose(buf.advantages, ref.advantages, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(buf.returns, ref.returns, rtol=1e-5, atol=1e-6)


def test_discount_follows_elapsed_seconds():
    """Hand-computed GAE (lambda = 1) for steps of 0.5 s and 2 s: the bootstrap value is
    discounted by gamma_s ** (elapsed seconds), not by one factor per step."""
    buf = _buffer(2, gae_lambda=1.0, gamma_per_s=0.5)
    _fill(buf, rewards=[[1.0, 1.0], [2.0, 2.0]], values=[[0.0, 0.0], [0.0, 0.0]], starts=[[1, 1], [0, 0]],
          durations=[[0.5, 2.0], [2.0, 0.5]])
    buf.compute_returns_and_advantage(th.tensor([4.0, 4.0]), np.array([False, False]))
    g = 0.5
    env0 = 1.0 + g ** 0.5 * (2.0 + g ** 2.0 * 4.0)
    env1 = 1.0 + g ** 2.0 * (2.0 + g ** 0.5 * 4.0)
    np.testing.assert_allclose(buf.returns[0], [env0, env1], rtol=1e-6)


def test_buffer_refuses_without_durations_and_bad_gamma():
    with pytest.raises(ValueError, match="gamma_per_s"):
        _buffer(2, gamma_per_s=1.5)
    buf = _buffer(2, gamma_per_s=0.9)
    with pytest.raises(RuntimeError, match="StepDurationRecorder"):
        buf.add({"x": np.zeros((2, 2), np.float32)}, np.zeros((2, 1)), np.zeros(2, np.float32), np.zeros(2, np.float32),
                th.zeros(2), th.zeros(2))


def test_step_durations_add_up_to_the_episode_span():
    """``info["step_duration_s"]`` is the simulated time between decisions: over an episode
    they add up to (end of the simulation - first decision)."""
    env = PrefillRoutingEnv([random_workload(60, rate_rps=6.0, seed=1)], SimConfig(pool=SMALL_POOL), toy_calibration())
    _, info = env.reset(seed=0)
    t_first, total = info["sim_time_s"], 0.0
    while True:
        _, _, term, trunc, info = env.step(int(env.action_masks().argmax()))
        assert info["step_duration_s"] >= 0
        total += info["step_duration_s"]
        if term or trunc:
            break
    assert total == pytest.approx(env.sim.env.now - t_first, rel=1e-9)


def test_training_with_gamma_per_s_records_durations(tmp_path):
    """A tiny run with --gamma-per-s trains through the time-discounted buffer (durations > 0,
    discounts gamma_s ** dt) and with prediction noise in its training environments only."""
    from dataclasses import replace

    from policies.routing.episodes import EpisodeSource
    from policies.routing.train import TrainConfig, training_sim_config

    cfg = TrainConfig(source=EpisodeSource(WorkloadSource(name="mixed-default"), episode_window_s=20.0), total_timesteps=64,
                      n_steps=32,
                      batch_size=32, n_envs=2, gamma_per_s=0.8, wandb_mode="disabled", hidden_dim=8)
    sc = training_sim_config(cfg, SimConfig())
    assert sc.prediction_error.noise_sigma == 0.1 and SimConfig().prediction_error.noise_sigma == 0.0
    assert training_sim_config(replace(cfg, train_prediction_noise=None), SimConfig()) == SimConfig()
    from sb3_contrib import MaskablePPO

    from policies.routing import train as train_mod

    seen = {}
    orig = MaskablePPO.learn

    def spy(self, *a, **k):
        out = orig(self, *a, **k)
        seen["buf"] = self.rollout_buffer
        return out

    MaskablePPO.learn = spy
    try:
        train_mod.train_routing(cfg, tmp_path, log=lambda s: None, progress="off")
    finally:
        MaskablePPO.learn = orig
    buf = seen["buf"]
    assert type(buf).__name__ == "TimeDiscountedRolloutBuffer" and (buf.step_durations_s > 0).mean() > 0.5
    np.testing.assert_allclose(buf.step_discounts, 0.8 ** buf.step_durations_s, rtol=1e-6)


def test_prediction_noise_makes_simulator_seeds_matter():
    """With the training noise the same window routed the same way gives different TTFTs for
    different simulator seeds (without it, identical)."""
    from policies.routing.episodes import EpisodeSource
    from policies.routing.train import TrainConfig, training_sim_config

    wl = random_workload(80, rate_rps=8.0, seed=2)
    cfg = TrainConfig(source=EpisodeSource(WorkloadSource(name="mixed-default")), wandb_mode="disabled")

    def returns(sc):
        out = []
        for seed in (1, 2):
            env = PrefillRoutingEnv([wl], sc, toy_calibration())
            env.reset(options={"window_index": 0, "sim_seed": seed})
            total = 0.0
            while True:
                _, r, term, trunc, _ = env.step(int(env.action_masks().argmax()))
                total += r
                if term or trunc:
                    break
            out.append(total)
        return out

    base = SimConfig(pool=SMALL_POOL)
    a, b = returns(training_sim_config(cfg, base))
    c, d = returns(base)
    assert a != b and c == d


class _Recorder:
    def __init__(self, n) -> None:
        self.last_step_duration_s = np.zeros(n)
        self.last_decision_time_s = np.zeros(n)
        self.last_episode_number = np.zeros(n, dtype=np.int64)


def test_input_driven_baseline_is_the_other_replicas_return_to_go():
    """Two replicas of one episode: the baseline of a step is the other replica's discounted
    return-to-go from its first decision at or after the same time; where the other replica has
    no decision left in the rollout the critic's value is the baseline."""
    from policies.common.time_discount import InputDrivenRolloutBuffer

    buf = InputDrivenRolloutBuffer(3, _OBS, spaces.Discrete(3), device="cpu", n_envs=2, gamma_per_s=0.5)
    rec = _Recorder(2)
    buf.durations = rec
    buf.reset()
    times = [[0.0, 0.0], [1.0, 2.0], [2.0, 3.0]]  # decision times of replica 0 / replica 1
    rewards = [[1.0, 2.0], [1.0, 2.0], [1.0, 2.0]]
    for t in range(3):
        rec.last_decision_time_s = np.array(times[t])
        rec.last_step_duration_s = np.array([1.0, 2.0 if t == 0 else 1.0])
        buf.add({"x": np.zeros((2, 2), np.float32)}, np.zeros((2, 1)), np.asarray(rewards[t], np.float32),
                np.asarray([1.0, 1.0] if t == 0 else [0.0, 0.0], np.float32), th.tensor([7.0, 9.0]), th.zeros(2),
                action_masks=np.ones((2, 3), np.float32))
    buf.compute_returns_and_advantage(th.tensor([0.0, 0.0]), np.array([True, True]))
    d0, d1 = 0.5 ** np.array([1.0, 1.0, 1.0]), 0.5 ** np.array([2.0, 1.0, 1.0])
    g0 = np.array([1 + d0[0] * (1 + d0[1] * 1), 1 + d0[1] * 1, 1.0])
    g1 = np.array([2 + d1[0] * (2 + d1[1] * 2), 2 + d1[1] * 2, 2.0])
    np.testing.assert_allclose(buf.returns[:, 0], g0, rtol=1e-6)
    # replica 0 at t = 0, 1, 2: replica 1's first decisions at or after are at 0, 2, 2
    b0 = np.array([g1[0], g1[1] * 0.5 ** 1.0, g1[1]])
    np.testing.assert_allclose(buf.advantages[:, 0], g0 - b0, rtol=1e-5)
    # replica 1 at t = 0, 2, 3: replica 0 decides at 0 and 2, none at or after 3 -> the critic (9.0)
    np.testing.assert_allclose(buf.advantages[:, 1], g1 - np.array([g0[0], g0[2], 9.0]), rtol=1e-5)
    assert buf.replica_baseline_share == pytest.approx(5 / 6)


def test_replica_environments_replay_the_same_episodes():
    """With --input-baseline every training environment draws the same windows and seeds even
    though SB3 seeds VecEnv members with seed + index."""
    from stable_baselines3.common.vec_env import DummyVecEnv

    from policies.routing.episodes import EpisodeSource
    from policies.routing.train import TrainConfig, make_env_fn

    wins = [random_workload(30, rate_rps=6.0, seed=s) for s in range(6)]
    cfg = TrainConfig(source=EpisodeSource(WorkloadSource(name="mixed-default")), n_envs=3, gamma_per_s=0.9,
                      input_baseline=True,
                      wandb_mode="disabled")
    venv = DummyVecEnv([make_env_fn(cfg, wins, SimConfig(pool=SMALL_POOL), i) for i in range(3)])
    venv.seed(5)
    venv.reset()
    picks = [[], [], []]
    for _ in range(4):
        for i, e in enumerate(venv.envs):
            e.reset()
            picks[i].append((e.unwrapped.window_index, e.unwrapped.sim.config.seed))
    assert picks[0] == picks[1] == picks[2] and len(set(picks[0])) > 1
    with pytest.raises(ValueError, match="input_baseline"):
        TrainConfig(source=EpisodeSource(WorkloadSource(name="mixed-default")), input_baseline=True)
