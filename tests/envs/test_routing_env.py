from __future__ import annotations

import math
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

from envs.routing_env import PrefillRoutingEnv, RoutingRewardConfig, split_windows
from envs.sim import SimConfig
from tests.factories import ONE_GPU_POOL, SMALL_POOL, make_workload, random_workload


def _masked_random_episode(env, seed, rng_seed=0):
    rng = np.random.default_rng(rng_seed)
    obs, _ = env.reset(seed=seed)
    rewards, obs_list = [], [obs]
    while True:
        assert env.observation_space.contains(obs)
        a = int(rng.choice(np.flatnonzero(env.action_masks())))
        obs, r, term, trunc, info = env.step(a)
        assert not info["invalid_action"]
        rewards.append(r)
        obs_list.append(obs)
        if term or trunc:
            return rewards, obs_list, term, trunc


def test_worked_example_rewards(toy_cal):
    pool = ONE_GPU_POOL
    cfg = SimConfig(pool=pool)
    env = PrefillRoutingEnv(make_workload([(0.0, 10, None), (0.5, 10, None)]), cfg, toy_cal)
    env.reset(seed=0)
    c = 10 * toy_cal.kv_bytes_per_token / cfg.latency.kv_handoff_bandwidth_bytes_per_s + cfg.latency.first_decode_step_s
    _, r0, term0, _, _ = env.step(0)
    _, r1, term1, _, _ = env.step(0)
    assert not term0 and term1
    assert r0 == pytest.approx(-(0.5 + c), rel=1e-12)
    assert r1 == pytest.approx(-(5.0 + c), rel=1e-12)


def test_reward_identity_time_in_system(toy_cal, small_config):
    wl = random_workload(300, rate_rps=3.0, seed=1)
    env = PrefillRoutingEnv(wl, small_config, toy_cal)
    rewards, _, term, trunc = _masked_random_episode(env, seed=3)
    assert term and not trunc
    ttft = env.sim.result().records["ttft_s"]
    assert not np.isnan(ttft).any()
    assert sum(rewards) == pytest.approx(-ttft.sum(), rel=1e-9)
    assert len(rewards) == wl.num_requests
    assert min(rewards) < 0


def test_reward_identity_slo_miss_tokens(toy_cal, small_config):
    wl = random_workload(300, rate_rps=4.0, seed=2)
    env = PrefillRoutingEnv(wl, small_config, toy_cal, reward="slo_miss_tokens")
    rewards, *_ = _masked_random_episode(env, seed=5)
    from envs.metrics import summarize

    att = summarize(env.sim.result())["slo_attainment_token_weighted"]
    assert 0.0 < att < 1.0  # the identity is checked with both hits and misses
    assert sum(rewards) == pytest.approx(-wl.num_requests * (1.0 - att), rel=1e-9)


def test_reward_identity_under_horizon_counts_unfinished_as_misses(toy_cal):
    wl = random_workload(200, rate_rps=8.0, seed=4)
    cfg = SimConfig(pool=SMALL_POOL, horizon_s=10.0)
    env = PrefillRoutingEnv(wl, cfg, toy_cal, reward="slo_miss_tokens")
    rewards, _, term, trunc = _masked_random_episode(env, seed=0)
    assert trunc and not term
    from envs.metrics import summarize

    s = summarize(env.sim.result())
    assert s["num_unfinished"] > 0
    assert sum(rewards) == pytest.approx(-wl.num_requests * (1.0 - s["slo_attainment_token_weighted"]), rel=1e-9)


