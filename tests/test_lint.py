"""The lint gate: `ruff check` over the repository with the settings in pyproject.toml
(line length 127, pyflakes, pycodestyle errors/warnings, mccabe max-complexity 15).

ruff is a dev dependency (``pip install -e ".[dev]"``), so a missing ruff is a failure, not a skip.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_ruff_check_passes():
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                          cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, \
        f"ruff check found problems (settings: pyproject.toml [tool.ruff]):\n{proc.stdout}{proc.stderr}"


def test_ruff_settings_are_the_gate():
    """The gate's thresholds: line length 127, mccabe complexity 15, pyflakes + pycodestyle selected."""
    ruff = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["ruff"]
    assert ruff["line-length"] == 127
    assert ruff["lint"]["mccabe"]["max-complexity"] == 15
    assert {"E", "W", "F", "C901"} <= set(ruff["lint"]["select"])
