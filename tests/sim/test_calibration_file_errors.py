"""A calibration file that is not UTF-8 JSON is reported by name in one line."""

from __future__ import annotations

import gzip

import pytest

from envs.sim import Calibration


def test_binary_calibration_file_is_named(tmp_path):
    p = tmp_path / "calib.json"
    p.write_bytes(gzip.compress(b'{"name": "x"}'))  # e.g. a compressed file under a .json name
    with pytest.raises(ValueError) as ei:
        Calibration.load(p)
    msg = str(ei.value)
    assert msg.startswith(f"{p}: not UTF-8 text") and "\n" not in msg


def test_malformed_calibration_json_is_named(tmp_path):
    p = tmp_path / "calib.json"
    p.write_text('{"name": ')
    with pytest.raises(ValueError, match=r"calib\.json: not valid JSON \(line 1"):
        Calibration.load(p)
