"""The tuned heuristic controller (``experiments.tune_controller``): selection from a sweep folder,
the tuned file's validation, and ``vertumnus-adaptive-tuned`` in ``cpgym evaluate --kind reconfig``."""

from __future__ import annotations

import json

import pytest

from baselines.tuned_controller import TUNED_LABEL, load_tuned_controller, tuned_controller_spec
from experiments.tune_controller import main, select_controller_setting


def _write_run(root, name, seed, params, mean_ttft_s, policy="vertumnus-adaptive"):
    d = root / name
    d.mkdir()
    (d / "cell.json").write_text(json.dumps({"key": name, "policy": policy, "seed": seed, "policy_params": params,
                                             "workload": {"name": "matched-phases"}}))
    (d / "summary.json").write_text(json.dumps({"mean_ttft_s": mean_ttft_s, "p90_ttft_s": 2 * mean_ttft_s,
                                                "slo_attainment_token_weighted": 0.99}))


@pytest.fixture
def sweep_dir(tmp_path):
    # default margin 0.05: 0.6 / 0.4; margin 0.2: 0.45 / 0.36 (lower on both seeds)
    _write_run(tmp_path, "a0", 0, {"target_margin": 0.05}, 0.6)
    _write_run(tmp_path, "a1", 1, {"target_margin": 0.05}, 0.4)
    _write_run(tmp_path, "b0", 0, {"target_margin": 0.2}, 0.45)
    _write_run(tmp_path, "b1", 1, {"target_margin": 0.2}, 0.36)
    return tmp_path


def test_selects_the_setting_with_the_lowest_mean_ttft_and_reports_paired_deltas(sweep_dir):
    doc = select_controller_setting(sweep_dir)
    assert doc["params"] == {"target_margin": 0.2}
    assert doc["seeds"] == [0, 1] and doc["workload"] == "matched-phases" and doc["heuristic"] == "vertumnus-adaptive"
    rows = {r["params"]["target_margin"]: r for r in doc["grid"]}
    assert rows[0.2]["mean_ttft_s"] == pytest.approx(0.405)
    assert rows[0.05]["delta_mean_ttft_pct_vs_default"] == pytest.approx(0.0)
    assert rows[0.2]["delta_mean_ttft_pct_vs_default"] == pytest.approx((-25.0 - 10.0) / 2)


def test_settings_on_different_seeds_are_refused(sweep_dir):
    _write_run(sweep_dir, "b2", 2, {"target_margin": 0.2}, 0.3)
    with pytest.raises(ValueError, match="different seeds"):
        select_controller_setting(sweep_dir)


def test_a_swept_parameter_that_is_not_a_controller_field_is_refused(tmp_path):
    _write_run(tmp_path, "a0", 0, {"beta_typo": 3.0}, 0.6)
    with pytest.raises(ValueError, match="beta_typo"):
        select_controller_setting(tmp_path)


def test_cli_writes_the_tuned_file_that_evaluation_loads(sweep_dir, tmp_path, capsys):
    out = tmp_path / "tuned" / "controller.json"
    assert main([str(sweep_dir), "--out", str(out)]) == 0
    assert "selected" in capsys.readouterr().out
    assert load_tuned_controller(out) == {"target_margin": 0.2}
    spec = tuned_controller_spec(out)
    assert spec.name == TUNED_LABEL
    (controller,) = spec.make_attachments()
    assert controller.config.target_margin == 0.2


@pytest.mark.parametrize("content, match", [
    (None, "no such file"),
    ("{not json", "not JSON"),
    (json.dumps({"heuristic": "vertumnus", "params": {}}), "heuristic"),
    (json.dumps({"heuristic": "vertumnus-adaptive", "params": {"no_such_field": 1}}), "params.no_such_field"),
])
def test_bad_tuned_files_name_the_file_and_what_was_expected(tmp_path, content, match):
    f = tmp_path / "tuned.json"
    if content is not None:
        f.write_text(content)
    with pytest.raises(ValueError, match=match):
        load_tuned_controller(f)


def test_out_of_range_tuned_value_names_the_file(tmp_path):
    f = tmp_path / "tuned.json"
    f.write_text(json.dumps({"heuristic": "vertumnus-adaptive", "params": {"target_margin": 0.9}}))
    with pytest.raises(ValueError, match="tuned.json: params"):
        tuned_controller_spec(f)


def test_list_valued_settings_group_and_the_default_tuple_is_recognised(tmp_path):
    # target_horizons_s is a tuple in ControllerConfig and a JSON list in cell.json
    for seed, (a, b) in enumerate([(0.5, 0.4), (0.3, 0.35)]):
        _write_run(tmp_path, f"d{seed}", seed, {"target_horizons_s": [20.0, 40.0]}, a)
        _write_run(tmp_path, f"z{seed}", seed, {"target_horizons_s": [0.0]}, b)
    doc = select_controller_setting(tmp_path)
    assert doc["params"] == {"target_horizons_s": [0.0]}
    rows = {tuple(r["params"]["target_horizons_s"]): r for r in doc["grid"]}
    assert rows[(20.0, 40.0)]["delta_mean_ttft_pct_vs_default"] == 0.0
    assert tuned_controller_spec_from(doc, tmp_path).make_attachments()[0].config.target_horizons_s == (0.0,)


