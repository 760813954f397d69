"""``cpgym reproduce`` (experiments/reproduce.py): row schema on a tiny configuration, paired
changes against the strongest baseline, paper values."""

import json

import pytest

from experiments.cli import main
from experiments.reproduce import METRICS, paired_changes, paper_value
from tests.factories import RECONFIG_POOL

KEYS = ["experiment", "workload", "model", "metric", "paper_value", "cpgym_value", "ci_low", "ci_high", "load_fraction",
        "strongest_baseline"]


def test_reproduce_rows_on_a_tiny_configuration(tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["reproduce", "--experiments", "end-to-end", "--workloads", "leval-like", "--arrival-window-length-s", "40",
               "--seeds", "0,1,2", "--loads", "0.6,0.95",
               "--pool-gpus", "8", "--pool-composition", "cp4x1,cp2x2", "--rel-tol", "0.2",
               "--cache-dir", str(tmp_path / "cache"), "--out", str(out), "--format", "json", "--quiet", "--jobs", "1"])
    assert rc == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["metric"] for r in rows] == list(METRICS)
    for r in rows:
        assert list(r) == KEYS
        assert r["experiment"] == "end-to-end" and r["workload"] == "leval-like" and r["model"] == "Qwen3-30B-A3B"
        assert r["load_fraction"] == 0.95
        assert r["strongest_baseline"] in {"homogeneous-cp2", "homogeneous-cp4", "static-threshold", "vllm-tp4",
                                           "sglang-cache-aware"}
        assert r["ci_low"] <= r["cpgym_value"] <= r["ci_high"]
    assert [r["paper_value"] for r in rows] == [-13.9, -17.8, 0.9]
    assert json.loads((out / "rows.json").read_text()) == rows
    for name in ("end-to-end.png", "end-to-end-runs.csv", "end-to-end-capacities.csv", "provenance.json"):
        assert (out / name).is_file()
    import pandas as pd

    runs = pd.read_csv(out / "end-to-end-runs.csv")
    assert len(runs) == 3 * 2 * 6  # seeds x loads x policies
    assert set(runs["overloaded"]) <= {True, False}
    # a rate above a policy's own capacity is labelled overloaded
    assert (runs["overloaded"] == (runs["rate_scale"] > runs["capacity_rate_scale"] * (1 + 1e-9))).all()


def test_paired_changes_use_the_lowest_mean_baseline():
    runs = []
    for seed, (v, a, b) in enumerate([(1.0, 2.0, 4.0), (3.0, 4.0, 2.0), (1.0, 2.0, 4.0)]):
        for p, m in (("vertumnus", v), ("a", a), ("b", b)):
            runs.append({"policy": p, "seed": seed, "load_fraction": 0.95, "mean_ttft_s": m, "p90_ttft_s": 2 * m,
                         "slo_attainment_token_weighted": 0.5})
    best, ch = paired_changes(runs, 0.95, ["a", "b"])
    assert best == "a"  # mean 2.67 < 3.33
    assert ch["mean_ttft_pct"] == pytest.approx([-50.0, -25.0, -50.0])
    assert ch["slo_token_pp"] == pytest.approx([0.0, 0.0, 0.0])


def test_paper_values_only_for_the_paper_model():
    assert paper_value("Qwen3-30B-A3B", "production", "mean_ttft_pct") == -28.1
    assert paper_value("Qwen3-30B-A3B", "tool-agent", "p90_ttft_pct") == -55.0
    assert paper_value("DeepSeek-V3", "production", "mean_ttft_pct") is None


# --- dynamic, cache and reconfiguration experiments (tiny settings: 8 GPUs, short phases / windows) ---

TINY = ["--seeds", "0,1,2", "--cache-seeds", "3,4,5", "--pool-gpus", "8", "--pool-composition", "cp4x1,cp2x2",
        "--rel-tol", "0.2", "--cache-duration-s", "30", "--dynamic-param", "num_phases=2",
        "--dynamic-param", "phase_duration_s=60", "--dynamic-param", "rate_scale=0.2", "--dynamic-param", "initial=cp4x2",
        "--quiet", "--jobs", "1"]


def test_registry_has_the_four_experiments():
    from experiments.reproduce import EXPERIMENTS

    assert list(EXPERIMENTS) == ["end-to-end", "dynamic", "cache", "reconfiguration"]


