"""Every registered heuristic gives exactly the same run through the Gymnasium environment as
through ``baselines.runner.run_policy`` (the path of ``cpgym simulate``)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from baselines.registry import POLICIES
from baselines.runner import run_policy
from envs.metrics import summarize
from envs.sim import SimConfig
from policies.common.heuristic import heuristic_policy, make_routing_env, run_episode


@pytest.fixture(scope="module")
def trace_window(conversation_trace):
    from envs import workloads

    return workloads.window(workloads.scale_to_rate(conversation_trace, 14.0), 60.0, 90.0)


@pytest.mark.parametrize("name", list(POLICIES))
@pytest.mark.slow
def test_env_metrics_equal_simulate(name, trace_window):
    cfg = SimConfig(seed=3)
    expected = run_policy(name, trace_window, cfg)
    env = make_routing_env(name, trace_window, cfg)
    pol = heuristic_policy(name, env)
    got, ret, n = run_episode(env, pol, options={"window_index": 0, "sim_seed": 3})
    assert n == int(expected.records["num_routings"].sum())
    for key, arr in expected.records.items():
        np.testing.assert_array_equal(got.records[key], arr, err_msg=f"{name}: record {key}")
    s_exp, s_got = summarize(expected), summarize(got)
    for k in s_exp:
        if k not in ("wall_time_s", "requests_per_wall_s"):
            assert s_got[k] == s_exp[k] or (s_got[k] != s_got[k] and s_exp[k] != s_exp[k]), f"{name}: {k}"
    assert ret == pytest.approx(-np.nansum(expected.records["ttft_s"]), rel=1e-9)


def test_env_with_other_seed_differs_for_random_router(trace_window):
    cfg = SimConfig(seed=3)
    env = make_routing_env("random", trace_window, cfg)
    pol = heuristic_policy("random", env)
    a, *_ = run_episode(env, pol, options={"window_index": 0, "sim_seed": 3})
    b, *_ = run_episode(env, pol, options={"window_index": 0, "sim_seed": 4})
    assert not np.array_equal(a.records["worker_id"], b.records["worker_id"])
    c = run_policy("random", trace_window, replace(cfg, seed=4))
    np.testing.assert_array_equal(b.records["worker_id"], c.records["worker_id"])
