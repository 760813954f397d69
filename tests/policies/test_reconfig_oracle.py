"""Oracle labels of the target-composition warm start: per-phase rule, switching-cost dynamic
programming, the reusable per-phase TTFT file, and the flags that select them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from baselines.envs import make_reconfig_env
from envs.workloads import WorkloadSource
from policies.reconfig.oracle import load_phase_ttft, save_phase_ttft, select_targets
from tests.factories import SMALL_POOL

# Three compositions of a 8-GPU pool: A = {4: 2}, B = {4: 1, 2: 2}, C = {2: 4};
# distance A-B = 4 GPUs (one CP-4 split), B-C = 4, A-C = 8.
A, B, C = {4: 2}, {4: 1, 2: 2}, {2: 4}
COUNTS = [A, B, C]


def test_per_phase_rule_takes_each_phase_best_and_breaks_near_ties_towards_the_previous_choice():
    ttft = np.array([[1.00, 2.00, 1.00],
                     [1.02, 1.00, 1.50],
                     [3.00, 1.01, 1.00]])
    num = np.array([100, 100, 100])
    assert select_targets(ttft, num, COUNTS, initial=A) == [0, 1, 0]  # exact minima (ties: earlier / closer)
    # 3 % tolerance: in phase 0 B (1.02) ties with A, and the one closer to the previous choice wins;
    # in phase 1 C (1.01) ties with B, and B is closer to A; in phase 2 A and C tie, both 4 GPUs from B.
    assert select_targets(ttft, num, COUNTS, initial=A, tolerance=0.03) == [0, 1, 0]
    assert select_targets(ttft, num, COUNTS, initial=B, tolerance=0.03) == [1, 1, 0]


def test_switching_cost_dynamic_programming_trades_phase_gains_against_gpus_moved():
    ttft = np.array([[1.0, 1.2, 1.0],
                     [1.1, 1.0, 1.1],
                     [2.0, 2.0, 2.0]])
    num = np.array([100, 100, 100])  # switching A -> B for phase 1 saves 20 request-s, costs 2 x 4 GPUs
    assert select_targets(ttft, num, COUNTS, initial=A, switch_cost_s_per_gpu=1.0) == [0, 1, 0]  # 8 < 20
    assert select_targets(ttft, num, COUNTS, initial=A, switch_cost_s_per_gpu=3.0) == [0, 0, 0]  # 24 > 20
    # the move away from the initial composition is charged too: a huge cost keeps it throughout
    assert select_targets(ttft, num, COUNTS, initial=C, switch_cost_s_per_gpu=1e9) == [2, 2, 2]
    # a tiny cost recovers the per-phase optimum
    assert select_targets(ttft, num, COUNTS, initial=A, switch_cost_s_per_gpu=1e-9) == [0, 1, 0]
    # the phase weight matters: a short phase 1 is not worth the switch
    assert select_targets(ttft, np.array([100, 10, 100]), COUNTS, initial=A, switch_cost_s_per_gpu=1.0) == [0, 0, 0]


def test_dynamic_programming_is_exact_on_random_instances():
    from itertools import product

    from envs.planning.operations import composition_distance

    rng = np.random.default_rng(0)
    for _ in range(20):
        ttft = rng.uniform(0.5, 2.0, (3, 4))
        num = rng.integers(10, 200, 4)
        cost = float(rng.uniform(0.0, 20.0))

        def total(path):
            prev, s = A, 0.0
            for p, k in enumerate(path):
                s += num[p] * ttft[k, p] + cost * composition_distance(prev, COUNTS[k])
                prev = COUNTS[k]
            return s

        best = min(total(path) for path in product(range(3), repeat=4))
        got = select_targets(ttft, num, COUNTS, initial=A, switch_cost_s_per_gpu=cost)
        assert total(got) == pytest.approx(best)


def test_select_targets_rejects_mismatched_shapes_and_negative_costs():
    ttft = np.ones((3, 2))
    with pytest.raises(ValueError, match="ttft_s must be"):
        select_targets(ttft, np.ones(3), COUNTS, initial=A)
    with pytest.raises(ValueError, match="ttft_s must be"):
        select_targets(np.ones((2, 2)), np.ones(2), COUNTS, initial=A)
    with pytest.raises(ValueError, match=">= 0"):
        select_targets(ttft, np.ones(2), COUNTS, initial=A, switch_cost_s_per_gpu=-1.0)


def test_phase_ttft_file_round_trips_and_checks_the_menu(tmp_path):
    menu = ["cp4x2", "cp4x1,cp2x2", "cp2x4"]
    t = np.array([[0.5, np.inf], [0.25, 1.0], [2.0, 3.0]])
    path = tmp_path / "phase_ttft.json"
    save_phase_ttft(path, {7: (t, np.array([10, 0]))}, menu)
    got = load_phase_ttft(path, menu)
    assert set(got) == {7}
    np.testing.assert_array_equal(got[7][0], t)
    np.testing.assert_array_equal(got[7][1], [10, 0])
    with pytest.raises(ValueError, match="composition menu"):
        load_phase_ttft(path, menu[:2])
    path.write_text(json.dumps({"seeds": {}}))
    with pytest.raises(ValueError, match="phase_ttft.json: field 'compositions' is missing or not a list; expected a "
                                         "per-phase TTFT file"):
        load_phase_ttft(path, menu)


def test_oracle_flags_need_the_oracle_warm_start():
    from policies.reconfig.train import ReconfigTrainConfig

    base = dict(workload=WorkloadSource(name="phases"), action_mode="target", wandb_mode="disabled")
    ReconfigTrainConfig(**base, warm_start="oracle", oracle_switch_cost_s_per_gpu=10.0)
    with pytest.raises(ValueError, match="--oracle-switch-cost-s-per-gpu applies to --warm-start oracle only"):
        ReconfigTrainConfig(**base, oracle_switch_cost_s_per_gpu=10.0)
    with pytest.raises(ValueError, match="--oracle-phase-ttft applies to --warm-start oracle only"):
        ReconfigTrainConfig(**base, oracle_phase_ttft="x.json")
    with pytest.raises(ValueError, match="oracle_switch_cost_s_per_gpu must be >= 0"):
        ReconfigTrainConfig(**base, warm_start="oracle", oracle_switch_cost_s_per_gpu=-1.0)
    with pytest.raises(ValueError, match="applies to --action-mode target only"):
        ReconfigTrainConfig(workload=WorkloadSource(name="phases"), wandb_mode="disabled", oracle_switch_cost_s_per_gpu=10.0)


def _tiny_oracle_training(bc_epochs: int):
    """(sim config, ReconfigTrainConfig kwargs): oracle warm start on a 2-phase matched-phases
    workload, 8 GPUs, 4 PPO steps."""
    from envs.sim import SimConfig

    small = SimConfig(pool=SMALL_POOL)
    params = (("duration_s", 80.0), ("load_fraction_range", (0.05, 0.1)), ("num_phases_range", (2, 2)))
    base = dict(workload=WorkloadSource(name="matched-phases", params=params), workload_seeds=(0,), total_timesteps=4,
                n_steps=4,
                batch_size=4, n_epochs=1, action_mode="target", target_degrees=(2, 4), warm_start="oracle",
                bc_epochs=bc_epochs, wandb_mode="disabled")
    return small, base


def test_warm_start_reuses_the_phase_ttft_file_and_applies_the_switching_cost(tmp_path):
    from policies.reconfig.train import ReconfigTrainConfig, train_reconfig

    small, base = _tiny_oracle_training(bc_epochs=1)
    train_reconfig(ReconfigTrainConfig(**base), tmp_path / "a", sim_config=small, log=lambda s: None)
    menu = json.loads((tmp_path / "a" / "oracle_phase_ttft.json").read_text())["compositions"]
    assert menu == ["cp4x2", "cp4x1,cp2x2", "cp2x4"]
    # a doctored file is read instead of simulating: every phase best on cp2x4, by far
    fake = tmp_path / "fake.json"
    save_phase_ttft(fake, {0: (np.array([[9.0, 9.0], [9.0, 9.0], [0.1, 0.1]]), np.array([50, 50]))}, menu)
    train_reconfig(ReconfigTrainConfig(**base, oracle_phase_ttft=str(fake)), tmp_path / "b", sim_config=small,
                   log=lambda s: None)
    assert json.loads((tmp_path / "b" / "oracle_targets.json").read_text()) == {"0": ["cp2x4", "cp2x4"]}
    # ... unless moving there costs more than it saves: the initial composition stays
    train_reconfig(ReconfigTrainConfig(**base, oracle_phase_ttft=str(fake), oracle_switch_cost_s_per_gpu=1e6),
                   tmp_path / "c", sim_config=small, log=lambda s: None)
    assert json.loads((tmp_path / "c" / "oracle_targets.json").read_text()) == {"0": ["cp4x1,cp2x2", "cp4x1,cp2x2"]}


def _small_matched_phases():
    """(workload, make_env): a 2-phase matched-phases workload on an 8-GPU pool, target actions over CP {2, 4}."""
    from envs.sim import SimConfig
    from envs.workloads import WorkloadSource

    small = SimConfig(pool=SMALL_POOL)
    params = (("duration_s", 80.0), ("load_fraction_range", (0.05, 0.1)), ("num_phases_range", (2, 2)))
    wl = WorkloadSource(name="matched-phases", seed=0, params=params).build()

    def make_env(w):
        return make_reconfig_env(w, small, capacity_features=True, action_mode="target", target_degrees=(2, 4))

    return wl, make_env


def test_noisy_demonstrations_keep_the_oracle_labels_and_visit_other_compositions():
    from policies.reconfig.oracle import collect_demonstrations

    wl, make_env = _small_matched_phases()

    targets = [[2, 2]]  # always cp2x4
    clean_obs, clean = collect_demonstrations(make_env, [wl], targets, [0])
    obs, actions = collect_demonstrations(make_env, [wl], targets, [0], num_noisy_rollouts=2, action_noise=1.0)
    n = len(clean)
    assert len(actions) == 3 * n and set(actions.tolist()) == {2}  # labels stay the oracle's
    for key in clean_obs:
        np.testing.assert_array_equal(obs[key][:n], clean_obs[key])  # the first rollout is the clean one
    # the clean rollout has chosen cp2x4 since its first step; the disturbed ones executed other compositions
    last_action = obs["targets"][:, :, 4]  # TARGET_FEATURES "is_last_action"
    assert last_action[1:n, 2].all() and not last_action[n + 1:, 2].all()
    again, _ = collect_demonstrations(make_env, [wl], targets, [0], num_noisy_rollouts=2, action_noise=1.0)
    np.testing.assert_array_equal(again["targets"], obs["targets"])  # seeded
    with pytest.raises(ValueError, match="action_noise in"):
        collect_demonstrations(make_env, [wl], targets, [0], num_noisy_rollouts=1, action_noise=1.5)


def test_noisy_rollout_flags_go_together():
    from policies.reconfig.train import ReconfigTrainConfig

    base = dict(workload=WorkloadSource(name="phases"), action_mode="target", warm_start="oracle", wandb_mode="disabled")
    ReconfigTrainConfig(**base, oracle_noisy_rollouts=2, oracle_action_noise=0.3)
    with pytest.raises(ValueError, match="go together"):
        ReconfigTrainConfig(**base, oracle_noisy_rollouts=2)
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        ReconfigTrainConfig(**base, oracle_noisy_rollouts=2, oracle_action_noise=2.0)


def test_learner_states_execute_the_learners_choice_and_keep_the_oracle_labels():
    from policies.reconfig.oracle import collect_demonstrations, collect_learner_states

    wl, make_env = _small_matched_phases()

    targets = [[2, 2]]  # the oracle: always cp2x4
    _, clean = collect_demonstrations(make_env, [wl], targets, [0])
    obs, actions = collect_learner_states(make_env, [wl], targets, [0], act=lambda o: 0)  # the learner: cp4x2
    assert len(actions) == len(clean) and set(actions.tolist()) == {2}  # the oracle's labels
    last_action = obs["targets"][:, :, 4]  # TARGET_FEATURES "is_last_action": the learner's choice was executed
    assert last_action[1:, 0].all() and not last_action[1:, 2].any()


def test_dagger_rounds_add_the_cloned_policys_states_to_the_demonstrations(tmp_path):
    from policies.reconfig.train import ReconfigTrainConfig, train_reconfig

    small, base = _tiny_oracle_training(bc_epochs=2)
    train_reconfig(ReconfigTrainConfig(**base), tmp_path / "a", sim_config=small, log=lambda s: None)
    train_reconfig(ReconfigTrainConfig(**base, oracle_dagger_rounds=2), tmp_path / "b", sim_config=small, log=lambda s: None)
    plain = json.loads((tmp_path / "a" / "train_config.json").read_text())["warm_start"]
    dagger = json.loads((tmp_path / "b" / "train_config.json").read_text())["warm_start"]
    assert "dagger" not in plain and [r["round"] for r in dagger["dagger"]] == [1, 2]
    per_round = [r["num_learner_states"] for r in dagger["dagger"]]
    assert per_round == [plain["num_demonstration_steps"]] * 2  # one whole-workload rollout per seed and round
    assert dagger["num_demonstration_steps"] == 3 * plain["num_demonstration_steps"]
    assert all(0.0 <= r["learner_agreement"] <= 1.0 for r in dagger["dagger"])
    assert len((tmp_path / "b" / "bc.csv").read_text().splitlines()) == 1 + 3 * 2  # cloned three times, 2 epochs each
    with pytest.raises(ValueError, match="oracle_dagger_rounds must be >= 0"):
        ReconfigTrainConfig(**base, oracle_dagger_rounds=-1)
    with pytest.raises(ValueError, match="--oracle-dagger-rounds applies to --warm-start oracle only"):
        ReconfigTrainConfig(**{**base, "warm_start": "none", "bc_epochs": 30}, oracle_dagger_rounds=1)


def _default_menu() -> list[str]:
    from envs.reconfig_env import target_menu
    from envs.sim import SimConfig
    from policies.reconfig.train import ReconfigTrainConfig

    return target_menu(SimConfig().pool, ReconfigTrainConfig.target_degrees)


def _bad_phase_ttft_files():
    """(file text or None for no file, expected message fragment) of bad --oracle-phase-ttft files, by name."""
    menu = _default_menu()

    def seeds(entry):
        return json.dumps({"compositions": menu, "seeds": {"0": entry}})

    cases = [
        ("missing", None, ": no such file; expected an oracle_phase_ttft.json"),
        ("not-json", "{", ": not JSON ("),
        ("no-seeds", json.dumps({"compositions": menu}), ": field 'seeds' is missing or not an object"),
        ("other-menu", json.dumps({"compositions": menu[:2], "seeds": {}}), ": its composition menu (2 entries) differs"),
        ("no-num-requests", seeds({"ttft_s": [[1.0]] * len(menu)}),
         ": seeds['0']: expected an object with 'ttft_s' and 'num_requests'"),
        ("bad-num-requests", seeds({"ttft_s": [[1.0]] * len(menu), "num_requests": [-1]}),
         ": seeds['0'].num_requests: expected a list of integers >= 0"),
        ("text-ttft", seeds({"ttft_s": [["1.0"]] * len(menu), "num_requests": [5]}),
         ": seeds['0'].ttft_s: expected one list per composition of mean TTFTs [s] (numbers or null)"),
        ("wrong-shape", seeds({"ttft_s": [[1.0, 2.0]] * len(menu), "num_requests": [5]}),
         f": seeds['0'].ttft_s: shape ({len(menu)}, 2), expected ({len(menu)}, 1)"),
        ("negative-ttft", seeds({"ttft_s": [[-1.0]] * len(menu), "num_requests": [5]}),
         ": seeds['0'].ttft_s: expected mean TTFTs >= 0 [s] or null"),
        ("bad-seed", json.dumps({"compositions": menu, "seeds": {"a": {}}}), ": seeds['a']: a seed must be an integer"),
    ]
    return [pytest.param(text, message, id=name) for name, text, message in cases]


@pytest.mark.parametrize("text, message", _bad_phase_ttft_files())
def test_bad_phase_ttft_file_fails_before_anything_is_written(text, message, tmp_path, capsys, monkeypatch):
    """``cpgym train reconfig --oracle-phase-ttft F``: a missing or malformed F is one error line
    naming the flag, the file and the field, before --out is created (it used to fail after
    train_config.json, provenance.json and the first simulations)."""
    import policies.reconfig.train as train_reconfig
    from experiments.cli import main

    def no_train(*a, **k):
        raise AssertionError("training started before checking --oracle-phase-ttft")

    monkeypatch.setattr(train_reconfig, "train_reconfig", no_train)
    path = tmp_path / "phase_ttft.json"
    if text is not None:
        path.write_text(text)
    out = tmp_path / "run"
    rc = main(["train", "reconfig", "--action-mode", "target", "--warm-start", "oracle", "--oracle-phase-ttft", str(path),
               "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith(f"cpgym train reconfig: error: --oracle-phase-ttft {path}") and message in err
    assert err.count("\n") == 1
    assert not out.exists()


def test_train_reconfig_checks_the_phase_ttft_file_before_creating_out(tmp_path):
    """The Python API checks the file too (train_reconfig), before ``out_dir`` exists."""
    from policies.reconfig.train import ReconfigTrainConfig, check_oracle_phase_ttft, train_reconfig

    small, base = _tiny_oracle_training(bc_epochs=1)
    fake = tmp_path / "fake.json"
    fake.write_text(json.dumps({"compositions": ["cp4x2", "cp4x1,cp2x2", "cp2x4"], "seeds": {"0": {"ttft_s": []}}}))
    cfg = ReconfigTrainConfig(**base, oracle_phase_ttft=str(fake))
    with pytest.raises(ValueError, match=r"^--oracle-phase-ttft .*fake.json: seeds\['0'\]: expected an object"):
        train_reconfig(cfg, tmp_path / "run", sim_config=small, log=lambda s: None)
    assert not (tmp_path / "run").exists()
    save_phase_ttft(fake, {0: (np.ones((3, 2)), np.array([5, 5]))}, ["cp4x2", "cp4x1,cp2x2", "cp2x4"])
    check_oracle_phase_ttft(cfg, small)  # a good file passes


def test_switching_cost_schedule_never_picks_a_composition_without_data_in_a_phase_with_requests():
    """The DP charged an inf entry (no finished request of a phase with requests) 0 request-s, so
    the cheapest-looking schedule moved to the composition that served that phase worst; the
    per-phase rule never picks it. An inf switching cost gave NaN costs (inf x 0 GPUs moved) and
    a schedule away from ``initial``; it is refused, as in the training config."""
    from policies.reconfig.train import ReconfigTrainConfig

    ttft = np.array([[1.0, 5.0, 1.0],
                     [1.1, np.inf, 1.1],
                     [2.0, 2.0, 2.0]])
    num = np.array([100, 100, 100])
    assert select_targets(ttft, num, COUNTS, A, 0.0, 0.0) == [0, 2, 0]
    assert select_targets(ttft, num, COUNTS, A, 0.0, 0.01) == [0, 2, 0]  # was [0, 1, 0]: B "free" in phase 1
    # a phase with no data at all (or no requests) costs nothing: the schedule holds its composition
    no_data = np.array([[1.0, np.inf, 1.0], [1.1, np.inf, 1.1], [2.0, np.inf, 2.0]])
    assert select_targets(no_data, num, COUNTS, A, 0.0, 0.01) == [0, 0, 0]
    assert select_targets(ttft, np.array([100, 0, 100]), COUNTS, A, 0.0, 0.01) == [0, 0, 0]
    with pytest.raises(ValueError, match="switch_cost_s_per_gpu finite and >= 0"):
        select_targets(ttft, num, COUNTS, B, 0.0, float("inf"))
    with pytest.raises(ValueError, match="oracle_switch_cost_s_per_gpu must be >= 0 and finite, got inf"):
        ReconfigTrainConfig(workload=WorkloadSource(name="phases"), action_mode="target", wandb_mode="disabled",
                            warm_start="oracle",
                            oracle_switch_cost_s_per_gpu=float("inf"))


def test_fixed_mean_ttft_weights_phases_by_their_requests():
    from policies.reconfig.oracle import fixed_mean_ttft

    ttft = np.array([[1.0, 3.0, 9.0], [2.0, np.inf, 0.5]])
    assert fixed_mean_ttft(ttft, np.array([1, 3, 0])).tolist() == [2.5, np.inf]  # the empty phase is skipped
