"""The README's Gymnasium code block runs as written (extracted from README.md and executed in
a fresh interpreter), and the mask accessors it names work on a ``gym.make`` environment."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]


def _readme_env_blocks() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
    return [b for b in blocks if "gym.make(" in b]


def test_readme_gymnasium_block_runs_as_written():
    blocks = _readme_env_blocks()
    assert len(blocks) == 1, "expected exactly one README python block using gym.make"
    code = blocks[0]
    assert "action_masks()" in code
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(r"return -\d+\.\d over \d+ requests\n", proc.stdout), proc.stdout


def test_mask_accessors_named_in_readme():
    from sb3_contrib.common.maskable.utils import get_action_masks
    from stable_baselines3.common.vec_env import DummyVecEnv

    import envs
    from envs.workloads import get_workload

    envs.register_envs()

    def make():
        return gym.make("cpgym/PrefillRouting-v0", workloads=get_workload("tool-agent", duration_s=5.0))

    env = make()
    env.reset(seed=0)
    with pytest.raises(AttributeError):
        env.action_masks()  # the wrapper does not forward it: why the README goes through .unwrapped
    mask = env.unwrapped.action_masks()
    assert mask.dtype == bool and mask.any()
    np.testing.assert_array_equal(get_action_masks(env), mask)
    venv = DummyVecEnv([make, make])
    venv.reset()
    assert get_action_masks(venv).shape == (2, mask.shape[0])
