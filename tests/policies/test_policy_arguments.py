"""``cpgym evaluate --policy``: a missing checkpoint path says so, an unknown name suggests close
matches, and unreadable checkpoint files are named."""

from __future__ import annotations

import pytest

from experiments.cli import main
from policies.common.checkpoint import LearnedPolicy, resolve_checkpoint
from policies.common.policy_args import check_policy_argument


def _evaluate_error(capsys, policy: str) -> str:
    rc = main(["evaluate", "--policy", policy, "--quick", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0, err
    return err


def test_misspelled_name_suggests_shipped(capsys):
    err = _evaluate_error(capsys, "shippd")
    assert "did you mean 'shipped'?" in err
    assert "checkpoint folder" in err and "least-work" in err


def test_misspelled_heuristic_suggests_it(capsys):
    assert "did you mean 'vertumnus'" in _evaluate_error(capsys, "vertumus")


def test_missing_checkpoint_path_says_it_does_not_exist(capsys):
    err = _evaluate_error(capsys, "policies/checkpoints/nothere")
    assert err.startswith("cpgym evaluate: error: policies/checkpoints/nothere: checkpoint path does not exist"), err
    assert "unknown policy" not in err and "round-robin" not in err
    assert "does not exist" in _evaluate_error(capsys, "nothere.zip")


def test_folder_without_model_zip(tmp_path, capsys):
    err = _evaluate_error(capsys, str(tmp_path))
    assert f"{tmp_path}: checkpoint folder has no model.zip" in err


def test_unknown_against_name_suggests(capsys):
    rc = main(["evaluate", "--policy", "least-work", "--against", "least-wrk", "--quick", "--quiet"])
    assert rc == 2 and "did you mean 'least-work'?" in capsys.readouterr().err


def test_check_policy_argument_accepts_valid_forms():
    for name in ("least-work", "vertumnus-adaptive", "shipped", "policies/checkpoints/routing_conversation_residual"):
        check_policy_argument(name)
    with pytest.raises(ValueError, match="unknown policy 'zzz'; expected"):
        check_policy_argument("zzz")


def test_unreadable_checkpoint_files_are_named(tmp_path):
    (tmp_path / "model.zip").write_bytes(b"PK\x03\x04 not really a zip")
    (tmp_path / "train_config.json").write_text('{"kind": "routing",')
    with pytest.raises(ValueError, match=r"train_config\.json: not valid JSON \(line 1"):
        resolve_checkpoint(tmp_path)
    (tmp_path / "train_config.json").write_bytes(b'{"kind": "\xff"}')
    with pytest.raises(ValueError, match=r"train_config\.json: not UTF-8"):
        resolve_checkpoint(tmp_path)
    (tmp_path / "train_config.json").write_text("{}")
    with pytest.raises(ValueError, match=r"model\.zip"):
        LearnedPolicy(tmp_path)


def test_learned_policy_names_an_arm_selection_checkpoint():
    # "shipped" is the arm-selection router (arm_model.json, no SB3 model): SB3 used to fail on it
    # with "arm_model.json wasn't a zip-file"
    with pytest.raises(ValueError, match=r"routing_vertumnus_arms: an arm-selection checkpoint .*ArmSelectionPolicy"):
        LearnedPolicy("shipped")


def test_an_existing_file_named_without_a_separator_is_no_checkpoint(tmp_path, monkeypatch):
    """`--policy README.md` (a file in the working folder) said 'unknown policy' and listed the registry."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.md").write_text("hello")
    with pytest.raises(ValueError, match=r"^notes.md: not a checkpoint"):
        check_policy_argument("notes.md")
