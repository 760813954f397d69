"""KV-tier CLI surfaces: simulate/bench with --kv-tiers, cache-curve per tier, the sweep plot."""

import json

import pytest

from envs.sim import Request, Workload
from experiments.cli import main
from experiments.commands.cache_curve import hit_rate_curve, tiered_hit_rate_curve
from tests.interrupt import patch_everywhere


def _workload():
    reqs, t = [], 0.0
    for i in range(60):  # six documents, each asked ten times: reuse that a tiny HBM cache loses
        doc = i % 6
        hashes = tuple(1000 * doc + k for k in range(8)) + (10**6 + i,)
        reqs.append(Request(i, t, 9 * 16, 1, hashes))
        t += 0.1
    return Workload("docs", tuple(reqs), kv_block_size_tokens=16)


def test_cache_curve_per_tier_adds_dram_hits_on_top_of_the_same_hbm_hits():
    wl = _workload()
    single = hit_rate_curve(wl, [10])[0]["hit_rate"]
    rows = tiered_hit_rate_curve(wl, [10], [1, 1000])
    assert [r["hbm_hit_rate"] for r in rows] == [single, single]
    assert rows[0]["dram_hit_rate"] < rows[1]["dram_hit_rate"]
    unbounded = hit_rate_curve(wl, [None])[0]["hit_rate"]
    assert rows[1]["hit_rate"] == unbounded > single


@pytest.mark.slow
def test_simulate_json_reports_hit_rate_per_tier(capsys):
    argv = ["simulate", "--workload", "tool-agent", "--arrival-window-s", "0", "20", "--policy", "least-work",
            "--cache-capacity-scale", "0.02", "--format", "json"]
    assert main(argv) == 0
    off = json.loads(capsys.readouterr().out)[0]
    assert "dram_hit_rate" not in off
    assert main(argv + ["--kv-tiers", "hbm,dram"]) == 0
    on = json.loads(capsys.readouterr().out)[0]
    assert on["hbm_hit_rate"] + on["dram_hit_rate"] + on["store_hit_rate"] == on["prefix_hit_rate"] or \
        abs(on["hbm_hit_rate"] + on["dram_hit_rate"] + on["store_hit_rate"] - on["prefix_hit_rate"]) < 1e-12
    assert on["dram_hit_rate"] > 0 and on["prefix_hit_rate"] > off["prefix_hit_rate"]
    assert main(argv + ["--kv-tiers", "dram"]) == 2  # one clear error line
    assert "KV tiers must be" in capsys.readouterr().err


@pytest.mark.slow
def test_bench_runs_tiers_off_and_on_side_by_side(capsys):
    assert main(["bench", "sim", "--workload", "tool-agent", "--arrival-window-s", "0", "5", "--policy", "round-robin",
                 "--repeat", "1", "--kv-tiers", "hbm,dram", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["results"]
    assert [(r["policy"], r["kv_tiers"]) for r in rows] == [("round-robin", "hbm"), ("round-robin", "hbm,dram")]


@pytest.mark.slow
def test_tiers_with_reconfiguration_and_the_global_cache_manager():
    # workers created by split/merge demote to DRAM too; per-tier hits always add up
    import numpy as np

    from baselines.runner import run_policy
    from envs import workloads
    from envs.sim import SimConfig
    from envs.sim.tier_config import TierConfig

    wl = workloads.window(workloads.get_workload("tool-agent", seed=0), 0, 60)
    cfg = SimConfig(cache_capacity_scale=0.02, kv_tiers=TierConfig(levels=("hbm", "dram", "store"), eviction="next-use",
                                                                    prefetch="queue-head", layerwise=True))
    for policy in ("vertumnus-adaptive", "vertumnus-global-cache"):
        r = run_policy(policy, wl, cfg).records
        done = ~np.isnan(r["start_s"])
        assert done.all()
        total = r["hbm_hit_tokens"] + r["dram_hit_tokens"] + r["store_hit_tokens"]
        assert (total[done] == r["num_cached_tokens"][done]).all()
        assert r["dram_hit_tokens"].sum() + r["store_hit_tokens"].sum() > 0


def test_kv_tiers_refuses_kv_tiers_levels_it_would_replace(capsys, monkeypatch):
    """--kv-tiers hbm,dram was accepted and ignored: every row's levels are set by the study."""
    import experiments.kv_tiers as kv_tiers
    from experiments.cli import main

    patch_everywhere(monkeypatch, kv_tiers, "run_tier_study", lambda *a, **k: pytest.fail("ran the study with --kv-tiers"))
    assert main(["kv-tiers", "--arrival-window-s", "0", "5", "--capacity-rps", "10", "--kv-tiers", "hbm,dram"]) == 2
    assert capsys.readouterr().err.startswith("cpgym kv-tiers: error: --kv-tiers hbm,dram has no effect here: the tier "
                                              "table runs each policy with hbm, hbm,dram and hbm,dram,store")


def test_kv_tiers_stopped_midway_keeps_its_finished_runs(tmp_path, capsys, monkeypatch):
    """kv_tiers.json, tables.md and provenance.json were written at the end only: a study that failed
    in its eviction table lost the tier table."""
    import json

    import pandas as pd

    import experiments.kv_tiers as kv_tiers
    from experiments.cli import main

    def two_runs_then_fail(*a, progress=None, **k):
        for policy in ("least-work", "vertumnus"):
            progress({"policy": policy, "kv_tiers": "hbm", "eviction": "-", "mean_ttft_s": 1.0, "prefix_hit_rate": 0.5})
        raise RuntimeError("killed")

    patch_everywhere(monkeypatch, kv_tiers, "run_tier_study", two_runs_then_fail)
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="killed"):
        main(["--traceback", "kv-tiers", "--arrival-window-s", "0", "5", "--capacity-rps", "10", "--out", str(out)])
    assert json.loads((out / "provenance.json").read_text())["argv"]
    assert list(pd.read_csv(out / "rows.csv")["policy"]) == ["least-work", "vertumnus"]


@pytest.mark.parametrize("load, overloaded", [("0.9", False), ("1.2", True)])
def test_kv_tiers_labels_a_load_above_capacity_as_overloaded(load, overloaded, capsys, monkeypatch):
    """--load accepts up to 1.5 of the measured capacity; a rate above it was printed like any other."""
    import experiments.kv_tiers as kv_tiers
    from experiments.cli import main

    def study(trace, config, policies, arrival_window_s, load_fraction, capacity_policy, capacity_rps, *a, **k):
        return kv_tiers.TierStudy(capacity={"capacity_rps": capacity_rps}, load_fraction=load_fraction,
                                  rate_rps=load_fraction * capacity_rps)

    patch_everywhere(monkeypatch, kv_tiers, "run_tier_study", study)
    assert main(["kv-tiers", "--arrival-window-s", "0", "5", "--capacity-rps", "10", "--load", load]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"capacity 10.00 req/s; load {load} -> ")
    assert ("overloaded: above vertumnus-router's capacity" in first) is overloaded
