"""One name per window concept (#38): ``arrival_window_s`` (the ``[start, end)`` arrival window of
a workload), ``arrival_window_length_s`` (its length from 0), ``episode_window_s`` (one episode)
and ``decision_window_s`` (the controller's observation / decision window). The spellings of
earlier releases (``--window-s``, ``--controller-window-s``, spec ``workload.window_s``, fault
spec ``window_s``, ``--dynamic-param window_s``, checkpoints' ``train_config.json``) still work,
each with a one-line deprecation warning, and keep the keys of finished sweep cells and caches."""

from __future__ import annotations

import json

import pytest

from envs.sim import SimConfig
from envs.workloads import WorkloadSource
from experiments.cli import deprecation_notice, main, normalize_argv, parse_args
from experiments.spec import WorkloadSpec, load_spec
from experiments.spec.cells import cell_key
from experiments.spec.paths import SpecDeprecationWarning
from policies.common.checkpoint import current_meta
from tests.experiments.conftest import write_spec


def test_old_window_flag_is_the_arrival_window_with_a_one_line_warning(capsys):
    base = ["simulate", "--workload", "tool-agent", "--policy", "least-work", "--quiet", "--format", "json"]
    assert main([*base, "--arrival-window-s", "0", "2"]) == 0
    new = capsys.readouterr()
    assert main([*base, "--window-s", "0", "2"]) == 0
    old = capsys.readouterr()
    assert old.err == "cpgym: warning: --window-s is deprecated; use --arrival-window-s\n" + new.err
    assert "deprecated" not in new.err

    def without_wall_time(text: str):
        rows = json.loads(text)
        for r in rows if isinstance(rows, list) else [rows]:
            r.pop("wall_time_s", None)
        return rows

    assert without_wall_time(old.out) == without_wall_time(new.out)


def test_flag_aliases_rewrite_only_flags_and_per_command():
    assert normalize_argv(["simulate", "--window-s=0", "5"]) == ["simulate", "--arrival-window-s=0", "5"]
    assert normalize_argv(["simulate", "--", "--window-s"]) == ["simulate", "--", "--window-s"]  # not a flag
    # reproduce's window is one number, the length of [0, LENGTH)
    assert parse_args(["reproduce", "--window-s", "40"]).arrival_window_length_s == 40.0
    assert deprecation_notice(["reproduce", "--window-s", "40"]) == \
        "cpgym: warning: --window-s is deprecated; use --arrival-window-length-s"
    args = parse_args(["train", "reconfig", "--controller-window-s", "10", "--out", "x"])
    assert args.decision_window_s == 10.0
    assert parse_args(["dynamic", "--controller-window-s", "5"]).decision_window_s == 5.0
    # a deprecated command and a deprecated flag: one line each
    assert deprecation_notice(["bench", "--window-s", "0", "1"]).splitlines() == [
        "cpgym: warning: `cpgym bench` is deprecated and will be removed in the next release; use `cpgym bench sim`",
        "cpgym: warning: --window-s is deprecated; use --arrival-window-s"]
    assert deprecation_notice(["simulate", "--arrival-window-s", "0", "1"]) is None


def test_old_spec_key_loads_with_a_deprecation_warning_and_the_same_cell_keys(tmp_path):
    new = write_spec(tmp_path, "name: t\nworkload: {name: mixed-default, arrival_window_s: [0, 30]}\n"
                               "policies: [least-work]\n", "new.yaml")
    old = write_spec(tmp_path, "name: t\nworkload: {name: mixed-default, window_s: [0, 30]}\n"
                               "policies: [least-work]\n", "old.yaml")
    with pytest.warns(SpecDeprecationWarning, match=r"old\.yaml: workload\.window_s is deprecated .* "
                                                    r"use workload\.arrival_window_s$"):
        old_spec = load_spec(old)
    new_spec = load_spec(new)
    assert old_spec.workload.arrival_window_s == (0.0, 30.0)
    assert [c.key for c in old_spec.resolve()] == [c.key for c in new_spec.resolve()]
    # the old dotted path as a grid axis
    grid = write_spec(tmp_path, "name: t\nworkload: {name: mixed-default}\npolicies: [least-work]\n"
                                "sweep: {grid: {workload.window_s: [[0, 10], [0, 20]]}}\n", "grid.yaml")
    with pytest.warns(SpecDeprecationWarning):
        cells = load_spec(grid).resolve()
    assert sorted(c.workload.arrival_window_s for c in cells) == [(0.0, 10.0), (0.0, 20.0)]


