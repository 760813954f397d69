"""Spec validation: every error names the file, the key and the expected form, before any run."""

from __future__ import annotations

import pytest

from experiments.spec import SpecError, load_spec
from tests.experiments.conftest import TINY, write_spec


def _err(tmp_path, text, name="spec.yaml") -> SpecError:
    p = write_spec(tmp_path, text, name)
    with pytest.raises(SpecError) as ei:
        load_spec(p)
    assert str(p) in str(ei.value)
    return ei.value


BASE = """
name: t
workload: {name: mixed-default}
policies: [least-work]
"""


def test_tiny_spec_cartesian_count(tiny_spec):
    spec = load_spec(tiny_spec)
    cells = spec.resolve()
    assert spec.num_cells == len(cells) == 2 * 2 * 2  # rates x policies x seeds
    assert len({c.key for c in cells}) == 8
    assert {c.workload.target_rps for c in cells} == {10.0, 20.0}
    # seed_workload (default): the run seed also re-draws the workload
    assert {(c.config.seed, c.workload.seed) for c in cells} == {(0, 0), (1, 1)}


def test_cell_keys_are_deterministic_and_config_sensitive(tmp_path, tiny_spec):
    a = [c.key for c in load_spec(tiny_spec).resolve()]
    b = [c.key for c in load_spec(tiny_spec).resolve()]
    assert a == b
    other = write_spec(tmp_path, TINY.replace("seeds: [0, 1]", "seeds: [0, 1]\nsim: {slo.slo_scale: 4.0}"), "o.yaml")
    assert not set(a) & {c.key for c in load_spec(other).resolve()}


def test_unknown_top_level_key(tmp_path):
    e = _err(tmp_path, BASE + "polcies: [x]\n")
    assert e.key == "polcies" and "one of" in e.expected


def test_unknown_workload_key(tmp_path):
    e = _err(tmp_path, "workload: {name: mixed-default, rate: 3}\npolicies: [least-work]\n")
    assert e.key == "workload.rate"


def test_wrong_type(tmp_path):
    e = _err(tmp_path, BASE + "seeds: [0, x]\n")
    assert e.key == "seeds[1]" and "integer" in e.expected
    e = _err(tmp_path, BASE + "sweep: {grid: {slo.slo_scale: [1.0, fast]}}\n")
    assert e.key == "sweep.grid.slo.slo_scale[1]" and "number" in e.expected
    e = _err(tmp_path, BASE + "sim: {engine: {max_batch_tokens: 1.5}}\n")
    assert e.key == "sim.engine.max_batch_tokens" and "integer" in e.expected


def test_bad_dotted_path(tmp_path):
    e = _err(tmp_path, BASE + "sweep: {grid: {pool.compositon: [cp4x10]}}\n")
    assert e.key == "sweep.grid.pool.compositon" and "dotted path" in e.expected
    e = _err(tmp_path, BASE + "sweep: {cells: [{slo.scale: 2.0}]}\n")
    assert e.key == "sweep.cells[0].slo.scale" and "slo.slo_scale" in e.expected  # suggests the close match


def test_empty_axes(tmp_path):
    e = _err(tmp_path, BASE + "sweep: {grid: {cache_capacity_scale: []}}\n")
    assert e.key == "sweep.grid.cache_capacity_scale" and "non-empty" in e.expected
    assert _err(tmp_path, BASE + "rates: []\n").key == "rates"
    assert _err(tmp_path, "workload: {name: mixed-default}\npolicies: []\n").key == "policies"


def test_invalid_values_are_caught_by_the_config_dataclasses(tmp_path):
    e = _err(tmp_path, BASE + "sweep: {grid: {pool.composition: [cp4x10, cp3x4]}}\n")
    assert e.key.startswith("sweep.grid") and "cp3" in str(e)
    e = _err(tmp_path, BASE + "rates: [5, -1]\n")  # reported where the value is given
    assert e.key == "rates[1]" and "target_rps must be a finite number > 0, got -1" in str(e)
    e = _err(tmp_path, BASE + "sweep: {grid: {workload.arrival_window_s: [[0, 10], [5, 1]]}}\n")
    assert e.key == "sweep.grid.workload.arrival_window_s[1]" and "arrival_window_s" in str(e)
    e = _err(tmp_path, BASE + "sweep: {cells: [{workload.rate_scale: 0}]}\n")
    assert e.key == "sweep.cells[0].workload.rate_scale"


