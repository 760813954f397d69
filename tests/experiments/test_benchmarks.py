"""``bench_routing_env`` runs as a library call (no timing thresholds: only that it measures)."""

from __future__ import annotations

import pytest


def test_bench_routing_env_measures_every_part():
    from envs.sim import SimConfig
    from envs.workloads import build_workload
    from experiments.benchmarks import EnvBenchConfig, bench_routing_env

    wl = build_workload(name="tool-agent", target_rps=10.0, arrival_window_s=(0.0, 40.0))
    res = bench_routing_env(EnvBenchConfig(steps=50, n_envs=2, heuristics="least-work", policy="none"), wl, 20.0, SimConfig())
    assert res.num_windows == 2 and res.workload == wl.name
    assert res.raw_env_steps_per_s > 0 and res.dummy_vec_env_steps_per_s > 0
    assert set(res.decision_latency_us) == {"least-work"}


@pytest.mark.parametrize("heuristics, message", [
    ("", "needs at least one name"),  # was: silently measured no heuristic
    ("least-work,least-work", "lists 'least-work' twice"),  # was: timed twice
    ("least-work,,round-robin", "must be a comma-separated list of names"),
])
def test_bench_config_rejects_empty_or_repeated_heuristics(heuristics, message):
    from experiments.benchmarks import EnvBenchConfig

    with pytest.raises(ValueError, match=f"bench-env: heuristics {message}"):
        EnvBenchConfig(heuristics=heuristics)
    assert EnvBenchConfig(heuristics="none").heuristic_names() == []
    assert EnvBenchConfig(heuristics="least-work, round-robin").heuristic_names() == ["least-work", "round-robin"]


def test_bench_config_rejects_zero_steps():
    from experiments.benchmarks import EnvBenchConfig

    with pytest.raises(ValueError, match="steps"):
        EnvBenchConfig(steps=0)


@pytest.mark.parametrize("flags, message", [
    (["--policy", "{tmp}/no-such-checkpoint"], "{tmp}/no-such-checkpoint: checkpoint path does not exist"),
    (["--heuristics", "least-work,nosuch"], "unknown policy 'nosuch'"),
    (["--target-rps", "0"], "--target-rps must be a finite number > 0, got 0.0"),  # was 'workload: target_rps ...'
    (["--episode-window-s", "nan"], "--episode-window-s must be a finite number > 0, got nan"),  # was 'window_s ...'
])
def test_bench_env_bad_flags_fail_before_anything_is_timed(flags, message, tmp_path, capsys, monkeypatch):
    """A missing checkpoint or an unknown heuristic failed only after the raw-env, DummyVecEnv and
    heuristic measurements had run (tens of seconds at the default --steps)."""
    import experiments.benchmarks as benchmarks
    from experiments.cli import main

    monkeypatch.setattr(benchmarks, "_raw_env", lambda *a, **k: pytest.fail("timed the env before checking the flags"))
    flags = [f.format(tmp=tmp_path) for f in flags]
    assert main(["bench", "env", "--steps", "10", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cpgym bench env: error: " + message.format(tmp=tmp_path)) and err.count("\n") == 1


def test_bench_sim_table_says_what_its_rates_are(capsys):
    """The header said 'load 0.02 s' (the time to build the workload, read as a load) and the
    column 'req/s' (simulated requests per wall-second, read as the arrival rate)."""
    from experiments.cli import main

    assert main(["bench", "sim", "--workload", "tool-agent", "--arrival-window-s", "0", "5", "--policy", "round-robin",
                 "--repeat", "1"]) == 0
    head, cols = capsys.readouterr().out.splitlines()[:2]
    assert " requests (built in " in head and ", load " not in head
    assert cols.split() == ["policy", "KV", "tiers", "wall", "s", "req/wall-s", "req/cpu-s", "1st-run", "req/cpu-s",
                            "sim/wall", "peak", "MiB"]


def test_bench_sim_json_reports_requests_per_cpu_second_per_policy(capsys):
    """Issue #40: ``requests_per_cpu_s`` (process CPU time of the runs alone, so that a shared
    machine does not distort it) for every policy, beside the wall-clock rate."""
    import json

    from experiments.cli import main

    assert main(["bench", "sim", "--workload", "tool-agent", "--arrival-window-s", "0", "5", "--policy",
                 "round-robin,vertumnus-router", "--repeat", "1", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["results"]
    assert [r["policy"] for r in rows] == ["round-robin", "vertumnus-router"]
    for r in rows:
        assert r["cpu_time_s"] > 0 and r["requests_per_cpu_s"] > 0 and r["requests_per_wall_s"] > 0
        assert r["requests_per_cpu_s"] * r["cpu_time_s"] == pytest.approx(r["num_requests"])


def test_bench_sim_profiles_capacity_in_the_first_run_only(capsys, monkeypatch):
    """The runs of one policy share a CapacityCache: the profiles are simulated in the first run
    (timed apart, ``first_run_cpu_s``) and reused by the ``--repeat`` runs and the memory run."""
    import json

    from envs.planning.capacity import CapacityTable
    from experiments.cli import main
    from experiments.commands import bench

    calls, per_run = [], []
    simulate = CapacityTable._simulate_profile
    monkeypatch.setattr(CapacityTable, "_simulate_profile", lambda self, *a: calls.append(a) or simulate(self, *a))
    run_policy = bench.run_policy

    def counted(*a, **k):
        n = len(calls)
        out = run_policy(*a, **k)
        per_run.append(len(calls) - n)
        return out

    monkeypatch.setattr(bench, "run_policy", counted)
    assert main(["bench", "sim", "--workload", "tool-agent", "--arrival-window-s", "0", "20", "--policy",
                 "vertumnus-adaptive", "--repeat", "2", "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["results"]
    assert row["first_run_cpu_s"] > 0
    assert row["first_run_requests_per_cpu_s"] * row["first_run_cpu_s"] == pytest.approx(row["num_requests"])
    assert len(per_run) == 4 and per_run[0] > 0 and per_run[1:] == [0, 0, 0]  # first, 2 repeats, memory run


@pytest.mark.slow
def test_bench_env_defaults_to_the_vertumnus_router_and_labels_the_full_system():
    """``vertumnus`` names the full system (its loop runs the controller: 113 steps/s), so the
    default row read as the router's; the default list now times ``vertumnus-router``, and a
    policy with attachments says what its loop includes (issue #43 item 9)."""
    from envs.sim import SimConfig
    from envs.workloads import build_workload
    from experiments.benchmarks import EnvBenchConfig, bench_routing_env

    names = EnvBenchConfig().heuristic_names()
    assert "vertumnus-router" in names and "vertumnus" not in names
    wl = build_workload(name="tool-agent", target_rps=10.0, arrival_window_s=(0.0, 20.0))
    res = bench_routing_env(EnvBenchConfig(steps=20, n_envs=1, heuristics="vertumnus-router,vertumnus", policy="none"),
                            wl, 20.0, SimConfig())
    assert set(res.decision_latency_us) == {"vertumnus-router",
                                            "vertumnus (route; loop incl. ReconfigController, GlobalCacheManager)"}
    assert [r["policy"] for r in res.rows()][2:] == list(res.decision_latency_us)
