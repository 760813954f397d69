"""The look-ahead's transition-aware scoring (baselines/lookahead.py ``TransitionPlan``,
``ControllerConfig.target_transition``): a candidate's stream starts on the current composition and
moves to it through the simulator's own split/merge protocol."""

import numpy as np
import pytest

from baselines.controller import ControllerConfig, ReconfigController
from baselines.lookahead import LookaheadConfig, LookaheadPredictor, TransitionPlan
from envs.planning.capacity import CapacityTable
from envs.sim import Calibration, PoolConfig, SimConfig, Simulator
from envs.sim.reconfig import ReconfigConfig
from envs.sim.router import LeastWorkRouter
from tests.factories import SMALL_POOL
from tests.reconfig.test_controller import FAST, _poisson_workload


def _plan(start: str, **kw) -> TransitionPlan:
    args = dict(reconfig=ReconfigConfig(), decision_window_s=20.0, max_gpus_per_window=8.0, max_ops_per_window=8)
    args.update(kw)
    return TransitionPlan(start, **args)


def _composition(sim) -> dict[int, int]:
    counts: dict[int, int] = {}
    for w in sim.workers.values():
        counts[w.degree] = counts.get(w.degree, 0) + 1
    return counts


def test_transition_plan_validation():
    with pytest.raises(ValueError, match="transition.from_composition must be a composition text"):
        _plan("")
    with pytest.raises(ValueError, match="transition.decision_window_s must be a finite number > 0"):
        _plan("cp4x2", decision_window_s=0.0)
    with pytest.raises(ValueError, match="transition.max_gpus_per_window must be > 0"):
        _plan("cp4x2", max_gpus_per_window=0.0)
    with pytest.raises(ValueError, match="transition.max_ops_per_window must be an integer >= 1"):
        _plan("cp4x2", max_ops_per_window=0)
    with pytest.raises(ValueError, match="controller.target_transition must be true or false"):
        ControllerConfig(target_transition=1)
    with pytest.raises(ValueError, match="'paper-rule' with lookahead.source 'requests' has none"):
        ControllerConfig(decision="paper-rule", target_transition=True)
    with pytest.raises(ValueError, match="lookahead.source 'histogram' has none"):
        ControllerConfig(target_transition=True, lookahead=LookaheadConfig(source="histogram"))


def test_transition_moves_through_the_protocol_in_planning_steps():
    # cp4x2 -> cp1x8 needs two levels (each CP-4 splits into two CP-2, each of those into two CP-1),
    # so the second level waits for the first to commit; with 4 GPUs per step the first step splits
    # one CP-4 only.
    cfg = SimConfig(pool=replace_pool("cp4x2"), seed=0)
    sim = Simulator(_poisson_workload(4.0, 60.0, 0), cfg)
    LookaheadPredictor._schedule_transition(sim, {1: 8}, _plan("cp4x2", max_gpus_per_window=4.0, decision_window_s=5.0), 10.0)
    res = sim.run(LeastWorkRouter())
    ops = res.extras["reconfig_operations"]
    assert _composition(sim) == {1: 8}
    assert ops and all(o["kind"] == "split" for o in ops) and len(ops) == 2 + 4
    starts = sorted(o["start_s"] for o in ops)
    assert starts[0] == pytest.approx(10.0) and starts[1] >= 15.0  # one CP-4 per 4-GPU step
    assert all(o["commit_s"] == o["commit_s"] for o in ops)  # every one committed (NaN otherwise)
    # drain + switch + confirmation were paid: each operation takes at least the fixed part
    assert min(o["total_s"] for o in ops) >= ReconfigConfig().switch_s + ReconfigConfig().drain_sync_s


def replace_pool(composition: str) -> PoolConfig:
    from dataclasses import replace

    return replace(SMALL_POOL, composition=composition)


def test_staying_put_costs_nothing_and_a_move_is_charged():
    table = CapacityTable(SimConfig(pool=SMALL_POOL, seed=0), Calibration.default(), FAST)
    pred = LookaheadPredictor(table, LeastWorkRouter, LookaheadConfig())
    wl = _poisson_workload(6.0, 40.0, 1)
    for c in ("cp4x2", "cp2x4"):
        assert pred._simulate(c, wl, 0.0, _plan(c), 0.0) == pred._simulate(c, wl, 0.0)
    # a slow switch: moving cp4x2 -> cp2x4 takes the pool out of service for 5 s while requests arrive
    slow = _plan("cp4x2", reconfig=ReconfigConfig(switch_s=5.0))
    moved = pred._simulate("cp2x4", wl, 0.0, slow, 0.0)
    assert moved > pred._simulate("cp2x4", wl, 0.0)