def test_cell_keys_of_finished_sweeps_are_unchanged_by_the_rename():
    # the keys this workload had before the field was renamed (window_s -> arrival_window_s)
    wl = WorkloadSpec(name="tool-agent", seed=3, target_rps=5.0, arrival_window_s=(0.0, 300.0))
    assert cell_key(wl, SimConfig(), "least-work", (), {}) == "f9d792f2d75c10eb"
    assert cell_key(WorkloadSpec(name="tool-agent", seed=3), SimConfig(), "least-work", (), {}) == "34617b0ea2771e37"


def test_capacity_and_arm_cache_keys_are_unchanged_by_the_rename():
    from baselines.capacity import RatedWorkload
    from policies.routing.episodes import EpisodeSource
    from policies.routing.train_arms import ArmTrainConfig, capacity_cache_file

    assert RatedWorkload(name="tool-agent", arrival_window_length_s=120.0).fingerprint() == {
        "name": "tool-agent", "seed": 0, "params": {}, "window_s": 120.0, "start_s": 0.0}
    src = EpisodeSource(WorkloadSource(name="tool-agent"), episode_window_s=12.0)
    assert capacity_cache_file(ArmTrainConfig(), src, SimConfig()).name == "capacity-42a4c2211eed.json"


def test_old_fault_spec_key_loads_with_a_deprecation_warning(tmp_path):
    from experiments.faults import load_spec as load_fault_spec
    from tests.faults.test_fault_experiment import SPEC, _write

    p = _write(tmp_path, SPEC.replace("arrival_window_s: [0, 40]", "window_s: [0, 40]"))
    with pytest.warns(SpecDeprecationWarning, match=r"spec\.yaml: window_s is deprecated .* use arrival_window_s$"):
        assert load_fault_spec(p).arrival_window_s == (0.0, 40.0)
    both = _write(tmp_path, SPEC.replace("arrival_window_s: [0, 40]", "arrival_window_s: [0, 40]\nwindow_s: [0, 40]"))
    with pytest.raises(ValueError, match="window_s: given with its new spelling arrival_window_s"):
        load_fault_spec(both)


def test_old_dynamic_param_names_still_reach_their_fields():
    from experiments.reproduce import _renamed_dynamic_params

    with pytest.warns(SpecDeprecationWarning) as caught:
        params = _renamed_dynamic_params((("window_s", "0,300"), ("controller_window_s", 10.0)))
    assert [str(w.message) for w in caught] == [
        "--dynamic-param window_s is deprecated and will be removed in the next release; use arrival_window_s",
        "--dynamic-param controller_window_s is deprecated and will be removed in the next release; use decision_window_s"]
    assert params == (("arrival_window_s", "0,300"), ("decision_window_s", 10.0))


_NESTED = {"name": "phases", "trace": None, "seed": 3, "params": [["num_phases", 2]], "target_rps": None, "rate_scale": 0.5,
           "arrival_window_s": None, "skip_invalid": False}


@pytest.mark.parametrize("meta, expected", [
    # reconfiguration: the controller's decision window; the flat workload fields nested as a WorkloadSource
    # (a field the checkpoint predates, here skip_invalid and arrival_window_s: its default)
    ({"kind": "reconfig", "train_config": {"window_s": 10.0, "episode_window_s": 600.0, "workload": "phases",
                                           "trace": None, "workload_seed": 3, "params": [["num_phases", 2]],
                                           "target_rps": None, "rate_scale": 0.5}},
     {"decision_window_s": 10.0, "episode_window_s": 600.0, "workload": _NESTED}),
    # arm selection: the episode window
    ({"kind": "routing", "policy_type": "vertumnus-arms", "train_config": {"window_s": 10.0, "decision_window_s": 5.0}},
     {"episode_window_s": 10.0, "decision_window_s": 5.0}),
    # learned router: the episode window of its source, its flat workload fields nested as a WorkloadSource
    ({"kind": "routing", "train_config": {"source": {"window_s": 10.0, "eval_every": 4, "workload": "phases",
                                                     "trace": None, "workload_seed": 3, "params": [["num_phases", 2]],
                                                     "target_rps": None, "rate_scale": 0.5}}},
     {"source": {"episode_window_s": 10.0, "eval_every": 4, "workload": _NESTED}}),
    ({"kind": "routing", "train_config": {"source": {"episode_window_s": 10.0, "eval_every": 4, "workload": _NESTED}}},
     {"source": {"episode_window_s": 10.0, "eval_every": 4, "workload": _NESTED}}),
    # already the new shape: unchanged
    ({"kind": "reconfig", "train_config": {"decision_window_s": 20.0, "workload": _NESTED}},
     {"decision_window_s": 20.0, "workload": _NESTED}),
])
def test_checkpoint_train_config_of_the_old_shape_reads_as_the_new(meta, expected):
    assert current_meta(meta)["train_config"] == expected


