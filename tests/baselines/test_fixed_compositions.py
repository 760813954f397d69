"""Fixed-pool references of a reconfiguration task (baselines/fixed_compositions.py): the best
fixed composition on training workloads and the per-phase hindsight oracle, on tiny inputs."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

import baselines.fixed_compositions as fc
from baselines.runner import run_policy
from envs.sim import SimConfig
from envs.sim.pool import PoolConfig
from envs.workloads.production_day import production_day

SMALL = SimConfig(pool=PoolConfig(num_gpus=8, gpus_per_node=8, composition="cp2x4", supported_degrees=(2, 4, 8)))


def test_per_phase_oracle_takes_each_phase_best_weighted_by_requests():
    ttft = np.array([[1.0, 4.0, 2.0],
                     [3.0, 2.0, 2.0]])
    mean, schedule = fc.per_phase_oracle_ttft(ttft, np.array([1, 3, 0]))
    assert schedule == [0, 1, 0]  # the tie in phase 2 goes to the earlier composition
    assert mean == pytest.approx((1.0 * 1 + 2.0 * 3) / 4)  # phase 2 has no request
    assert np.isnan(fc.per_phase_oracle_ttft(ttft, np.zeros(3))[0])
    with pytest.raises(ValueError, match="num_requests"):
        fc.per_phase_oracle_ttft(ttft, np.ones(2))


def _fake_run(ttft_by_composition):
    """A stand-in for run_policy: every request of the workload gets its composition's TTFTs."""
    def run(router, workload, config):
        values = ttft_by_composition[config.pool.composition]
        return SimpleNamespace(records={"ttft_s": np.resize(np.asarray(values, float), workload.num_requests)})
    return run


def test_best_fixed_composition_lowest_mean_over_workloads(monkeypatch):
    wls = [production_day(duration_s=5.0, peak_rate_rps=4.0, seed=s) for s in (0, 1)]
    monkeypatch.setattr(fc, "run_policy", _fake_run({"cp2x4": [0.3], "cp4x2": [0.2], "cp8x1": [np.nan],
                                                     "cp4x1,cp2x2": [0.2]}))
    comp, scores = fc.best_fixed_composition(wls, SMALL, ["cp2x4", "cp8x1", "cp4x2", "cp4x1,cp2x2"])
    assert comp == "cp4x2"  # tie with cp4x1,cp2x2: the earlier; cp8x1 (nothing finished) never wins
    assert np.allclose(scores[[0, 2, 3]], [0.3, 0.2, 0.2]) and np.isnan(scores[1])
    with pytest.raises(ValueError, match="at least one workload"):
        fc.best_fixed_composition([], SMALL, ["cp2x4"])


def test_best_fixed_composition_scores_are_the_runs_mean_ttft():
    wls = [production_day(duration_s=6.0, peak_rate_rps=6.0, seed=s) for s in (0, 1)]
    menu = ["cp8x1", "cp4x2", "cp2x4"]
    comp, scores = fc.best_fixed_composition(wls, SMALL, menu)
    direct = [np.mean([np.nanmean(run_policy("vertumnus-router", wl, replace(SMALL, pool=replace(SMALL.pool, composition=c)))
                                  .records["ttft_s"]) for wl in wls]) for c in menu]
    assert np.allclose(scores, direct)
    assert comp == menu[int(np.argmin(direct))]


def test_fixed_and_oracle_rows(monkeypatch):
    wl = production_day(duration_s=8.0, peak_rate_rps=3.0, num_phases=2, seed=0)
    phase = np.array(wl.metadata["phase_of_request"])
    # per composition: TTFT 1 s in phase 0, 2 s in phase 1 for cp4x2; the reverse for cp8x1; cp2x4 (the start) 3 s
    table = {"cp4x2": np.where(phase == 0, 1.0, 2.0), "cp8x1": np.where(phase == 0, 2.0, 1.0),
             "cp2x4": np.full(phase.size, 3.0)}
    monkeypatch.setattr(fc, "run_policy", _fake_run(table))
    (row,) = fc.fixed_and_oracle_rows([wl], SMALL, ["cp4x2", "cp8x1"], fixed="cp4x2")
    n0, n1 = (phase == 0).sum(), (phase == 1).sum()
    assert row["fixed_mean_ttft_s"] == pytest.approx((n0 * 1.0 + n1 * 2.0) / (n0 + n1))
    assert row["no_reconfiguration_mean_ttft_s"] == pytest.approx(3.0)  # cp2x4, added to the menu
    assert row["oracle_mean_ttft_s"] == pytest.approx(1.0)
    assert row["oracle_schedule"] == ["cp4x2", "cp8x1"]


