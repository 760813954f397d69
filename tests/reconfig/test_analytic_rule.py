"""The default controller decision (``"analytic"``: the paper's §6 triggers with the do-no-harm
gate, baselines/controller/analytic_rule.py) and the names of the Vertumnus systems."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from baselines.controller import ControllerConfig
from baselines.controller.actuation import Actuation
from baselines.controller.analytic_rule import AnalyticRule, predicted_ttft_s, service_times_s
from baselines.registry import get_policy
from envs.planning.capacity import CapacityProfile
from envs.sim.cost_model import Calibration
from envs.sim.reconfig import MERGE, SPLIT, Operation
from tests.reconfig.test_controller import _run_controller

DEGREES = [2, 4]


def _service(lengths):
    return service_times_s(Calibration.default().cost_model(), DEGREES, np.asarray(lengths, float), 0.0)


def test_predicted_ttft_rises_with_rate_falls_with_capacity_and_stays_finite_past_capacity():
    S = _service([1000, 2000, 30000, 1500])
    caps = {2: 1.0, 4: 1.6}
    counts = {4: 4, 2: 4}
    t = [predicted_ttft_s(counts, r, S, DEGREES, caps, 1.0, 60.0) for r in (1.0, 5.0, 9.0, 20.0)]
    assert all(a < b for a, b in zip(t, t[1:]))
    assert math.isfinite(t[-1])  # fluid backlog past capacity (capacity 10.4 req/s here)
    more = predicted_ttft_s({4: 4, 2: 6}, 9.0, S, DEGREES, caps, 1.0, 60.0)
    assert more < t[2]
    # over-dispersed arrivals wait longer than Poisson ones
    assert predicted_ttft_s(counts, 9.0, S, DEGREES, caps, 2.2, 60.0) > t[2]
    assert predicted_ttft_s({}, 1.0, S, DEGREES, caps, 1.0, 60.0) == math.inf


def test_long_prompts_gain_from_a_larger_degree_at_low_load():
    # at low load the wait is small: a pool with CP-4 workers serves 30k-token prompts faster
    S = _service([30000] * 4)
    caps = {2: 0.2, 4: 0.2}
    assert (predicted_ttft_s({4: 2}, 0.05, S, DEGREES, caps, 1.0, 60.0)
            < predicted_ttft_s({2: 4}, 0.05, S, DEGREES, caps, 1.0, 60.0))


def test_the_gate_refuses_moves_that_do_not_pay_and_never_acts_more_than_the_paper_rule():
    # low load (0.3): the paper rule's sustained merge condition holds; the gate starts a merge only
    # when the estimate says it pays, and never more operations than the ungated rule
    gated, res_g = _run_controller(0.3, 0, decision="analytic")
    ungated, res_u = _run_controller(0.3, 0, decision="paper-rule")
    assert len(res_g.extras["reconfig_operations"]) <= len(res_u.extras["reconfig_operations"])
    assert res_u.extras["reconfig_operations"]
    proposals = [w for w in gated.windows if w["action"].startswith(("merge", "split"))]
    assert proposals
    for w in proposals:
        if w["action"].endswith("-no-gain"):
            assert not w["predicted_gain"] > 0
        elif "(" in w["action"]:
            assert w["predicted_gain"] > 0


def test_vertumnus_names_mean_one_system_each():
    assert ControllerConfig().decision == "analytic"
    assert get_policy("vertumnus").params["decision"] == "analytic"
    assert get_policy("vertumnus-adaptive").params["decision"] == "analytic"
    assert get_policy("vertumnus-paper-rule").params["decision"] == "paper-rule"
    assert get_policy("vertumnus-lookahead").params["decision"] == "target"
    assert get_policy("vertumnus-adaptive").choose_pool is None  # the run's pool, as before
    assert get_policy("vertumnus").choose_pool is not None  # the initial composition (paper §6)


def test_one_admissibility_screen_for_the_paper_rule_and_the_analytic_plan():
    # Actuation.admissible_operations is the check both act() and the analytic rule's plan use:
    # GPU budget first, then the dwell-time lockout (counted), then the projected capacity
    workers = {0: SimpleNamespace(degree=4, gpus=[0, 1, 2, 3]), 1: SimpleNamespace(degree=4, gpus=[4, 5, 6, 7]),
               2: SimpleNamespace(degree=2, gpus=[8, 9]), 3: SimpleNamespace(degree=2, gpus=[10, 11])}
    act = Actuation()
    act.sim, act.config = SimpleNamespace(workers=workers), ControllerConfig()
    act._gpu_last_op = {4: (95.0, MERGE)}  # worker 1 merged 5 s ago: locked against a split for min_dwell_s
    profiles = {d: CapacityProfile(d, c, 0.0, 1000.0, 1.0) for d, c in ((2, 1.0), (4, 1.5))}  # two CP-2 > one CP-4
    splits = [Operation(SPLIT, (0,)), Operation(SPLIT, (1,))]
    ok, caps, locked = act.admissible_operations(splits, SPLIT, 5.0, 4.5, 8.0, profiles, now_s=100.0)
    assert ok == [splits[0]] and locked == 1 and caps == {splits[0]: 5.0 - 1.5 + 2.0}
    assert act.admissible_operations(splits, SPLIT, 5.0, 4.5, 3.0, profiles, now_s=100.0)[:2] == ([], {})  # over budget
    merge = [Operation(MERGE, (2, 3))]  # capacity 5.0 -> 4.5: allowed while forecast / 4.5 <= 0.7
    assert act.admissible_operations(merge, MERGE, 5.0, 3.0, 8.0, profiles, now_s=100.0)[0] == merge
    assert act.admissible_operations(merge, MERGE, 5.0, 3.5, 8.0, profiles, now_s=100.0)[0] == []


def test_reversal_cost_charges_a_merge_for_the_split_at_the_split_threshold():
    # issue #40 (production day): a move also pays for its undoing at the opposite threshold; a merge's
    # reversal drains its merged workers at split_load x capacity, a split's at merge_load x capacity
    S = _service([1000, 2000, 30000, 1500])
    caps = {2: 1.0, 4: 1.6}
    rule = AnalyticRule()
    rule.config = ControllerConfig()

    def T(counts, rate, horizon):
        return predicted_ttft_s(counts, rate, S, DEGREES, caps, 1.0, horizon)

    after_merge = {4: 6, 2: 6}  # from {4: 4, 2: 10}: two merges made two CP-4 workers
    merge = rule._reversal_cost_rs("merge", after_merge, {4: 2}, caps, 3.0, T)
    after_split = {4: 4, 2: 10}  # from {4: 6, 2: 6}: two splits made four CP-2 workers
    split = rule._reversal_cost_rs("split", after_split, {2: 4}, caps, 3.0, T)
    cap = 6 * 1.6 + 6 * 1.0
    r = rule.config.split_load * cap
    assert merge == r * 3.0 * (T({4: 4, 2: 6}, r, 3.0) - T(after_merge, r, 3.0)) > 0
    assert 0 < split < merge  # undoing a split drains at the low merge threshold
    assert rule._reversal_cost_rs("merge", {4: 2}, {4: 2}, caps, 3.0, T) == math.inf  # nothing left to serve


def test_the_gate_plans_without_the_traffic_and_starts_what_the_exact_plan_starts(monkeypatch):
    # _plan_operations(exact=False) leaves the reconciliation traffic out of the ranking (it only
    # breaks ties among operations of one degree, which the gate cannot tell apart); the run's
    # decisions, windows and per-request records are those of always planning exactly
    plan = AnalyticRule._plan_operations
    passes = []

    def counted(self, kind, record, profiles, exact=True):
        passes.append(exact)
        return plan(self, kind, record, profiles, exact)

    monkeypatch.setattr(AnalyticRule, "_plan_operations", counted)
    lazy, res_lazy = _run_controller(1.3, 0, decision="analytic")
    assert False in passes and res_lazy.extras["reconfig_operations"]  # deferred, and operations started
    monkeypatch.setattr(AnalyticRule, "_plan_operations",
                        lambda self, kind, record, profiles, exact=True: plan(self, kind, record, profiles, True))
    exact, res_exact = _run_controller(1.3, 0, decision="analytic")
    assert lazy.windows == exact.windows
    assert res_lazy.extras["reconfig_operations"] == res_exact.extras["reconfig_operations"]
    for k in ("ttft_s", "worker_id"):
        np.testing.assert_array_equal(res_lazy.records[k], res_exact.records[k])