@pytest.mark.slow
def test_reproduce_dynamic_cache_and_reconfiguration_rows(tmp_path, capsys, monkeypatch):
    import experiments.reproduce as reproduce
    from experiments.paper_experiments.paper_rows import DYNAMIC_METRICS, DYNAMIC_SCENARIOS

    calls = []
    real = reproduce.run_dynamic_phases
    monkeypatch.setattr(reproduce, "run_dynamic_phases",
                        lambda cfg, base, log=None: calls.append(cfg.workload_seed) or real(cfg, base))
    out = tmp_path / "out"
    rc = main(["reproduce", "--experiments", "dynamic,cache,reconfiguration", *TINY, "--no-cache", "--out", str(out),
               "--format", "json"])
    assert rc == 0
    rows = json.loads(capsys.readouterr().out)
    assert calls == [0, 1, 2]  # one dynamic run per seed, shared by dynamic and reconfiguration
    for r in rows:
        assert list(r) == KEYS and r["model"] == "Qwen3-30B-A3B"
        assert r["ci_low"] <= r["cpgym_value"] <= r["ci_high"]  # 3 seeds: finite 95 % CI
    dyn = [r for r in rows if r["experiment"] == "dynamic"]
    assert [(r["workload"], r["metric"]) for r in dyn] == [(w, m) for w in DYNAMIC_SCENARIOS for m in DYNAMIC_METRICS]
    assert {r["strongest_baseline"] for r in dyn} <= {"cp4x2", "cp4x1,cp2x2", "cp2x4"}
    cache = [r for r in rows if r["experiment"] == "cache"]
    assert [r["metric"] for r in cache] == ["mean_ttft_pct", "p90_ttft_pct", "hit_rate_pp"]
    assert [r["paper_value"] for r in cache] == [-10.3, -18.7, None]
    assert all(r["workload"] == "tool-agent" and r["load_fraction"] == 0.95 for r in cache)
    rec = [r for r in rows if r["experiment"] == "reconfiguration"]
    assert [(r["metric"], r["paper_value"]) for r in rec] == [("reconfig_time_s_p10", 1.1), ("reconfig_time_s_p90", 5.1)]
    assert rows == [r for k in ("dynamic", "cache", "reconfiguration") for r in rows if r["experiment"] == k]
    assert json.loads((out / "rows.json").read_text()) == rows
    import pandas as pd

    caps = pd.read_csv(out / "cache-capacities.csv")
    assert list(caps["seed"]) == [3, 4, 5] and (caps["capacity_rps"] > 0).all()
    runs = pd.read_csv(out / "cache-runs.csv")
    assert list(runs["seed"]) == [3, 3, 4, 4, 5, 5]
    assert runs["rate_rps"].tolist() == pytest.approx([0.95 * caps["capacity_rps"].min()] * 6)  # below every seed's capacity
    assert set(runs["policy"]) == {"local caches only", "global manager"}
    ops = pd.read_csv(out / "reconfiguration-runs.csv")
    assert set(ops["seed"]) == {0, 1, 2} and (ops["total_s"] > 0).all()
    assert len(pd.read_csv(out / "dynamic-runs.csv")) == 3 * 4  # seeds x (adaptive + 3 fixed compositions)


def test_cache_load_is_a_fraction_of_the_measured_capacity():
    from envs.sim import SimConfig
    from experiments.paper_experiments.cache_ablation import ToolAgentRated, tool_agent_at_rate

    rated = ToolAgentRated(arrival_window_length_s=30.0, seed=4, reference_rate_rps=40.0)
    wl = rated.at_scale(0.5)
    assert wl.mean_rate_rps == pytest.approx(20.0, rel=0.02)
    ref = tool_agent_at_rate(20.0, 30.0, 4)
    assert [r.arrival_time_s for r in wl.requests] == [r.arrival_time_s for r in ref.requests]
    assert rated.fingerprint() != ToolAgentRated(arrival_window_length_s=30.0, seed=5, reference_rate_rps=40.0).fingerprint()
    with pytest.raises(ValueError, match="reference_rate_rps"):
        ToolAgentRated(arrival_window_length_s=30.0, reference_rate_rps=0.0)
    with pytest.raises(ValueError, match="tool-agent"):
        ToolAgentRated(arrival_window_length_s=30.0, start_s=5.0)
    assert SimConfig().pool.num_gpus == 40  # the ablation's pool (for the capacity in the rows)