def test_headroom_paired_percent_differences():
    rows = [{"fixed_mean_ttft_s": 1.0, "oracle_mean_ttft_s": 0.8, "no_reconfiguration_mean_ttft_s": 1.1},
            {"fixed_mean_ttft_s": 2.0, "oracle_mean_ttft_s": 1.8, "no_reconfiguration_mean_ttft_s": 2.0}]
    h = fc.headroom(rows)
    assert h["num_workloads"] == 2 and h["fixed_mean_ttft_s"] == pytest.approx(1.5)
    mean, low, high = h["oracle_vs_fixed_pct"]
    assert mean == pytest.approx(-15.0) and low < -15.0 < high  # -20 % and -10 %
    assert h["no_reconfiguration_vs_fixed_pct"][0] == pytest.approx(5.0)
    with pytest.raises(ValueError, match="at least one row"):
        fc.headroom([])


# ------------------------------------------------------------------ the schedule oracle

def _day(seed: int = 0):
    return production_day(duration_s=24.0, peak_rate_rps=6.0, seed=seed)  # 24 one-second "hours" (phases)


def test_a_held_schedule_is_the_fixed_run_exactly():
    """Following one composition in every phase starts no operation and changes no request."""
    wl = _day()
    num_phases = len(wl.metadata["phase_boundaries_s"]) - 1
    held = fc.follow_schedule_run(wl, SMALL, ["cp2x4", "cp4x2"], [1] * num_phases, decision_window_s=2.0)
    fixed = run_policy("vertumnus-router", wl, replace(SMALL, pool=replace(SMALL.pool, composition="cp4x2")))
    assert held.extras["num_schedule_operations"] == 0
    for key in ("ttft_s", "worker_id", "arrival_s"):
        assert np.array_equal(held.records[key], fixed.records[key], equal_nan=True)


