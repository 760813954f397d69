from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from baselines.envs import make_reconfig_env
from envs.reconfig_env import candidate_operations
from envs.sim import PoolConfig, SimConfig
from envs.sim.router import LeastWorkRouter
from tests.factories import SMALL_POOL, random_workload


def _env(toy_cal, n=400, rate=6.0, seed=0, **kw):
    wins = [random_workload(n, rate_rps=rate, seed=seed + s) for s in range(2)]
    return make_reconfig_env(wins, SimConfig(pool=SMALL_POOL), toy_cal, make_router=LeastWorkRouter, decision_window_s=5.0,
                             **kw)


def test_candidate_operations_follow_topology():
    ops = candidate_operations(SMALL_POOL)  # 8 GPUs, degrees {1, 2, 4}
    splits = [o for o in ops if o[0] == "split"]
    merges = [o for o in ops if o[0] == "merge"]
    assert splits == [("split", 2, 0), ("split", 2, 2), ("split", 2, 4), ("split", 2, 6), ("split", 4, 0), ("split", 4, 4)]
    assert merges == [("merge", 1, 0), ("merge", 1, 2), ("merge", 1, 4), ("merge", 1, 6), ("merge", 2, 0), ("merge", 2, 4)]
    two_nodes = PoolConfig(num_gpus=8, gpus_per_node=4, composition="cp4x2", supported_degrees=(4, 8))
    assert candidate_operations(two_nodes) == []  # a CP-8 group would cross a node


def test_reward_identity_masks_and_operations(toy_cal):
    env = _env(toy_cal)
    obs, _ = env.reset(seed=1)
    rng = np.random.default_rng(0)
    total = 0.0
    while True:
        assert env.observation_space.contains(obs)
        mask = env.action_masks()
        assert mask[0]
        # initial pool cp4@0, cp2@4, cp2@6: split of the CP-4 and of each CP-2, merge of the CP-2 pair
        a = int(rng.choice(np.flatnonzero(mask))) if rng.random() < 0.5 else 0
        obs, r, term, trunc, info = env.step(a)
        assert not info["invalid_action"]
        total += r
        if term or trunc:
            break
    assert info["num_operations"] > 0
    assert sum(d for d, _ in info["composition"]) == 8  # GPU count preserved
    ttft = env.sim.result().records["ttft_s"]
    assert not np.isnan(ttft).any()
    assert total == pytest.approx(-env.reward_scale * ttft.sum(), rel=1e-9)


def test_initial_mask_and_invalid_action_penalty(toy_cal):
    env = _env(toy_cal, invalid_action_penalty=3.0)
    env.reset(seed=0)
    mask = env.action_masks()
    allowed = {env.candidates[k - 1] for k in np.flatnonzero(mask) if k > 0}
    assert allowed == {("split", 4, 0), ("split", 2, 4), ("split", 2, 6), ("merge", 2, 4)}
    bad = next(k for k in range(1, env.action_space.n) if not mask[k])
    ref = _env(toy_cal)
    ref.reset(seed=0)
    _, r_ok, *_ = ref.step(0)
    _, r_bad, _, _, info = env.step(bad)
    assert info["invalid_action"] and info["num_operations"] == 0
    assert r_bad == pytest.approx(r_ok - 3.0)


def test_check_env_registered_reconfig(toy_cal):
    from gymnasium.utils.env_checker import check_env as gym_check_env
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    import envs

    envs.register_envs()
    wins = [random_workload(120, rate_rps=6.0, seed=s) for s in range(2)]
    env = gym.make("cpgym/PrefillReconfig-v0", workloads=wins, config=SimConfig(pool=SMALL_POOL), calibration=toy_cal,
                   make_router=LeastWorkRouter, decision_window_s=5.0)
    gym_check_env(env.unwrapped, skip_render_check=True)
    sb3_check_env(env.unwrapped, warn=True)
    env.reset(seed=0)
    for _ in range(30):  # unmasked random actions never crash
        _, r, term, trunc, _ = env.step(env.action_space.sample())
        if term or trunc:
            env.reset()


def test_default_inner_router_is_vertumnus(toy_cal):
    wins = [random_workload(60, rate_rps=6.0, seed=0)]
    env = make_reconfig_env(wins, SimConfig(pool=SMALL_POOL), toy_cal, decision_window_s=5.0)
    env.reset(seed=0)
    assert env.router.name == "vertumnus-router"
    with pytest.raises(ValueError, match="decision_window_s"):
        make_reconfig_env(wins, SimConfig(pool=SMALL_POOL), toy_cal, decision_window_s=0)


