"""The shipped DeepSeek calibrations run on the paper's 40-GPU H20-3e pool at the degrees their weight placement allows."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from experiments.cli import main


def _calibration(name: str) -> str:
    return str(resources.files("envs.sim").joinpath("calibrations", name))


@pytest.mark.parametrize("name, degrees, composition, shard", [
    ("deepseek-v4-flash-fp8__h20-3e.json", "4,8", "cp8x3,cp4x4", 4),  # paper §9: DeepSeek at CP {4, 8}
    ("deepseek-v3__h20-3e.json", "8", "cp8x5", 8),                     # 671B FP8 needs G = 8 on 141 GB
])
@pytest.mark.slow
def test_deepseek_presets_simulate_on_the_h20_3e_pool(capsys, name, degrees, composition, shard):
    with open(_calibration(name)) as f:
        assert json.load(f)["weight_shard_gpus"] == shard
    assert main(["simulate", "--workload", "tool-agent", "--arrival-window-s", "0", "10", "--policy", "least-work",
                 "--calibration", _calibration(name), "--supported-degrees", degrees, "--pool-composition", composition,
                 "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["num_requests"] > 0 and row["num_unfinished"] == 0 and row["num_gpus"] == 40


def test_deepseek_v3_at_cp4_is_refused_with_the_reason(capsys):
    assert main(["simulate", "--workload", "tool-agent", "--arrival-window-s", "0", "10", "--policy", "least-work",
                 "--calibration", _calibration("deepseek-v3__h20-3e.json"), "--supported-degrees", "4,8",
                 "--pool-composition", "cp8x3,cp4x4"]) == 2
    err = capsys.readouterr().err
    assert "G = 8" in err and "--supported-degrees 8" in err and len(err.strip().splitlines()) == 1
