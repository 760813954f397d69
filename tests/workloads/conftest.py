"""Shared fixtures for the workloads tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from envs.sim.request import Workload
from envs.workloads import default_traces_dir

# <repo>/tests/workloads/conftest.py -> parents[2] = <repo>; the traces live beside the repo.
TRACES_DIR = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "traces"


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """The shared trace directory (skips the test if it is not there)."""
    d = default_traces_dir()
    if not d.is_dir():
        d = TRACES_DIR
    if not (d / "conversation_trace.jsonl").is_file():
        pytest.skip(f"shared traces not found at {d}")
    return d


def assert_prefix_consistent(workload: Workload) -> None:
    """Equal hash at position k implies equal hashes at every position < k (for all request pairs).

    Equivalent check: every hash id always appears at the same position and after the same
    parent hash (induction over k).
    """
    seen: dict[int, tuple[int, int]] = {}
    for r in workload.requests:
        parent = -1
        for k, h in enumerate(r.block_hashes):
            key = (k, parent)
            prev = seen.setdefault(h, key)
            assert prev == key, f"hash {h} of request {r.request_id} at position {k} after {parent}; first seen as {prev}"
            parent = h


def assert_prefix_consistent_pairwise(workload: Workload) -> None:
    """The literal statement: for any two requests, equal hash at position k implies equal hashes at all positions < k."""
    prefix_of: dict[tuple[int, int], tuple[int, ...]] = {}
    for r in workload.requests:
        for k, h in enumerate(r.block_hashes):
            prefix = prefix_of.setdefault((k, h), r.block_hashes[:k])
            assert prefix == r.block_hashes[:k], f"request {r.request_id}: hash {h} at position {k} with a different prefix"
