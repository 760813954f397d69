"""Arm-selection router (policies.routing.arm_selection): features, model, per-window switching, fit,
checkpoints and evaluation through the protocol and the routing environment."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from envs.sim import Request, SimConfig, Workload
from policies.routing.arm_selection import (
    FEATURE_NAMES,
    ArmCostModel,
    ArmSelectingRouter,
    LoadObserver,
    constant_model,
    design_matrix,
    num_terms,
)
from tests.factories import SMALL_POOL, random_workload, toy_calibration

ARMS = ((1.0, 0.0), (3.0, 1.0), (8.0, 4.0))


def _spec(router_factory, name="arm-test"):
    from baselines.registry import PolicySpec

    return PolicySpec(name, router_factory, "test", "test")


def _run(router_factory, wl, config=None):
    from baselines.runner import run_policy

    return run_policy(_spec(router_factory), wl, config or SimConfig(pool=SMALL_POOL), toy_calibration())


def test_design_matrix_terms():
    z = np.array([[1.0, 2.0, 3.0]])
    assert design_matrix(z, 1).tolist() == [[1.0, 1.0, 2.0, 3.0]]
    d2 = design_matrix(z, 2)
    assert d2.shape == (1, num_terms(3, 2)) == (1, 10)
    assert d2[0, 4:].tolist() == [1.0, 2.0, 3.0, 4.0, 6.0, 9.0]


def test_model_validation_errors():
    m = constant_model(ARMS, 1)
    with pytest.raises(ValueError, match="degree"):
        ArmCostModel(m.arms, m.feature_names, m.feature_mean, m.feature_scale, 3, m.coef, 0)
    with pytest.raises(ValueError, match="unknown features"):
        ArmCostModel(m.arms, ("nope",), (0.0,), (1.0,), 1, ((0.0, 0.0),) * 3, 0)
    with pytest.raises(ValueError, match="coef"):
        ArmCostModel(m.arms, m.feature_names, m.feature_mean, m.feature_scale, 1, m.coef[:2], 0)
    with pytest.raises(ValueError, match="beta"):
        constant_model(((0.5, 0.0),), 0)
    with pytest.raises(ValueError, match="missing field 'coef'"):
        ArmCostModel.from_json({k: v for k, v in m.to_json().items() if k != "coef"})
    assert ArmCostModel.from_json(m.to_json()) == m


def _rate_model(switch_margin=0.0, fallback_arm=1):
    """Arm 0 predicted cheapest below 1 request/s/GPU (log rate < 0), arm 2 above; the gap between
    them is ``2 * |log rate per GPU|``."""
    k = len(FEATURE_NAMES)
    coef = [[0.0] * (1 + k) for _ in ARMS]
    coef[0][1 + FEATURE_NAMES.index("log_rate_per_gpu")] = 1.0
    coef[2][1 + FEATURE_NAMES.index("log_rate_per_gpu")] = -1.0
    return ArmCostModel(ARMS, FEATURE_NAMES, (0.0,) * k, (1.0,) * k, 1, tuple(map(tuple, coef)), fallback_arm, switch_margin)


def test_switch_margin_keeps_the_current_arm_unless_the_gain_exceeds_it():
    f = np.zeros(len(FEATURE_NAMES))
    f[FEATURE_NAMES.index("log_rate_per_gpu")] = 0.1  # arm 2 best: cost -0.1 vs arm 0's +0.1
    assert _rate_model(0.0).choose(f, current=0) == 2
    f0 = np.zeros(len(FEATURE_NAMES))  # every arm predicted 0: ties go to the first arm, as without a current arm
    assert _rate_model(0.0).choose(f0, current=2) == 0 and _rate_model(0.1).choose(f0, current=2) == 2
    assert _rate_model(0.15).choose(f, current=0) == 2  # gain 0.2 > 0.15
    assert _rate_model(0.25).choose(f, current=0) == 0  # gain 0.2 <= 0.25: keep
    assert _rate_model(0.15).choose(f, current=1) == 1  # gain over arm 1 (cost 0) is 0.1
    assert _rate_model(0.25).choose(f) == 2  # no current arm: the best
    assert _rate_model(0.25).choose(None, current=0) == 1  # no features: the fallback
    for bad in (-0.1, math.inf, math.nan):
        with pytest.raises(ValueError, match="switch_margin"):
            _rate_model(bad)
    m = _rate_model(0.25)
    assert ArmCostModel.from_json(m.to_json()) == m
    old = {k: v for k, v in m.to_json().items() if k != "switch_margin"}  # a model file written before the field
    assert ArmCostModel.from_json(old).switch_margin == 0.0


def test_constant_model_routes_like_vertumnus_with_that_arm():
    from baselines.vertumnus import VertumnusParams, VertumnusRouter

    wl = random_workload(200, rate_rps=8.0, seed=3)
    for arm, (b, lam) in enumerate(ARMS):
        ours = _run(lambda arm=arm: ArmSelectingRouter(constant_model(ARMS, arm)), wl)
        ref = _run(lambda b=b, lam=lam: VertumnusRouter(VertumnusParams(beta=b, lambda_=lam)), wl)
        assert np.array_equal(ours.records["worker_id"], ref.records["worker_id"])


class _View:
    """Minimal PoolView stand-in: two workers of degree 2, the toy cost model, 4-token blocks."""

    def __init__(self):
        from envs.sim.cost_model import CostModel

        self.now_s = 0.0
        self.worker_ids = [0, 1]
        self.kv_block_size_tokens = 4
        self.cost_model = CostModel(toy_calibration().coefficients)

    def degree(self, wid):
        return 2

    def outstanding_work_s(self, wid):
        return 1.0 + wid


def test_observer_features_by_hand():
    v = _View()
    obs = LoadObserver(history_s=10.0, prefix_memory_s=60.0)
    assert obs.features(v, 0.0) is None
    # t=1: 8 tokens (blocks 1,2), nothing seen; t=3: 12 tokens (blocks 1,2,3), the first 2 blocks seen
    for t, L, hashes in ((1.0, 8, (1, 2)), (3.0, 12, (1, 2, 3))):
        v.now_s = t
        obs.observe(Request(0, t, L, 1, hashes), v)
    f = dict(zip(FEATURE_NAMES, obs.features(v, 5.0)))
    span, gpus = 5.0 - 1.0, 4
    # GPU work at C_min = 2: 2 * (1 + 0.1 * R / 2) with R = 8, then R = 12 - 8 = 4
    work = 2 * (1 + 0.1 * 8 / 2) + 2 * (1 + 0.1 * 4 / 2)
    assert f["offered_utilisation"] == pytest.approx(work / (span * gpus))
    assert f["log_rate_per_gpu"] == pytest.approx(math.log(2 / span / gpus))
    assert f["mean_log_prompt_tokens"] == pytest.approx((math.log(8) + math.log(12)) / 2)
    assert f["std_log_prompt_tokens"] == pytest.approx(abs(math.log(8) - math.log(12)) / 2)
    assert f["prefix_reuse_share"] == pytest.approx(8 / 20)
    assert f["backlog_s_per_worker"] == pytest.approx(1.5)
    # arrivals older than history_s drop out; none left -> None
    assert obs.features(v, 20.0) is None


def test_router_switches_arms_at_decision_boundaries():
    """A model whose best arm depends on the arrival rate: the router decides once per decision
    window (fallback at t = 0, without history), records the features and follows the model."""
    model = _rate_model()  # arm 0 the cheapest below 1 request/s/GPU, arm 2 above
    slow = random_workload(40, rate_rps=1.0, seed=0)  # 1 request/s on 8 GPUs until ~46 s
    burst = [Request(40 + i, 60.0 + 0.05 * i, 8, 1, (10**7 + i, 2 * 10**7 + i)) for i in range(200)]  # 20/s to 70 s
    wl = Workload("mix", tuple(list(slow.requests) + burst), kv_block_size_tokens=4)
    record: list = []
    _run(lambda: ArmSelectingRouter(model, decision_window_s=5.0, history_s=5.0, record=record), wl)
    times = [t for t, _, _ in record]
    assert times == sorted(set(times)) and all(t % 5.0 == 0 for t in times)
    assert record[0][0] == 0.0 and record[0][1] is None and record[0][2] == 1
    for t, f, arm in record[1:]:
        if f is not None:
            assert arm == model.choose(f) == (0 if f[1] < 0 else 2)
    by_time = {t: arm for t, f, arm in record}
    assert by_time[10.0] == 0 and by_time[65.0] == 2
    # with a margin above every predicted gain the first arm chosen from features is kept
    record = []
    _run(lambda: ArmSelectingRouter(_rate_model(switch_margin=50.0), decision_window_s=5.0, history_s=5.0,
                                    record=record), wl)
    chosen = [arm for _, f, arm in record if f is not None]
    assert chosen[0] == 0 and set(chosen) == {0}


def test_fit_model_recovers_a_feature_dependent_best_arm():
    from policies.routing.train_arms import CellData, chosen_arms, fit_model

    rng = np.random.default_rng(0)
    n = 200
    f = rng.normal(size=(n, len(FEATURE_NAMES)))
    x = f[:, 0]
    # arm 0 best when offered_utilisation < 0, arm 1 best above, arm 2 always worst
    ttft = np.exp(np.stack([0.5 * x, -0.5 * x, np.ones(n)], axis=1) + 0.01 * rng.normal(size=(n, 3)))
    cell = CellData("c", f, ttft, np.ones_like(ttft))
    m = fit_model([cell], ARMS, ("offered_utilisation",), 1, 0.1)
    arms = chosen_arms(m, cell)
    assert np.mean(arms == np.where(x < 0, 0, 1)) > 0.97
    assert m.fallback_arm in (0, 1)
    with pytest.raises(ValueError, match="weighting"):
        fit_model([cell], ARMS, ("offered_utilisation",), 1, 0.1, weighting="nope")


def test_headroom_and_change_pct_by_hand():
    from policies.routing.train_arms import CellData, change_pct, headroom

    a = CellData("a", np.zeros((2, len(FEATURE_NAMES))), np.array([[1.5, 2.0, 4.0], [3.0, 2.0, 4.0]]), np.ones((2, 3)))
    b = CellData("b", np.zeros((2, len(FEATURE_NAMES))), np.array([[4.0, 4.0, 1.0], [4.0, 4.0, 3.0]]), np.ones((2, 3)))
    assert change_pct(a, np.array([0, 1]), 1) == pytest.approx(100 * (1.75 / 2 - 1))
    rows = headroom([a, b], ARMS)
    assert rows[0]["tuned_beta"] == 3.0 and rows[0]["per_window_best_pct"] == pytest.approx(-12.5)
    assert rows[0]["arm_of_b_pct"] == pytest.approx(100 * (8 / 4 - 1))
    assert rows[1]["tuned_beta"] == 8.0 and rows[1]["arm_of_a_pct"] == pytest.approx(100 * (8 / 4 - 1))


def _write_checkpoint(path, model):
    from policies.routing.arm_selection import write_model

    write_model(path, model, {"decision_window_s": 10.0, "history_s": 30.0, "prefix_memory_s": 60.0})
    (path / "train_config.json").write_text(json.dumps({"kind": "routing", "policy_type": "vertumnus-arms"}))


def test_checkpoint_round_trip_and_arguments(tmp_path):
    from policies.common.checkpoint import resolve_checkpoint
    from policies.common.policy_args import check_checkpoint_kind, check_policy_argument
    from policies.routing.arm_selection import is_arm_checkpoint, load_arm_checkpoint

    m = constant_model(ARMS, 2)
    _write_checkpoint(tmp_path / "ck", m)
    assert is_arm_checkpoint(tmp_path / "ck") and not is_arm_checkpoint(tmp_path)
    loaded, router = load_arm_checkpoint(tmp_path / "ck")
    assert loaded == m and router["history_s"] == 30.0
    z, meta = resolve_checkpoint(str(tmp_path / "ck"))
    assert z.name == "arm_model.json" and meta["kind"] == "routing"
    check_policy_argument(str(tmp_path / "ck"))
    check_checkpoint_kind(str(tmp_path / "ck"), "routing")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "arm_model.json").write_text('{"model": {}}')
    with pytest.raises(ValueError, match="arm_model.json: expected fields 'model' and 'router'"):
        load_arm_checkpoint(tmp_path / "bad")


def test_env_policy_equals_direct_run(tmp_path):
    """Through the routing environment (SB3 ``predict``) the checkpoint routes exactly as its
    router run directly."""
    from envs.routing_env import PrefillRoutingEnv
    from policies.common.heuristic import run_episode
    from policies.routing.arm_selection import ArmSelectionPolicy, arm_policy_spec

    k = len(FEATURE_NAMES)
    coef = [[0.0] * (1 + k) for _ in ARMS]
    coef[0][1 + FEATURE_NAMES.index("backlog_s_per_worker")] = 1.0
    model = ArmCostModel(ARMS, FEATURE_NAMES, (0.0,) * k, (1.0,) * k, 1, tuple(map(tuple, coef)), 0)
    _write_checkpoint(tmp_path / "ck", model)
    wl = random_workload(150, rate_rps=8.0, seed=5)
    cfg = SimConfig(pool=SMALL_POOL)
    env = PrefillRoutingEnv([wl], cfg, toy_calibration())
    res, _, _ = run_episode(env, ArmSelectionPolicy(tmp_path / "ck", env), options={"window_index": 0, "sim_seed": cfg.seed})
    direct = _run(arm_policy_spec(tmp_path / "ck").make_router, wl, cfg)
    assert np.array_equal(res.records["worker_id"], direct.records["worker_id"])
    assert np.allclose(res.records["ttft_s"], direct.records["ttft_s"], equal_nan=True)


class _StubScenario:
    """A protocol scenario over a small random workload (``policies.routing.protocol.Scenario`` API)."""

    key = "rand@0.9"
    load_fraction = 0.9
    rate_rps = 8.0

    def windows(self, part, seed=0, max_windows=None):
        from policies.routing.protocol import protocol_windows

        return protocol_windows(random_workload(1000, rate_rps=8.0, seed=seed), 10.0, part, warmup_s=10.0)[:3]


def test_deployed_validation_runs_the_router_and_selects_the_least_score(tmp_path):
    """Deployed a constant model is its fixed arm: 0 % against itself as the tuned arm and the
    collected cost of its arm otherwise; the margin with the least score is selected and set."""
    from dataclasses import dataclass, replace

    from policies.routing.train_arms import (
        ArmTrainConfig,
        CellData,
        change_pct,
        collect_cell,
        deployed_validation,
        one_standard_error_choice,
    )

    @dataclass(frozen=True)
    class Source:
        name: str = "rand"

    stub = _StubScenario()
    stub.source = Source()
    cfg = ArmTrainConfig(betas=(1.0, 8.0), lambdas=(4.0,), max_train_windows=3, max_validation_windows=3, warmup_s=10.0,
                         switch_margins=(0.0, 0.5), cache_dir=str(tmp_path / "cache"))
    sim = SimConfig(pool=SMALL_POOL)
    train = [CellData.from_collected(collect_cell(stub, "train", cfg, sim))]
    val = [CellData.from_collected(collect_cell(stub, "validation", cfg, sim))]
    tuned = int(np.argmin(train[0].ttft.mean(axis=0)))
    for arm in (0, 1):
        model, rows, window_rows = deployed_validation(cfg, [stub], train, val, constant_model(cfg.arms, arm), sim)
        assert [r["switch_margin"] for r in rows] == [0.0, 0.5] and [r["selected"] for r in rows] == [True, False]
        assert model.switch_margin == 0.0 and model.coef == constant_model(cfg.arms, arm).coef
        for r in rows:
            expected = change_pct(val[0], np.full(3, arm), tuned)
            assert r["rand@0.9_pct"] == pytest.approx(expected, abs=1e-9) and r["score"] == r["rand@0.9_pct"]
            assert r["rand@0.9_arm_switches_per_window"] == 0.0
            assert r["rand@0.9_ci_low"] <= r["rand@0.9_pct"] <= r["rand@0.9_ci_high"]
        assert [w["mean_ttft_s"] for w in window_rows[:3]] == val[0].ttft[:, arm].tolist()
        assert {w["decisions"] for w in window_rows} == {" ".join([f"{cfg.arms[arm][0]:g}/4"] * 2)}  # t = 0, 10 s
    # the selection follows the one-standard-error rule: a model that switches by the arrival rate
    k = len(FEATURE_NAMES)
    coef = [[0.0] * (1 + k), [0.0] * (1 + k)]
    coef[1][1 + FEATURE_NAMES.index("log_rate_per_gpu")] = -1.0
    switching = ArmCostModel(cfg.arms, FEATURE_NAMES, (0.0,) * k, (1.0,) * k, 1, tuple(map(tuple, coef)), 0)
    model, rows, _ = deployed_validation(cfg, [stub], train, val, switching, sim)
    chosen = one_standard_error_choice([r["score"] for r in rows], [r["score_standard_error"] for r in rows], [0.0, 0.5])
    assert rows[chosen]["selected"] and model.switch_margin == rows[chosen]["switch_margin"]
    assert all(r["score_standard_error"] >= 0 for r in rows)
    with pytest.raises(ValueError, match="same cells"):
        deployed_validation(cfg, [stub], train, [replace(val[0], key="other")], switching, sim)
    with pytest.raises(ValueError, match="switch_margins"):
        ArmTrainConfig(switch_margins=(-1.0,))


def test_one_standard_error_rule_by_hand():
    """The least complex candidate within one standard error of the least score (ESL §7.10)."""
    from policies.routing.train_arms import one_standard_error_choice

    margins = [0.0, 0.01, 0.1]
    assert one_standard_error_choice([2.41, 2.19, 3.0], [3.0, 3.3, 1.0], margins) == 0  # 2.41 <= 2.19 + 3.3
    assert one_standard_error_choice([5.0, 2.0, 2.4], [1.0, 0.5, 1.0], margins) == 1  # 5 > 2.5: the best itself
    assert one_standard_error_choice([5.0, 2.4, 2.0], [1.0, 1.0, 0.5], margins) == 1  # 2.4 <= 2.5, simpler than 0.1
    assert one_standard_error_choice([1.0, 1.0], [float("nan"), 0.0], [0.5, 0.0]) == 1  # NaN error: no slack
    with pytest.raises(ValueError, match="one score"):
        one_standard_error_choice([1.0], [], [0.0])


@pytest.mark.parametrize("margin", [-0.1, "abc", "0.1", True, None, [0.1], float("nan")])
def test_checkpoint_with_bad_switch_margin_names_the_file_and_field(tmp_path, margin):
    """A hand-edited ``arm_model.json`` whose ``switch_margin`` is negative, NaN or not a JSON number
    fails to load with one error naming the file and the field (no silent string/bool coercion)."""
    from policies.routing.arm_selection import load_arm_checkpoint

    _write_checkpoint(tmp_path, constant_model(ARMS, 1))
    data = json.loads((tmp_path / "arm_model.json").read_text())
    data["model"]["switch_margin"] = margin
    (tmp_path / "arm_model.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"arm_model\.json: .*switch_margin") as exc:
        load_arm_checkpoint(tmp_path)
    assert "\n" not in str(exc.value)
    data["model"]["switch_margin"] = 0.05
    (tmp_path / "arm_model.json").write_text(json.dumps(data))
    assert load_arm_checkpoint(tmp_path)[0].switch_margin == 0.05
