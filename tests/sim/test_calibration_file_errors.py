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



@pytest.mark.parametrize("value", [float("inf"), float("nan"), -1.0])
def test_non_finite_or_negative_cost_coefficient_is_named(tmp_path, value):
    # inf ("Infinity" in the JSON) used to load and fail later as "cannot schedule an event inf s
    # from now", naming no file
    import json

    data = Calibration.default().to_dict()
    data["coefficients"]["a_s_per_token"] = value
    p = tmp_path / "calib.json"
    p.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=rf"^{p}: cost coefficient a_s_per_token must be a finite number >= 0, got "):
        Calibration.load(p)


@pytest.mark.parametrize("absent", [(), ("dtype",), ("weight_shard_gpus",), ("provenance",),
                                    ("dtype", "weight_shard_gpus", "provenance")])
def test_optional_calibration_fields_may_be_absent(tmp_path, absent):
    # the integer check read data["weight_shard_gpus"] even when absent (operator precedence), so a
    # file in the documented format without it failed with KeyError instead of getting the default 1
    import json

    data = Calibration.default().to_dict()
    for key in absent:
        del data[key]
    p = tmp_path / "calib.json"
    p.write_text(json.dumps(data))
    cal = Calibration.load(p)
    assert cal.weight_shard_gpus == (1 if "weight_shard_gpus" in absent else data["weight_shard_gpus"])
    assert cal.dtype == (data["dtype"] if "dtype" not in absent else "bfloat16")
    assert cal.provenance == ({} if "provenance" in absent else data["provenance"])
    assert cal.coefficients == Calibration.default().coefficients


@pytest.mark.parametrize("value", [True, 2.0, "2"])
def test_non_integer_weight_shard_gpus_is_named(tmp_path, value):
    import json

    data = Calibration.default().to_dict()
    data["weight_shard_gpus"] = value
    p = tmp_path / "calib.json"
    p.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=rf"^{p}: field 'weight_shard_gpus' must be an integer, got "):
        Calibration.load(p)
