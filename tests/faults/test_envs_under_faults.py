"""Both Gymnasium environments under a fault model: fault flags in the observation, masks
without stopped or rebuilding workers, Gymnasium/SB3 API checks."""

import math

import numpy as np
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

from baselines.envs import make_reconfig_env
from envs.routing_env import PrefillRoutingEnv
from envs.sim import SimConfig
from envs.sim.fault_config import FaultConfig, FaultEvent
from envs.sim.router import LeastWorkRouter
from tests.factories import SMALL_POOL, random_workload, toy_calibration

FAULTS = FaultConfig(events=(FaultEvent("straggler", 0.0, gpu=4, factor=2.0, duration_s=1000.0),
                             FaultEvent("gpu_failure", 2.0, gpu=0)),
                     detection_delay_s=1.0, rebuild_s=3.0, repair_s=1000.0)


def test_routing_env_observes_faults_and_masks_exclude_unschedulable_workers():
    # SMALL_POOL: cp4@0, cp2@4, cp2@6 (worker id = first GPU). GPU 0 fails at 2 s, detected at
    # 3 s: survivors CP-1@1 and CP-2@2 rebuild until 6 s; GPU 4 (worker 4) straggles throughout.
    env = PrefillRoutingEnv([random_workload(200, rate_rps=20.0, seed=1)], SimConfig(pool=SMALL_POOL, faults=FAULTS),
                            toy_calibration(), observe_faults=True)
    obs, _ = env.reset(seed=0)
    seen_rebuilding = False
    done = False
    while not done:
        now = env.sim.env.now
        f = obs["faults"]
        mask = env.action_masks()
        assert f[4, 1] == 1.0  # degraded
        if 3.0 <= now < 6.0:
            seen_rebuilding = True
            assert f[0, 0] == 1.0 and f[1, 2] == 1.0 and f[2, 2] == 1.0
            assert not mask[0] and not mask[1] and not mask[2] and mask[4] and mask[6]
        if now >= 6.0:
            assert f[1, 2] == 0.0 and mask[1] and mask[2]
        obs, r, term, trunc, _ = env.step(int(np.flatnonzero(mask)[-1]))
        assert math.isfinite(r)
        done = term or trunc
    assert seen_rebuilding
    assert env.sim.attachments["faults"].records[1].num_rebuilt_workers == 2


def test_routing_env_api_checks_with_faults():
    env = PrefillRoutingEnv([random_workload(60, rate_rps=6.0, seed=s) for s in range(2)],
                            SimConfig(pool=SMALL_POOL, faults=FAULTS), toy_calibration(), observe_faults=True)
    gym_check_env(env, skip_render_check=True)
    sb3_check_env(env, warn=True)
    env.reset(seed=0)
    for _ in range(150):  # unmasked random actions never crash
        obs, r, term, trunc, _ = env.step(env.action_space.sample())
        assert env.observation_space.contains(obs)
        if term or trunc:
            env.reset()


def test_default_observation_space_unchanged_by_a_fault_model():
    wins = [random_workload(20, rate_rps=6.0, seed=0)]
    a = PrefillRoutingEnv(wins, SimConfig(pool=SMALL_POOL), toy_calibration())
    b = PrefillRoutingEnv(wins, SimConfig(pool=SMALL_POOL, faults=FAULTS), toy_calibration())
    assert a.observation_space == b.observation_space and "faults" not in b.observation_space.spaces


def test_reconfig_env_with_faults():
    env = make_reconfig_env([random_workload(120, rate_rps=6.0, seed=s) for s in range(2)],
                             SimConfig(pool=SMALL_POOL, faults=FAULTS), toy_calibration(), make_router=LeastWorkRouter,
                             decision_window_s=2.0, observe_faults=True)
    gym_check_env(env, skip_render_check=True)
    sb3_check_env(env, warn=True)
    obs, _ = env.reset(seed=0)
    saw_down = False
    for _ in range(40):
        obs, r, term, trunc, _ = env.step(env.action_space.sample())
        saw_down |= bool(obs["faults"][0, 0])
        assert env.observation_space.contains(obs) and math.isfinite(r)
        if term or trunc:
            obs, _ = env.reset()
    assert saw_down