def test_workload_and_policy_parameters_are_validated_at_load_time(tmp_path):
    e = _err(tmp_path, "workload: {name: tool-agent, params: {duration_s: -10}}\npolicies: [least-work]\n")
    assert e.key == "workload.params.duration_s" and "duration_s must be a finite number > 0, got -10" in str(e)
    e = _err(tmp_path, "workload: {name: tool-agent, params: {duration_s: 5}}\npolicies: [least-work]\n"
                       "sweep: {grid: {workload.params.duration_s: [5, -1]}}\n")
    assert e.key.startswith("sweep (cell ") and "-1" in e.key and "duration_s must be" in str(e)
    e = _err(tmp_path, BASE.replace("least-work", "vertumnus") + "sweep: {grid: {vertumnus.beta: [3.0, 0.5]}}\n")
    assert e.key == "sweep.grid.vertumnus.beta[1]" and "beta must be a finite number >= 1" in str(e)
    e = _err(tmp_path, BASE + "policy_params: {vertumnus: {beta: 0.5}}\n")
    assert e.key == "policy_params.vertumnus.beta"
    e = _err(tmp_path, BASE + "sweep: {cells: [{policy: vertumnus, vertumnus.beta: 0.5}]}\n")
    assert e.key == "sweep.cells[0].vertumnus.beta"


def test_syntax_errors_name_file_line_and_column(tmp_path):
    e = _err(tmp_path, "name: s3\nworkload: {name: tool-agent\npolicies: [x]\n")
    assert str(e) == (f"{tmp_path / 'spec.yaml'}:3:9: not valid YAML: expected ',' or '}}', but got ':' "
                      "(while parsing a flow mapping); expected a YAML mapping")
    assert "<" not in str(e)
    e = _err(tmp_path, 'name = "x"\nworkload = {name = \n', name="spec.toml")
    assert str(e).startswith(f"{tmp_path / 'spec.toml'}:2:20: not valid TOML: ") and "(at line" not in str(e)
    e = _err(tmp_path, "- a\n- b\n")
    assert str(e).startswith(f"{tmp_path / 'spec.yaml'}: top level is ") and e.key is None


def test_a_repeated_yaml_key_names_file_line_and_column(tmp_path):
    # PyYAML keeps the last of two equal keys: the first 'sweep' block (4 cells) was silently dropped
    e = _err(tmp_path, BASE + "sweep: {grid: {cache_capacity_scale: [0.5, 1.0]}}\nseeds: [0, 1]\n"
                       "sweep: {grid: {max_batch_tokens: [8192]}}\n")
    assert str(e) == (f"{tmp_path / 'spec.yaml'}:7:1: key 'sweep' given twice in one mapping (first on line 5); "
                      "expected each key once")
    e = _err(tmp_path, "name: t\nworkload: {name: mixed-default, seed: 1, seed: 2}\npolicies: [least-work]\n")
    assert str(e).startswith(f"{tmp_path / 'spec.yaml'}:2:42: key 'seed' given twice")
    # a YAML merge key is an override on purpose, not a repetition
    spec = load_spec(write_spec(tmp_path, "workload: {<<: {name: mixed-default, seed: 1}, seed: 2}\npolicies: [least-work]\n"))
    assert spec.workload.seed == 2


def test_a_parameter_of_a_policy_no_cell_runs_is_an_error(tmp_path):
    # the grid axis over vertumnus-router.beta was silently one cell of least-work
    e = _err(tmp_path, BASE + "sweep: {grid: {vertumnus-router.beta: [1, 2]}}\n")
    assert e.key == "sweep.grid.vertumnus-router.beta" and "not run by any cell (policies: least-work)" in e.problem
    e = _err(tmp_path, BASE + "policy_params: {vertumnus-router: {beta: 2}}\n")
    assert e.key == "policy_params.vertumnus-router" and "add it to 'policies'" in e.expected
    # a listed cell that runs the policy uses it
    spec = load_spec(write_spec(tmp_path, BASE + "sweep: {cells: [{policy: vertumnus-router, vertumnus-router.beta: 2}]}\n"))
    assert [(c.policy, c.policy_params) for c in spec.resolve()] == [("vertumnus-router", (("beta", 2),))]