def test_a_schedule_is_followed_with_real_operations():
    """Alternating compositions: the follower starts operations at its decision times, and they
    run through the simulator's drain/switch (committed reconfigurations, changed TTFTs)."""
    wl = _day()
    num_phases = len(wl.metadata["phase_boundaries_s"]) - 1
    schedule = [(p // 6) % 2 for p in range(num_phases)]  # 6 s on cp2x4, 6 s on cp4x2, ...
    res = fc.follow_schedule_run(wl, SMALL, ["cp2x4", "cp4x2"], schedule, decision_window_s=2.0)
    assert res.extras["num_schedule_operations"] > 0
    assert res.extras.get("num_reconfigurations", 0) > 0
    fixed = run_policy("vertumnus-router", wl, SMALL)
    assert not np.array_equal(res.records["ttft_s"], fixed.records["ttft_s"], equal_nan=True)


def test_the_schedule_oracle_is_never_behind_the_fixed_composition():
    from envs.metrics.summary import measured_summary

    wl = _day(1)
    menu = ["cp2x4", "cp4x2", "cp8x1"]
    table, num = fc.phase_ttft(wl, SMALL, menu)
    means = fc.fixed_mean_ttft(table, num)
    best = int(np.nanargmin(means))
    fixed_run = run_policy("vertumnus-router", wl, replace(SMALL, pool=replace(SMALL.pool, composition=menu[best])))
    res, schedule = fc.schedule_oracle(wl, SMALL, menu, table, num, best, fixed_run, decision_window_s=2.0)
    assert len(schedule) == len(num) and all(0 <= k < len(menu) for k in schedule)
    assert measured_summary(res, 0.0)["mean_ttft_s"] <= measured_summary(fixed_run, 0.0)["mean_ttft_s"]
    if set(schedule) == {best}:
        assert res is fixed_run  # the held composition is not simulated again
    # a cost at which no move pays keeps the fixed composition (its run, as given)
    held, held_schedule = fc.schedule_oracle(wl, SMALL, menu, table, num, best, fixed_run, 2.0, costs=(1e9,))
    assert held is fixed_run and held_schedule == [best] * len(num)


def test_schedule_follower_refuses_bad_input():
    wl = _day()
    num_phases = len(wl.metadata["phase_boundaries_s"]) - 1
    with pytest.raises(ValueError, match=r"the schedule has 2 compositions for 24 phases"):
        fc.ScheduleFollower(wl, [{2: 4}, {4: 2}], 2.0)
    for window in (0, -1.0, float("nan"), float("inf"), 1e-300, True, "20", None, 10**400):
        with pytest.raises(ValueError, match=r"^decision_window_s must be a finite number >= 0.001 \[s\], got "):
            fc.ScheduleFollower(wl, [{2: 4}] * num_phases, window)
    assert fc.ScheduleFollower(wl, [{2: 4}] * num_phases, np.float32(2.0)).decision_window_s == 2.0
    with pytest.raises(ValueError, match=r"has no metadata\['phase_boundaries_s'\]"):
        fc.ScheduleFollower(replace(wl, metadata={}), [{2: 4}], 2.0)
    with pytest.raises(ValueError, match=r"every target must be a \{CP degree: number of workers\} dict"):
        fc.ScheduleFollower(wl, ["cp2x4"] * num_phases, 2.0)
    menu = ["cp2x4", "cp4x2"]
    for schedule in ([2] * num_phases, [-1] * num_phases, [True] * num_phases, [1.0] * num_phases):
        with pytest.raises(ValueError, match=r"every schedule entry must be an index into the 2 compositions"):
            fc.follow_schedule_run(wl, SMALL, menu, schedule, 2.0)
    for schedule in ([], np.array(1), "01"):
        with pytest.raises(ValueError, match=r"^schedule must be one index into the 2 compositions per phase"):
            fc.follow_schedule_run(wl, SMALL, menu, schedule, 2.0)
    for router in ("homogeneous-cp2", "vertumnus", "vertumnus-adaptive", None):  # own pool / controller / not a name
        with pytest.raises(ValueError, match=r"^router "):
            fc.follow_schedule_run(wl, SMALL, menu, [0] * num_phases, 2.0, router=router)
    for targets in ([{2: 4.0}] * num_phases, [{2.0: 4}] * num_phases, [{8: True}] * num_phases, None):
        with pytest.raises(ValueError, match=r"^(every target must be a|targets must be)"):
            fc.ScheduleFollower(wl, targets, 2.0)
    with pytest.raises(ValueError, match=r"CP degree 8 is not supported"):
        fc.follow_schedule_run(wl, replace(SMALL, pool=replace(SMALL.pool, supported_degrees=(2, 4))),
                               ["cp2x4", "cp8x1"], [1] * num_phases, 2.0, start_index=0)
    from baselines.registry import get_policy

    short = fc.ScheduleFollower(wl, [{2: 3}] * num_phases, 2.0)  # 6 of the pool's 8 GPUs: refused at attach
    spec = replace(get_policy("vertumnus-router"), make_attachments=lambda: [short])
    with pytest.raises(ValueError, match=r"^phase 0's target \{2: 3\} must cover the pool's 8 GPUs with CP degrees "
                                         r"in \[2, 4, 8\]"):
        run_policy(spec, wl, SMALL)
    held = fc.follow_schedule_run(wl, SMALL, menu, np.ones(num_phases, dtype=np.int64), 2.0)  # numpy indices
    assert held.extras["num_schedule_operations"] == 0


def test_schedule_oracle_refuses_bad_input():
    wl = _day()
    menu = ["cp2x4", "cp4x2"]
    table, num = np.full((2, 24), 0.5), np.ones(24)
    fixed_run = run_policy("vertumnus-router", wl, SMALL)

    def oracle(**kw):
        args = {"ttft_s": table, "num_requests": num, "fixed_index": 0, "fixed_result": fixed_run,
                "decision_window_s": 2.0, **kw}
        return fc.schedule_oracle(wl, SMALL, kw.pop("compositions", menu), **{k: v for k, v in args.items()
                                                                               if k != "compositions"})

    for window in (0, float("nan"), "x", None, [1]):  # checked even when no schedule is simulated
        with pytest.raises(ValueError, match=r"^decision_window_s must be a finite number"):
            oracle(decision_window_s=window)
    for index in (-1, 2, True, 1.5):
        with pytest.raises(ValueError, match=r"^fixed_index must be an index into the 2 compositions"):
            oracle(fixed_index=index)
    nan_table = table.copy()
    nan_table[0, 3] = np.nan
    for bad in (np.ones(24), np.ones((2, 5)), nan_table, table.astype(complex), "x"):  # checked before any run
        with pytest.raises(ValueError, match=r"^ttft_s must be a \(2, 24\) \(compositions x phases\) table"):
            oracle(ttft_s=bad)
    with pytest.raises(ValueError, match=r"^num_requests must be \(24,\) finite counts >= 0"):
        oracle(num_requests=-np.ones(24))
    for costs in ((0.0, -1.0), (True,), None, ("1",), (10**400,)):
        with pytest.raises(ValueError, match=r"^(every switching cost must be a finite number >= 0|costs must be)"):
            oracle(costs=costs)
    with pytest.raises(ValueError, match=r"^router 'vertumnus-adaptive' brings its own pool or attachments"):
        oracle(router="vertumnus-adaptive")
    with pytest.raises(ValueError, match=r"^fixed_result must be the SimResult"):
        oracle(fixed_result=None)
    with pytest.raises(ValueError, match=r"has no metadata\['phase_boundaries_s'\]"):
        fc.schedule_oracle(replace(wl, metadata={}), SMALL, menu, table, num, 0, fixed_run, 2.0)
    with pytest.raises(ValueError, match=r"^measure_from_s must be a finite number"):
        oracle(measure_from_s=float("nan"))
    with pytest.raises(ValueError, match="^costs must be a non-empty list"):
        oracle(costs=())
    with pytest.raises(ValueError, match="at least one composition"):
        oracle(compositions=[])


def test_schedule_oracle_ranks_unfinished_requests_first_and_never_picks_a_nan_mean(monkeypatch):
    """Under a horizon a schedule that leaves requests unfinished looks fast on the mean TTFT of the
    ones it finished: it must not win; a run that finished nothing (NaN mean) never wins either."""
    wl = _day()
    menu = ["cp2x4", "cp4x2"]
    table, num = np.full((2, 24), 0.5), np.ones(24)
    table[1, 12:] = 0.1  # every cost's schedule moves to cp4x2 halfway
    summaries = {"fixed": {"mean_ttft_s": 1.0, "num_unfinished": 0}}
    monkeypatch.setattr(fc, "measured_summary", lambda result, t: summaries[result.records["which"]])
    monkeypatch.setattr(fc, "follow_schedule_run", lambda *a, **k: SimpleNamespace(records={"which": "moving"}))
    fixed_run = SimpleNamespace(records={"which": "fixed", "ttft_s": np.ones(3)})
    for moving, wins in (({"mean_ttft_s": 0.9, "num_unfinished": 7}, False),
                         ({"mean_ttft_s": float("nan"), "num_unfinished": 0}, False),
                         ({"mean_ttft_s": 0.9, "num_unfinished": 0}, True)):
        summaries["moving"] = moving
        res, schedule = fc.schedule_oracle(wl, SMALL, menu, table, num, 0, fixed_run, 2.0)
        assert (res is not fixed_run) == wins and (schedule != [0] * 24) == wins
