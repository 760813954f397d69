"""Bad ``cpgym dynamic`` / ``cpgym cache-ablation`` input is one line naming the flag, found before
any capacity search, simulation or output (review of the dynamic and cache experiments)."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.cli import main

TINY = ["--num-phases", "2", "--phase-duration-s", "20", "--long-rate-rps", "1", "--decision-window-s", "5",
        "--k-windows", "1", "--initial", "cp4x10", "--compositions", "cp4x10;cp2x20", "--quiet"]


@pytest.fixture
def no_search(monkeypatch):
    """Fails the test if a capacity search or a run starts."""
    from experiments.paper_experiments import dynamic_phases

    def boom(*a, **k):
        pytest.fail("a capacity search or a run started")

    monkeypatch.setattr(dynamic_phases, "phase_capacities", boom)
    monkeypatch.setattr("baselines.runner.run_policy", boom)


def _error(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("flags, expected", [
    # controller / look-ahead / switch settings: checked after the capacity bisections, named by their inner field
    (["--lookahead-replications", "0"], "lookahead_replications must be an integer >= 1, got 0 (--lookahead-replications)"),
    (["--lookahead-stationary-duration-s", "0"], "(--lookahead-stationary-duration-s)"),
    (["--switch-s", "nan"], "switch_s must be a finite number >= 0, got nan (--switch-s)"),
    (["--target-margin", "-0.1"], "target_margin must be a finite number >= 0, got -0.1 (--target-margin)"),
    # the arrival window: checked when the workload was built, after the bisections
    (["--arrival-window-s", "30", "10"],
     "arrival_window_s must be [start, end) with 0 <= start < end, got 30 10 (--arrival-window-s)"),
    (["--arrival-window-s", "100", "200"],
     "arrival_window_s [100, 200) starts after the last phase (num_phases x phase_duration_s = "
                                   "40 s) (--arrival-window-s, --num-phases, --phase-duration-s)"),
])
def test_dynamic_settings_are_checked_before_the_capacity_search(flags, expected, tmp_path, capsys, no_search):
    cache = tmp_path / "cache"
    assert main(["dynamic", *TINY, "--short-load", "0.5", "--capacity-cache-dir", str(cache), *flags]) == 2
    assert _error(capsys).endswith(expected)
    assert not cache.exists()


@pytest.mark.parametrize("flags, given", [
    (["--lookahead-replications", "3"], "lookahead_replications"),
    (["--lookahead-duration-s", "30", "--target-trend-min-t", "1"], "lookahead_duration_s / target_trend_min_t"),
    (["--target-margin", "0"], "target_margin"),  # 0.0 == False: it passed a test against (None, False)
    (["--target-sample", "latest"], "target_sample"),
])
def test_paper_rule_refuses_target_decision_settings(flags, given, capsys, no_search):
    """The paper rule has no look-ahead: these flags were accepted and ignored."""
    assert main(["dynamic", *TINY, "--short-rate-rps", "2", "--decision", "paper-rule", *flags]) == 2
    assert f"dynamic: {given} set the 'target' decision; decision 'paper-rule' has none" in _error(capsys)


@pytest.mark.parametrize("flags", [["--supported-degrees", "16", "--pool-gpus", "32"], ["--pool-gpus", "41"],
                                   ["--gpus-per-node", "3"]])
def test_dynamic_pool_without_a_homogeneous_composition_names_the_flags(flags, capsys, no_search):
    """Was ``composition 'cp16x2' cannot be placed``: a composition the user never typed."""
    assert main(["dynamic", *TINY[:-5], "--quiet", *flags]) == 2
    err = _error(capsys)
    assert "no CP degree both divides --pool-gpus" in err and "--supported-degrees" in err and "--gpus-per-node" in err


def test_dynamic_base_pool_falls_back_to_a_placeable_degree():
    """--supported-degrees 2,16 on 32 GPUs in nodes of 8: cp16x2 cannot be placed, cp2x16 can."""
    import argparse

    from experiments.commands import dynamic

    p = argparse.ArgumentParser()
    dynamic.add_arguments(p)
    base = dynamic.base_config_from_args(p.parse_args(["--supported-degrees", "2,16", "--pool-gpus", "32"]))
    assert base.pool.composition == "cp2x16"
    assert dynamic.base_config_from_args(p.parse_args([])).pool.composition == "cp4x10"  # the default is unchanged


@pytest.mark.parametrize("flag, value, expected", [
    ("--plot", "dyn.txt", "needs a file name ending in one of"),  # savefig refused it after every run
    ("--plot", "dyn", "needs a file name ending in one of"),  # written as dyn.png, reported as dyn
    ("--plot", "", "--plot is empty; expected a file path"),  # was "--plot  is a folder"
    ("--out-dir", "", "--out-dir is empty; expected a folder path"),  # was ignored: nothing written
])
def test_dynamic_outputs_are_checked_before_the_runs(flag, value, expected, capsys, no_search):
    assert main(["dynamic", *TINY, "--short-rate-rps", "2", flag, value]) == 2
    assert expected in _error(capsys)


def test_empty_out_is_refused_by_every_command(capsys, monkeypatch):
    from experiments.paper_experiments import cache_ablation

    monkeypatch.setattr(cache_ablation, "run_cache_ablation", lambda *a, **k: pytest.fail("ran"))
    assert main(["cache-ablation", "--rates", "1", "--duration-s", "10", "--out", ""]) == 2
    assert _error(capsys).endswith("--out is empty; expected a folder path")


@pytest.mark.parametrize("flags, expected", [
    (["--rates", "1,2,1"], "rates_rps must be distinct rates, got [1.0, 2.0, 1.0] (--rates)"),
    (["--duration-s", "inf"], "duration_s must be a finite number > 0, got inf (--duration-s)"),
    (["--scan-interval-s", "inf"], "scan_interval_s must be a finite number > 0, got inf (--scan-interval-s)"),
])
def test_cache_ablation_flags(flags, expected, capsys, monkeypatch):
    from experiments.paper_experiments import cache_ablation

    monkeypatch.setattr(cache_ablation, "run_cache_ablation", lambda *a, **k: pytest.fail("ran"))
    assert main(["cache-ablation", "--rates", "1", "--duration-s", "10", *flags]) == 2
    assert _error(capsys).endswith(expected)


def test_huge_arrival_counts_are_refused_before_allocating():
    """--rates 1e9 / --duration-s 1e12 died with numpy's ArrayMemoryError traceback (182 GiB);
    --num-phases 1e8 ran out of memory building the per-phase lists."""
    from envs.workloads import get_workload
    from envs.workloads.arrivals import GammaArrivals, PoissonArrivals

    rng = np.random.default_rng(0)
    for proc in (PoissonArrivals(1e9), GammaArrivals(1e9)):
        with pytest.raises(ValueError, match="expected requests, more than 10,000,000"):
            proc.sample(10.0, rng)
    assert PoissonArrivals(1e3).sample(10.0, rng).size > 0
    with pytest.raises(ValueError, match="num_phases x phase_duration_s = 100000000 x 20 s"):
        get_workload("phases", seed=0, num_phases=100_000_000, phase_duration_s=20.0)
