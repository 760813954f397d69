"""`cpgym evaluate` input checks: checkpoint kind vs --kind before loading, and --from-csv."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from experiments.cli import main
from tests.factories import tiny_trace

CKPT = Path(__file__).resolve().parents[2] / "policies" / "checkpoints"


@pytest.fixture
def no_model_loading(monkeypatch):
    import policies.common.checkpoint as checkpoint
    import policies.reconfig.evaluate as evaluate_reconfig

    def fail(*a, **k):
        raise AssertionError("loaded a model before checking the checkpoint's kind")

    for module in (checkpoint, evaluate_reconfig):
        monkeypatch.setattr(module, "load_model_zip", fail)


@pytest.mark.parametrize("ckpt, kind, trained", [("routing_conversation_residual", "reconfig", "routing"),
                                                 ("reconfig_target", "routing", "reconfig")])
def test_checkpoint_of_the_other_kind_is_one_line(ckpt, kind, trained, capsys, no_model_loading):
    path = str(CKPT / ckpt)
    assert main(["evaluate", "--policy", path, "--kind", kind, "--seeds", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err == (f"cpgym evaluate: error: --policy {path} is a {trained} checkpoint (train_config.json kind "
                   f"'{trained}'), not a {kind} one; evaluate it with --kind {trained} (or --kind auto)\n")


def test_run_evaluation_checks_the_checkpoint_kind(no_model_loading):
    from envs.sim import SimConfig
    from policies.evaluate import EvaluationConfig, run_evaluation

    cfg = EvaluationConfig(policy=str(CKPT / "routing_conversation_residual"), kind="reconfig", seeds=(1,))
    with pytest.raises(ValueError, match="is a routing checkpoint"):
        run_evaluation(cfg, SimConfig())


def _rows_csv(tmp_path) -> Path:
    rows = [{"policy": p, "seed": s, "window": 0, "window_name": "w", "num_requests": 10, "wall_s": 0.1,
             "mean_ttft_s": t + s, "p90_ttft_s": 2 * t, "slo_attainment_token_weighted": 0.5, "prefix_hit_rate": 0.3,
             "num_unfinished": 0} for p, t in (("least-work", 1.0), ("round-robin", 2.0)) for s in (7, 9)]
    path = tmp_path / "rows.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_from_csv_needs_no_policy_and_titles_the_csv_seeds(tmp_path, capsys):
    path = _rows_csv(tmp_path)
    assert main(["evaluate", "--from-csv", str(path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "seeds [7, 9]" in out and "seeds [1, 2, 3]" not in out
    assert "least-work" in out and "round-robin" in out


def test_from_csv_warns_when_policies_have_different_episodes(tmp_path, capsys):
    path = _rows_csv(tmp_path)
    assert main(["evaluate", "--from-csv", str(path)]) == 0
    assert "different episodes" not in capsys.readouterr().err  # every policy on seeds 7, 9
    df = pd.read_csv(path)
    df[~((df["policy"] == "round-robin") & (df["seed"] == 9))].to_csv(path, index=False)
    assert main(["evaluate", "--from-csv", str(path), "--reference", "least-work"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "policies were evaluated on different episodes: round-robin lacks (seed, window) episodes (9, 0)" in err


def test_uneven_episodes_of_a_reconfig_evaluation_name_the_missing_seeds():
    from policies.episode_rows import uneven_episodes

    rows = [{"policy": p, "seed": s} for p in ("a", "b") for s in range(8)]
    assert uneven_episodes(rows, "reconfig") is None
    rows = [r for r in rows if not (r["policy"] == "b" and r["seed"] != 0)]
    assert "b lacks seeds 1, 2, 3, 4, 5 and 2 more" in uneven_episodes(rows, "reconfig")


@pytest.mark.parametrize("extra, message", [(["--policy", "shipped"], "--policy does not apply with --from-csv"),
                                            (["--seeds", "1"], "--seeds does not apply with --from-csv")])
def test_from_csv_rejects_flags_that_choose_what_runs(tmp_path, capsys, extra, message):
    assert main(["evaluate", "--from-csv", str(_rows_csv(tmp_path)), *extra]) == 2
    assert capsys.readouterr().err.startswith(f"cpgym evaluate: error: {message}")


def test_from_csv_with_wrong_columns_names_file_and_column(tmp_path, capsys):
    path = tmp_path / "bad.csv"
    pd.DataFrame([{"name": "x", "seed": 1}]).to_csv(path, index=False)
    assert main(["evaluate", "--from-csv", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cpgym evaluate: error: {path}: missing column(s) policy, window, mean_ttft_s")
    assert len(err.splitlines()) == 1
    path.write_text("")
    assert main(["evaluate", "--from-csv", str(path)]) == 2
    assert f"{path}: not a per-episode CSV" in capsys.readouterr().err


@pytest.mark.parametrize("edit, message", [
    (lambda df: df.astype({"mean_ttft_s": object}).assign(mean_ttft_s=["1.0", "abc", "2", "3"]),
     "row 2, field 'mean_ttft_s': got 'abc'; expected a finite number >= 0"),
    (lambda df: df.astype({"seed": float}).assign(seed=[7, 9, 7.5, 9]), "row 3, field 'seed': got 7.5; expected an integer"),
    (lambda df: pd.concat([df, df.iloc[[1]]]),
     "row 5: a second row of the episode (policy 'least-work', seed 9, window 0); expected one row per episode"),
])
def test_from_csv_with_a_bad_value_or_a_repeated_episode_is_one_line(tmp_path, capsys, edit, message):
    # a non-number was a bare "could not convert string to float"; a repeated episode counted twice
    path = _rows_csv(tmp_path)
    edit(pd.read_csv(path)).to_csv(path, index=False)
    assert main(["evaluate", "--from-csv", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cpgym evaluate: error: {path}, {message}") and len(err.splitlines()) == 1, err


def _set(col, value, row=1):
    def edit(df):
        df = df.astype({col: object})
        df.loc[row, col] = value
        return df
    return edit


@pytest.mark.parametrize("edit, message", [
    # nan was read as a missing value and dropped (the table then paired the policies over different episodes);
    # the others were averaged into the table (a negative mean TTFT in the JSON)
    (_set("mean_ttft_s", "nan"), "row 2, field 'mean_ttft_s': got 'nan'; expected a finite number >= 0"),
    (_set("mean_ttft_s", "NA"), "row 2, field 'mean_ttft_s': got 'NA'; expected a finite number >= 0"),
    (_set("mean_ttft_s", -5), "row 2, field 'mean_ttft_s': got -5.0; expected a finite number >= 0"),
    (_set("p90_ttft_s", "inf", row=3), "row 4, field 'p90_ttft_s': got inf; expected a finite number >= 0"),
    (_set("slo_attainment_token_weighted", 1.5), "row 2, field 'slo_attainment_token_weighted': got 1.5; expected a share "
                                                 "in [0, 1]"),
    (_set("prefix_hit_rate", -0.1), "row 2, field 'prefix_hit_rate': got -0.1; expected a share in [0, 1]"),
    (_set("num_unfinished", -1), "row 2, field 'num_unfinished': got -1; expected a count (an integer >= 0)"),
    (_set("num_unfinished", 0.5), "row 2, field 'num_unfinished': got 0.5; expected a count (an integer >= 0)"),
    (_set("seed", -7), "row 2, field 'seed': got -7; expected an integer >= 0"),
])
def test_from_csv_with_a_value_out_of_its_range_is_one_line(tmp_path, capsys, edit, message):
    path = _rows_csv(tmp_path)
    edit(pd.read_csv(path)).to_csv(path, index=False)
    assert main(["evaluate", "--from-csv", str(path), "--format", "json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cpgym evaluate: error: {path}, {message}") and len(err.splitlines()) == 1, err


def test_from_csv_reads_an_empty_metric_cell_as_not_recorded(tmp_path, capsys):
    """``--out`` writes a metric an episode did not record (NaN) as an empty cell: read back, not an error."""
    import json
    import math

    from policies.episode_rows import read_episode_rows

    path = _rows_csv(tmp_path)
    _set("prefix_hit_rate", None)(pd.read_csv(path)).to_csv(path, index=False)
    _, rows = read_episode_rows(str(path))
    assert math.isnan(rows[1]["prefix_hit_rate"]) and rows[0]["prefix_hit_rate"] == 0.3
    assert main(["evaluate", "--from-csv", str(path), "--format", "json"]) == 0
    json.loads(capsys.readouterr().out)


def test_policy_is_required_when_something_runs(capsys):
    assert main(["evaluate", "--seeds", "1"]) == 2
    assert "--policy is required" in capsys.readouterr().err


@pytest.mark.parametrize("content, message", [
    ("a,b\n1,2\n", r"not valid JSON \(line 1, column 1\)"),
    ('{"heuristic": "vertumnus"}', "no 'cells' object; expected the file written by `cpgym tune vertumnus --out`"),
    ('{"cells": {"conv@0.7": [3, 1]}}', "cell 'conv@0.7' is a list"),
    ('{"cells": {"conv@0.7": {"lambda": 1}}}', "cell 'conv@0.7', field 'beta': got None; expected a finite number >= 1"),
    ('{"cells": {"conv@0.7": {"beta": 0.5, "lambda": 1}}}', "field 'beta': got 0.5; expected a finite number >= 1"),
    ('{"cells": {"conv@0.7": {"beta": 3, "lambda": "1"}}}', "field 'lambda': got '1'; expected a finite number >= 0"),
    ('{"cells": {"conv@0.7": {"beta": 3, "lambda": NaN}}}', "field 'lambda': got nan; expected a finite number >= 0"),
])
def test_tuned_file_that_is_not_a_tune_output_is_one_line(tmp_path, capsys, monkeypatch, content, message):
    import re

    import policies.routing.protocol as protocol

    def no_run(*a, **k):
        raise AssertionError("built scenarios before reading --tuned")

    monkeypatch.setattr(protocol, "scenarios", no_run)
    bad = tmp_path / "tuned.json"
    bad.write_text(content)
    assert main(["evaluate", "--policy", "least-work", "--against", "vertumnus-tuned", "--protocol", "--target-rps", "6",
                 "--tuned", str(bad), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert re.fullmatch(rf"cpgym evaluate: error: {re.escape(str(bad))}: .*\n", err) and re.search(message, err), err


def test_an_existing_file_that_is_not_a_checkpoint_is_named(tmp_path, capsys):
    f = tmp_path / "notes.txt"
    f.write_text("x")
    assert main(["evaluate", "--policy", str(f), "--quiet"]) == 2  # was "unknown policy '...'; known policies: ..."
    assert capsys.readouterr().err == f"cpgym evaluate: error: {f}: not a checkpoint; expected a checkpoint folder " \
                                      "holding model.zip, a model .zip file, or 'shipped'\n"


def test_a_heuristic_as_the_reconfig_policy_is_one_line(capsys):
    """``--kind reconfig --policy vertumnus-adaptive`` was read as a checkpoint folder
    ("vertumnus-adaptive/train_config.json: No such file or directory")."""
    assert main(["evaluate", "--kind", "reconfig", "--policy", "vertumnus-adaptive", "--seeds", "1000", "--quiet"]) == 2
    assert capsys.readouterr().err == (
        "cpgym evaluate: error: evaluate: --policy vertumnus-adaptive is a heuristic; a reconfiguration evaluation takes "
        "a reconfiguration checkpoint ('shipped-reconfig' or a folder) or 'none', and compares heuristics with --against "
        "(e.g. --policy none --against vertumnus-adaptive)\n")


def test_a_fixed_composition_the_pool_rejects_is_named_before_any_run(capsys, monkeypatch):
    """``--against vertumnus-router,fixed:cp4x5`` on 8 GPUs ran vertumnus-router first, then failed
    with the pool's message alone."""
    import baselines.runner as runner

    monkeypatch.setattr(runner, "run_policy", lambda *a, **k: pytest.fail("ran before the fixed composition was checked"))
    assert main(["evaluate", "--kind", "reconfig", "--policy", "none", "--against", "vertumnus-router,fixed:cp4x5",
                 "--seeds", "1000", "--pool-gpus", "8", "--pool-composition", "cp4x1,cp2x2", "--supported-degrees", "2,4",
                 "--quiet"]) == 2
    assert capsys.readouterr().err == \
        "cpgym evaluate: error: --against fixed:cp4x5: composition 'cp4x5' uses 20 GPUs but the pool has 8\n"


