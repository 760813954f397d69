"""The learned day plan (policies/reconfig/day_plan.py, `cpgym train day-plan`): fit on tiny days,
followed by the clock alone, selected on validation days, resumable, and refused on bad input."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

import baselines.fixed_compositions as fc
from baselines.runner import run_policy
from envs.metrics.summary import measured_summary
from envs.sim import SimConfig
from envs.sim.pool import PoolConfig
from envs.workloads.production_day import production_day
from policies.reconfig import day_plan as dp

SMALL = SimConfig(pool=PoolConfig(num_gpus=8, gpus_per_node=8, composition="cp2x4", supported_degrees=(2, 4, 8)))
MENU = ["cp2x4", "cp4x2", "cp8x1"]


def _day(seed: int):
    wl = production_day(duration_s=24.0, peak_rate_rps=6.0, num_phases=4, seed=seed)
    return replace(wl, metadata={**wl.metadata, "seed": seed})


def test_pooled_table_is_the_request_weighted_mean_over_days():
    a = (np.array([[1.0, 2.0], [3.0, np.inf]]), np.array([1, 0]))
    b = (np.array([[3.0, 4.0], [1.0, 1.0]]), np.array([3, 2]))
    t, n = dp.pooled_table([a, b])
    assert n.tolist() == [4.0, 2.0]
    assert t[0, 0] == pytest.approx((1 * 1 + 3 * 3) / 4) and t[1, 0] == pytest.approx((3 + 3) / 4)
    assert t[1, 1] == pytest.approx(1.0)  # the day without requests in phase 1 does not count (its inf neither)
    with pytest.raises(ValueError, match="at least one day"):
        dp.pooled_table([])


def test_candidates_start_with_the_held_best_fixed_composition():
    # composition 1 is best overall; composition 0 wins phase 0 by far, so a free move goes there
    t = np.array([[0.1, 5.0, 5.0], [1.0, 1.0, 1.0], [9.0, 9.0, 9.0]])
    n = np.array([10, 10, 10])
    plans = dp.candidate_plans("x", t, n, MENU, SMALL.pool, [0.0, 1.0, 2.0, 3.0], 1.0, (0.0, 1e9))
    assert plans[0].schedule == ("cp4x2",) * 3 and plans[0].switch_cost_s_per_gpu is None
    assert [p.schedule for p in plans[1:]] == [("cp2x4", "cp4x2", "cp4x2")]  # cost 1e9 repeats the held plan
    assert plans[1].switch_cost_s_per_gpu == 0.0


def test_a_plan_reads_the_clock_not_the_workload_phases():
    """The plan's own phase boundaries decide: a workload without phase metadata runs the same."""
    wl = _day(0)
    plan = dp.DayPlan("t", [0.0, 12.0, 24.0], ["cp2x4", "cp4x2"], 2.0, 0.0)
    res = plan.run(wl, SMALL)
    bare = replace(wl, metadata={})
    again = plan.run(bare, SMALL)
    assert np.array_equal(res.records["ttft_s"], again.records["ttft_s"], equal_nan=True)
    assert res.extras["num_schedule_operations"] > 0  # it moved at 12 s
    held = dp.DayPlan("t", [0.0, 12.0, 24.0], ["cp4x2", "cp4x2"], 2.0).run(bare, SMALL)
    fixed = run_policy("vertumnus-router", wl, replace(SMALL, pool=replace(SMALL.pool, composition="cp4x2")))
    assert np.array_equal(held.records["ttft_s"], fixed.records["ttft_s"], equal_nan=True)


