"""``cpgym evaluate --kind reconfig`` without ``--against`` derives its comparisons from the pool
(issue #43 item 13): the default list named the 40-GPU pool's ``fixed:cp1x40``, so every other pool
size failed before running anything."""

from __future__ import annotations

import json

import pytest

H = "vertumnus-adaptive,vertumnus-router,"


@pytest.mark.parametrize("pool, expected", [
    ({}, H + "fixed:cp1x40,fixed:cp2x20,fixed:cp4x10,fixed:cp8x5"),
    ({"num_gpus": 8, "composition": "cp4x2"}, H + "fixed:cp1x8,fixed:cp2x4,fixed:cp8x1"),
    # CP-8 does not fit nodes of 4 GPUs
    ({"num_gpus": 8, "gpus_per_node": 4, "composition": "cp2x4"}, H + "fixed:cp1x8,fixed:cp4x2"),
    ({"num_gpus": 24, "composition": "cp4x6", "supported_degrees": (2, 4)}, H + "fixed:cp2x12"),
])
def test_default_comparisons_follow_the_pool(pool, expected):
    from envs.sim.pool import PoolConfig
    from policies.evaluate import DEFAULT_RECONFIG_AGAINST, default_reconfig_against

    assert default_reconfig_against(PoolConfig(**pool)) == expected
    assert default_reconfig_against(PoolConfig()) == DEFAULT_RECONFIG_AGAINST


@pytest.mark.slow
def test_reconfig_evaluation_on_an_8_gpu_pool_runs_without_against(monkeypatch, capsys):
    import policies.reconfig.evaluate as reconfig_evaluate
    from experiments.cli import main

    real, ran = reconfig_evaluate.run_policy, []

    def run_policy(policy, workload, config, **kw):
        ran.append((policy if isinstance(policy, str) else policy.name, config.pool.composition))
        # vertumnus-adaptive's capacity profiling takes minutes; this test is about the comparison list
        return real("vertumnus-router" if policy == "vertumnus-adaptive" else policy, workload, config, **kw)

    monkeypatch.setattr(reconfig_evaluate, "run_policy", run_policy)
    assert main(["evaluate", "--kind", "reconfig", "--policy", "none", "--pool-gpus", "8", "--pool-composition", "cp4x2",
                 "--seeds", "1000", "--workload", "tool-agent", "--target-rps", "2", "--quiet", "--format", "json"]) == 0
    out = capsys.readouterr()
    labels = [r["policy"] for r in json.loads(out.out)]
    assert labels[:5] == ["vertumnus-adaptive", "vertumnus-router", "fixed:cp1x8", "fixed:cp2x4", "fixed:cp8x1"], labels
    assert ran == [("vertumnus-adaptive", "cp4x2"), ("vertumnus-router", "cp4x2"), ("vertumnus-router", "cp1x8"),
                   ("vertumnus-router", "cp2x4"), ("vertumnus-router", "cp8x1")]