def test_cache_capacity_search_starts_at_the_session_floor():
    # the definition's ~100-request light load holds a handful of sessions, whose prefix hits alone
    # made the thirds differ 1.4x (judged overloaded at 0.34 req/s); the search starts at the floor
    from baselines.capacity import RatedWorkload
    from envs.sim import SimConfig
    from experiments.paper_experiments.cache_ablation import (
        TOOL_AGENT_MIN_RATE_SCALE,
        TOOL_AGENT_REFERENCE_RATE_RPS,
        tool_agent_capacity,
    )

    sim = SimConfig(pool=RECONFIG_POOL)
    res = tool_agent_capacity(sim, duration_s=30.0, seed=3)
    assert res.probes[0].rate_scale == TOOL_AGENT_MIN_RATE_SCALE
    assert res.native_rate_rps == pytest.approx(TOOL_AGENT_REFERENCE_RATE_RPS * 8 / 40, rel=0.02)  # follows the pool
    assert res.capacity_rps > TOOL_AGENT_MIN_RATE_SCALE * res.native_rate_rps
    with pytest.raises(ValueError, match="min_rate_scale"):
        RatedWorkload(arrival_window_length_s=10.0, name="tool-agent", min_rate_scale=-1.0)
    plain = RatedWorkload(arrival_window_length_s=10.0, name="tool-agent")
    assert "min_rate_scale" not in plain.fingerprint()  # cached capacities of other workloads keep their keys


def test_reproduce_dynamic_params_are_typed_for_dynamic_phases():
    from experiments.common import parse_workload_params
    from experiments.reproduce import ReproduceConfig

    cfg = ReproduceConfig(workloads=("tool-agent",), dynamic_params=parse_workload_params(
        ["phase_duration_s=20", "capacity_cache_dir=5", "arrival_window_s=0,300", "rising_rate=false"]))
    assert dict(cfg.dynamic_params) == {"phase_duration_s": 20.0, "capacity_cache_dir": "5", "arrival_window_s": (0.0, 300.0),
                                        "rising_rate": False}


def test_an_interrupted_reproduce_says_which_experiments_and_files_are_its_own(tmp_path, monkeypatch):
    """provenance.json was written only at the end: an interrupted run in a reused --out left its
    rows next to the previous run's provenance."""
    import experiments.commands.reproduce as reproduce_command
    import experiments.reproduce as reproduce
    from experiments.cli import main

    out = tmp_path / "out"
    out.mkdir()
    (out / "cache-runs.csv").write_text("an earlier run's file\n")

    def two_then_interrupt(kinds, cfg, log=None, jobs=1, on_partial=None):
        yield "dynamic", reproduce.ExperimentResult([], [{"seed": 0}], [])
        raise KeyboardInterrupt

    monkeypatch.setattr(reproduce_command, "run_experiments", two_then_interrupt)
    assert main(["reproduce", "--quick", "--experiments", "dynamic,reconfiguration", "--out", str(out), "--quiet"]) != 0
    rec = json.loads((out / "provenance.json").read_text())
    assert rec["experiments"] == ["dynamic", "reconfiguration"] and rec["finished"] == ["dynamic"]
    assert rec["files"] == ["dynamic-runs.csv", "rows.json"]  # not the earlier run's cache-runs.csv


def _fake_end_to_end_tasks(monkeypatch, fail_on: int, exception=RuntimeError):
    """End-to-end without simulations: every capacity 2 req/s, every run a fixed row; the
    ``fail_on``-th (model, workload, seed) task raises ``exception``."""
    import experiments.reproduce as reproduce
    from tests.interrupt import fail_on_call

    def capacity(task):
        model, _, _, case, policy, _ = task
        return {"model": model, "workload": case.key, "policy": policy, "capacity_rps": 2.0, "capacity_rate_scale": 1.0,
                "native_rate_rps": 2.0, "num_simulations": 0, "cached": False, "wall_s": 0.0}

    def runs(task):
        model, _, _, case, seed, scales, _, strongest, cfg = task
        return [{"model": model, "workload": case.key, "policy": p, "seed": seed, "load_fraction": load, "rate_rps": 2 * s,
                 "rate_scale": s, "capacity_rps": 2.0, "capacity_rate_scale": 1.0, "overloaded": s > 1.0,
                 "strongest_static_baseline": strongest, "num_requests": 10, "mean_ttft_s": 1.0 + seed + s, "p90_ttft_s": 2.0,
                 "p99_ttft_s": 3.0, "slo_attainment_token_weighted": 0.9, "prefix_hit_rate": 0.1, "num_unfinished": 0,
                 "wall_s": 0.0} for load, s in zip(cfg.loads, scales) for p in cfg.policies]

    monkeypatch.setattr(reproduce, "_capacity_task", capacity)
    monkeypatch.setattr(reproduce, "_runs_task", fail_on_call(runs, fail_on, exception=exception))