def test_controller_scores_from_its_projected_composition():
    cfg = SimConfig(pool=SMALL_POOL, seed=0)
    sim = Simulator(_poisson_workload(8.0, 100.0, 0), cfg)
    ctl = ReconfigController(ControllerConfig(decision_window_s=20.0, k_windows=2, profile=FAST, decision="target",
                                              target_degrees=(2, 4), target_transition=True,
                                              lookahead=LookaheadConfig(num_replications=1)))
    ctl.attach(sim)
    starts: list[str] = []
    seen = []

    def before_window(_):
        starts.append(ctl.composition_text(_composition(sim)))

    for t in (19.999, 39.999, 59.999, 79.999):
        sim.schedule(t, 4, before_window)
    sim.run(LeastWorkRouter())
    calls = ctl.predictor.score_calls
    assert calls
    for *_, span in calls:
        assert span[-2] == "from"
        seen.append(span[-1])
    # the merge at 40 s commits within ~1.1 s, so at each window boundary the projected composition
    # is the pool's: every window scores from where the pool stands, the later ones from cp4x2
    assert [w["action"] for w in ctl.windows][:2] == ["none", "merge(4,6)"]
    assert seen[:len(starts)] == starts == ["cp4x1,cp2x2", "cp4x1,cp2x2", "cp4x2", "cp4x2"]
    # every memo entry of a transition run is keyed by its starting composition
    assert all(k[-1][-2] == "from" for k in ctl.predictor.stream_memo)


def test_dynamic_command_passes_and_checks_target_transition():
    from experiments.paper_experiments.dynamic_phases import DynamicPhasesConfig, controller_config

    assert controller_config(DynamicPhasesConfig(target_transition=True)).target_transition
    assert not controller_config(DynamicPhasesConfig()).target_transition
    with pytest.raises(ValueError, match="target_transition .* decision 'paper-rule' has none"):
        DynamicPhasesConfig(decision="paper-rule", target_transition=True)
    # a text is not a switch: "false" is truthy and read as on (or as the wrong rule's error)
    for name in ("target_transition", "target_replay_sample", "rising_rate"):
        for bad in ("false", "true", 1, np.True_):
            with pytest.raises(ValueError, match=f"dynamic: {name} must be true or false, got"):
                DynamicPhasesConfig(**{name: bad})
        with pytest.raises(ValueError, match=f"dynamic: {name} must be true or false, got 'false'"):
            DynamicPhasesConfig(decision="paper-rule", **{name: "false"})


def test_transition_waits_for_operations_still_confirming():
    # a planning step that falls between an operation's switch and its commit sees no eligible
    # operation (the new workers are SWITCHING) and nothing draining: it must not end the move.
    # cp4x2 -> cp1x8: the first level switches at ~11.1 s and commits at ~19.1 s (8 s of
    # confirmation for 4 ranks); the step at 15 s falls in between, the one at 20 s goes on.
    sim = Simulator(_poisson_workload(4.0, 60.0, 0), SimConfig(pool=replace_pool("cp4x2"), seed=0))
    plan = _plan("cp4x2", reconfig=ReconfigConfig(confirm_s_per_rank=2.0), decision_window_s=5.0)
    LookaheadPredictor._schedule_transition(sim, {1: 8}, plan, 10.0)
    res = sim.run(LeastWorkRouter())
    assert _composition(sim) == {1: 8}
    assert len(res.extras["reconfig_operations"]) == 2 + 4


def _predictor(**cfg) -> LookaheadPredictor:
    table = CapacityTable(SimConfig(pool=SMALL_POOL, seed=0), Calibration.default(), FAST)
    return LookaheadPredictor(table, LeastWorkRouter, LookaheadConfig(num_replications=1, **cfg))


def _score(pred, plan, wl, compositions=("cp4x2", "cp2x4")):
    sample = list(wl.requests)
    return pred.score_from_requests(list(compositions), sample, wl.kv_block_size_tokens, [6.0], (0, len(sample)),
                                    transition=plan)


def test_transition_plan_rejects_a_start_the_pool_does_not_accept_naming_the_field():
    pred = _predictor(duration_s=20.0, min_requests=10)
    wl = _poisson_workload(6.0, 10.0, 1)
    for bad in ("cp4x1", "cp3x2", "cp8x1", "cp4@2,cp4@6"):
        with pytest.raises(ValueError, match=r"transition.from_composition '.*' does not fit the run's pool \(8 GPUs"):
            _score(pred, _plan(bad), wl)
    assert pred.num_simulations == 0  # checked before any look-ahead simulation
    with pytest.raises(ValueError, match="transition.reconfig must be a ReconfigConfig"):
        _plan("cp4x2", reconfig=None)
    with pytest.raises(ValueError, match="transition.max_ops_per_window must be an integer >= 1, got True"):
        _plan("cp4x2", max_ops_per_window=True)
    with pytest.raises(ValueError, match="transition.decision_window_s must be a finite number > 0, got '5'"):
        _plan("cp4x2", decision_window_s="5")
    with pytest.raises(ValueError, match="transition.max_gpus_per_window must be > 0, got '8'"):
        _plan("cp4x2", max_gpus_per_window="8")
    assert _plan("cp4x2", max_ops_per_window=np.int64(2), decision_window_s=np.float64(5.0)).max_ops_per_window == 2


