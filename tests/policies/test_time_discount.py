"""Discounting per simulated second (policies.time_discount) and prediction noise in training."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th
from gymnasium import spaces

from envs.routing_env import PrefillRoutingEnv
from envs.sim import SimConfig
from tests.envs.conftest import SMALL_POOL, random_workload, toy_calibration

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
    from policies.time_discount import TimeDiscountedRolloutBuffer

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

    from policies.train import EpisodeSource, TrainConfig, training_sim_config

    cfg = TrainConfig(source=EpisodeSource(workload="mixed-default", window_s=20.0), total_timesteps=64, n_steps=32,
                      batch_size=32, n_envs=2, gamma_per_s=0.8, wandb_mode="disabled", hidden_dim=8)
    sc = training_sim_config(cfg, SimConfig())
    assert sc.prediction_error.noise_sigma == 0.1 and SimConfig().prediction_error.noise_sigma == 0.0
    assert training_sim_config(replace(cfg, train_prediction_noise=None), SimConfig()) == SimConfig()
    from sb3_contrib import MaskablePPO

    from policies import train as train_mod

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
    from policies.train import EpisodeSource, TrainConfig, training_sim_config

    wl = random_workload(80, rate_rps=8.0, seed=2)
    cfg = TrainConfig(source=EpisodeSource(workload="mixed-default"), wandb_mode="disabled")

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
