"""The optimised llm-d and Dynamo routers make exactly the decisions of their direct
implementations through the public PoolView methods (issue #3 follow-up)."""

from __future__ import annotations

import numpy as np
import pytest

from baselines.industry import ApproxPrefixIndex, DynamoKVRouter, LlmdRouter
from envs.sim import PoolConfig, SimConfig, Simulator
from tests.baselines.reference_routers import RefDynamo, RefLlmd


@pytest.mark.parametrize("cache_scale", [1.0, 0.01])  # 0.01: 26/52-block caches, the llm-d index evicts
@pytest.mark.parametrize("fast,ref", [(LlmdRouter, RefLlmd), (DynamoKVRouter, RefDynamo)])
def test_fast_industry_router_matches_reference(small_prefix_workload, fast, ref, cache_scale):
    from envs.workloads import scale_rate

    wl = scale_rate(small_prefix_workload, 4.0)
    cfg = SimConfig(pool=PoolConfig(num_gpus=16, composition="cp4x2,cp2x4"), seed=5, cache_capacity_scale=cache_scale)
    a = Simulator(wl, cfg).run(fast())
    b = Simulator(wl, cfg).run(ref())
    assert np.array_equal(a.records["worker_id"], b.records["worker_id"])
    assert len(set(a.records["worker_id"].tolist())) > 1


def test_prefix_index_forgets_retired_and_recreated_workers():
    from envs.sim.cache import PrefixCache
    from envs.sim.worker import Worker

    class V:  # minimal view: id -> worker
        def __init__(self, ws):
            self.workers = ws

    w0, w1 = (Worker(i, 2, 2 * i, 0, PrefixCache(10, i), 100) for i in (0, 1))
    idx = ApproxPrefixIndex(None)
    idx.sync_workers(V({0: w0, 1: w1}))
    idx.insert(0, (1, 2), 0.0)
    idx.insert(1, (1, 2), 0.0)
    idx.sync_workers(V({0: w0, 1: w1}))
    assert idx.match(0, (1, 2)) == 2 and idx.match(1, (1, 2)) == 2
    # merge: worker 0 is re-created (same id, later creation time), worker 1 retired
    new0 = Worker(0, 4, 0, 0, PrefixCache(10, 0), 200, created_s=5.0)
    idx.sync_workers(V({0: new0}))
    assert idx.match(0, (1, 2)) == 0 and idx.match(1, (1, 2)) == 0
    assert idx.longest_match((1, 2), {0, 1}) == (-1, 0)
