"""The cache manager's speedups change no result: digests of the per-request records (TTFT,
worker, cached tokens) and the manager's counters of the policies with the global prefix-cache manager, pinned with the
code before the speedups (commit 51e188b) by this same function, with the manager settings of that time
(``CACHE_MANAGER_SETTINGS["sweep-1"]``)."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from baselines.runner import run_policy
from envs import workloads
from envs.sim.config import SimConfig

RECORD_KEYS = ("ttft_s", "worker_id", "num_cached_tokens")


def _digest(policy: str, workload) -> str:
    # the manager settings the digests were pinned with (the defaults until the replication sweep)
    from baselines.cache_manager import CACHE_MANAGER_SETTINGS
    from baselines.registry import get_policy

    old = CACHE_MANAGER_SETTINGS["sweep-1"]
    spec = get_policy(policy).with_params(cache_intra_degree_threshold=old.intra_degree_threshold,
                                          cache_reclaim_threshold=old.reclaim_threshold,
                                          cache_max_replications_per_scan=old.max_replications_per_scan)
    r = run_policy(spec, workload, SimConfig(seed=0))
    h = hashlib.sha256()
    for k in RECORD_KEYS:
        h.update(k.encode())
        h.update(np.ascontiguousarray(r.records[k]).tobytes())
    counters = r.extras["cache_manager"]
    assert counters["num_inter_degree_replications"] + counters["num_intra_degree_replications"] > 0
    h.update(json.dumps(counters, sort_keys=True).encode())  # replications, reclamations, missed benefit
    return h.hexdigest()


@pytest.fixture(scope="module")
def conversation_600s():
    path = workloads.default_traces_dir() / "conversation_trace.jsonl"
    if not path.exists():
        pytest.skip(f"trace {path} not present")
    return workloads.window(workloads.load_trace(path), 0.0, 600.0)


@pytest.fixture(scope="module")
def tool_agent():
    return workloads.get_workload("tool-agent", seed=0)


GOLDEN = {
    ("conversation_600s", "vertumnus-global-cache"):
        "ae70e7dcbef3bb992e4628deb4f15355c9ddd2663a64c85b11c96d44a1ccb41c",
    ("conversation_600s", "vertumnus-lookahead"):
        "ef8624a507b5fb663418bc713de24921af63ab070b3022ada47a561bdafc035b",
    ("tool_agent", "vertumnus-global-cache"):
        "2a9e6e7cc86e9a3b35abf4d456da0274d15b536c731bfa5fd9ef667ba5b68003",
    ("tool_agent", "vertumnus-lookahead"):
        "89a8ec40060ac649a0d9bc9e3d9eb8d9f12b1c532371ac3be8105c8129be7c1e",
}


@pytest.mark.parametrize("workload_name,policy", [
    pytest.param(w, p, marks=pytest.mark.slow) if w == "tool_agent" or p == "vertumnus-lookahead" else (w, p)
    for w, p in sorted(GOLDEN)])
def test_records_unchanged_by_the_cache_manager_speedups(workload_name, policy, request):
    wl = request.getfixturevalue(workload_name)
    assert _digest(policy, wl) == GOLDEN[(workload_name, policy)]
