"""The default controller decision (``"analytic"``: the paper's §6 triggers with the do-no-harm
gate, baselines/controller/analytic_rule.py) and the names of the Vertumnus systems."""

from __future__ import annotations

import math

import numpy as np

from baselines.controller import ControllerConfig
from baselines.controller.analytic_rule import predicted_ttft_s, service_times_s
from baselines.registry import get_policy
from envs.sim.cost_model import Calibration
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


def test_reversal_cost_charges_a_merge_for_the_split_at_the_split_threshold():
    # issue #40 (production day): a move also pays for its undoing at the opposite threshold; a merge's
    # reversal drains its merged workers at split_load x capacity, a split's at merge_load x capacity
    from baselines.controller.analytic_rule import AnalyticRule

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
