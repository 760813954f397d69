"""``cpgym dynamic`` end to end on a short phases workload (JSON output and the plot)."""

import argparse
import json

import pytest

from envs.sim.reconfig import ReconfigConfig
from experiments.commands import dynamic
from tests.interrupt import patch_everywhere


def test_dynamic_json_and_plot(tmp_path, capsys):
    p = argparse.ArgumentParser()
    dynamic.add_arguments(p)
    png = tmp_path / "plots" / "dyn.png"  # its folder is created
    args = p.parse_args(["--num-phases", "2", "--phase-duration-s", "60", "--rate-scale", "0.3", "--decision-window-s", "10",
                         "--supported-degrees", "2,4",
                         "--compositions", "cp4x10;cp2x20", "--initial", "cp2x20", "--format", "json", "--plot", str(png),
                         "--decision", "paper-rule"])  # fast; the default decision runs in the other command tests
    assert dynamic.run(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in out["policies"]] == ["vertumnus-adaptive", "fixed cp4x10", "fixed cp2x20"]
    assert all(len(r["phase_mean_ttft_s"]) == 2 for r in out["policies"])
    assert [ph["kind"] for ph in out["phases"]] == ["short", "long"]
    assert out["best_fixed_composition"] in ("cp4x10", "cp2x20") and out["controller"]["decision"] == "paper-rule"
    for o in out["operations"]:
        assert o["kind"] in ("split", "merge") and o["switch_s"] == pytest.approx(ReconfigConfig().switch_s)
        assert o["drain_s"] >= ReconfigConfig().drain_sync_s - 1e-9
    assert png.stat().st_size > 10_000


def test_dynamic_rejects_bad_rate_scale():
    p = argparse.ArgumentParser()
    dynamic.add_arguments(p)
    try:
        dynamic.run(p.parse_args(["--rate-scale", "0"]))
    except ValueError as exc:
        assert "rate_scale" in str(exc)
    else:
        raise AssertionError("expected ValueError")


@pytest.mark.slow
def test_dynamic_window_is_the_workload_window_and_shared_flags_have_shared_defaults(tmp_path, capsys):
    """``--arrival-window-s START END`` is the arrival window (as in every command); the controller
    window is ``--decision-window-s``; pool flags come from the shared group (with the paper's
    CP degrees 2,4 as this command's default)."""
    from experiments.cli import build_parser, main

    args = build_parser().parse_args(["dynamic", "--arrival-window-s", "0", "120"])
    assert args.arrival_window_s == [0.0, 120.0] and args.decision_window_s == 20.0
    assert args.supported_degrees == "2,4" and build_parser().parse_args(["simulate"]).supported_degrees == "1,2,4,8"
    assert args.pool_gpus == build_parser().parse_args(["simulate"]).pool_gpus
    out_dir = tmp_path / "out"
    rc = main(["dynamic", "--num-phases", "2", "--phase-duration-s", "60", "--rate-scale", "0.3", "--arrival-window-s", "30",
               "90",
               "--supported-degrees", "2,4", "--compositions", "cp4x10", "--initial", "cp4x10", "--format", "json",
               "--out-dir", str(out_dir)])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["workload"]["arrival_window_s"] == [30.0, 90.0]
    assert [ph["kind"] for ph in out["phases"]] == ["short", "long"]
    assert [(ph["start_s"], ph["end_s"]) for ph in out["phases"]] == [(0.0, 30.0), (30.0, 60.0)]
    assert json.loads((out_dir / "provenance.json").read_text())["argv"]


def test_dynamic_default_is_the_paper_set_and_all_is_bounded():
    """Defaults: the paper's CP degrees 2,4 (11 fixed compositions of 40 GPUs); ``all`` over
    1,2,4,8 (286 compositions) is refused before anything runs unless --max-compositions allows it."""
    from experiments.cli import build_parser

    runs = dynamic.plan(build_parser().parse_args(["dynamic"]))
    assert len(runs) == 1 + 11
    assert {tuple(cfg.pool.supported_degrees) for _, cfg, _ in runs} == {(2, 4)}
    # without --max-compositions 300: a row of tests/experiments/test_cli_errors.py
    args = build_parser().parse_args(["dynamic", "--supported-degrees", "1,2,4,8", "--max-compositions", "300"])
    dynamic.check_composition_count(_cfg(args), dynamic.base_config_from_args(args), args.max_compositions)  # allowed


def _cfg(args):
    from envs.sim.options import config_from_args
    from experiments.paper_experiments.dynamic_phases import DynamicPhasesConfig

    return config_from_args(DynamicPhasesConfig, args)