def test_capacity_features_follow_the_profile_and_the_operations(toy_cal):
    from envs.reconfig_env import CAPACITY_WINDOW_FEATURES, WINDOW_FEATURES

    env = _env(toy_cal, capacity_features=True)
    base = len(WINDOW_FEATURES)
    names = [n for n, _, _ in CAPACITY_WINDOW_FEATURES] + [f"cp{d}" for d in env.degrees]
    assert env.observation_space["window"].shape == (base + len(names),)
    assert env.observation_space["window"].low[base] < 0  # the rate trend is signed
    obs, _ = env.reset(seed=1)
    f = dict(zip(names, obs["window"][base:]))
    lam = {d: f[f"cp{d}"] for d in env.degrees}
    assert all(v > 0 for v in lam.values())
    counts = {}
    for wid in env.sim.worker_ids:
        counts[env.sim.workers[wid].degree] = counts.get(env.sim.workers[wid].degree, 0) + 1
    cap = sum(n * lam[d] for d, n in counts.items())
    assert f["capacity_rps"] == pytest.approx(cap, rel=1e-5)
    assert f["load"] == pytest.approx(obs["window"][0] / cap, rel=1e-4)
    # initial pool cp4@0, cp2@4, cp2@6: best split is of a CP-2 (or the CP-4), best merge the CP-2 pair
    best_split = max(cap - lam[2] + 2 * lam[1], cap - lam[4] + 2 * lam[2])
    assert f["capacity_rps_after_best_split"] == pytest.approx(best_split, rel=1e-5)
    assert f["capacity_rps_after_best_merge"] == pytest.approx(cap - 2 * lam[2] + lam[4], rel=1e-5)
    assert f["time_since_last_operation_s"] == pytest.approx(5.0)
    split = next(k for k in np.flatnonzero(env.action_masks()) if k > 0 and env.candidates[k - 1][0] == "split")
    obs, *_ = env.step(split)
    g = dict(zip(names, obs["window"][base:]))
    assert g["time_since_last_operation_s"] == pytest.approx(5.0)  # the operation started at 5 s, now 10 s
    assert g["arrival_rate_trend_rps"] == pytest.approx(obs["window"][0] - f["load"] * f["capacity_rps"], abs=1e-3)
    assert 0.0 <= g["prefix_hit_share"] <= 1.0
    obs, *_ = env.step(0)
    assert dict(zip(names, obs["window"][base:]))["time_since_last_operation_s"] == pytest.approx(10.0)
    cache, computed = env.capacity_cache, env.capacity_cache.num_profiles_computed
    env.reset(seed=1)
    assert env.capacity_cache is cache and cache.num_profiles_computed == computed  # profiles reused across episodes