def test_invalid_action_is_remapped_to_least_work_and_penalised(toy_cal, small_config):
    wl = random_workload(20, rate_rps=2.0, seed=0)
    env = PrefillRoutingEnv(wl, small_config, toy_cal, reward=RoutingRewardConfig(invalid_action_penalty=7.0))
    env.reset(seed=0)
    mask = env.action_masks()
    assert mask.shape == (SMALL_POOL.max_num_workers,) and mask.sum() == 3  # three workers, ids 0, 4, 6
    empty = int(np.flatnonzero(~mask)[0])
    _, r_bad, *_, info = env.step(empty)
    assert info["invalid_action"] and info["worker_id"] == 0  # idle pool: least work, pool order
    env2 = PrefillRoutingEnv(wl, small_config, toy_cal)
    env2.reset(seed=0)
    _, r_ok, *_ = env2.step(0)
    assert r_bad == pytest.approx(r_ok - 7.0)
    for a in (-1, 10**6):  # not an element of the action space: a ValueError (tests/envs/test_env_api.py)
        with pytest.raises(ValueError, match=f"action {a} is not an element of the action space"):
            env.step(a)


def test_same_seed_same_episode_and_seeds_differ(toy_cal, small_config):
    wins = [random_workload(60, rate_rps=3.0, seed=s, name=f"w{s}") for s in range(4)]
    a = PrefillRoutingEnv(wins, small_config, toy_cal)
    b = PrefillRoutingEnv(wins, small_config, toy_cal)
    ra, oa, *_ = _masked_random_episode(a, seed=11)
    rb, ob, *_ = _masked_random_episode(b, seed=11)
    assert ra == rb
    assert all(np.array_equal(x["workers"], y["workers"]) for x, y in zip(oa, ob))
    picks = set()
    for s in range(8):
        a.reset(seed=s)
        picks.add(a.window_index)
    assert len(picks) > 1


def test_observation_features_match_pool_view(toy_cal, small_config):
    wl = random_workload(80, rate_rps=6.0, seed=9)
    env = PrefillRoutingEnv(wl, small_config, toy_cal)
    obs, _ = env.reset(seed=0)
    from envs.routing_env import WORKER_FEATURES

    col = {n: i for i, (n, _) in enumerate(WORKER_FEATURES)}
    for _ in range(40):
        view, req = env.sim.view, env.pending_request
        for wid in view.worker_ids:
            row = obs["workers"][wid]
            assert row[col["degree"]] == view.degree(wid)
            assert row[col["outstanding_work_s"]] == pytest.approx(view.outstanding_work_s(wid), rel=1e-6)
            assert row[col["ready_hit_tokens"]] == view.cached_tokens(wid, req)
            assert row[col["predicted_service_s"]] == pytest.approx(view.predicted_service_s(wid, req), rel=1e-6)
        assert obs["request"][0] == req.num_prompt_tokens
        obs, *_ = env.step(int(np.flatnonzero(env.action_masks())[-1]))


@pytest.mark.parametrize("env_id", ["cpgym/PrefillRouting-v0"])
def test_check_env_registered_routing(env_id, toy_cal, small_config):
    from gymnasium.utils.env_checker import check_env as gym_check_env
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    import envs

    assert env_id in envs.register_envs()
    wins = [random_workload(40, rate_rps=3.0, seed=s) for s in range(3)]
    env = gym.make(env_id, workloads=wins, config=small_config, calibration=toy_cal)
    gym_check_env(env.unwrapped, skip_render_check=True)
    sb3_check_env(env.unwrapped, warn=True)
    # unmasked random actions never crash and stay in the space
    env.reset(seed=0)
    for _ in range(200):
        obs, r, term, trunc, _ = env.step(env.action_space.sample())
        assert env.observation_space.contains(obs) and math.isfinite(r)
        if term or trunc:
            env.reset()


def test_registered_default_routing_env_builds():
    import envs

    envs.register_envs()
    env = gym.make("cpgym/PrefillRouting-v0")
    obs, _ = env.reset(seed=0)
    assert obs["workers"].shape == (40, 12) and env.action_space.n == 40
    assert env.unwrapped.action_masks().sum() == 14  # the default cp4x6,cp2x8 pool