def test_reproduce_stopped_midway_keeps_the_finished_runs_of_its_experiment(tmp_path, capsys, monkeypatch):
    """KIND-runs.csv and KIND-capacities.csv were written when the experiment finished: a run that
    failed at the last seed of end-to-end lost every capacity search and every other seed's runs."""
    import pandas as pd

    _fake_end_to_end_tasks(monkeypatch, fail_on=3)
    out = tmp_path / "out"
    argv = ["reproduce", "--experiments", "end-to-end", "--workloads", "leval-like", "--seeds", "0,1,2", "--loads", "0.5,0.9",
            "--arrival-window-length-s", "40", "--no-cache", "--quiet", "--jobs", "1"]
    with pytest.raises(RuntimeError, match="killed"):
        main(["--traceback", *argv, "--out", str(out)])
    runs = pd.read_csv(out / "end-to-end-runs.csv")
    assert sorted(set(runs["seed"])) == [0, 1] and len(runs) == 2 * 2 * 6  # seeds x loads x policies
    caps = pd.read_csv(out / "end-to-end-capacities.csv")
    assert len(caps) == 6 and (caps["capacity_rps"] == 2.0).all()
    rec = json.loads((out / "provenance.json").read_text())
    assert rec["finished"] == [] and rec["files"] == ["end-to-end-capacities.csv", "end-to-end-runs.csv"]
    assert not (out / "rows.json").exists()
    # the complete run writes the same rows: the partial file is its first seeds
    _fake_end_to_end_tasks(monkeypatch, fail_on=0)
    full = tmp_path / "full"
    assert main([*argv, "--out", str(full), "--format", "json"]) == 0
    text = (full / "end-to-end-runs.csv").read_text().splitlines(keepends=True)
    assert (out / "end-to-end-runs.csv").read_text() == "".join(text[:1 + len(runs)])
    assert (out / "end-to-end-capacities.csv").read_text() == (full / "end-to-end-capacities.csv").read_text()
    assert json.loads((full / "provenance.json").read_text())["finished"] == ["end-to-end"]


def test_reproduce_interrupted_in_the_dynamic_runs_keeps_the_finished_seeds(tmp_path, capsys, monkeypatch):
    """Ctrl-C at the second seed of the dynamic runs (shared by dynamic and reconfiguration): the
    first seed's runs and operations are on disk."""
    import pandas as pd

    import experiments.reproduce as reproduce
    from tests.interrupt import fail_on_call

    def summary(task):
        _, seed, _ = task
        return {"seed": seed, "pool": {"num_gpus": 8, "supported_degrees": [2, 4]}, "initial_composition": "cp4x2",
                "phases": [{"kind": "short"}, {"kind": "long"}],
                "policies": [{"policy": p, "mean_ttft_s": 1.0, "phase_mean_ttft_s": [0.5, 1.5]}
                             for p in ("vertumnus-adaptive", "cp2x4")],
                "operations": [{"kind": "split", "drain_s": 1.0, "switch_s": 0.5, "confirm_s": 0.1, "total_s": 1.6}],
                "wall_s": 0.0}

    monkeypatch.setattr(reproduce, "_dynamic_task", fail_on_call(summary, 2, exception=KeyboardInterrupt))
    out = tmp_path / "out"
    assert main(["reproduce", "--experiments", "reconfiguration,dynamic", "--seeds", "0,1,2", "--quiet", "--jobs", "1",
                 "--out", str(out)]) == 130
    assert capsys.readouterr().err == "cpgym reproduce: interrupted\n"
    ops = pd.read_csv(out / "reconfiguration-runs.csv")
    assert list(ops["seed"]) == [0] and ops["total_s"].tolist() == [1.6]
    rec = json.loads((out / "provenance.json").read_text())
    assert rec["finished"] == [] and rec["files"] == ["reconfiguration-runs.csv"]
