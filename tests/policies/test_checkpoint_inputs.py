"""The checkpoint loaders: a zip SB3 cannot read is named in one line, and a ``last_model.zip``
path loads that zip (the CLI's corrupt-checkpoint errors are rows of tests/policies/test_errors.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.factories import junk_checkpoint

CKPT = Path(__file__).resolve().parents[2] / "policies" / "checkpoints"


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

    d = junk_checkpoint(tmp_path, "reconfig", "model.zip")
    os.symlink(CKPT / "reconfig_target" / "model.zip", d / "last_model.zip")
    os.symlink(CKPT / "reconfig_target" / "vecnormalize.pkl", d / "last_vecnormalize.pkl")
    learned = LearnedReconfig(d / "last_model.zip")
    assert learned.vecnormalize is not None
    with pytest.raises(ValueError, match="model.zip: not a readable SB3 checkpoint zip"):
        LearnedReconfig(d)