def test_transition_memo_is_keyed_by_the_whole_plan():
    # one predictor, the same sample and start: a slower switch (or another budget) is another
    # result, not the memoised one of the first plan
    wl = _poisson_workload(6.0, 40.0, 1)
    pred = _predictor(duration_s=20.0, min_requests=10)
    fast = _score(pred, _plan("cp4x2"), wl)
    slow = _score(pred, _plan("cp4x2", reconfig=ReconfigConfig(switch_s=5.0)), wl)
    assert slow["cp4x2"] == fast["cp4x2"]  # staying put: no move, no cost
    assert slow["cp2x4"] > fast["cp2x4"]
    assert slow == _score(_predictor(duration_s=20.0, min_requests=10),
                          _plan("cp4x2", reconfig=ReconfigConfig(switch_s=5.0)), wl)
    assert len({k[3] for k in pred.stream_memo}) == 2


def test_transition_starts_when_the_scored_part_begins(monkeypatch):
    # with a warm-up the move starts after it (else a short move is over before scoring begins and
    # looks free), with a replay after the replayed sample
    seen = []
    real = LookaheadPredictor._schedule_transition

    def spy(sim, target, plan, at_s):
        seen.append(at_s)
        real(sim, target, plan, at_s)

    monkeypatch.setattr(LookaheadPredictor, "_schedule_transition", staticmethod(spy))
    wl = _poisson_workload(6.0, 10.0, 1)
    _score(_predictor(duration_s=20.0, min_requests=10, warmup_s=5.0), _plan("cp4x2"), wl, ("cp2x4",))
    assert seen == [5.0]
    seen.clear()
    pred = _predictor(duration_s=20.0, min_requests=10, warmup_s=5.0)
    sample = list(wl.requests)
    pred.score_from_requests(["cp2x4"], sample, wl.kv_block_size_tokens, [6.0], (0, len(sample)),
                             replay_sample=True, transition=_plan("cp4x2"))
    replayed_s = sample[-1].arrival_time_s - sample[0].arrival_time_s
    assert seen == [pytest.approx(replayed_s + 5.0)] and seen[0] > replayed_s + 5.0


@pytest.mark.parametrize("transition", [False, True])
def test_target_decision_on_a_pool_degraded_by_a_fault(transition):
    # GPU 1 of the CP-4 worker fails at 5 s (detected at 6 s): its survivors re-form as CP-2@2 and
    # CP-1@0 and GPU 1 stays out of service (repair after 1000 s), so at the first decision the
    # workers hold 7 of the 8 GPUs. The look-ahead simulates whole-pool compositions: the target
    # starts from the configured composition, and no move is simulated from the degraded pool
    # (this used to raise "composition 'cp2x3,cp1x1' uses 7 GPUs but the pool has 8").
    from envs.planning.composition import degree_counts
    from envs.planning.operations import covers_pool
    from envs.sim.fault_config import FaultConfig, FaultEvent

    faults = FaultConfig(events=(FaultEvent("gpu_failure", 5.0, gpu=1),), detection_delay_s=1.0, rebuild_s=3.0,
                         repair_s=1000.0)
    sim = Simulator(_poisson_workload(8.0, 100.0, 0), SimConfig(pool=SMALL_POOL, seed=0, faults=faults))
    ctl = ReconfigController(ControllerConfig(decision_window_s=20.0, k_windows=2, profile=FAST, decision="target",
                                              target_degrees=(1, 2, 4), target_transition=transition,
                                              lookahead=LookaheadConfig(num_replications=1)))
    ctl.attach(sim)
    from envs.metrics import summarize

    res = sim.run(LeastWorkRouter())
    summary = summarize(res)
    assert summary["num_unfinished"] == 0 and summary["num_faults"] == 1
    assert sum(d * n for d, n in _composition(sim).items()) == 7  # still degraded at the end
    assert not covers_pool(_composition(sim), SMALL_POOL) and covers_pool({4: 1, 2: 2}, SMALL_POOL)
    decided = [w.target_composition for w in ctl.windows if w.target_composition]
    assert decided[0] == "cp4x1,cp2x2"  # the configured composition, not the degraded "cp2x3,cp1x1"
    # every target is a whole-pool composition
    assert all(covers_pool(degree_counts(t, SMALL_POOL), SMALL_POOL) for t in decided)
    assert ctl.predictor.score_calls
    assert all("from" not in call[-1] for call in ctl.predictor.score_calls)  # degraded from the first decision on
