from __future__ import annotations

import textwrap
from pathlib import Path

import pytest


def write_spec(folder: Path, text: str, name: str = "spec.yaml") -> Path:
    p = folder / name
    p.write_text(textwrap.dedent(text))
    return p


TINY = """
name: tiny
workload:
  name: mixed-default
  params: {duration_s: 8.0}
policies: [least-work, round-robin]
seeds: [0, 1]
rates: [10, 20]
"""


@pytest.fixture
def tiny_spec(tmp_path) -> Path:
    return write_spec(tmp_path, TINY)
