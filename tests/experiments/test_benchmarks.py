"""``bench_routing_env`` runs as a library call (no timing thresholds: only that it measures)."""

from __future__ import annotations

import pytest


def test_bench_routing_env_measures_every_part():
    from envs.sim import SimConfig
    from envs.workloads import build_workload
    from experiments.benchmarks import EnvBenchConfig, bench_routing_env

    wl = build_workload(name="tool-agent", target_rps=10.0, window_s=(0.0, 40.0))
    res = bench_routing_env(EnvBenchConfig(steps=50, n_envs=2, heuristics="least-work", policy="none"), wl, 20.0, SimConfig())
    assert res.num_windows == 2 and res.workload == wl.name
    assert res.raw_env_steps_per_s > 0 and res.dummy_vec_env_steps_per_s > 0
    assert set(res.decision_latency_us) == {"least-work"}


def test_bench_config_rejects_zero_steps():
    from experiments.benchmarks import EnvBenchConfig

    with pytest.raises(ValueError, match="steps"):
        EnvBenchConfig(steps=0)
