"""Checkpoint files that cannot be read: one line naming the file, before anything runs or is
written (`cpgym evaluate` on a benchmark task, `cpgym train --init-from`, the loaders)."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.cli import main

CKPT = Path(__file__).resolve().parents[2] / "policies" / "checkpoints"


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
    assert main(["evaluate", "--policy", str(path), "--quick", "--quiet"]) == 2
    _one_error_line(capsys.readouterr().err, path if target == "zip" else path / "model.zip",
                    "not a readable SB3 checkpoint zip")


@pytest.mark.parametrize("junk, what", [("model.zip", "not a readable SB3 checkpoint zip"),
                                        ("vecnormalize.pkl", "not a readable VecNormalize pickle")])
def test_a_corrupt_init_from_fails_before_anything_is_written(tmp_path, capsys, junk, what):
    d = _junk_checkpoint(tmp_path, "reconfig", junk)
    assert main(["train", "reconfig", "--init-from", str(d / "model.zip"), "--out", str(tmp_path / "run"), "--quiet",
                 "--wandb", "disabled"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cpgym train reconfig: error: {d / junk}: {what} (") and len(err.splitlines()) == 1, err
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