def test_a_missing_joint_routing_checkpoint_is_named_before_any_run(capsys, monkeypatch):
    # it was loaded only when its turn came, after the learned controller's runs
    import policies.reconfig.evaluate as ev

    monkeypatch.setattr(ev, "LearnedReconfig", lambda *a, **k: pytest.fail("loaded before --against was checked"))
    assert main(["evaluate", "--kind", "reconfig", "--policy", "shipped-reconfig", "--against", "joint:/nonexistent/ckpt",
                 "--seeds", "1000", "--quiet"]) == 2
    assert capsys.readouterr().err == ("cpgym evaluate: error: --against joint:/nonexistent/ckpt: /nonexistent/ckpt: "
                                       "checkpoint path does not exist; expected a checkpoint folder holding model.zip, "
                                       "a model .zip file, or 'shipped'\n")


def test_a_reconfig_checkpoint_on_a_pool_of_another_size_is_one_line(capsys):
    """The 40-GPU target-menu checkpoint on 32 GPUs (25 compositions, 32 worker slots) failed as a
    numpy broadcasting traceback inside VecNormalize at its first action."""
    assert main(["evaluate", "--kind", "reconfig", "--policy", "shipped-reconfig", "--against", "vertumnus-router",
                 "--seeds", "1000", "--pool-gpus", "32", "--pool-composition", "cp4x4,cp2x8", "--horizon-s", "1",
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    from policies.common.checkpoint import SHIPPED_RECONFIG

    assert len(err.splitlines()) == 1 and f"{SHIPPED_RECONFIG.name}: the checkpoint observes targets (36, 5)" in err
    assert "36 actions, this pool (32 GPUs, CP degrees 1,2,4,8) gives targets (25, 5)" in err


def test_a_reconfig_checkpoint_whose_menu_the_pool_cannot_make_names_the_checkpoint(capsys, monkeypatch):
    import baselines.runner as runner

    monkeypatch.setattr(runner, "run_policy", lambda *a, **k: pytest.fail("ran before the checkpoint's menu was checked"))
    assert main(["evaluate", "--kind", "reconfig", "--policy", "shipped-reconfig", "--against", "vertumnus-router",
                 "--seeds", "1000", "--supported-degrees", "2,4", "--horizon-s", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    from policies.common.checkpoint import SHIPPED_RECONFIG

    assert err.endswith(f"{SHIPPED_RECONFIG.name}: the checkpoint's target menu does not fit this pool: "
                        "target_degrees [2, 4, 8]: expected a non-empty subset of the pool's supported degrees [2, 4]\n")
    assert len(err.splitlines()) == 1


def _junk_checkpoint(tmp_path, kind: str, junk: str = "model.zip") -> Path:
    """A checkpoint folder of ``kind`` (the shipped one's files) whose ``junk`` file is 4 junk bytes."""
    import shutil

    src = CKPT / ("reconfig_target" if kind == "reconfig" else "routing_conversation_residual")
    d = tmp_path / f"{kind}_ckpt"
    d.mkdir()
    for name in ("model.zip", "train_config.json", *(("vecnormalize.pkl",) if kind == "reconfig" else ())):
        shutil.copyfile(src / name, d / name)
    (d / junk).write_bytes(b"junk")
    return d


def _one_error_line(err: str, path: Path, what: str) -> None:
    assert err.startswith(f"cpgym evaluate: error: {path}: {what} (") and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("target", ["zip", "folder"])
def test_a_corrupt_routing_checkpoint_is_one_line_naming_the_file(tmp_path, capsys, target):
    # was SB3's "ValueError: Error: the file ... wasn't a zip-file" traceback
    path = tmp_path / "junk.zip" if target == "zip" else _junk_checkpoint(tmp_path, "routing")
    if target == "zip":
        path.write_bytes(b"junk")
    assert main(["evaluate", "--policy", str(path), "--windows", "0", "--quiet"]) == 2
    _one_error_line(capsys.readouterr().err, path if target == "zip" else path / "model.zip",
                    "not a readable SB3 checkpoint zip")


@pytest.mark.parametrize("junk, what", [("model.zip", "not a readable SB3 checkpoint zip"),
                                        ("vecnormalize.pkl", "not a readable VecNormalize pickle")])
def test_a_corrupt_reconfig_checkpoint_is_one_line_naming_the_file(tmp_path, capsys, junk, what):
    d = _junk_checkpoint(tmp_path, "reconfig", junk)
    assert main(["evaluate", "--policy", str(d), "--seeds", "1000", "--quiet"]) == 2
    _one_error_line(capsys.readouterr().err, d / junk, what)


def test_a_corrupt_joint_routing_checkpoint_fails_before_any_run(tmp_path, capsys, monkeypatch):
    # it was loaded at its turn, after the learned controller's run of the first seed, as a traceback
    import policies.reconfig.evaluate as ev

    monkeypatch.setattr(ev.LearnedReconfig, "run", lambda *a, **k: pytest.fail("ran before joint: was loaded"))
    d = _junk_checkpoint(tmp_path, "routing")
    assert main(["evaluate", "--kind", "reconfig", "--policy", "shipped-reconfig", "--against", f"joint:{d}",
                 "--seeds", "1000", "--quiet"]) == 2
    _one_error_line(capsys.readouterr().err, d / "model.zip", "not a readable SB3 checkpoint zip")


@pytest.mark.parametrize("junk, what", [("model.zip", "not a readable SB3 checkpoint zip"),
                                        ("vecnormalize.pkl", "not a readable VecNormalize pickle")])
def test_a_corrupt_init_from_fails_before_anything_is_written(tmp_path, capsys, junk, what):
    d = _junk_checkpoint(tmp_path, "reconfig", junk)
    assert main(["train", "reconfig", "--init-from", str(d / "model.zip"), "--out", str(tmp_path / "run"), "--quiet",
                 "--wandb", "disabled"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cpgym train: error: {d / junk}: {what} (") and len(err.splitlines()) == 1, err
    assert not (tmp_path / "run").exists()


def test_load_model_zip_names_a_zip_sb3_cannot_read(tmp_path):
    import zipfile

    from sb3_contrib import MaskablePPO

    from policies.common.checkpoint import load_model_zip

    for members in ({"notes.txt": "x"}, {"data": "{not json", "policy.pth": "x"}):
        path = tmp_path / "m.zip"
        with zipfile.ZipFile(path, "w") as z:
            for name, text in members.items():
                z.writestr(name, text)
        with pytest.raises(ValueError, match=rf"^{path}: not a readable SB3 checkpoint zip \(\w+: .*\); expected the "
                                             r"model.zip written by `cpgym train`$"):
            load_model_zip(MaskablePPO, path)


def test_a_reconfig_checkpoint_zip_path_loads_that_zip(tmp_path):
    """``--policy DIR/last_model.zip`` loaded ``DIR/model.zip`` (the best validated model) instead."""
    import os

    from policies.reconfig.evaluate import LearnedReconfig

    d = _junk_checkpoint(tmp_path, "reconfig", "model.zip")
    os.symlink(CKPT / "reconfig_target" / "model.zip", d / "last_model.zip")
    os.symlink(CKPT / "reconfig_target" / "vecnormalize.pkl", d / "last_vecnormalize.pkl")
    learned = LearnedReconfig(d / "last_model.zip")
    assert learned.vecnormalize is not None
    with pytest.raises(ValueError, match="model.zip: not a readable SB3 checkpoint zip"):
        LearnedReconfig(d)


@pytest.mark.parametrize("flags, message", [
    (["--seeds", "1,1", "--windows", "0"], "evaluate: seeds must be distinct integers >= 0, got [1, 1] (--seeds)"),
    (["--seeds", "1", "--windows", "0,0"], "--windows lists 0 twice: '0,0'; expected distinct values (each is one episode)"),
    (["--kind", "reconfig", "--policy", "none", "--against", "vertumnus-router", "--seeds", "1000,1001,1000"],
     "evaluate: seeds must be distinct integers >= 0, got [1000, 1001, 1000] (--seeds)"),
])
def test_a_repeated_seed_or_window_is_an_error_before_anything_runs(flags, message, capsys, monkeypatch):
    # each copy was counted as another episode: a zero-width, fake confidence interval
    import baselines.runner as runner

    monkeypatch.setattr(runner, "run_policy", lambda *a, **k: pytest.fail("ran an episode"))
    argv = ["evaluate", "--policy", "least-work", "--against", "round-robin", *flags, "--quiet"]
    if "reconfig" in flags:
        argv = ["evaluate", *flags, "--quiet"]
    assert main(argv) == 2
    assert capsys.readouterr().err == f"cpgym evaluate: error: {message}\n"


def test_library_evaluations_reject_a_repeated_seed_or_window():
    from envs.sim import SimConfig
    from policies.reconfig.evaluate import evaluate_reconfig
    from policies.routing.episodes import EpisodeSource
    from policies.routing.evaluate import evaluate

    with pytest.raises(ValueError, match=r"^seeds lists 1 twice: '1,2,1'"):
        evaluate(["least-work"], EpisodeSource(), SimConfig(), [1, 2, 1])
    with pytest.raises(ValueError, match=r"^window_indices lists 3 twice: '3,3'"):
        evaluate(["least-work"], EpisodeSource(), SimConfig(), [1], window_indices=[3, 3])
    with pytest.raises(ValueError, match=r"^seeds lists 5 twice"):
        evaluate_reconfig(None, ["vertumnus-router"], "phases", [5, 5], SimConfig())


def test_from_csv_of_a_reconfig_evaluation_checks_its_counts(tmp_path):
    from policies.episode_rows import read_episode_rows

    rows = [{"policy": p, "seed": s, "mean_ttft_s": 1.0, "p90_ttft_s": 2.0, "slo_attainment_token_weighted": 0.9,
             "num_operations": 3, "num_committed_operations": 2, "num_unfinished": 0}
            for p in ("learned", "vertumnus-adaptive") for s in (1000, 1001)]
    path = tmp_path / "reconfig.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    assert read_episode_rows(str(path))[0] == "reconfig"
    _set("num_committed_operations", -2, row=2)(pd.read_csv(path)).to_csv(path, index=False)
    with pytest.raises(ValueError, match=r"reconfig.csv, row 3, field 'num_committed_operations': got -2; expected a count"):
        read_episode_rows(str(path))


# --- reconfiguration evaluation: comparisons, held-out seeds and --from-csv rows (evalreview) ---

def _no_reconfig_runs(monkeypatch):
    import baselines.runner as runner
    import policies.reconfig.evaluate as ev

    def fail(*a, **k):
        raise AssertionError("ran or loaded before the input was checked")

    monkeypatch.setattr(runner, "run_policy", fail)
    monkeypatch.setattr(ev, "LearnedReconfig", fail)


def test_a_reconfig_checkpoint_as_the_joint_router_is_one_line(capsys, monkeypatch):
    """``--against joint:shipped-reconfig`` loaded the reconfiguration model as a router: a torch
    AttributeError traceback ('CombinedExtractor' object has no attribute 'w_div')."""
    _no_reconfig_runs(monkeypatch)
    assert main(["evaluate", "--kind", "reconfig", "--policy", "shipped-reconfig", "--against",
                 "vertumnus-router,joint:shipped-reconfig", "--seeds", "1000", "--quiet"]) == 2
    assert capsys.readouterr().err == (
        "cpgym evaluate: error: --against joint:shipped-reconfig: shipped-reconfig is a reconfig checkpoint "
        "(train_config.json kind 'reconfig'); joint: takes a routing checkpoint (e.g. joint:shipped), the controller "
        "is --policy\n")


@pytest.mark.parametrize("against, message", [
    ("fixed:cp4x9+cp2x2,fixed:cp2x2+cp4x9", "--against fixed:cp2x2+cp4x9 is the same composition as fixed:cp4x9+cp2x2"),
    ("vertumnus-router,fixed:cp4x6+cp2x8", "--against fixed:cp4x6+cp2x8 is the initial composition cp4x6,cp2x8 "
                                           "(--pool-composition), which vertumnus-router runs"),
])
def test_one_composition_under_two_labels_is_refused_before_any_run(against, message, capsys, monkeypatch):
    """Both labels ran, and best-fixed-in-hindsight was made of a single composition (a 'best of one')."""
    _no_reconfig_runs(monkeypatch)
    assert main(["evaluate", "--kind", "reconfig", "--policy", "none", "--against", against, "--seeds", "1000",
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cpgym evaluate: error: {message}; expected each composition once") and err.count("\n") == 1


def test_training_seeds_of_the_checkpoint_are_refused(capsys, monkeypatch):
    """Seeds the checkpoint was trained on (shipped-reconfig: 0-59) were evaluated after a warning
    line: training-data numbers in the table."""
    _no_reconfig_runs(monkeypatch)
    assert main(["evaluate", "--kind", "reconfig", "--policy", "shipped-reconfig", "--seeds", "1,2,70", "--quiet"]) == 2
    assert capsys.readouterr().err == (
        "cpgym evaluate: error: --seeds 1,2,70: seed(s) 1-2 of matched-phases are training seeds of "
        "shipped-reconfig (trained on seeds 0-59); evaluate on held-out seeds (e.g. >= 1000)\n")


def test_reconfig_evaluation_defaults_to_held_out_seeds(monkeypatch, capsys):
    """The default --seeds were 1,2,3 for every kind: training seeds of shipped-reconfig, so the
    issue's own command (no --seeds) evaluated the checkpoint on its training data."""
    from policies.evaluate import DEFAULT_RECONFIG_SEEDS, DEFAULT_ROUTING_SEEDS, EvaluationConfig

    calls = []
    _fake_reconfig_rows(monkeypatch, calls)
    assert main(["evaluate", "--kind", "reconfig", "--policy", "shipped-reconfig", "--against", "vertumnus-adaptive",
                 "--format", "json", "--quiet"]) == 0
    assert calls == [("matched-phases", [1000, 1001, 1002])] and DEFAULT_RECONFIG_SEEDS == (1000, 1001, 1002)
    assert capsys.readouterr().err == ""  # no training or validation seed among them
    cfg = EvaluationConfig(policy="least-work")
    assert cfg.seeds is None and cfg.with_default_seeds("routing").seeds == DEFAULT_ROUTING_SEEDS == (1, 2, 3)
    assert EvaluationConfig(policy="least-work", seeds=(7,)).with_default_seeds("reconfig").seeds == (7,)


def test_run_evaluation_refuses_training_seeds_too(monkeypatch):
    from envs.sim import SimConfig
    from policies.evaluate import EvaluationConfig, run_evaluation

    _no_reconfig_runs(monkeypatch)
    with pytest.raises(ValueError, match="training seeds of shipped-reconfig"):
        run_evaluation(EvaluationConfig(policy="shipped-reconfig", kind="reconfig", seeds=(5,)), SimConfig())


def _fake_reconfig_rows(monkeypatch, calls):
    import policies.reconfig.evaluate as ev

    def fake(checkpoint, against, workload, seeds, *a, **k):
        calls.append((workload, list(seeds)))
        return [{"policy": p, "seed": s, "wall_s": 0.0, "mean_ttft_s": 1.0, "p90_ttft_s": 2.0,
                 "slo_attainment_token_weighted": 0.9, "num_operations": 0, "num_committed_operations": 0,
                 "num_unfinished": 0} for s in seeds for p in ("shipped-reconfig", *against)]

    monkeypatch.setattr(ev, "evaluate_reconfig", fake)


def test_validation_seeds_are_named_in_a_warning_and_other_workloads_are_other_data(capsys, monkeypatch):
    """Validation seeds (model selection) were evaluated without a word; a seed of another workload
    than the checkpoint's is not its training data."""
    calls = []
    _fake_reconfig_rows(monkeypatch, calls)
    assert main(["evaluate", "--kind", "reconfig", "--policy", "shipped-reconfig", "--against", "vertumnus-router",
                 "--seeds", "500,1000", "--quiet", "--format", "json"]) == 0
    assert capsys.readouterr().err == ("warning: seeds [500] are validation seeds of shipped-reconfig (model selection "
                                       "data, not held out)\n")
    assert main(["evaluate", "--kind", "reconfig", "--policy", "shipped-reconfig", "--against", "vertumnus-router",
                 "--workload", "phases", "--seeds", "1", "--quiet", "--format", "json"]) == 0
    assert capsys.readouterr().err == ""
    assert calls == [("matched-phases", [500, 1000]), ("phases", [1])]


def _reconfig_csv(tmp_path, extra=(), composition=True) -> Path:
    rows = [{"policy": p, "seed": s, "wall_s": 0.0, "mean_ttft_s": t, "p90_ttft_s": 2 * t,
             "slo_attainment_token_weighted": 0.9, "num_operations": 0, "num_committed_operations": 0,
             "num_unfinished": 0, "composition": c}
            for s in (1000, 1001) for p, t, c in (("vertumnus-router", 1.0, None), ("fixed:cp4x10", 0.9, None),
                                                  ("best-fixed-in-hindsight", 0.9, "cp4x10"))]
    df = pd.concat([pd.DataFrame(rows), pd.DataFrame(list(extra))])
    path = tmp_path / "reconfig.csv"
    (df if composition else df.drop(columns=["composition"])).to_csv(path, index=False)
    return path


ROUTING_ROW = {"policy": "least-work", "seed": 1000, "window": 0, "window_name": "w", "mean_ttft_s": 1.0,
               "p90_ttft_s": 2.0, "slo_attainment_token_weighted": 0.5, "prefix_hit_rate": 0.3, "num_unfinished": 0}


@pytest.mark.parametrize("case, message", [
    # a KeyError traceback in aggregate_reconfig
    ("no composition column", "row 3, field 'composition': missing column; expected the fixed composition that won"),
    ("empty composition", "row 3, field 'composition': empty; expected the fixed composition that won"),
    # a rich MarkupError / TypeError traceback on the NaN label
    ("empty policy", "row 2, field 'policy': empty; expected the policy label of the episode"),
    # aggregated as a reconfiguration policy with one episode and a paired delta
    ("routing row", "row 7: a routing evaluation's row (field 'window' 0.0) among a reconfiguration evaluation's rows"),
])
def test_from_csv_reconfig_rows_with_bad_labels_are_one_line(case, message, tmp_path, capsys):
    path = _reconfig_csv(tmp_path, extra=[ROUTING_ROW] if case == "routing row" else (),
                         composition=case != "no composition column")
    df = pd.read_csv(path)
    if case == "empty composition":
        df.loc[2, "composition"] = None
    if case == "empty policy":
        df.loc[1, "policy"] = None
    df.to_csv(path, index=False)
    assert main(["evaluate", "--from-csv", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cpgym evaluate: error: {path}, {message}") and err.count("\n") == 1, err
    assert main(["evaluate", "--from-csv", str(_reconfig_csv(tmp_path)), "--format", "json"]) == 0  # the well-formed rows
    capsys.readouterr()


@pytest.mark.parametrize("extra", [[], ["--kind", "reconfig", "--seeds", "1000"], ["--protocol", "--target-rps", "5"]])
def test_an_empty_against_is_an_error_not_the_default_list(extra, capsys, monkeypatch):
    """``--against ''`` ran the default comparison policies (an empty string read as 'not given')."""
    import baselines.runner as runner

    monkeypatch.setattr(runner, "run_policy", lambda *a, **k: pytest.fail("ran with an empty --against"))
    policy = "none" if "reconfig" in extra else "least-work"
    assert main(["evaluate", "--policy", policy, "--against", "", *extra, "--quiet"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == "cpgym evaluate: error: --against needs at least one name, got ''"


def test_from_csv_reads_the_rows_of_a_protocol_evaluation(tmp_path, capsys):
    # --loads / --protocol --out writes per-window rows without seed (and prefix_hit_rate): --from-csv
    # refused them ("missing column(s) seed, prefix_hit_rate"), though --out's help says it reads them
    import json

    trace = tiny_trace(tmp_path / "tiny.jsonl")
    out = tmp_path / "protocol.csv"
    run = ["evaluate", "--policy", "least-work", "--against", "vertumnus-router", "--trace", str(trace), "--target-rps", "6",
           "--protocol", "--episode-window-s", "4", "--pool-gpus", "8", "--pool-composition", "cp2x2,cp1x4",
           "--supported-degrees", "1,2", "--quiet"]
    assert main([*run, "--out", str(out)]) == 0
    table = capsys.readouterr().out
    assert main(["evaluate", "--from-csv", str(out)]) == 0
    again = capsys.readouterr()
    assert again.err == ""
    title = "test windows (4 s, warm-up 30 s)"
    assert title in table and f"{out}: protocol windows" in " ".join(again.out.split())
    def body(text):  # the table below its title (which may wrap)
        return text[text.index("┏"):]

    assert body(again.out) == body(table)  # the run's table
    assert main([*run, "--format", "json"]) == 0
    ran = json.loads(capsys.readouterr().out)
    assert main(["evaluate", "--from-csv", str(out), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == ran and ran[0]["load_fraction"] is None
    assert main(["evaluate", "--from-csv", str(out), "--format", "json", "--reference", "least-work"]) == 0
    assert {r["reference"] for r in json.loads(capsys.readouterr().out)} == {"least-work"}
    # --kind routing reads them as well; --kind reconfig is one line naming the file and the CSV it expects
    assert main(["evaluate", "--from-csv", str(out), "--kind", "routing", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == ran
    assert main(["evaluate", "--from-csv", str(out), "--kind", "reconfig"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cpgym evaluate: error: {out}: the per-window rows of a protocol evaluation") and \
        "expected the per-episode rows of a reconfig evaluation" in err and len(err.splitlines()) == 1
    assert main(["evaluate", "--from-csv", str(out), "--reference", "round-robin"]) == 2
    assert "--reference 'round-robin' is not among the evaluated policies" in capsys.readouterr().err


def test_from_csv_of_protocol_rows_checks_cells_and_windows(tmp_path, capsys):
    rows = [{"policy": p, "workload": "conv", "load_fraction": lf, "rate_rps": 10.0 * lf, "window": w, "num_requests": 5,
             "num_unfinished": 0, "mean_ttft_s": t * w + lf, "p90_ttft_s": 2.0, "slo_attainment_token_weighted": 0.9}
            for lf in (0.5, 0.9) for w in (1, 2, 3) for p, t in (("least-work", 1.0), ("vertumnus-router", 1.5))]
    path = tmp_path / "p.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    from experiments.common import dumps_json
    from policies.routing.protocol import cell_table

    assert main(["evaluate", "--from-csv", str(path), "--format", "json"]) == 0
    import json

    assert json.loads(capsys.readouterr().out) == json.loads(dumps_json(cell_table(rows, "vertumnus-router")))
    pd.DataFrame(rows[:-1]).to_csv(path, index=False)  # vertumnus-router lacks conv@0.9's window 3
    assert main(["evaluate", "--from-csv", str(path)]) == 0
    assert "vertumnus-router lacks windows conv@0.9 window 3" in capsys.readouterr().err
    for edit, message in [({"load_fraction": 2.5}, "'load_fraction': got 2.5; expected a fraction of capacity in (0, 2]"),
                          ({"rate_rps": None}, "'rate_rps': got nan; expected a rate > 0"),
                          ({"workload": ""}, "'workload': empty")]:
        pd.DataFrame([{**rows[0], **edit}] + rows[1:]).to_csv(path, index=False)
        assert main(["evaluate", "--from-csv", str(path)]) == 2
        assert f"{path}, row 1, field {message}" in capsys.readouterr().err
    pd.DataFrame(rows + rows[:1]).to_csv(path, index=False)
    assert main(["evaluate", "--from-csv", str(path)]) == 2
    assert "a second row of the episode (policy 'least-work', workload 'conv', load_fraction 0.5, rate_rps 5, window 1)" \
        in capsys.readouterr().err


@pytest.mark.parametrize("column", ["window", "rate_rps", "load_fraction"])
def test_from_csv_of_protocol_rows_lacking_a_column_names_that_column(column, tmp_path, capsys):
    # a protocol CSV without its window column was read as a routing CSV: "missing column(s) seed,
    # window, prefix_hit_rate; expected the per-episode rows of a routing evaluation"
    rows = [{"policy": p, "workload": "conv", "load_fraction": 0.5, "rate_rps": 5.0, "window": w, "mean_ttft_s": 1.0,
             "p90_ttft_s": 2.0, "slo_attainment_token_weighted": 0.9} for w in (1, 2) for p in ("least-work", "round-robin")]
    path = tmp_path / "p.csv"
    pd.DataFrame(rows).drop(columns=[column]).to_csv(path, index=False)
    assert main(["evaluate", "--from-csv", str(path)]) == 2
    assert capsys.readouterr().err == (f"cpgym evaluate: error: {path}: missing column(s) {column}; expected the per-episode "
                                       "rows of a protocol evaluation written by `cpgym evaluate --out`\n")


def test_from_csv_of_protocol_rows_with_a_zero_reference_ttft_has_no_delta(tmp_path, capsys):
    # a reference mean TTFT of 0 in every window (a hand-edited CSV: 0 is a time >= 0) was a
    # ZeroDivisionError traceback in policies.routing.protocol.cell_table; a % of 0 has no value
    import json

    rows = [{"policy": p, "workload": "conv", "load_fraction": 0.5, "rate_rps": 5.0, "window": w,
             "mean_ttft_s": 0.0 if p == "vertumnus-router" else 1.0, "p90_ttft_s": 2.0, "slo_attainment_token_weighted": 0.9}
            for w in (1, 2) for p in ("least-work", "vertumnus-router")]
    path = tmp_path / "p.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    assert main(["evaluate", "--from-csv", str(path), "--format", "json"]) == 0
    table = {r["policy"]: r for r in json.loads(capsys.readouterr().out)}
    assert table["least-work"]["delta_mean_ttft_pct_vs_ref"] is None and table["least-work"]["mean_ttft_s"] == 1.0
    assert table["vertumnus-router"]["delta_mean_ttft_pct_vs_ref"] == 0.0
    assert main(["evaluate", "--from-csv", str(path)]) == 0


@pytest.mark.parametrize("edit, fields", [
    (lambda line: line.rsplit(",", 1)[0], 7),  # a truncated row: its SLO attainment was read as not recorded
    (lambda line: line + ",", 9),  # a trailing comma: read as an index column, every value one column left
])
def test_from_csv_row_with_another_number_of_fields_than_the_header_is_one_line(edit, fields, tmp_path, capsys):
    rows = [{"policy": p, "workload": "conv", "load_fraction": 0.5, "rate_rps": 5.0, "window": w, "mean_ttft_s": 1.0,
             "p90_ttft_s": 2.0, "slo_attainment_token_weighted": 0.9} for w in (1, 2) for p in ("least-work", "round-robin")]
    path = tmp_path / "p.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], edit(lines[1]), *lines[2:]]) + "\n")
    assert main(["evaluate", "--from-csv", str(path)]) == 2
    assert capsys.readouterr().err == (f"cpgym evaluate: error: {path}, row 1: {fields} fields, the header has 8; expected "
                                       "one field per column (an empty one for a metric not recorded), as `cpgym evaluate "
                                       "--out` writes them\n")


def test_from_csv_second_row_of_an_absolute_rate_window_names_its_load_as_empty(tmp_path, capsys):
    # the message read "load_fraction nan" for the empty cell of a --target-rps run
    rows = [{"policy": p, "workload": "conv", "load_fraction": None, "rate_rps": 5.0, "window": w, "mean_ttft_s": 1.0,
             "p90_ttft_s": 2.0, "slo_attainment_token_weighted": 0.9} for w in (1, 2) for p in ("least-work", "round-robin")]
    path = tmp_path / "p.csv"
    pd.DataFrame(rows + rows[:1]).to_csv(path, index=False)
    assert main(["evaluate", "--from-csv", str(path)]) == 2
    assert (f"{path}, row 5: a second row of the episode (policy 'least-work', workload 'conv', load_fraction empty (an "
            "absolute rate), rate_rps 5, window 1)") in capsys.readouterr().err


def test_from_csv_of_protocol_rows_with_a_metric_never_recorded_prints_no_numpy_warning(tmp_path, capsys, recwarn):
    # "protocol.py:379: RuntimeWarning: Mean of empty slice" on stderr above the table
    import json

    rows = [{"policy": p, "workload": "conv", "load_fraction": 0.5, "rate_rps": 5.0, "window": w, "mean_ttft_s": 1.0,
             "p90_ttft_s": None if p == "round-robin" else 2.0, "slo_attainment_token_weighted": 0.9}
            for w in (1, 2) for p in ("least-work", "round-robin")]
    path = tmp_path / "p.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    assert main(["evaluate", "--from-csv", str(path), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and [r["p90_ttft_s"] for r in json.loads(out)] == [2.0, None]
    assert [str(w.message) for w in recwarn if issubclass(w.category, RuntimeWarning)] == []