@pytest.mark.slow
def test_dynamic_quiet_prints_no_progress(capsys):
    from experiments.cli import main

    argv = ["dynamic", "--num-phases", "1", "--phase-duration-s", "20", "--rate-scale", "0.2", "--compositions", "cp4x10",
            "--initial", "cp4x10", "--format", "json"]
    assert main([*argv, "--quiet"]) == 0
    assert capsys.readouterr().err == ""
    assert main(argv) == 0
    assert "running fixed cp4x10" in capsys.readouterr().err


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_dynamic_quiet_writes_nothing_to_stderr_and_the_results_to_stdout(fmt, tmp_path):
    """``--quiet`` (a real process, so that a library warning is seen as a user sees it): stderr holds
    no library warning (only cpgym's own one-line warnings), also with ``--plot`` of an overloaded
    run cut by ``--horizon-s`` (10 s bins whose requests are all unfinished used to print numpy's
    "Mean of empty slice" RuntimeWarning with its source line); stdout keeps the results: the
    tables, or JSON with --format json."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    argv = ["dynamic", "--num-phases", "2", "--phase-duration-s", "10", "--rate-scale", "3", "--compositions", "cp4x10",
            "--initial", "cp4x10", "--horizon-s", "11", "--plot", str(tmp_path / "dyn.png"), "--format", fmt, "--quiet"]
    res = subprocess.run([sys.executable, "-m", "experiments.cli", *argv], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(root)}, cwd=tmp_path)
    # nothing but the one cpgym warning these 10 s phases earn (shorter than the controller's reaction time)
    assert res.returncode == 0 and res.stderr.startswith("cpgym dynamic: warning: phases of 10 s are shorter than")
    assert len(res.stderr.splitlines()) == 1
    if fmt == "json":
        out = json.loads(res.stdout)
        assert [r["policy"] for r in out["policies"]] == ["vertumnus-adaptive", "fixed cp4x10"]
        assert out["policies"][1]["num_unfinished"] > 0 and out["policies"][1]["phase_mean_ttft_s"][1] is None
    else:
        assert "mean TTFT [s] per phase (arrival)" in res.stdout  # "[s]" was taken as rich markup
        assert "reconfiguration operations (initial cp4x10)" in res.stdout
        assert "final composition cp4x10" in res.stdout.replace("\n", " ")  # was the list of (degree, first GPU)
    assert (tmp_path / "dyn.png").stat().st_size > 0


def test_dynamic_quiet_help_says_what_goes_where(capsys):
    from experiments.cli import main

    with pytest.raises(SystemExit):
        main(["dynamic", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--quiet nothing on stderr but errors and cpgym warnings: no progress lines" in text
    assert "the results still go to stdout (tables, or JSON with --format json)" in text


def test_phase_rates_as_fractions_of_capacity(monkeypatch):
    # the capacity search is replaced by fixed sustainable rates per (mix, pool): the phase rate is
    # load x the strongest pool's capacity, and the summary keeps what was used
    import baselines.capacity as capacity
    from experiments.commands.dynamic import base_config_from_args
    from experiments.paper_experiments.dynamic_phases import DynamicPhasesConfig, resolve_rates

    caps = {("short", "cp4x10"): 56.0, ("short", "cp2x20"): 64.0, ("long", "cp4x10"): 8.5, ("long", "cp2x20"): 9.5}

    def fake_find_capacity(policy, rated, config, calibration=None, cache_dir=None, **_):
        kind = "short" if rated.base.metadata["phase_kinds"] == ["short"] else "long"
        assert policy == "vertumnus-router" and rated.arrival_window_length_s == 150.0
        assert not rated.base.metadata["rising_rate"]
        return capacity.CapacityResult(policy, "phases", caps[(kind, config.pool.composition)], 1.0, 1.0, [], {})

    patch_everywhere(monkeypatch, capacity, "find_capacity", fake_find_capacity)
    p = argparse.ArgumentParser()
    dynamic.add_arguments(p)
    base = base_config_from_args(p.parse_args(["--supported-degrees", "2,4"]))
    cfg, used = resolve_rates(DynamicPhasesConfig(short_load=0.5, long_load=0.4, capacity_cache_dir=""), base, None)
    assert cfg.short_rate_rps == pytest.approx(32.0) and cfg.long_rate_rps == pytest.approx(3.8)
    assert cfg.short_load is None and cfg.long_load is None  # made absolute
    assert used["short"]["strongest_pool"] == "cp2x20" and used["long"]["per_pool_capacity_rps"]["cp4x10"] == 8.5
    # absolute rates stay the default and untouched
    cfg, used = resolve_rates(DynamicPhasesConfig(), base, None)
    assert used == {} and cfg == DynamicPhasesConfig()


@pytest.mark.parametrize("kw, msg", [({"short_load": 0.0}, "short_load"), ({"long_load": 2.5}, "long_load"),
                                     ({"short_load": 0.5, "rate_scale": 2.0}, "rate_scale"),
                                     # were accepted, the absolute rate silently replaced by the load's
                                     ({"short_load": 0.5, "short_rate_rps": 3.0}, "short_load replaces short_rate_rps"),
                                     ({"long_load": 0.5, "long_rate_rps": 3.0}, "long_load replaces long_rate_rps")])
def test_dynamic_load_fractions_are_validated(kw, msg):
    from experiments.paper_experiments.dynamic_phases import DynamicPhasesConfig

    with pytest.raises(ValueError, match=msg):
        DynamicPhasesConfig(**kw)


def test_dynamic_lookahead_sample_flags_reach_the_controller():
    from experiments.paper_experiments.dynamic_phases import DynamicPhasesConfig, controller_config

    ccfg = controller_config(DynamicPhasesConfig(target_sample="latest", target_replay_sample=True))
    assert (ccfg.target_sample, ccfg.target_replay_sample) == ("latest", True)
    default = controller_config(DynamicPhasesConfig())
    assert (default.target_sample, default.target_replay_sample) == ("regime-start", False)
    # with the paper rule, or an unknown --target-sample: rows of tests/experiments/test_cli_errors.py


def test_phases_shorter_than_the_controller_reaction_time_warn(capsys):
    """A phase shorter than the controller's reaction time (k_windows + 1 windows) leaves it no time
    to adapt: `cpgym dynamic` says so in one warning line, also with --quiet, and still runs."""
    import warnings

    from experiments.cli import main
    from experiments.paper_experiments.dynamic_phases import (
        DynamicPhasesConfig,
        DynamicPhasesWarning,
        reaction_windows,
        warn_short_phases,
    )

    assert reaction_windows(2) == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_short_phases(DynamicPhasesConfig())  # the paper's 150 s phases
        warn_short_phases(DynamicPhasesConfig(phase_duration_s=60.0))  # exactly 3 windows of 20 s
        warn_short_phases(DynamicPhasesConfig(num_phases=1, phase_duration_s=10.0))  # no phase change
        warn_short_phases(DynamicPhasesConfig(phase_duration_s=30.0, decision_window_s=10.0))
        # equal up to float rounding (3 x 1.1 = 3.3000000000000003): not shorter ("phases of 3.3 s are shorter than ... 3.3 s")
        warn_short_phases(DynamicPhasesConfig(phase_duration_s=3.3, decision_window_s=1.1))
        warn_short_phases(DynamicPhasesConfig(phase_duration_s=0.3, decision_window_s=0.1))
    with pytest.warns(DynamicPhasesWarning, match=r"phases of 59 s are shorter than the adaptive controller's reaction "
                                                  r"time \(3 windows of 20 s = 60 s"):
        warn_short_phases(DynamicPhasesConfig(phase_duration_s=59.0))
    with pytest.warns(DynamicPhasesWarning, match=r"\(5 windows of 20 s = 100 s: the window of the change, then "
                                                  r"--k-windows 4 sustained windows\)"):
        warn_short_phases(DynamicPhasesConfig(k_windows=4, phase_duration_s=90.0))
    # the three flags that set the reaction time; --k-windows only where it can be lowered
    with pytest.warns(DynamicPhasesWarning, match=r"use --phase-duration-s >= 40 or a shorter --decision-window-s$"):
        warn_short_phases(DynamicPhasesConfig(k_windows=1, phase_duration_s=30.0))
    for bad in (0, -1, 2.5, True, "2"):
        with pytest.raises(ValueError, match="k_windows must be an integer >= 1"):
            reaction_windows(bad)

    argv = ["dynamic", "--num-phases", "2", "--phase-duration-s", "30", "--rate-scale", "0.2", "--compositions", "cp4x10",
            "--initial", "cp4x10", "--format", "json", "--quiet"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.err == ("cpgym dynamic: warning: phases of 30 s are shorter than the adaptive controller's reaction "
                            "time (3 windows of 20 s = 60 s: the window of the change, then --k-windows 2 sustained "
                            "windows), so the pool cannot adapt within a phase; use --phase-duration-s >= 60, a "
                            "shorter --decision-window-s or a smaller --k-windows\n")
    assert [r["policy"] for r in json.loads(captured.out)["policies"]] == ["vertumnus-adaptive", "fixed cp4x10"]


@pytest.mark.slow
def test_dynamic_stopped_midway_keeps_its_provenance_and_finished_runs(tmp_path, capsys, monkeypatch):
    """Everything was written at the end: a run that failed at its last fixed composition lost the
    finished ones (paper runs take minutes per composition)."""
    import pandas as pd

    import baselines.runner as runner
    from experiments.cli import main
    from tests.interrupt import fail_on_call

    patch_everywhere(monkeypatch, runner, "run_policy", fail_on_call(runner.run_policy, 2))
    out_dir = tmp_path / "out"
    with pytest.raises(RuntimeError, match="killed"):
        main(["--traceback", "dynamic", "--num-phases", "2", "--phase-duration-s", "60", "--rate-scale", "0.3",
              "--arrival-window-s", "30", "90", "--supported-degrees", "2,4", "--compositions", "cp4x10",
              "--initial", "cp4x10", "--quiet", "--out-dir", str(out_dir)])
    assert json.loads((out_dir / "provenance.json").read_text())["argv"]
    pol = pd.read_csv(out_dir / "policies.csv")
    assert list(pol["policy"]) == ["vertumnus-adaptive"] and "phase0_short_mean_ttft_s" in pol.columns
    assert not (out_dir / "dynamic.json").exists()  # written only by a finished run