def test_a_value_twice_on_one_axis_or_a_cell_listed_twice_is_an_error(tmp_path):
    # they were merged into one cell without a word, while repeated seeds and policies are errors
    e = _err(tmp_path, BASE + "rates: [20, 40, 20.0]\n")
    assert e.key == "rates[2]" and "given twice (first at [0])" in e.problem
    e = _err(tmp_path, BASE.replace("least-work", "vertumnus") + "sweep: {grid: {vertumnus.beta: [1, 2, 2]}}\n")
    assert e.key == "sweep.grid.vertumnus.beta[2]" and e.expected == "distinct values on one axis"
    e = _err(tmp_path, BASE.replace("least-work", "vertumnus")
             + "sweep: {cells: [{vertumnus.beta: 2}, {vertumnus.beta: 3}, {vertumnus.beta: 2}]}\n")
    assert e.key == "sweep.cells[2]" and "sweep.cells[0]" in e.problem


def test_unknown_policy_and_workload(tmp_path):
    e = _err(tmp_path, "workload: {name: mixed-default}\npolicies: [least-work, nope]\n")
    assert e.key == "policies[1]" and "least-work" in e.expected
    e = _err(tmp_path, "workload: {name: nope}\npolicies: [least-work]\n")
    assert e.key == "workload.name" and "mixed-default" in e.expected


def test_undeclared_policy_parameter_is_a_spec_error(tmp_path):
    e = _err(tmp_path, BASE + "sweep: {grid: {least-work.beta: [1, 2]}}\n")
    assert e.key.endswith("least-work.beta") and "least-work" in e.problem and "beta" in e.problem
    e = _err(tmp_path, BASE.replace("least-work", "vertumnus") + "sweep: {grid: {vertumnus.gamma: [1, 2]}}\n")
    assert "beta" in e.expected and "lambda" in e.expected


def test_nested_settings_and_mapping_values_of_a_policy_parameter_are_spec_errors(tmp_path):
    # was a traceback from inside ControllerConfig ('dict' object has no attribute 'source')
    adaptive = BASE.replace("least-work", "vertumnus-adaptive")
    e = _err(tmp_path, adaptive + "sweep: {cells: [{vertumnus-adaptive.profile: {duration_s: 10}}]}\n")
    assert e.key.endswith("vertumnus-adaptive.profile") and "nested settings object (ProfileConfig)" in e.problem
    # the look-ahead's settings are flat parameters: the error lists them
    e = _err(tmp_path, adaptive + "sweep: {cells: [{vertumnus-adaptive.lookahead: {source: histogram}}]}\n")
    assert e.key.endswith("vertumnus-adaptive.lookahead") and "lookahead.source" in e.expected
    e = _err(tmp_path, adaptive + "sweep: {grid: {vertumnus-adaptive.target_sample: [{a: 1}]}}\n")
    assert "got a mapping" in e.problem and "vertumnus-adaptive.target_sample" in e.expected


def test_lookahead_settings_are_flat_policy_parameters(tmp_path):
    from baselines.registry import get_policy

    spec = get_policy("vertumnus-adaptive").with_params(**{"lookahead.duration_s": 120.0,
                                                            "lookahead.stationary_duration_s": 120.0})
    la = spec.make_attachments()[0].config.lookahead
    assert (la.duration_s, la.stationary_duration_s, la.num_replications) == (120.0, 120.0, 3)
    # the LookaheadConfig's own validation names the field
    with pytest.raises(ValueError, match="lookahead.stationary_duration_s must be finite and >= duration_s"):
        get_policy("vertumnus-adaptive").with_params(**{"lookahead.duration_s": 120.0})
    e = _err(tmp_path, BASE.replace("least-work", "vertumnus-adaptive")
             + "sweep: {grid: {vertumnus-adaptive.lookahead.num_replications: [0]}}\n")
    assert "num_replications" in str(e)


def test_missing_trace_and_seed_axis(tmp_path):
    e = _err(tmp_path, "workload: {trace: nothere.jsonl}\npolicies: [least-work]\n")
    assert e.key == "workload.trace" and "existing file" in e.expected
    e = _err(tmp_path, BASE + "sweep: {grid: {seed: [1, 2]}}\n")
    assert "seeds" in e.expected


def test_listed_cells_and_policy_override(tmp_path):
    p = write_spec(tmp_path, BASE.replace("[least-work]", "[least-work, round-robin]") + """
seeds: [3]
sweep:
  grid: {cache_capacity_scale: [0.5, 1.0]}
  cells:
    - {slo.slo_scale: 2.0}
    - {slo.slo_scale: 4.0, policy: round-robin}
""")
    cells = load_spec(p).resolve()
    assert len(cells) == 2 * 2 + 2 * 1
    assert {(c.config.slo.slo_scale, c.policy) for c in cells} == {(2.0, "least-work"), (2.0, "round-robin"),
                                                                   (4.0, "round-robin")}
    assert {c.config.cache_capacity_scale for c in cells} == {0.5, 1.0}
    assert all(dict(c.axes)["seed"] == 3 and c.config.seed == 3 for c in cells)
    # a listed cell may not override a grid axis
    e = _err(tmp_path, BASE + "sweep: {grid: {cache_capacity_scale: [1.0]}, cells: [{cache_capacity_scale: 2.0}]}\n", "b.yaml")
    assert "grid" in e.problem