def test_fit_selects_on_validation_writes_the_checkpoint_and_resumes(tmp_path):
    train, val = [_day(s) for s in (0, 1)], [_day(s) for s in (10, 11)]
    plan = dp.fit_from_days("t", train, val, SMALL, MENU, 2.0, tmp_path, costs=(0.0, 1.0))
    assert {p.name for p in tmp_path.iterdir()} == {"day_plan.json", "train_tables.json", "validation.csv"}
    assert dp.load_day_plan(tmp_path) == plan and dp.is_day_plan_checkpoint(tmp_path)
    fit = plan.fit
    assert fit["train_seeds"] == [0, 1] and fit["validation_seeds"] == [10, 11]
    scores = [c["validation_mean_ttft_s"] for c in fit["candidates"]]
    assert fit["selected"] == int(np.argmin(scores))
    # the selected score is the plan's own runs on the validation days
    again = np.mean([measured_summary(plan.run(w, SMALL), 0.0)["mean_ttft_s"] for w in val])
    assert again == pytest.approx(scores[fit["selected"]])
    # the tables are those of phase_ttft, and a second fit reuses them (no table is recomputed)
    tables = json.loads((tmp_path / "train_tables.json").read_text())
    assert tables["task"] == "t" and sorted(tables["seeds"]) == ["0", "1"]
    t0, _ = fc.phase_ttft(train[0], SMALL, MENU)
    assert np.allclose(np.array(tables["seeds"]["0"]["ttft_s"], float), t0)
    (tmp_path / "day_plan.json").unlink()
    calls = []
    real = dp._table

    def counting(*args):
        calls.append(1)
        return real(*args)

    try:
        dp._table = counting
        assert dp.fit_from_days("t", train, val, SMALL, MENU, 2.0, tmp_path, costs=(0.0, 1.0)) == plan
    finally:
        dp._table = real
    assert calls == []
    with pytest.raises(ValueError, match="day_plan.json exists"):
        dp.fit_from_days("t", train, val, SMALL, MENU, 2.0, tmp_path)
    (tmp_path / "day_plan.json").unlink()
    with pytest.raises(ValueError, match="holds another run's tables"):
        dp.fit_from_days("other", train, val, SMALL, MENU, 2.0, tmp_path)


def test_fit_refuses_days_without_the_same_phases(tmp_path):
    odd = production_day(duration_s=24.0, peak_rate_rps=6.0, num_phases=3, seed=2)
    odd = replace(odd, metadata={**odd.metadata, "seed": 2})
    with pytest.raises(ValueError, match="same phases"):
        dp.fit_from_days("t", [_day(0), odd], [_day(10)], SMALL, MENU, 2.0, tmp_path)
    with pytest.raises(ValueError, match="training and validation days"):
        dp.fit_from_days("t", [_day(0)], [], SMALL, MENU, 2.0, tmp_path)


@pytest.mark.parametrize("kwargs, match", [
    ({"phase_boundaries_s": [0.0]}, "phase_boundaries_s"),
    ({"phase_boundaries_s": [1.0, 2.0]}, "phase_boundaries_s"),
    ({"phase_boundaries_s": [0.0, 2.0, 1.0]}, "phase_boundaries_s"),
    ({"schedule": ["cp2x4"]}, "schedule has 1 compositions for 2 phases"),
    ({"schedule": "cp2x4"}, "schedule must be a list"),
    ({"decision_window_s": 0.0}, "decision"),
    ({"switch_cost_s_per_gpu": -1.0}, "switch_cost_s_per_gpu"),
])
def test_day_plan_refuses_bad_fields(kwargs, match):
    base = {"task": "t", "phase_boundaries_s": [0.0, 1.0, 2.0], "schedule": ["cp2x4", "cp4x2"],
            "decision_window_s": 1.0}
    with pytest.raises(ValueError, match=match):
        dp.DayPlan(**{**base, **kwargs})


def test_load_day_plan_names_the_file_and_field(tmp_path):
    f = tmp_path / "day_plan.json"
    with pytest.raises(FileNotFoundError):
        dp.load_day_plan(tmp_path)
    f.write_text("{")
    with pytest.raises(ValueError, match=r"day_plan.json: not JSON"):
        dp.load_day_plan(tmp_path)
    f.write_text(json.dumps({"format": "other"}))
    with pytest.raises(ValueError, match=r"field 'format'"):
        dp.load_day_plan(f)
    good = dp.DayPlan("t", [0.0, 1.0], ["cp2x4"], 1.0).to_dict()
    f.write_text(json.dumps({k: v for k, v in good.items() if k != "schedule"}))
    with pytest.raises(ValueError, match=r"field 'schedule' is missing"):
        dp.load_day_plan(f)
    f.write_text(json.dumps({**good, "decision_window_s": "soon"}))
    with pytest.raises(ValueError, match=r"day_plan.json: .*decision"):
        dp.load_day_plan(f)


@pytest.mark.parametrize("kwargs, match", [
    ({"task": "routing/conversation-0.9-v1"}, "routing task"),
    ({"task": "reconfig/nope-v1"}, "unknown task"),
    ({"train_episodes": 0}, "train_episodes"),
    ({"validation_episodes": -1}, "validation_episodes"),
    ({"switch_costs": ()}, "switch_costs"),
    ({"switch_costs": (float("nan"),)}, "switch_costs"),
    ({"jobs": 0}, "jobs"),
])
def test_config_refuses_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        dp.DayPlanConfig(**kwargs)
