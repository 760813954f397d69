"""Helpers of the reconfiguration analysis scripts (experiments/scripts/reconfig_*.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from baselines.envs import make_reconfig_env


def test_phase_means_average_each_phase_and_skip_unfinished_requests():
    from experiments.scripts.reconfig_gap_analysis import phase_means

    ttft = np.array([1.0, 3.0, np.nan, 0.5, np.nan])
    phase = np.array([0, 0, 1, 1, 2])
    got = phase_means(ttft, phase, 4)
    assert got[:2] == [2.0, 0.5]
    assert math.isnan(got[2]) and math.isnan(got[3])  # only unfinished / no requests


def test_target_runs_collapse_repeated_targets():
    from experiments.scripts.reconfig_gap_analysis import target_runs

    menu = ["cp4x2", "cp4x1,cp2x2", "cp2x4"]
    assert target_runs([0, 0, 2, 2, 0], [0, 0, 0, 1, 1], menu) == [(0, 0, "cp4x2"), (2, 0, "cp2x4"), (4, 1, "cp4x2")]
    assert target_runs([], [], menu) == []


def test_oracle_schedule_rows_are_evaluation_rows(tmp_path):
    """``reconfig_oracle_schedule.py --out-csv``: the followed schedule's row has the columns of an
    evaluation row (``cpgym evaluate --from-csv`` reads it) next to the selected rows of ``--with-rows``."""
    import pandas as pd
    import pytest

    from envs.sim import PoolConfig, SimConfig
    from envs.workloads import WorkloadSource
    from experiments.scripts.reconfig_oracle_schedule import rows_with, write_rows
    from policies.episode_rows import read_episode_rows
    from policies.reconfig.evaluate import aggregate_reconfig
    from policies.reconfig.oracle import follow_schedule

    small = SimConfig(pool=PoolConfig(num_gpus=8, gpus_per_node=8, composition="cp4x1,cp2x2", supported_degrees=(1, 2, 4)))
    params = (("duration_s", 80.0), ("load_fraction_range", (0.05, 0.1)), ("num_phases_range", (2, 2)))
    wl = WorkloadSource(name="matched-phases", seed=0, params=params).build()
    env = make_reconfig_env([wl], small, capacity_features=True, action_mode="target", target_degrees=(2, 4))
    stay = follow_schedule(env, wl, 0, [1, 1])  # cp4x1,cp2x2: the initial composition
    move = follow_schedule(env, wl, 0, [2, 2])  # cp2x4: one split
    assert stay["num_operations"] == 0 and move["num_operations"] >= 1 and stay["mean_ttft_s"] > 0
    evaluated = tmp_path / "eval.csv"
    pd.DataFrame([{"policy": p, "seed": s, "wall_s": 1.0, "mean_ttft_s": m, "p90_ttft_s": 2 * m,
                   "slo_attainment_token_weighted": 1.0, "num_operations": 0, "num_committed_operations": 0,
                   "num_unfinished": 0} for p, m in (("a", 0.2), ("b", 0.4)) for s in (0, 1)]).to_csv(evaluated, index=False)
    kept = rows_with(str(evaluated), "b", [0])
    assert [(r["policy"], r["seed"]) for r in kept] == [("b", 0)]
    assert len(rows_with(str(evaluated), None, [0, 1])) == 4 and rows_with(None, None, [0]) == []
    with pytest.raises(ValueError, match="policy 'c' has no row for seed"):
        rows_with(str(evaluated), "b,c", [0])
    with pytest.raises(ValueError, match="--with-policies needs --with-rows"):
        rows_with(None, "b", [0])
    out = tmp_path / "oracle.csv"
    write_rows(str(out), kept + [{"policy": "oracle-schedule:switch-cost-5", "seed": 0, **move, "composition": "cp2x4"}])
    kind, rows = read_episode_rows(str(out))
    assert kind == "reconfig"
    table = {r["policy"]: r for r in aggregate_reconfig(rows, reference="oracle-schedule:switch-cost-5")}
    expected = 100 * (0.4 - move["mean_ttft_s"]) / move["mean_ttft_s"]
    assert math.isclose(table["b"]["delta_mean_ttft_pct_vs_ref"], expected)


def test_oracle_schedule_rejects_bad_arguments_before_simulating(tmp_path, capsys):
    """``reconfig_oracle_schedule.py``: each bad argument exits with status 2 and one line naming it
    (argparse's error), before any simulation (``parse_args`` runs none)."""
    import pytest

    from experiments.scripts.reconfig_oracle_schedule import parse_args

    a_file = tmp_path / "not-a-csv.csv"
    a_file.write_text("")
    cases = [
        (["0", "--with-rows", str(a_file)], "--with-rows needs --out-csv"),
        (["0", "--with-policies", "p"], "--with-policies needs --with-rows"),
        (["0", "--out-csv", str(tmp_path / "missing" / "x.csv")], "--out-csv"),
        (["0", "--out-csv", str(tmp_path)], "--out-csv"),
        (["0", "--cache", str(tmp_path)], "--cache"),
        (["0", "--out-csv", str(tmp_path / "o.csv"), "--with-rows", str(tmp_path / "absent.csv")], "--with-rows"),
        (["0", "--out-csv", str(tmp_path / "o.csv"), "--with-rows", str(a_file)], "--with-rows"),
        (["a,b"], "SEEDS"),
        (["0", "--switch-costs=-1"], "--switch-costs"),
        (["0", "--switch-costs", "nan"], "--switch-costs"),
        (["0", "--switch-costs", "x"], "--switch-costs"),
        (["0", "-0.5"], "TOLERANCE"),
        (["0", "0.1", "0"], "GPUS_PER_WINDOW"),
        (["0", "--window-s", "0"], "--window-s"),
        (["0", "--window-s", "inf"], "--window-s"),
    ]
    for argv, needle in cases:
        with pytest.raises(SystemExit) as exc:
            parse_args(argv)
        assert exc.value.code == 2, argv
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert needle in err and "Traceback" not in err, (argv, err)
    a, seeds, costs, rows = parse_args(["3,4", "--switch-costs", "0,5", "--out-csv", str(tmp_path / "o.csv")])
    assert (seeds, costs, rows) == ([3, 4], [0.0, 5.0], [])


def _cell(root, name: str, policy: str, seed: int, params: dict, mean_ttft_s: float, num_ops: int | None):
    import json

    d = root / name
    d.mkdir()
    (d / "summary.json").write_text(json.dumps({"mean_ttft_s": mean_ttft_s, "p90_ttft_s": 2 * mean_ttft_s,
                                                "slo_attainment_token_weighted": 0.99, "num_unfinished": 0,
                                                "wall_time_s": 1.0}))
    if num_ops is not None:
        (d / "extras.json").write_text(json.dumps({"reconfig_operations": [{}] * num_ops, "num_reconfigurations": num_ops}))
    (d / "cell.json").write_text(json.dumps({"key": name, "policy": policy, "seed": seed, "policy_params": params}))


def test_sweep_reconfig_rows_feed_paired_deltas(tmp_path, capsys):
    """``sweep_reconfig_rows.py``: one evaluation row per finished cell, labelled by policy and swept
    parameters; ``cpgym evaluate --from-csv`` pairs them by seed."""
    import json

    import pytest

    from experiments.cli import main
    from experiments.scripts.sweep_reconfig_rows import sweep_rows

    sweep = tmp_path / "sweep"
    sweep.mkdir()
    for seed, (router, adaptive) in enumerate([(1.0, 1.2), (2.0, 2.2)]):
        _cell(sweep, f"r{seed}", "vertumnus-router", seed, {}, router, 0)
        _cell(sweep, f"a{seed}", "vertumnus-adaptive", seed, {"target_sample": "latest"}, adaptive, 3)
    with pytest.raises(ValueError, match="no sweep.json"):  # not a sweep's output folder
        sweep_rows(sweep)
    (sweep / "sweep.json").write_text(json.dumps({"cells": [{}] * 4}))
    rows = sweep_rows(sweep)
    labels = {(r["policy"], r["seed"]) for r in rows}
    assert labels == {("vertumnus-router", 0), ("vertumnus-router", 1), ("vertumnus-adaptive[target_sample=latest]", 0),
                      ("vertumnus-adaptive[target_sample=latest]", 1)}
    assert {r["num_operations"] for r in rows if r["policy"] == "vertumnus-router"} == {0}
    out = tmp_path / "rows.csv"
    from experiments.scripts.sweep_reconfig_rows import main as rows_main

    assert rows_main([str(sweep), "--out", str(out)]) == 0
    # the sweep's manifest says how many cells it has: an unfinished one is an error, not a shorter table
    (sweep / "sweep.json").write_text(json.dumps({"cells": [{}] * 5}))
    with pytest.raises(ValueError, match="4 of 5 cells finished"):
        sweep_rows(sweep)
    (sweep / "sweep.json").write_text(json.dumps({"cells": [{}] * 4}))
    _cell(sweep, "z", "vertumnus-router", 0, {}, 1.0, 0)  # a second router seed 0: would be averaged silently
    with pytest.raises(ValueError, match="both vertumnus-router seed 0"):
        sweep_rows(sweep)
    with pytest.raises(ValueError, match="no such folder"):
        sweep_rows(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "sweep.json").write_text(json.dumps({"cells": [{}]}))
    with pytest.raises(ValueError, match="no finished (sweep )?cell"):
        sweep_rows(tmp_path / "empty")
    # a cell without extras.json: its operations are unknown (NaN), not 0
    import math

    unknown = tmp_path / "unknown"
    unknown.mkdir()
    (unknown / "sweep.json").write_text(json.dumps({"cells": [{}]}))
    _cell(unknown, "a0", "vertumnus-adaptive", 0, {}, 1.0, None)
    assert math.isnan(sweep_rows(unknown)[0]["num_operations"])
    with pytest.raises(SystemExit):  # --out a folder: a usage error before reading anything
        rows_main([str(sweep), "--out", str(tmp_path)])
    capsys.readouterr()
    assert main(["evaluate", "--from-csv", str(out), "--kind", "reconfig", "--reference", "vertumnus-router",
                 "--format", "json"]) == 0
    table = {r["policy"]: r for r in json.loads(capsys.readouterr().out)}
    # paired per seed: +20 % and +10 % -> +15 %; not the ratio of the means (1.7 / 1.5 - 1 = 13.3 %)
    assert table["vertumnus-adaptive[target_sample=latest]"]["delta_mean_ttft_pct_vs_ref"] == pytest.approx(15.0)
    assert table["vertumnus-adaptive[target_sample=latest]"]["num_operations"] == 3.0
    # the table prints the bracketed label whole (rich would take "[...]" for markup and drop it)
    assert main(["evaluate", "--from-csv", str(out), "--kind", "reconfig", "--reference",
                 "vertumnus-adaptive[target_sample=latest]"]) == 0
    text = capsys.readouterr().out
    assert text.count("vertumnus-adaptive[target_sample=latest]") >= 2  # its row and the delta column's header


def test_sustained_target_changes_only_after_k_consecutive_windows(monkeypatch):
    """``reconfig_sustained_target.SustainedTarget``: the first choice is taken at once, a new
    target only after ``k`` consecutive windows name it (an interrupted run starts again), and a
    held target that the mask refuses gives way to the checkpoint's choice."""
    from experiments.scripts.reconfig_sustained_target import SustainedTarget
    from policies.reconfig.evaluate import LearnedReconfig

    choices = iter([3, 5, 5, 7, 5, 5, 5, 3, 3])
    monkeypatch.setattr(LearnedReconfig, "act", lambda self, obs, mask: next(choices))
    pol = object.__new__(SustainedTarget)
    pol.sustained_windows = 2
    pol._held, pol._candidate, pol._count = None, None, 0
    mask = np.ones(8, dtype=bool)
    assert [pol.act({}, mask) for _ in range(7)] == [3, 3, 5, 5, 5, 5, 5]
    mask[5] = False
    assert pol.act({}, mask) == 3  # the held target 5 is masked: the checkpoint's choice
    mask[5] = True
    assert pol.act({}, mask) == 3  # second window naming 3: it becomes the target
    assert pol._held == 3


def test_margin_gated_target_moves_only_for_a_clear_probability_gain(monkeypatch):
    """``reconfig_sustained_target.MarginGatedTarget``: the first choice is taken at once; the
    target moves to the checkpoint's choice only when its probability beats the current target's
    by the margin (a confident move is not delayed); a masked current target gives way."""
    from experiments.scripts import reconfig_ensemble_check as rec
    from experiments.scripts.reconfig_sustained_target import MarginGatedTarget

    probs = iter([np.array([0.1, 0.7, 0.2]),   # first choice: 1
                  np.array([0.1, 0.35, 0.55]),  # 2 beats 1 by 0.2 < 0.25: stay on 1
                  np.array([0.0, 0.2, 0.8]),    # 2 beats 1 by 0.6: move at once
                  np.array([0.5, 0.0, 0.5]),    # tie 0 / 2: argmax 0 beats 2 by 0: stay on 2
                  np.array([0.6, 0.4, 0.0])])   # 2 is masked: the checkpoint's choice 0
    monkeypatch.setattr(rec, "action_probabilities", lambda member, obs, mask: next(probs))
    pol = object.__new__(MarginGatedTarget)
    pol.margin, pol._held = 0.25, None
    mask = np.ones(3, dtype=bool)
    assert [pol.act({}, mask) for _ in range(4)] == [1, 1, 2, 2]
    mask[2] = False
    assert pol.act({}, mask) == 0
    with pytest.raises(ValueError, match="--probability-margins must be numbers in \\[0, 1\\]"):
        MarginGatedTarget("shipped-reconfig", 1.5)


def test_operation_budget_variant_changes_only_the_deployed_budget():
    from experiments.scripts.reconfig_sustained_target import with_operation_budget
    from policies.reconfig.evaluate import LearnedReconfig

    shipped = LearnedReconfig("shipped-reconfig")
    varied = with_operation_budget("shipped-reconfig", 24)
    assert shipped.env_kwargs["max_operation_gpus_per_window"] == 16.0
    assert varied.env_kwargs == dict(shipped.env_kwargs, max_operation_gpus_per_window=24.0)
    with pytest.raises(ValueError, match="--max-operation-gpus-per-window must be numbers > 0"):
        with_operation_budget("shipped-reconfig", 0)


@pytest.mark.parametrize("argv, error", [
    # --sustained-windows was silently ignored next to another mode (its default hid the conflict)
    (["--sustained-windows", "2", "--probability-margins", "0.1"],
     "give one of --sustained-windows, --probability-margins and --max-operation-gpus-per-window, "
     "got --sustained-windows and --probability-margins"),
    (["--sustained-windows", "2", "--max-operation-gpus-per-window", "8"], "got --sustained-windows and --max-op"),
    # a repeated value was one policy (dict key): silently fewer rows than asked
    (["--probability-margins", "0.1,0.1"], "--probability-margins lists 0.1 twice"),
    (["--max-operation-gpus-per-window", "8,8.0"], "--max-operation-gpus-per-window lists 8 twice"),
    # a bad list did not name its flag
    (["--probability-margins", "x"], "--probability-margins: must be a comma-separated list of numbers, got 'x'"),
    (["--seeds", ""], "--seeds: needs at least one value"),
    # an --out that cannot be written failed only after every evaluation (a missing folder is created)
    (["--out", "/dev/null/rows.csv"], "--out /dev/null/rows.csv cannot be created: /dev/null is not a folder"),
])
def test_sustained_target_script_refuses_bad_flags_before_evaluating(argv, error, monkeypatch, capsys):
    from experiments.scripts import reconfig_sustained_target as rst

    def no_eval(*a, **k):
        raise AssertionError("evaluated despite a bad flag")

    monkeypatch.setattr(rst, "evaluate_and_report", no_eval)
    assert rst.main(argv) == 2
    assert error in capsys.readouterr().err


def test_probability_ensemble_of_one_checkpoint_acts_like_it(monkeypatch):
    """``reconfig_ensemble_check.ProbabilityEnsemble``: the argmax of the mean masked action
    probabilities is each member's deterministic action when the members are one checkpoint,
    and a mean of two different probability vectors picks the action they favour together."""
    from experiments.scripts import reconfig_ensemble_check as rec
    from policies.reconfig.evaluate import LearnedReconfig

    policy = LearnedReconfig("shipped-reconfig")
    ens = rec.ProbabilityEnsemble(["shipped-reconfig", "shipped-reconfig"])
    rng = np.random.default_rng(0)
    spaces = policy.model.observation_space.spaces
    for _ in range(5):
        obs = {k: rng.uniform(0.0, 2.0, size=s.shape).astype(np.float32) for k, s in spaces.items()}
        mask = rng.random(policy.model.action_space.n) < 0.5
        mask[0] = True
        assert ens.act(obs, mask) == policy.act(obs, mask)
        probs = rec.action_probabilities(policy, obs, mask)
        assert probs.shape == (policy.model.action_space.n,) and np.all(probs[~mask] == 0)
        assert math.isclose(float(probs.sum()), 1.0, rel_tol=1e-5)
    votes = iter([np.array([0.6, 0.4, 0.0]), np.array([0.0, 0.45, 0.55])] * 2)
    monkeypatch.setattr(rec, "action_probabilities", lambda member, obs, mask: next(votes))
    assert ens.act({}, np.ones(3, dtype=bool)) == 1  # neither member's own first choice


def test_dynamic_paired_compares_seed_by_seed_and_refuses_mismatched_pairs(tmp_path, capsys):
    import json

    import pytest

    from experiments.scripts.dynamic_paired import main, paired

    def run(name, seed, ttft):
        d = tmp_path / name
        d.mkdir()
        (d / "dynamic.json").write_text(json.dumps({"workload": {"name": "phases", "seed": seed}, "policies": [
            {"policy": "fixed cp4x10", "mean_ttft_s": 9.0}, {"policy": "vertumnus-adaptive", "mean_ttft_s": ttft}]}))
        return str(d)

    a = [run("a0", 0, 1.0), run("a1", 1, 2.0)]
    b = [run("b0", 0, 1.1), run("b1", 1, 2.2)]
    out = paired(a, b)
    assert out["seeds"] == [0, 1] and out["pct_change"] == pytest.approx([10.0, 10.0])
    assert out["mean_pct_change"] == pytest.approx(10.0) and out["ci_low"] == pytest.approx(10.0)
    with pytest.raises(ValueError, match="are not a pair"):
        paired(a, [b[1], b[0]])
    assert main(["--a", a[0], "--b", b[0]]) == 2  # one pair: no CI
    assert "same number (>= 2)" in capsys.readouterr().err
    bad = tmp_path / "bad"
    bad.mkdir()
    assert main(["--a", a[0], str(bad), "--b", *b]) == 2
    assert "bad/dynamic.json: not a readable" in capsys.readouterr().err


def test_runs_paired_pairs_runs_by_seed_and_averages_the_training_seeds(tmp_path, capsys):
    import pandas as pd

    from experiments.scripts.runs_paired import main, paired

    f = tmp_path / "runs.csv"
    rows = [("a1", 0, 1.0), ("a1", 1, 2.0), ("a2", 0, 3.0), ("a2", 1, 2.0),
            ("b1", 0, 1.1), ("b1", 1, 2.2), ("b2", 0, 3.0), ("b2", 1, 2.0)]
    pd.DataFrame(rows, columns=["policy", "seed", "mean_ttft_s"]).to_csv(f, index=False)
    out = paired([f"{f}:a1", f"{f}:a2"], [f"{f}:b1", f"{f}:b2"])
    assert out["seeds"] == [0, 1]
    assert out["pairs"][0]["mean_pct_change"] == pytest.approx(10.0)
    assert out["pairs"][0]["ci_low"] == pytest.approx(10.0) and out["pairs"][1]["mean_pct_change"] == pytest.approx(0.0)
    mean = out["mean_of_runs"]  # per seed: a (2.0, 2.0), b (2.05, 2.1)
    assert mean["a_mean_ttft_s"] == pytest.approx(2.0) and mean["b_mean_ttft_s"] == pytest.approx(2.075)
    assert mean["mean_pct_change"] == pytest.approx(3.75)
    pd.DataFrame(rows + [("c", 0, 1.0)], columns=["policy", "seed", "mean_ttft_s"]).to_csv(tmp_path / "c.csv", index=False)
    with pytest.raises(ValueError, match="not paired"):
        paired([f"{f}:a1"], [f"{tmp_path / 'c.csv'}:c"])
    with pytest.raises(ValueError, match="no rows of policy 'zz'"):
        paired([f"{f}:a1"], [f"{f}:zz"])
    with pytest.raises(ValueError, match="expected CSV:POLICY"):
        paired([str(f)], [f"{f}:b1"])
    assert main(["--a", f"{f}:a1", "--b", f"{f}:b1", f"{f}:b2"]) == 2
    assert "same number" in capsys.readouterr().err
    assert main(["--a", f"{f}:a1", "--b", f"{f}:b1"]) == 0
    assert json.loads(capsys.readouterr().out)["pairs"][0]["b_mean_ttft_s"] == pytest.approx(1.65)


def test_runs_paired_refuses_bad_rows_by_file_and_accepts_colons_in_paths(tmp_path, capsys):
    import pandas as pd

    from experiments.scripts.runs_paired import main, paired, run_mean_ttft_s

    cols = ["policy", "seed", "mean_ttft_s"]
    folder = tmp_path / "run:2"  # a ':' in the path, and policies that contain ':' or read as numbers
    folder.mkdir()
    f = folder / "runs.csv"
    rows = [("single:x", 0, 1.0), ("single:x", 1, 2.0), ("0", 0, 1.1), ("0", 1, 2.2)]
    pd.DataFrame(rows, columns=cols).to_csv(f, index=False)
    assert run_mean_ttft_s(f"{f}:single:x") == {0: 1.0, 1: 2.0}
    out = paired([f"{f}:single:x"], [f"{f}:0"])  # policy '0' was read as an integer and never matched
    assert out["pairs"][0]["mean_pct_change"] == pytest.approx(10.0)
    good = tmp_path / "good.csv"
    pd.DataFrame([("a", 0, 1.0), ("a", 1, 2.0)], columns=cols).to_csv(good, index=False)
    for name, rows, match in [
            ("nan.csv", [("b", 0, None), ("b", 1, 2.2)], r"nan.csv: policy 'b': mean_ttft_s must be finite .*seed\(s\) \[0\]"),
            ("text.csv", [("b", 0, "abc"), ("b", 1, 2.2)], r"text.csv: policy 'b': mean_ttft_s .*'abc'"),
            ("zero.csv", [("b", 0, 0.0), ("b", 1, 2.2)], r"zero.csv: policy 'b': mean_ttft_s .*\[0.0\]"),
            ("frac.csv", [("b", 0, 1.1), ("b", 1.7, 2.2)], r"frac.csv: policy 'b': seed must be integers >= 0, got \[1.7\]"),
            ("noseed.csv", [("b", None, 1.1), ("b", 1, 2.2)], r"noseed.csv: policy 'b': seed must be integers")]:
        pd.DataFrame(rows, columns=cols).to_csv(tmp_path / name, index=False)
        with pytest.raises(ValueError, match=match):  # NaN went into the JSON, 0 a ZeroDivisionError, 1.7 seed 1
            paired([f"{good}:a"], [f"{tmp_path / name}:b"])
    assert main(["--a", f"{tmp_path / 'zero.csv'}:b", "--b", f"{good}:a"]) == 2
    assert "zero.csv: policy 'b'" in capsys.readouterr().err


def test_best_single_composition_ranks_the_cache_by_whole_workload_mean(tmp_path, capsys):
    """``reconfig_best_single``: compositions ranked by their request-weighted whole-workload mean
    TTFT averaged over the chosen seeds; a seed the cache does not hold is one error line."""
    import numpy as np

    from experiments.scripts.reconfig_best_single import main, ranking
    from policies.reconfig.oracle import save_phase_ttft

    menu = ["cp4x2", "cp2x4"]
    path = tmp_path / "cache.json"
    # seed 0: two phases of 10 and 30 requests; cp4x2 = (1*10 + 3*30)/40 = 2.5, cp2x4 = (2*10 + 2*30)/40 = 2.0
    # seed 1: cp4x2 1.0, cp2x4 4.0
    save_phase_ttft(path, {0: (np.array([[1.0, 3.0], [2.0, 2.0]]), np.array([10, 30])),
                           1: (np.array([[1.0, 1.0], [4.0, 4.0]]), np.array([5, 5]))}, menu)
    assert ranking(str(path), [0]) == ([("cp2x4", 2.0), ("cp4x2", 2.5)], [0])
    assert ranking(str(path)) == ([("cp4x2", 1.75), ("cp2x4", 3.0)], [0, 1])
    assert main([str(path), "--top", "1"]) == 0
    assert capsys.readouterr().out == "cp4x2\t1.7500 s (mean over 2 seeds, 0-1)\n"
    assert main([str(path), "--seeds", "0,7"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m experiments.scripts.reconfig_best_single: error: ") and "seed(s) [7]" in err
    assert len(err.splitlines()) == 1


def test_ttft_model_planner_moves_only_when_the_gain_pays_for_the_gpus():
    from experiments.scripts.reconfig_ttft_model import plan

    log_ttft = np.log(np.array([1.0, 0.8, 0.9]))  # composition 1 predicted 20 % faster than 0
    moved = np.array([0.0, 16.0, 8.0])  # 0 is where the pool stands
    assert plan(log_ttft, moved, 0.0) == 1
    assert plan(log_ttft, moved, 0.01) == 1  # 1.25 - 1 = 0.25 relative gain > 0.16 for 16 GPUs
    assert plan(log_ttft, moved, 0.02) == 0  # 0.32 for 16 GPUs, 0.16 for 8: staying is best
    assert plan(np.zeros(3), np.zeros(3), 0.5) == 0  # ties: the first


def test_ttft_model_features_and_fit_rank_compositions_by_load():
    from experiments.scripts.reconfig_ttft_model import composition_gpu_shares, fit_ttft_model, state_features

    shares = composition_gpu_shares([{4: 10}, {8: 2, 4: 4, 2: 4}, {2: 20}], 40)
    assert shares.shape == (3, 3) and np.allclose(shares.sum(1), 1.0) and np.allclose(shares[0], [0, 1, 0])
    rng = np.random.default_rng(0)
    n = 200
    window = np.zeros((n, 21), np.float32)
    window[:, 0] = rng.uniform(5, 30, n)
    targets = np.zeros((n, 3, 5), np.float32)
    targets[:, :, 0] = rng.uniform(20, 40, (n, 3))  # capacity [req/s]
    targets[:, :, 1] = window[:, :1] / targets[:, :, 0]  # load
    x = state_features(window, targets, shares)
    assert x.shape == (n, 3, 9)
    ttft = 0.2 / (1.0 - np.minimum(targets[:, :, 1], 0.95))  # queueing-like: TTFT grows with load
    ttft[0, 2] = np.inf  # no data: ignored
    predict = fit_ttft_model(x, ttft, steps=300)
    pred = predict(x)
    agree = np.mean(pred.argmin(1) == np.where(np.isfinite(ttft), ttft, 9).argmin(1))
    assert agree > 0.9
    with pytest.raises(ValueError, match="expected x"):
        fit_ttft_model(x[:, :2], ttft)


def test_ttft_model_cli_refuses_overlapping_seeds(capsys):
    from experiments.scripts.reconfig_ttft_model import _seed_list, main

    assert _seed_list("0-3") == [0, 1, 2, 3] and _seed_list("5,7") == [5, 7]
    with pytest.raises(SystemExit) as e:
        main(["--fit-seeds", "0-3", "--eval-seeds", "3,4", "--cache", "x.json"])
    assert e.value.code == 2 and "overlap: [3]" in capsys.readouterr().err