def test_toml_spec_and_trace_paths(tmp_path):
    from envs.workloads import default_traces_dir

    if not (default_traces_dir() / "synthetic_trace.jsonl").is_file():
        pytest.skip("shared traces not available")
    p = write_spec(tmp_path, """
name = "t"
policies = ["least-work"]
seeds = [0]
[workload]
trace = "@traces/synthetic_trace.jsonl"
arrival_window_s = [0.0, 60.0]
[sweep.grid]
"prediction_error.bias" = [1.0, 1.2]
""", "spec.toml")
    cells = load_spec(p).resolve()
    assert len(cells) == 2 and cells[0].workload.trace.endswith("synthetic_trace.jsonl")
    assert [c.config.prediction_error.bias for c in cells] == [1.0, 1.2]


@pytest.mark.slow
def test_example_specs_validate():
    from pathlib import Path

    from baselines.registry import POLICIES

    root = Path(__file__).resolve().parents[2] / "experiments"
    specs = sorted((root / "specs").glob("*.yaml")) + sorted((root / "paper").glob("*.yaml"))
    assert specs
    for p in specs:
        spec = load_spec(p)
        assert spec.num_cells >= 1 and all(c.policy in POLICIES for c in spec.resolve())


@pytest.mark.parametrize("body, key", [
    ("workload: {name: tool-agent, params: {durration_s: 20}}\npolicies: [least-work]\n", "workload.params.durration_s"),
    ("workload: {name: tool-agent, params: {duration_s: abc}}\npolicies: [least-work]\n", "workload.params.duration_s"),
    ("workload: {name: tool-agent}\ncalibration: bad.json\npolicies: [least-work]\n", "calibration"),
    ("workload: {trace: bad.jsonl}\npolicies: [least-work]\n", "workload.trace"),
])
def test_content_errors_fail_at_load_time(tmp_path, body, key):
    from experiments.spec import SpecError, load_spec

    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "bad.jsonl").write_text("")
    p = tmp_path / "spec.yaml"
    p.write_text("name: t\n" + body)
    with pytest.raises(SpecError) as e:
        load_spec(p)
    assert str(p) in str(e.value) and key in str(e.value)


def test_policy_parameter_rules_across_swept_parameters(tmp_path):
    # the manager's reclaim threshold must stay below its intra-degree threshold (default 0.3): 1.0 fails alone,
    # but every cell sweeps it with an intra-degree threshold above it, so the spec is valid
    head = "name: t\nworkload: {name: mixed-default}\npolicies: [vertumnus-global-cache]\n"
    ok = write_spec(tmp_path, head + "sweep: {grid: {vertumnus-global-cache.cache_intra_degree_threshold: [2.0, 8.0], "
                                     "vertumnus-global-cache.cache_reclaim_threshold: [0.25, 1.0]}}\n", "ok.yaml")
    assert load_spec(ok).num_cells == 4
    # a value no cell can use is still reported at its own key
    e = _err(tmp_path, head + "sweep: {grid: {vertumnus-global-cache.cache_intra_degree_threshold: [2.0], "
                              "vertumnus-global-cache.cache_reclaim_threshold: [0.25, 9.0]}}\n")
    assert e.key == "sweep.grid.vertumnus-global-cache.cache_reclaim_threshold[1]" and "reclaim_threshold" in e.problem
    # a combination that breaks the rule is reported at its cell
    e = _err(tmp_path, head + "sweep: {grid: {vertumnus-global-cache.cache_intra_degree_threshold: [0.5, 2.0], "
                              "vertumnus-global-cache.cache_reclaim_threshold: [1.0]}}\n")
    assert e.key.startswith("sweep (cell") and "reclaim_threshold" in e.problem


GOOD_LINE = '{"timestamp": 0, "input_length": 100, "output_length": 10, "hash_ids": [1]}\n'
BAD_LINE = '{"timestamp": 5, "input_length": -100, "output_length": 10, "hash_ids": [2]}\n'


