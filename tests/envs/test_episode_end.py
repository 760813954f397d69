"""Gymnasium end semantics of both environments: a horizon cut while work remains is
``truncated=True, terminated=False``; ``terminated=True`` only at a true end."""

from __future__ import annotations

import numpy as np
import pytest

from baselines.envs import make_reconfig_env
from envs.routing_env import PrefillRoutingEnv
from envs.sim import PoolConfig, Request, SimConfig, Workload

ONE_CP2 = PoolConfig(num_gpus=2, gpus_per_node=2, composition="cp2x1", supported_degrees=(2,))


def _ten_requests() -> Workload:
    """The issue's example: ten 512-token requests, one per second (0 s, 1 s, ..., 9 s)."""
    return Workload("ten", tuple(Request(i, float(i), 512, 1, (1000 + i,)) for i in range(10)), kv_block_size_tokens=512)


def _routing_episode(horizon_s):
    env = PrefillRoutingEnv(_ten_requests(), SimConfig(pool=ONE_CP2, horizon_s=horizon_s))
    env.reset(seed=0)
    steps = []
    while True:
        _, _, term, trunc, info = env.step(int(np.flatnonzero(env.action_masks())[0]))
        steps.append((term, trunc))
        if term or trunc:
            return env, steps, info


def test_routing_horizon_cut_with_arrivals_left_is_truncated():
    env, steps, _ = _routing_episode(3.5)
    assert len(steps) == 4  # 4 of 10 routed (arrivals at 0, 1, 2, 3 s); the next one is at 4.0 s
    assert steps[-1] == (False, True)
    assert all(s == (False, False) for s in steps[:-1])
    records = env.sim.result().records
    assert np.isfinite(records["finish_s"][:4]).all()  # the routed ones finished: only arrivals remain
    assert env.sim.env.peek() == pytest.approx(4.0)
    _, r, term, trunc, _ = env.step(0)  # stepping after the end repeats the flags
    assert (r, term, trunc) == (0.0, False, True)


def test_routing_true_end_with_horizon_set_is_terminated():
    _, steps, info = _routing_episode(1000.0)
    assert len(steps) == 10 and steps[-1] == (True, False)
    assert info["num_invalid_actions"] == 0


def test_routing_horizon_cut_with_unfinished_request_is_truncated():
    env, steps, _ = _routing_episode(9.01)  # the request arriving at 9 s is still in its prefill
    assert len(steps) == 10 and steps[-1] == (False, True)
    assert np.isnan(env.sim.result().records["finish_s"][9])


def _reconfig_episode(horizon_s, window_s):
    env = make_reconfig_env(_ten_requests(), SimConfig(pool=ONE_CP2, horizon_s=horizon_s), decision_window_s=window_s)
    env.reset(seed=0)
    steps = []
    while True:
        _, _, term, trunc, _ = env.step(0)
        steps.append((term, trunc))
        if term or trunc:
            return env, steps


@pytest.mark.parametrize("window_s", [1.0, 20.0])  # the cut inside a later window / inside the first one
def test_reconfig_horizon_cut_with_arrivals_left_is_truncated(window_s):
    env, steps = _reconfig_episode(3.5, window_s)
    assert steps[-1] == (False, True)
    assert all(s == (False, False) for s in steps[:-1])
    assert int(np.isfinite(env.sim.result().records["first_dispatch_s"]).sum()) == 4
    _, r, term, trunc, _ = env.step(0)
    assert (r, term, trunc) == (0.0, False, True)


def test_reconfig_true_end_with_horizon_set_is_terminated():
    env, steps = _reconfig_episode(1000.0, 1.0)
    assert steps[-1] == (True, False)
    assert np.isfinite(env.sim.result().records["finish_s"]).all()


def test_moved_helpers_stay_importable_from_routing_env():
    import envs.accounting
    import envs.episodes
    import envs.routing_env as old

    for name in ("episode_windows", "split_windows", "nonempty_windows", "DEFAULT_TARGET_RPS", "DEFAULT_WINDOW_S"):
        assert getattr(old, name) is getattr(envs.episodes, name)
    assert old._Accounting is envs.accounting.EpisodeAccounting