def test_split_windows_is_disjoint_and_deterministic():
    wins = [random_workload(3, 1.0, s, name=f"w{s}") for s in range(9)]
    tr, ev = split_windows(wins, "train"), split_windows(wins, "eval")
    assert [w.name for w in ev] == ["w3", "w7"]
    assert not {w.name for w in tr} & {w.name for w in ev} and len(tr) + len(ev) == 9
    with pytest.raises(ValueError, match="part"):
        split_windows(wins, "test")


def test_reward_config_validation():
    with pytest.raises(ValueError, match="reward.kind"):
        RoutingRewardConfig(kind="throughput")
    with pytest.raises(ValueError, match="invalid_action_penalty"):
        RoutingRewardConfig(invalid_action_penalty=-1)


def test_import_envs_sim_does_not_import_gymnasium():
    code = "import envs.sim, envs, sys; assert 'gymnasium' not in sys.modules and 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_observation_costs_and_rate_are_exact(toy_cal, small_config):
    """The fast observation build (A/B split of the cost model reused per prefix hit, forward
    cursors over the arrivals) gives exactly the float32 of the direct formulas: ``service_time_s``
    per worker, ``C*s - C_min*E_{C_min}`` for the extra GPU time, and a ``searchsorted`` count for
    the recent arrival rate."""
    from envs.routing_env import RECENT_RATE_WINDOW_S, WORKER_FEATURES

    wl = random_workload(120, rate_rps=8.0, seed=3)
    env = PrefillRoutingEnv(wl, small_config, toy_cal)
    obs, _ = env.reset(seed=0)
    col = {n: i for i, (n, _) in enumerate(WORKER_FEATURES)}
    arrivals = np.array([r.arrival_time_s for r in wl.requests])
    num_checked = 0
    while env.pending_request is not None:
        sim, req = env.sim, env.pending_request
        cm, L = sim.cost_model, req.num_prompt_tokens
        elig = [w for w in sim.worker_ids if sim.is_eligible(sim.workers[w], req)]
        c_min = min(sim.workers[w].degree for w in elig)
        for wid in sim.worker_ids:
            w, p = sim.workers[wid], int(obs["workers"][wid, col["ready_hit_tokens"]])
            s = w.cost_model.service_time_s(w.degree, L - p, p)
            assert obs["workers"][wid, col["predicted_service_s"]] == np.float32(s)
            x = max(w.degree * s - c_min * cm.service_time_s(c_min, L - p, p), 0.0) if wid in elig else 0.0
            assert obs["workers_extra"][wid, 0] == np.float32(x)
        now = sim.env.now
        t0 = max(now - RECENT_RATE_WINDOW_S, 0.0)
        num = np.searchsorted(arrivals, now, side="right") - np.searchsorted(arrivals, t0, side="right")
        assert obs["context"][1] == np.float32(num / (now - t0) if now > t0 else 0.0)
        num_checked += 1
        obs, *_ = env.step(int(np.flatnonzero(env.action_masks())[0]))
    assert num_checked >= 100


@pytest.mark.parametrize("arrivals_s, key_index", [
    ((0.0, 1e-9, 2e-9), 1),   # three arrivals within 2 ns: recent_arrival_rate_rps ~1e9 > COUNT_BOUND
    ((0.0, 2e5), 0),          # a window of 2e5 s: time_to_window_end_s > TIME_BOUND_S
])
def test_context_observation_is_clipped_to_its_bounds(arrivals_s, key_index, toy_cal, small_config):
    # the "context" features were not clipped (every other key was): observations outside the
    # declared observation_space at a burst of arrivals or in a window longer than ~28 hours
    env = PrefillRoutingEnv(make_workload([(t, 10, None) for t in arrivals_s]), small_config, toy_cal)
    obs, _ = env.reset(seed=0)
    seen = [obs]
    while env.pending_request is not None:
        seen.append(env.step(int(np.flatnonzero(env.action_masks())[0]))[0])
    high = env.observation_space["context"].high
    assert all(env.observation_space.contains(o) for o in seen)
    assert max(o["context"][key_index] for o in seen) == high[key_index]
