"""``HeuristicPolicy`` over a ``DummyVecEnv`` keeps the wrapped policy's parameters and label:
every env's decisions equal the single-env policy's."""

from __future__ import annotations

import pytest
from stable_baselines3.common.vec_env import DummyVecEnv

from baselines.registry import get_policy
from envs.sim import SimConfig
from policies.common.heuristic import HeuristicPolicy, make_routing_env

SEED = 3
CASES = [("vertumnus-lambda0", {}), ("vertumnus-no-reservation", {}), ("homogeneous-cp2", {}),
         ("vertumnus-router", {"beta": 1.5, "lambda": 0.25})]


@pytest.fixture(scope="module")
def trace_window(conversation_trace):
    from envs import workloads

    return workloads.window(workloads.scale_to_rate(conversation_trace, 14.0), 60.0, 90.0)


def _single_env_decisions(name, spec, window):
    env = make_routing_env(name, window, SimConfig(seed=SEED))
    pol = HeuristicPolicy(spec.make_router, env, name=spec.name)
    obs, _ = env.reset(options={"window_index": 0, "sim_seed": SEED})
    out = []
    while True:
        a, _ = pol.predict(obs, action_masks=env.action_masks())
        obs, _, term, trunc, info = env.step(int(a))
        out.append(info["worker_id"])
        if term or trunc:
            return pol, out


def _vec_env_decisions(venv, pol):
    venv.set_options({"window_index": 0, "sim_seed": SEED})
    obs = venv.reset()
    out = [[] for _ in range(venv.num_envs)]
    while True:
        a, _ = pol.predict(obs)
        obs, _, dones, infos = venv.step(a)
        for k, info in enumerate(infos):
            out[k].append(info["worker_id"])
        if dones.any():
            assert dones.all()  # same window and seed: the episodes end together
            return out


def _params(router):
    return getattr(router, "params", None)


@pytest.mark.parametrize("name,overrides", CASES, ids=[n + ("+" + ",".join(o) if o else "") for n, o in CASES])
@pytest.mark.parametrize("form", ["factory", "instance"])
def test_vec_env_keeps_policy_parameters(name, overrides, form, trace_window):
    spec = get_policy(name).with_params(**overrides)
    single, expected = _single_env_decisions(name, spec, trace_window)
    venv = DummyVecEnv([lambda: make_routing_env(name, trace_window, SimConfig(seed=SEED))] * 2)
    router = spec.make_router if form == "factory" else spec.make_router()
    pol = HeuristicPolicy(router, venv)
    assert pol.name == spec.name == single.name
    routers = pol.routers
    assert len(routers) == 2 and routers[0] is not routers[1]
    for r in routers:
        assert type(r) is type(single.router)
        assert r.name == spec.name
        assert _params(r) == _params(single.router)
    if overrides:
        assert (routers[1].params.beta, routers[1].params.lambda_) == (1.5, 0.25)
    got = _vec_env_decisions(venv, pol)
    assert got[0] == expected and got[1] == expected


def test_parameters_change_decisions_here(trace_window):
    """The check above can fail: on this window the ablations decide differently from plain Vertumnus."""
    _, base = _single_env_decisions("vertumnus-router", get_policy("vertumnus-router"), trace_window)
    for name in ("vertumnus-lambda0", "vertumnus-no-reservation"):
        _, other = _single_env_decisions(name, get_policy(name), trace_window)
        assert other != base, name