def test_a_trace_with_invalid_lines_fails_at_load_time_unless_skip_invalid(tmp_path, recwarn):
    # it used to pass --dry-run (with a warning saying "skip_invalid=True") and fail every cell at run time
    (tmp_path / "t.jsonl").write_text(GOOD_LINE + BAD_LINE)
    p = tmp_path / "spec.yaml"
    p.write_text("name: t\nworkload: {trace: t.jsonl}\npolicies: [least-work]\n")
    with pytest.raises(SpecError, match=r"workload\.trace: .*t\.jsonl, line 2, field 'input_length': got -100; .*"
                                         r"expected a trace without invalid lines, or workload\.skip_invalid: true"):
        load_spec(p)
    p.write_text("name: t\nworkload: {trace: t.jsonl, skip_invalid: true}\npolicies: [least-work]\n")
    assert load_spec(p).num_cells == 1
    assert not [w for w in recwarn if "skip_invalid=True" in str(w.message)]  # loading the spec warns of nothing


def test_a_swept_trace_with_invalid_lines_names_the_cell(tmp_path):
    (tmp_path / "good.jsonl").write_text(GOOD_LINE)
    (tmp_path / "bad.jsonl").write_text(GOOD_LINE + BAD_LINE)
    p = tmp_path / "spec.yaml"
    p.write_text("name: t\nworkload: {trace: good.jsonl}\npolicies: [least-work]\n"
                 "sweep: {grid: {workload.trace: [good.jsonl, bad.jsonl]}}\n")
    with pytest.raises(SpecError, match=r"sweep \(cell .*bad\.jsonl.*\): .*line 2"):
        load_spec(p)


def test_workload_params_with_a_trace_fail_at_load_time(tmp_path):
    # they used to pass --dry-run and fail every cell at run time (WorkloadSource refuses them)
    (tmp_path / "t.jsonl").write_text(GOOD_LINE)
    e = _err(tmp_path, "name: t\nworkload: {trace: t.jsonl, params: {duration_s: 3}}\npolicies: [least-work]\n")
    assert e.key == "workload" and "params ['duration_s'] override a named workload" in e.problem
    e = _err(tmp_path, "name: t\nworkload: {trace: t.jsonl}\npolicies: [least-work]\n"
                       "sweep: {grid: {workload.params.duration_s: [3, 4]}}\n")
    assert e.key == "sweep.grid" and "not a trace" in e.problem


def test_a_pool_of_another_size_with_its_composition_loads(tmp_path):
    """``sim.pool: {num_gpus: 8, composition: ...}`` was applied one leaf at a time, so the 8-GPU
    pool was first checked against the default 40-GPU composition and no order of the keys loaded;
    the same for a cell or grid that changes both."""
    pool = "sim: {pool: {num_gpus: 8, composition: 'cp4x1,cp2x2', supported_degrees: [2, 4]}}\n"
    cells = load_spec(write_spec(tmp_path, BASE + pool, "a.yaml")).resolve()
    assert {(c.config.pool.num_gpus, c.config.pool.composition) for c in cells} == {(8, "cp4x1,cp2x2")}
    listed = "sweep: {cells: [{pool.num_gpus: 16, pool.composition: cp4x4}, {pool.composition: cp2x4}]}\n"
    cells = load_spec(write_spec(tmp_path, BASE + pool + listed, "b.yaml")).resolve()
    assert [(c.config.pool.num_gpus, c.config.pool.composition) for c in cells] == [(16, "cp4x4"), (8, "cp2x4")]
    e = _err(tmp_path, BASE + "sim: {pool: {num_gpus: 8, composition: cp4x4}}\n")  # invalid together: both keys named
    assert e.key == "sim.pool.num_gpus + sim.pool.composition"
    assert "composition 'cp4x4' uses 16 GPUs but the pool has 8" in str(e)
    e = _err(tmp_path, BASE + pool + "sweep: {grid: {pool.composition: [cp2x4, cp4x4]}}\n")
    assert e.key == "sweep.grid.pool.composition" and "uses 16 GPUs but the pool has 8" in str(e)