def tuned_controller_spec_from(doc, folder):
    f = folder / "tuned.json"
    f.write_text(json.dumps(doc))
    return tuned_controller_spec(f)


def test_rounds_of_a_coordinate_search_pool_into_one_grid(sweep_dir, tmp_path):
    # round 2 fixes target_margin 0.2 and varies k_windows; its k_windows=2 runs (the default) are
    # the same setting as round 1's margin-0.2 runs
    round2 = tmp_path / "round2"
    round2.mkdir()
    _write_run(round2, "c0", 0, {"target_margin": 0.2, "k_windows": 2}, 0.45)
    _write_run(round2, "c1", 1, {"target_margin": 0.2, "k_windows": 2}, 0.36)
    _write_run(round2, "d0", 0, {"target_margin": 0.2, "k_windows": 3}, 0.40)
    _write_run(round2, "d1", 1, {"target_margin": 0.2, "k_windows": 3}, 0.35)
    doc = select_controller_setting([sweep_dir, round2])
    assert len(doc["grid"]) == 3 and doc["params"] == {"k_windows": 3, "target_margin": 0.2}
    assert main([str(sweep_dir), str(round2), "--out", str(tmp_path / "t.json")]) == 0
    assert load_tuned_controller(tmp_path / "t.json") == {"k_windows": 3, "target_margin": 0.2}


@pytest.mark.parametrize("cell, summary, message", [
    ('{"key": "x", "policy": "vertumnus-adaptive", "seed": 0, "policy_params": {"target_margin": 0.5}}',
     '{"p90_ttft_s": 1.0, "slo_attainment_token_weighted": 1.0}',
     r"x/summary.json: mean_ttft_s is missing; expected a number"),  # was read as 0 s: the selected setting
    ('{"key": "x", "policy": "vertumnus-adaptive", "seed": 0}', '{"mean_ttft_s": null}',
     r"x/summary.json: mean_ttft_s is None"),
    ('{not json', None, r"x/cell.json: not a readable JSON cell document"),  # was skipped: the setting silently dropped
    ('[1]', None, r"x/cell.json: expected a JSON object with a \"key\""),
    ('{"key": "x", "seed": 0}', None, r"x/cell.json: expected \"policy\" \(a string\), \"seed\" \(an integer\)"),
    ('{"key": "x", "policy": "vertumnus-adaptive", "seed": "0"}', None, r"x/cell.json: expected \"policy\""),
    ('{"key": "x", "policy": "vertumnus-adaptive", "seed": 0, "policy_params": [1]}', None, r"x/cell.json: expected"),
])
def test_a_malformed_cell_is_one_line_naming_its_file(sweep_dir, tmp_path, capsys, cell, summary, message):
    import re

    d = sweep_dir / "x"
    d.mkdir()
    (d / "cell.json").write_text(cell)
    (d / "summary.json").write_text(summary or '{"mean_ttft_s": 0.1, "p90_ttft_s": 0.2, "slo_attainment_token_weighted": 1}')
    assert main([str(sweep_dir), "--out", str(tmp_path / "t.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m experiments.tune_controller: error: ") and len(err.splitlines()) == 1, err
    assert re.search(message, err), err
    assert not (tmp_path / "t.json").exists()


def test_an_empty_folder_is_one_line(tmp_path, capsys):
    assert main([str(tmp_path), "--out", str(tmp_path / "t.json")]) == 2
    assert capsys.readouterr().err == (f"python -m experiments.tune_controller: error: {tmp_path}: no finished sweep cell "
                                       "(no */cell.json); run `cpgym sweep` first\n")


def test_a_setting_whose_runs_finished_nothing_is_never_selected(tmp_path):
    # a NaN mean TTFT (no request finished) sorted first was kept by min() as the best setting
    for seed in (0, 1):
        _write_run(tmp_path, f"a{seed}", seed, {"k_windows": 1}, float("nan"))
        _write_run(tmp_path, f"b{seed}", seed, {"k_windows": 3}, 0.5)
    assert select_controller_setting(tmp_path)["params"] == {"k_windows": 3}


def test_lookahead_parameters_are_tunable(tmp_path):
    # vertumnus-adaptive's look-ahead settings are flat parameters (lookahead.<field>); the
    # selection fills their defaults and the tuned file builds the policy with them
    from baselines.tuned_controller import default_params, tunable_params, tuned_controller_spec

    assert "lookahead.duration_s" in tunable_params() and "lookahead" not in tunable_params()
    assert default_params(["lookahead.duration_s", "target_margin"]) == {"lookahead.duration_s": 60.0,
                                                                           "target_margin": 0.05}
    f = tmp_path / "tuned.json"
    f.write_text(json.dumps({"heuristic": "vertumnus-adaptive",
                             "params": {"lookahead.duration_s": 120.0, "lookahead.stationary_duration_s": 120.0}}))
    la = tuned_controller_spec(f).make_attachments()[0].config.lookahead
    assert (la.duration_s, la.stationary_duration_s) == (120.0, 120.0)