def _mix_workload(name: str, long_share: float, seed: int):
    """40 arrivals at 4 req/s of 200-token prompts, ``long_share`` of them 700 tokens (another
    length class of the capacity profile), no shared prefixes."""
    from envs.sim import Request, Workload

    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(0.25, 40))
    reqs, nxt = [], 0
    for i in range(40):
        L = 700 if rng.random() < long_share else 200
        reqs.append(Request(i, float(t[i]), L, 1, tuple(range(nxt, nxt + L // 4))))
        nxt += L // 4
    return Workload(name, tuple(reqs), kv_block_size_tokens=4)


def test_capacity_features_reset_with_a_seed_ignore_earlier_episodes(toy_cal):
    # the table kept across episodes remembered the mixes it had met: a mix within the tolerance
    # of an earlier episode's got that reference's rescaled profile, so reset(seed=5) observed
    # other capacities after another episode than in a fresh environment
    def make():
        return make_reconfig_env([_mix_workload("x", 0.25, 0), _mix_workload("y", 0.0, 1)], SimConfig(pool=SMALL_POOL),
                                  toy_cal, decision_window_s=2.0, capacity_features=True)

    fresh = make().reset(seed=5, options={"window_index": 0})[0]["window"]
    env = make()
    env.reset(seed=1, options={"window_index": 1})
    assert np.array_equal(env.reset(seed=5, options={"window_index": 0})[0]["window"], fresh)


def test_capacity_features_pass_the_env_checker(toy_cal):
    from gymnasium.utils.env_checker import check_env

    check_env(_env(toy_cal, n=120, capacity_features=True), skip_render_check=True)


def test_history_features_accumulate_the_episode_so_far(toy_cal):
    from envs.reconfig_env import CAPACITY_WINDOW_FEATURES, HISTORY_WINDOW_FEATURES, WINDOW_FEATURES

    env = _env(toy_cal, n=200, capacity_features=True, history_features=True)
    base = len(WINDOW_FEATURES) + len(CAPACITY_WINDOW_FEATURES) + len(env.degrees)
    names = [n for n, _, _ in HISTORY_WINDOW_FEATURES]
    assert env.observation_space["window"].shape == (base + len(names),)
    obs, _ = env.reset(seed=1, options={"window_index": 0, "sim_seed": 1})
    reqs = env.sim.workload.requests
    windows = []  # (rate, long share, tokens) of each observed window, from the workload itself
    done, t = False, 0.0
    while not done:
        t += env.decision_window_s
        w = [r for r in reqs if t - env.decision_window_s < r.arrival_time_s <= t]
        n_long = sum(r.num_prompt_tokens > env.long_request_tokens for r in w)
        windows.append((len(w) / env.decision_window_s, n_long / len(w) if w else 0.0, sum(r.num_prompt_tokens for r in w)))
        h = dict(zip(names, obs["window"][base:]))
        arrived = [r for r in reqs if r.arrival_time_s <= t]
        assert obs["window"][0] == pytest.approx(windows[-1][0])
        assert h["elapsed_s"] == pytest.approx(t)
        assert h["episode_arrival_rate_rps"] == pytest.approx(len(arrived) / t, rel=1e-5)
        assert h["episode_token_rate_per_s"] == pytest.approx(sum(r.num_prompt_tokens for r in arrived) / t, rel=1e-5)
        n_long_all = sum(r.num_prompt_tokens > env.long_request_tokens for r in arrived)
        assert h["episode_long_request_fraction"] == pytest.approx(n_long_all / len(arrived), rel=1e-5)
        prev = windows[-2] if len(windows) > 1 else (0.0, 0.0)
        assert (h["previous_arrival_rate_rps"], h["previous_long_request_fraction"]) == pytest.approx(prev[:2], rel=1e-5)
        assert h["max_window_arrival_rate_rps"] == pytest.approx(max(x[0] for x in windows), rel=1e-5)
        assert h["max_window_long_request_fraction"] == pytest.approx(max(x[1] for x in windows), rel=1e-5)
        assert env.observation_space.contains(obs)
        obs, _, term, trunc, _ = env.step(0)
        done = term or trunc
    last = obs["window"][base:].copy()
    again, *_ = env.step(0)  # stepping after the end repeats the observation, the history included
    assert np.array_equal(again["window"][base:], last)
    first, _ = env.reset(seed=1, options={"window_index": 0, "sim_seed": 1})  # reset clears the history
    assert first["window"][base + names.index("elapsed_s")] == pytest.approx(env.decision_window_s)
    assert first["window"][base + names.index("previous_arrival_rate_rps")] == 0.0
    with pytest.raises(ValueError, match="history_features must be a bool"):
        _env(toy_cal, history_features="yes")


def test_history_features_pass_the_env_checker_and_reach_the_checkpoint_arguments(toy_cal):
    from gymnasium.utils.env_checker import check_env

    from policies.reconfig.evaluate import env_kwargs_of
    from policies.reconfig.train import ReconfigTrainConfig

    check_env(_env(toy_cal, n=120, capacity_features=True, history_features=True), skip_render_check=True)
    assert env_kwargs_of({"capacity_features": True}) == {"capacity_features": True}  # older checkpoints: off
    assert ReconfigTrainConfig(history_features=True).env_kwargs()["history_features"] is True
    # a non-bool was truthy: "false" / "no" turned the observation on
    with pytest.raises(ValueError, match="history_features must be a bool, got 'false'"):
        env_kwargs_of({"capacity_features": True, "history_features": "false"})
    with pytest.raises(ValueError, match="capacity_features must be a bool, got 'no'"):
        env_kwargs_of({"capacity_features": "no"})
    with pytest.raises(ValueError, match="history_features must be a bool, got 'no'"):
        ReconfigTrainConfig(history_features="no")


def test_target_menu_lists_every_composition_of_the_degrees():
    from envs.reconfig_env import target_menu

    assert target_menu(SMALL_POOL, (2, 4)) == ["cp4x2", "cp4x1,cp2x2", "cp2x4"]
    pool40 = PoolConfig(num_gpus=40, gpus_per_node=8, composition="cp4x6,cp2x8", supported_degrees=(1, 2, 4, 8))
    assert len(target_menu(pool40, (2, 4))) == 11 and len(target_menu(pool40, (2, 4, 8))) == 36
    with pytest.raises(ValueError, match="subset of the pool's supported degrees"):
        target_menu(SMALL_POOL, (2, 8))


def test_target_mode_moves_to_the_chosen_composition_and_stays(toy_cal):
    from envs.reconfig_env import TARGET_FEATURES

    env = _env(toy_cal, capacity_features=True, action_mode="target")
    assert env.target_compositions == ["cp4x2", "cp4x1,cp2x2", "cp2x4"]  # default degrees (2, 4, 8) & pool's
    assert env.action_space.n == 3
    obs, _ = env.reset(seed=1)
    assert env.action_masks().tolist() == [True, True, True]
    assert obs["targets"].shape == (3, len(TARGET_FEATURES))
    T = obs["targets"]
    assert T[:, 3].tolist() == [0.0, 1.0, 0.0]  # the pool starts at cp4x1,cp2x2
    assert T[1, 2] == 0.0 and T[0, 2] > 0 and T[2, 2] > 0  # GPU-level distance from the pool
    lam = dict(zip(env.degrees, obs["window"][-len(env.degrees):]))
    assert T[2, 0] == pytest.approx(4 * lam[2], rel=1e-5)  # cp2x4: four CP-2 workers
    assert T[2, 1] == pytest.approx(obs["window"][0] / T[2, 0], rel=1e-4)
    total = 0.0
    ops = []
    while True:
        assert env.observation_space.contains(obs)
        obs, r, term, trunc, info = env.step(2)  # cp2x4: one split of the CP-4, then nothing more to do
        total += r
        ops.append(info["num_operations"])
        if term or trunc:
            break
    assert ops[0] == 1 and ops[-1] == 1  # one operation, then "stay" starts nothing
    assert sorted(d for d, _ in info["composition"]) == [2, 2, 2, 2]
    assert obs["targets"][2, 3] == 1.0 and obs["targets"][2, 4] == 1.0  # is the pool, was the last action
    ttft = env.sim.result().records["ttft_s"]
    assert total == pytest.approx(-env.reward_scale * ttft.sum(), rel=1e-9)


def test_target_mode_budget_below_one_operation_is_refused(toy_cal):
    # 2 GPUs fit no operation of this menu (every split / merge moves 4): the env never reconfigured
    with pytest.raises(ValueError, match=r"max_operation_gpus_per_window must be >= 4 .* got 2"):
        _env(toy_cal, capacity_features=True, action_mode="target", max_operation_gpus_per_window=2)
    env = _env(toy_cal, capacity_features=True, action_mode="target", max_operation_gpus_per_window=4)
    env.reset(seed=1)
    _, _, _, _, info = env.step(0)  # cp4x2: the merge of the CP-2 pair (4 GPUs) fits
    assert info["num_operations"] == 1
    with pytest.raises(ValueError, match="capacity_features=True"):
        _env(toy_cal, action_mode="target")
    with pytest.raises(ValueError, match="action_mode must be"):
        _env(toy_cal, capacity_features=True, action_mode="targets")


def test_target_mode_passes_the_env_checker(toy_cal):
    from gymnasium.utils.env_checker import check_env

    check_env(_env(toy_cal, n=120, capacity_features=True, action_mode="target"), skip_render_check=True)


@pytest.mark.parametrize("reward", ["time_in_system", "slo_miss_tokens"])
def test_episode_ending_in_the_first_window_keeps_its_reward(reward, toy_cal):
    # the whole run fits in reset's window: the first (and last) step returned 0.0, so the episode
    # return was 0 instead of -sum(TTFT) (or -misses); a later step stays a no-op
    from envs.sim import SimConfig, SLOConfig
    config = SimConfig(pool=SMALL_POOL, slo=SLOConfig(kind="fixed", ttft_slo_s=1.5))  # some requests miss it
    env = make_reconfig_env([random_workload(10, 5.0, 0)], config, toy_cal, decision_window_s=100.0, reward=reward,
                             reward_scale=1.0)
    env.reset(seed=0)
    assert env.sim.done
    _, r, term, trunc, info = env.step(1)  # a masked action: ignored, nothing is left to simulate
    assert (term, trunc, info["invalid_action"], info["num_operations"]) == (True, False, False, 0)
    records = env.sim.result().records
    if reward == "time_in_system":
        assert r == pytest.approx(-records["ttft_s"].sum(), rel=1e-9) and r < 0
    else:
        tokens = records["num_prompt_tokens"]
        missed = tokens[records["ttft_s"] > records["ttft_slo_s"]].sum()
        assert r == pytest.approx(-missed * len(tokens) / tokens.sum(), rel=1e-9) and r < 0
    assert env.step(0)[1:4] == (0.0, True, False)


def test_window_s_kwarg_is_the_deprecated_spelling_of_decision_window_s(toy_cal):
    """``window_s=`` (the name before #38) still sets the decision window, with a DeprecationWarning."""
    wins = [random_workload(40, rate_rps=6.0, seed=0)]
    with pytest.warns(DeprecationWarning, match=r"window_s=\.\.\.\) is deprecated .* use decision_window_s"):
        env = make_reconfig_env(wins, SimConfig(pool=SMALL_POOL), toy_cal, make_router=LeastWorkRouter, window_s=7.0)
    assert env.decision_window_s == 7.0
    import envs

    envs.register_envs()
    with pytest.warns(DeprecationWarning):
        env = gym.make("cpgym/PrefillReconfig-v0", workloads=wins, window_s=3.0)
    assert env.unwrapped.decision_window_s == 3.0
