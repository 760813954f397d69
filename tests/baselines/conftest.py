from __future__ import annotations

import numpy as np
import pytest

from envs.sim import Request, Workload


@pytest.fixture(scope="session")
def small_prefix_workload() -> Workload:
    """300 requests at 30 req/s, 512-token blocks, 20 shared document prefixes (seeded, fast)."""
    rng = np.random.default_rng(7)
    t = np.cumsum(rng.exponential(1 / 30.0, 300))
    reqs = []
    for i in range(300):
        doc = int(rng.integers(20))
        n_doc = 2 + doc % 8
        n_own = int(rng.integers(1, 6))
        hashes = tuple(doc * 1000 + k for k in range(n_doc)) + tuple(10**6 + i * 10 + k for k in range(n_own))
        L = 512 * (len(hashes) - 1) + int(rng.integers(1, 513))
        reqs.append(Request(i, float(t[i]), L, 1, hashes))
    return Workload("small-prefix", tuple(reqs), kv_block_size_tokens=512)
