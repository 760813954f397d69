"""One API / determinism / pickle test over every registered id (Gymnasium's ``tests/envs/test_envs.py``
pattern): a new id in ``envs.registration.ENV_IDS`` without small test arguments here fails."""

from __future__ import annotations

import pickle
import warnings

import gymnasium as gym
import numpy as np
import pytest

import envs
from envs.registration import ENV_IDS
from envs.sim import SimConfig
from tests.factories import SMALL_POOL, random_workload, toy_calibration

#: Small arguments per registered id (the defaults build minutes-long episodes).
SMALL_KWARGS = {
    "cpgym/PrefillRouting-v0": {},
    "cpgym/PrefillReconfig-v0": {"decision_window_s": 2.0, "capacity_features": True, "history_features": True},
    # a benchmark task's environment builds its own episodes (benchmark.env): 3 training episodes
    "cpgym/Benchmark-v1": {"task": "routing/conversation-0.9-v1", "max_episodes": 3},
}


def _make(env_id: str):
    envs.register_envs()
    if "task" in SMALL_KWARGS[env_id]:
        return gym.make(env_id, **SMALL_KWARGS[env_id])
    return gym.make(env_id, workloads=[random_workload(40, 6.0, s, name=f"w{s}") for s in range(3)],
                    config=SimConfig(pool=SMALL_POOL), calibration=toy_calibration(), **SMALL_KWARGS[env_id])


def _trajectory(env, seed: int) -> list:
    """Observations, rewards and flags of one episode under the first eligible action."""
    obs, _ = env.reset(seed=seed)
    out = [obs]
    while True:
        action = int(np.flatnonzero(env.unwrapped.action_masks())[0])
        obs, reward, terminated, truncated, _ = env.step(action)
        assert env.observation_space.contains(obs)
        out.append((obs, reward, terminated, truncated))
        if terminated or truncated:
            return out


def _same(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def test_every_registered_id_has_test_arguments():
    assert sorted(SMALL_KWARGS) == sorted(ENV_IDS) == sorted(envs.register_envs())


@pytest.mark.parametrize("env_id", sorted(ENV_IDS))
def test_registered_id_passes_the_env_checkers(env_id):
    from gymnasium.utils.env_checker import check_env
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = _make(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # gymnasium's checker warns about what it finds
        warnings.filterwarnings("ignore", message=".*is different from the unwrapped version.*")
        check_env(env, skip_render_check=True)
    sb3_check_env(env.unwrapped, warn=True)  # (it warns that the per-worker 2-D keys need a custom extractor: they have one)


@pytest.mark.parametrize("env_id", sorted(ENV_IDS))
def test_registered_id_is_deterministic_per_seed(env_id):
    # same seed, same trajectory (also after other episodes of the same env); other seeds differ
    a, b = _make(env_id), _make(env_id)
    ref = _trajectory(a, 7)
    _trajectory(b, 1)
    _trajectory(b, 2)
    again = _trajectory(b, 7)
    assert len(ref) == len(again) and all(_same(x, y) for x, y in zip(ref, again))
    others = [_trajectory(a, s) for s in range(3)]
    assert any(len(t) != len(ref) or not all(_same(x, y) for x, y in zip(t, ref)) for t in others)


@pytest.mark.parametrize("env_id", sorted(ENV_IDS))
def test_registered_id_pickles_before_reset(env_id):
    env = _make(env_id)
    twin = pickle.loads(pickle.dumps(env.unwrapped))
    assert _same(env.reset(seed=3)[0], twin.reset(seed=3)[0])