def test_a_policy_setting_the_cells_pool_cannot_run_fails_at_load_time(tmp_path):
    """A controller's target_degrees outside the pool's degrees (or a baseline whose own pool does
    not fit) passed --dry-run and failed each cell at run time."""
    pool = "sim: {pool: {num_gpus: 8, composition: 'cp4x1,cp2x2', supported_degrees: [2, 4]}}\n"
    spec = ("name: t\nworkload: {name: tool-agent}\npolicies: [vertumnus-adaptive]\n"
            "policy_params: {vertumnus-adaptive: {decision: target}}\n" + pool)
    e = _err(tmp_path, spec + "sweep: {grid: {vertumnus-adaptive.target_degrees: [[2, 4], [8]]}}\n")
    assert e.key == "sweep (cell {'vertumnus-adaptive.target_degrees': (8,), 'policy': 'vertumnus-adaptive'})"
    assert "controller.target_degrees [8]: degree(s) [8] not in the pool's supported_degrees [2, 4]" in str(e)
    e = _err(tmp_path, "name: t\nworkload: {name: tool-agent}\npolicies: [homogeneous-cp4]\n"
                       "sim: {pool: {num_gpus: 6, composition: 'cp2x3', supported_degrees: [2, 4]}}\n")
    assert "policy 'homogeneous-cp4' runs on its own pool" in str(e)
    load_spec(write_spec(tmp_path, spec + "sweep: {grid: {vertumnus-adaptive.target_degrees: [[2, 4], [4]]}}\n"))


def test_a_folder_given_as_the_spec_or_a_trace_is_named_as_a_folder(tmp_path):
    # both said "does not exist" for a folder that exists
    with pytest.raises(FileNotFoundError, match="is a folder; expected a .yaml/.yml/.toml spec file"):
        load_spec(tmp_path)
    (tmp_path / "traces").mkdir()
    e = _err(tmp_path, "name: t\nworkload: {trace: traces}\npolicies: [least-work]\n")
    assert e.key == "workload.trace" and "is a folder" in str(e)


def test_a_list_valued_static_policy_parameter_loads_as_a_tuple(tmp_path):
    # policy_params: {vertumnus-adaptive: {target_degrees: [2, 4]}} was a TypeError traceback
    # (unhashable type: 'list'); only grid axes were made tuples
    spec = load_spec(write_spec(tmp_path, "name: t\nworkload: {name: tool-agent}\npolicies: [vertumnus-adaptive]\n"
                                          "policy_params: {vertumnus-adaptive: {decision: target, target_degrees: [2, 4]}}\n"))
    (cell,) = spec.resolve()
    assert dict(cell.policy_params) == {"decision": "target", "target_degrees": (2, 4)}


def test_exponent_numbers_are_numbers(tmp_path):
    """`rates: [2e1]` (a number in YAML 1.2, JSON and TOML) was the string '2e1' to PyYAML's
    safe_load and failed as "rates[0]: got str '2e1'; expected a number"."""
    text = ("name: t\nworkload: {name: mixed-default, params: {duration_s: 6e1}}\npolicies: [least-work]\n"
            "rates: [2e1, 4.0e+1]\n")
    cells = load_spec(write_spec(tmp_path, text)).resolve()
    assert {c.workload.target_rps for c in cells} == {20.0, 40.0}
    assert dict(cells[0].workload.params)["duration_s"] == 60.0


@pytest.mark.parametrize("text, where", [
    ("name: v\nworkload: {name: mixed-default, colour: red}\npolicies: [least-work]\n", "2: workload.colour: unknown key"),
    ("name: v\nworkload: {name: mixed-default}\npolicies:\n  - least-work\n  - nope\n", "5: policies[1]: unknown policy"),
    ("name: v\nworkload: {name: mixed-default}\npolicies: [least-work]\nrates: [10, -2]\n", "4: rates[1]: workload."),
    ("name: v\nworkload: {name: mixed-default}\npolicies: [least-work]\nsweep:\n  grid:\n    slo.slo_scale: 3\n",
     "6: sweep.grid.slo.slo_scale: got int 3"),
    ("name: v\nworkload: {name: mixed-default}\npolicies: [least-work]\nsweep:\n  grid:\n    pool.num_gpus:\n"
     "      - 8\n      - x\n", "8: sweep.grid.pool.num_gpus[1]: got str 'x'"),
    ("name: v\nworkload: {name: mixed-default}\nsim:\n  slo:\n    slo_scale: -1\npolicies: [least-work]\n",
     "5: sim.slo.slo_scale:"),
])
def test_a_yaml_spec_error_names_the_line_of_its_key(tmp_path, text, where):
    """Errors of a key's value named the file and the key but no line (only syntax errors had one)."""
    p = tmp_path / "spec.yaml"
    p.write_text(text)
    with pytest.raises(SpecError) as info:
        load_spec(p)
    assert str(info.value).startswith(f"{p}:{where}"), str(info.value)