def test_shipped_reconfig_checkpoint_keeps_its_decision_window():
    """Its ``train_config.json`` predates the rename (``window_s``): the evaluation still steps
    the environment every 20 s, not at a default."""
    from policies.common.checkpoint import SHIPPED_RECONFIG
    from policies.reconfig.evaluate import checkpoint_train_config

    stored = json.loads((SHIPPED_RECONFIG / "train_config.json").read_text())["train_config"]
    assert "window_s" in stored and "decision_window_s" not in stored
    assert checkpoint_train_config(str(SHIPPED_RECONFIG))["decision_window_s"] == stored["window_s"]


def test_old_controller_policy_param_loads_with_a_deprecation_warning_and_the_same_cell_keys(tmp_path):
    """``<policy>.window_s`` (the controller's window, now ``decision_window_s``) in policy_params
    and as a grid axis; the cell keys are those the old name gave."""
    base = "name: t\nworkload: {name: tool-agent}\npolicies: [vertumnus-adaptive]\n"
    new = write_spec(tmp_path, base + "policy_params: {vertumnus-adaptive: {decision_window_s: 10.0}}\n", "new.yaml")
    old = write_spec(tmp_path, base + "policy_params: {vertumnus-adaptive: {window_s: 10.0}}\n", "old.yaml")
    with pytest.warns(SpecDeprecationWarning, match=r"vertumnus-adaptive\.window_s is deprecated .* "
                                                    r"use vertumnus-adaptive\.decision_window_s$"):
        old_cells = load_spec(old).resolve()
    new_cells = load_spec(new).resolve()
    assert old_cells[0].policy_params == new_cells[0].policy_params == (("decision_window_s", 10.0),)
    assert [c.key for c in old_cells] == [c.key for c in new_cells]
    grid = write_spec(tmp_path, base + "sweep: {grid: {vertumnus-adaptive.window_s: [10.0, 30.0]}}\n", "grid.yaml")
    with pytest.warns(SpecDeprecationWarning):
        cells = load_spec(grid).resolve()
    assert sorted(dict(c.policy_params)["decision_window_s"] for c in cells) == [10.0, 30.0]
    # the key the parameter's earlier name gave (window_s, sorted after k_windows)
    key = cell_key(WorkloadSpec(name="tool-agent"), SimConfig(), "vertumnus-adaptive",
                   (("decision_window_s", 10.0), ("k_windows", 3)), {})
    assert key == "db9f86ad197f5692"


def test_old_and_new_spelling_of_one_flag_together_are_one_error(capsys):
    """`--window-s 0 5 --arrival-window-s 0 30` ran whichever came last, with a warning only."""
    with pytest.raises(SystemExit) as exc:
        parse_args(["simulate", "--window-s", "0", "5", "--arrival-window-s", "0", "30"])
    assert exc.value.code == 2
    assert "--window-s (deprecated) and --arrival-window-s are the same option" in capsys.readouterr().err


def test_a_deprecated_flag_a_command_lacks_is_named_as_typed(capsys):
    """`cpgym evaluate --window-s 0 10` said 'unrecognized arguments: --arrival-window-s 0 10'."""
    with pytest.raises(SystemExit):
        parse_args(["evaluate", "--policy", "least-work", "--window-s", "0", "10"])
    err = capsys.readouterr().err
    assert "unrecognized arguments: --window-s 0 10" in err and "--arrival-window-s" not in err


@pytest.mark.parametrize("param, hint", [("name", "--workload"), ("seed", "--workload-seed")])
def test_workload_param_refuses_the_arguments_other_flags_set(param, hint, capsys):
    """`--workload-param name=foo` / `seed=3` was a TypeError traceback (get_workload got multiple values)."""
    code = main(["simulate", "--workload", "tool-agent", "--target-rps", "5", "--arrival-window-s", "0", "5",
                 "--policy", "least-work", "--quiet", "--workload-param", f"{param}=3"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and f"--workload-param {param}: not a generator parameter" in err[0]
    assert hint in err[0]
