"""Library-level API of both environments (Gymnasium conventions): ``reset(options=...)``
validation, pickling, and constructor arguments checked where they are given."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from baselines.envs import make_reconfig_env, vertumnus_inner_router
from envs.reconfig_env import PrefillReconfigEnv
from envs.routing_env import PrefillRoutingEnv
from envs.sim import SimConfig
from tests.factories import SMALL_POOL, random_workload


def _make(cls, cal, **kwargs):
    # the reconfiguration environment takes its inner router (envs imports no baselines)
    extra = {"decision_window_s": 2.0, "make_router": vertumnus_inner_router} if cls is PrefillReconfigEnv else {}
    if cls is PrefillReconfigEnv:
        kwargs = {**extra, **kwargs}
        extra = {}
    return cls([random_workload(20, 5.0, s) for s in range(2)], SimConfig(pool=SMALL_POOL), cal, **extra, **kwargs)


ENVS = [PrefillRoutingEnv, PrefillReconfigEnv]


@pytest.mark.parametrize("cls", ENVS)
@pytest.mark.parametrize("options, match", [
    ({"window_idx": 1}, r"unknown key\(s\) \['window_idx'\]; accepted: \['window_index', 'sim_seed'\]"),
    ({"window_index": 1.7}, r"options\['window_index'\] must be an integer, got 1.7"),
    ({"window_index": True}, r"options\['window_index'\] must be an integer"),
    ({"window_index": "1"}, r"options\['window_index'\] must be an integer"),
    ({"window_index": 2}, r"options\['window_index'\] must be in \[0, 2\), got 2"),
    ({"sim_seed": "x"}, r"options\['sim_seed'\] must be an integer"),
    ({"sim_seed": -1}, r"options\['sim_seed'\] must be an integer >= 0"),
    ([("window_index", 1)], "options must be a dict"),
])
def test_reset_options_are_checked(cls, options, match, toy_cal):
    # a misspelt key was ignored (a random window instead of the chosen one), 1.7 truncated to 1
    env = _make(cls, toy_cal)
    with pytest.raises(ValueError, match=match):
        env.reset(seed=0, options=options)


@pytest.mark.parametrize("cls", ENVS)
def test_reset_options_accept_numpy_integers_and_none(cls, toy_cal):
    env = _make(cls, toy_cal)
    assert env.reset(seed=0, options={"window_index": np.int64(1), "sim_seed": np.int32(3)})[1]["window_index"] == 1
    env.reset(seed=0, options=None)
    env.reset(seed=0, options={})


@pytest.mark.parametrize("cls", ENVS)
def test_env_pickles_before_reset(cls, toy_cal):
    # Gymnasium's registered-env test pickles a made env; the reconfig env's default inner router
    # factory was the registry's lambda ("Can't pickle local object 'vertumnus_spec.<locals>.<lambda>'")
    env = _make(cls, toy_cal)
    copy = pickle.loads(pickle.dumps(env))
    a, b = env.reset(seed=3)[0], copy.reset(seed=3)[0]
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("cls", ENVS)
def test_pickle_after_reset_is_a_clear_error_and_deepcopy_continues_the_episode(cls, toy_cal):
    # pickle.dumps succeeded and pickle.loads failed later with
    # "'Environment' object has no attribute 'Process'" (SimPy's bound event classes)
    import copy

    env = _make(cls, toy_cal)
    env.reset(seed=3)
    env.step(_valid_action(env))
    with pytest.raises(TypeError, match=f"{cls.__name__} cannot be pickled after reset\\(\\)"):
        pickle.dumps(env)
    twin = copy.deepcopy(env)
    for _ in range(5):
        k = _valid_action(env)
        a, b = env.step(k), twin.step(k)
        assert all(np.array_equal(a[0][key], b[0][key]) for key in a[0]) and a[1:4] == b[1:4]
        if a[2] or a[3]:
            break


@pytest.mark.parametrize("kwargs, match", [
    ({"reward": 3}, r"reward must be a RoutingRewardConfig, a kind \('time_in_system', 'slo_miss_tokens'\) or None, got 3"),
    ({"num_slots": 8.5}, "num_slots must be an integer, got 8.5"),
    ({"num_slots": "8"}, "num_slots must be an integer"),
])
def test_routing_constructor_arguments_are_checked(kwargs, match, toy_cal):
    # reward=3 failed only at the first step ("'int' object has no attribute 'kind'"); num_slots
    # of the wrong type failed inside the spaces
    with pytest.raises(ValueError, match=match):
        _make(PrefillRoutingEnv, toy_cal, **kwargs)


@pytest.mark.parametrize("kwargs, match", [
    ({"decision_window_s": float("inf")}, "window_s must be a finite number > 0, got inf"),
    ({"decision_window_s": "20"}, "window_s must be a finite number > 0, got '20'"),
    ({"reward_scale": float("inf")}, "reward_scale must be a finite number > 0, got inf"),
    ({"invalid_action_penalty": float("inf")}, "invalid_action_penalty must be a finite number >= 0, got inf"),
    ({"long_request_tokens": -5}, r"long_request_tokens must be an integer >= 0 \[tokens\], got -5"),
    ({"long_request_tokens": 2.5}, "long_request_tokens must be an integer >= 0"),
    ({"make_router": 3}, r"make_router must be a zero-argument factory of routers \(e.g. "
                         r"baselines.envs.vertumnus_inner_router\), got 3"),
])
def test_reconfig_constructor_arguments_are_checked(kwargs, match, toy_cal):
    # decision_window_s=inf ended every episode at reset with zero rates, an infinite scale / penalty gave
    # infinite rewards, long_request_tokens=2.5 was truncated to 2, make_router=3 failed at reset
    kwargs = {"decision_window_s": 2.0, **kwargs}
    with pytest.raises(ValueError, match=match):
        make_reconfig_env([random_workload(20, 5.0, 0)], SimConfig(pool=SMALL_POOL), toy_cal, **kwargs)


def test_the_reconfig_env_needs_its_inner_router(toy_cal):
    """envs imports no baselines: constructed directly, the environment names the missing router
    (the registered id and baselines.envs.make_reconfig_env give the Vertumnus router)."""
    with pytest.raises(ValueError, match="make_router must be a zero-argument factory of routers"):
        PrefillReconfigEnv([random_workload(20, 5.0, 0)], SimConfig(pool=SMALL_POOL), toy_cal, decision_window_s=2.0)


@pytest.mark.parametrize("cls", ENVS)
@pytest.mark.parametrize("action", [1.7, 1.0, np.float64(1.0), "x", "1", True, None, np.array([1, 2]), np.array([1.0]),
                                    np.array([[1]]), [1], -1, "n"])
def test_action_outside_the_space_is_a_value_error(cls, action, toy_cal):
    # 1.7 was truncated to action 1, "x" failed inside int(), np.array([1]) raised TypeError
    env = _make(cls, toy_cal)
    env.reset(seed=0)
    n = env.action_space.n
    action = n if isinstance(action, str) and action == "n" else action
    # gymnasium's Discrete.contains(True) is True; the environments refuse a bool as reset options do
    assert isinstance(action, bool) or not env.action_space.contains(action)
    with pytest.raises(ValueError, match=rf"action .* is not an element of the action space Discrete\({n}\): "
                                         rf"expected an integer in \[0, {n}\)"):
        env.step(action)


def _valid_action(env) -> int:
    mask = env.action_masks()
    return int(np.flatnonzero(mask)[-1])


@pytest.mark.parametrize("cls", ENVS)
@pytest.mark.parametrize("wrap", [np.int64, np.int32, np.uint8, np.array, lambda k: np.array([k])])
def test_numpy_integer_actions_step_like_python_ints(cls, wrap, toy_cal):
    # what DummyVecEnv (a numpy integer) and SB3's predict for one observation (shape () or (1,)) pass
    a, b = _make(cls, toy_cal), _make(cls, toy_cal)
    oa, _ = a.reset(seed=0)
    ob, _ = b.reset(seed=0)
    for _ in range(5):
        k = _valid_action(a)
        oa, ra, ta, ua, ia = a.step(k)
        ob, rb, tb, ub, ib = b.step(wrap(k))
        assert (ra, ta, ua) == (rb, tb, ub) and not ia["invalid_action"] and not ib["invalid_action"]
        assert all(np.array_equal(oa[key], ob[key]) for key in oa)
        if ta or ua:
            break


@pytest.mark.parametrize("cls", ENVS)
def test_masked_action_is_remapped_not_raised(cls, toy_cal):
    # a valid but masked action keeps its documented behaviour: penalised, flagged, no exception
    env = _make(cls, toy_cal)
    env.reset(seed=0)
    masked = np.flatnonzero(~env.action_masks())
    assert masked.size
    _, _, _, _, info = env.step(np.int64(masked[0]))
    assert info["invalid_action"] and info["num_invalid_actions"] == 1


@pytest.mark.parametrize("cls", ENVS)
def test_dummy_vec_env_steps_with_predict_shaped_actions(cls, toy_cal):
    from stable_baselines3.common.vec_env import DummyVecEnv

    venv = DummyVecEnv([lambda: _make(cls, toy_cal)])
    venv.seed(0)
    venv.reset()
    k = _valid_action(venv.envs[0].unwrapped)
    _, _, _, infos = venv.step(np.array([k]))  # what model.predict(vec_obs) returns for one env
    assert not infos[0]["invalid_action"]


RECONFIG_INFO_KEYS = {"sim_time_s", "window_start_s", "invalid_action", "num_invalid_actions", "num_operations",
                      "window_index", "composition"}


def test_reconfig_info_has_the_documented_keys_at_reset_step_and_after_the_end(toy_cal):
    # reset returned only {sim_time_s, window_index}, a step after the end only {sim_time_s}
    env = _make(PrefillReconfigEnv, toy_cal)
    _, info = env.reset(seed=0, options={"window_index": 1})
    assert info.keys() == RECONFIG_INFO_KEYS
    assert info["window_start_s"] == 0.0 and info["sim_time_s"] == env.decision_time_s == 2.0
    assert not info["invalid_action"] and info["num_operations"] == info["num_invalid_actions"] == 0
    assert info["window_index"] == 1 and sorted(info["composition"]) == [(2, 4), (2, 6), (4, 0)]
    done = False
    while not done:
        _, _, term, trunc, info = env.step(0)
        assert info.keys() == RECONFIG_INFO_KEYS and info["sim_time_s"] - info["window_start_s"] == pytest.approx(2.0)
        done = term or trunc
    end_time = info["sim_time_s"]
    _, _, _, _, info = env.step(0)
    assert info.keys() == RECONFIG_INFO_KEYS
    assert info["sim_time_s"] == info["window_start_s"] == end_time and not info["invalid_action"]


ROUTING_INFO_KEYS = {"sim_time_s", "window_index", "num_invalid_actions", "invalid_action", "worker_id",
                     "step_duration_s"}
ROUTING_EPISODE_KEYS = {"episode_return", "episode_mean_ttft_s", "episode_p90_ttft_s",
                        "episode_slo_attainment_token_weighted"}


def test_routing_info_has_the_documented_keys_at_reset_step_and_after_the_end(toy_cal):
    # reset returned 3 keys, a step 6, the last step 10, a step after the end 7
    env = _make(PrefillRoutingEnv, toy_cal)
    _, info = env.reset(seed=0)
    assert info.keys() == ROUTING_INFO_KEYS
    assert info["worker_id"] == -1 and not info["invalid_action"] and info["step_duration_s"] == 0.0
    done, n = False, 0
    while not done:
        _, _, term, trunc, info = env.step(_valid_action(env))
        done, n = term or trunc, n + 1
        assert info.keys() == (ROUTING_INFO_KEYS | ROUTING_EPISODE_KEYS if done else ROUTING_INFO_KEYS)
        assert info["worker_id"] >= 0 and info["step_duration_s"] >= 0.0
    assert n > 1
    last = info
    _, _, _, _, info = env.step(0)
    assert info.keys() == ROUTING_INFO_KEYS | ROUTING_EPISODE_KEYS
    assert info["worker_id"] == -1 and info["step_duration_s"] == 0.0 and not info["invalid_action"]
    assert info["episode_mean_ttft_s"] == last["episode_mean_ttft_s"]


@pytest.mark.parametrize("kwargs, name", [
    ({"target_degrees": (2, 4)}, "target_degrees"),
    ({"max_operation_gpus_per_window": 4}, "max_operation_gpus_per_window"),
])
def test_reconfig_target_arguments_are_refused_in_operation_mode(kwargs, name, toy_cal):
    # they were silently ignored (the CLI already refuses --target-degrees with --action-mode operation)
    with pytest.raises(ValueError, match=rf"{name} applies to action_mode='target' only \(got .* with "
                                         r"action_mode='operation'\)"):
        _make(PrefillReconfigEnv, toy_cal, action_mode="operation", **kwargs)
    env = _make(PrefillReconfigEnv, toy_cal, action_mode="target", capacity_features=True, **kwargs)
    assert env.action_space.n == len(env.target_compositions)


ENV_IDS = {PrefillRoutingEnv: "cpgym/PrefillRouting-v0", PrefillReconfigEnv: "cpgym/PrefillReconfig-v0"}


@pytest.mark.parametrize("cls", ENVS)
@pytest.mark.parametrize("render_mode", ["human", "ansi", "rgb_array"])
def test_render_mode_other_than_none_is_refused_by_name(cls, render_mode, toy_cal):
    # gym.make(id, render_mode="human") warned, then failed with "unexpected keyword argument 'render_mode'"
    import warnings

    import gymnasium as gym

    import envs

    envs.register_envs()
    assert cls.metadata["render_modes"] == []
    match = rf"render_mode must be None or one of metadata\['render_modes'\] = \[\], got '{render_mode}'"
    with pytest.raises(ValueError, match=match):
        _make(cls, toy_cal, render_mode=render_mode)
    with warnings.catch_warnings(), pytest.raises(ValueError, match=match):
        warnings.simplefilter("ignore")  # gymnasium warns that the mode is not in metadata["render_modes"]
        gym.make(ENV_IDS[cls], workloads=[random_workload(20, 5.0, 0)], config=SimConfig(pool=SMALL_POOL),
                 calibration=toy_cal, render_mode=render_mode)


@pytest.mark.parametrize("cls", ENVS)
def test_render_mode_none_is_accepted(cls, toy_cal):
    import gymnasium as gym

    import envs

    envs.register_envs()
    assert _make(cls, toy_cal, render_mode=None).render_mode is None
    env = gym.make(ENV_IDS[cls], workloads=[random_workload(20, 5.0, 0)], config=SimConfig(pool=SMALL_POOL),
                   calibration=toy_cal, render_mode=None)
    assert env.render_mode is None and env.unwrapped.render_mode is None
    env.reset(seed=0)


def _docstring_section(cls, title: str) -> str:
    doc = cls.__doc__
    start = doc.index(f"## {title}")
    end = doc.find("## ", start + 3)
    return doc[start:end if end >= 0 else None]


@pytest.mark.parametrize("cls", ENVS)
def test_every_constructor_argument_is_documented(cls):
    # observe_faults was undocumented in both environments
    import inspect

    args = _docstring_section(cls, "Arguments")
    missing = [p for p in inspect.signature(cls.__init__).parameters if p != "self" and f"        {p}: " not in args]
    assert not missing


@pytest.mark.parametrize("cls, kwargs", [(PrefillRoutingEnv, {}), (PrefillReconfigEnv, {"action_mode": "target",
                                                                                        "capacity_features": True})])
def test_every_observation_key_is_documented(cls, kwargs, toy_cal):
    # the "faults" key of observe_faults=True was undocumented in both environments
    env = _make(cls, toy_cal, observe_faults=True, **kwargs)
    section = _docstring_section(cls, "Observation Space")
    assert [k for k in env.observation_space.spaces if f'``"{k}"``' not in section] == []


@pytest.mark.parametrize("cls", ENVS)
@pytest.mark.parametrize("kwargs, match", [
    ({"config": {}}, r"config must be an envs.sim.SimConfig or None, got dict \{\}"),
    ({"config": {"seed": 3}}, "config must be an envs.sim.SimConfig or None, got dict"),
    ({"calibration": "qwen3.json"}, r"calibration must be an envs.sim.Calibration or None \(for a calibration file"),
    ({"workloads": "tool-agent"}, "workloads must be an envs.sim.Workload or a sequence of them"),
    ({"workloads": [3]}, "workloads must be an envs.sim.Workload or a sequence of them"),
    ({"observe_faults": "no"}, "observe_faults must be a bool, got 'no'"),
])
def test_shared_constructor_arguments_are_type_checked(cls, kwargs, match, toy_cal):
    # config={} silently meant the default config, a dict config or a workload name failed with
    # "'dict'/'str' object has no attribute ...", a calibration file name failed only at reset, and
    # observe_faults="no" added the faults key
    args = {"workloads": [random_workload(20, 5.0, 0)], "config": SimConfig(pool=SMALL_POOL), "calibration": toy_cal,
            **({"decision_window_s": 2.0,
                "make_router": vertumnus_inner_router} if cls is PrefillReconfigEnv else {}), **kwargs}
    with pytest.raises(ValueError, match=match):
        cls(**args)


def test_reconfig_capacity_features_must_be_a_bool(toy_cal):
    with pytest.raises(ValueError, match="capacity_features must be a bool, got 'yes'"):
        _make(PrefillReconfigEnv, toy_cal, capacity_features="yes")
    # a table of another type failed only at the first capacity observation, inside the episode
    with pytest.raises(ValueError, match="capacity_table must be an envs.planning.capacity.CapacityTable or None, got int 3"):
        _make(PrefillReconfigEnv, toy_cal, capacity_features=True, capacity_table=3)


@pytest.mark.parametrize("kwargs, match", [
    ({"scale": "1"}, "reward.scale must be a finite number > 0, got '1'"),
    ({"invalid_action_penalty": [1]}, r"reward.invalid_action_penalty must be a finite number >= 0, got \[1\]"),
])
def test_routing_reward_config_numbers_are_type_checked(kwargs, match):
    # a string or a list failed inside a comparison ("'>' not supported between 'str' and 'int'")
    from envs.routing_env import RoutingRewardConfig

    with pytest.raises(ValueError, match=match):
        RoutingRewardConfig(**kwargs)


@pytest.mark.parametrize("kwargs, match", [
    ({"target_degrees": "24"}, r"target_degrees must be a sequence of integer CP degrees, e.g. \[2, 4\], got '24'"),
    ({"target_degrees": (2.0, 4.0)}, "target_degrees must be a sequence of integer CP degrees"),
    ({"max_operation_gpus_per_window": "8"}, r"max_operation_gpus_per_window must be a number > 0 \[GPUs\], got '8'"),
])
def test_reconfig_target_menu_arguments_are_type_checked(kwargs, match, toy_cal):
    # target_degrees="24" was read as the degrees 2 and 4; a string budget failed inside a comparison
    with pytest.raises(ValueError, match=match):
        _make(PrefillReconfigEnv, toy_cal, capacity_features=True, action_mode="target", **kwargs)


def test_reconfig_target_degrees_may_be_any_iterable(toy_cal):
    # a generator was used up by the type check and then read as an empty menu
    from_list = _make(PrefillReconfigEnv, toy_cal, capacity_features=True, action_mode="target", target_degrees=[2, 4])
    from_gen = _make(PrefillReconfigEnv, toy_cal, capacity_features=True, action_mode="target",
                     target_degrees=(d for d in (2, 4)))
    assert from_gen.target_compositions == from_list.target_compositions and from_list.target_compositions
