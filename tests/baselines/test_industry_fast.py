"""The optimised llm-d and Dynamo routers make exactly the decisions of their direct
implementations through the public PoolView methods (issue #3 follow-up)."""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import pytest

from baselines.industry import ApproxPrefixIndex, DynamoKVRouter, LlmdRouter
from envs.sim import PoolConfig, SimConfig, Simulator
from envs.sim.router import Router


class _RefInflight:
    def __init__(self):
        self.q: dict[int, deque] = {}

    def record(self, wid, n):
        self.q.setdefault(wid, deque()).append(n)

    def _sync(self, view, wid):
        dq = self.q.setdefault(wid, deque())
        while len(dq) > view.num_inflight_requests(wid):
            dq.popleft()
        return dq

    def inflight(self, view, wid):
        return sum(self._sync(view, wid))

    def running(self, view, wid):
        dq = self._sync(view, wid)
        n_run = view.num_inflight_requests(wid) - view.num_queued_requests(wid)
        return sum(list(dq)[:n_run])


class RefLlmd(Router):
    name = "ref-llm-d"

    def reset(self, view, rng):
        super().reset(view, rng)
        self.p = LlmdRouter().params
        self.index = ApproxPrefixIndex(max(1, self.p.lru_capacity_tokens // view.kv_block_size_tokens))
        self.inflight = _RefInflight()

    def route(self, request, view):
        p = self.p
        cands = view.eligible_worker_ids(request)
        waits = [view.num_queued_requests(w) for w in cands]
        lo, hi = min(waits), max(waits)
        nb = len(request.block_hashes)
        scores = np.empty(len(cands))
        for i, w in enumerate(cands):
            prefix = self.index.match(w, request.block_hashes) / nb
            queue = 1.0 if hi == lo else (hi - waits[i]) / (hi - lo)
            cap = view.kv_capacity_blocks(w) * view.kv_block_size_tokens
            usage = min(1.0, self.inflight.running(view, w) / cap) if cap else 1.0
            scores[i] = p.prefix_weight * prefix + p.queue_weight * queue + p.kv_utilization_weight * (1.0 - usage)
        best = np.flatnonzero(scores >= scores.max() - 1e-12)
        return cands[int(best[0] if len(best) == 1 else best[self.rng.integers(len(best))])]

    def on_dispatch(self, request, worker_id, view):
        self.index.insert(worker_id, request.block_hashes, view.now_s)
        self.inflight.record(worker_id, request.num_prompt_tokens)


class RefDynamo(Router):
    name = "ref-dynamo"

    def reset(self, view, rng):
        super().reset(view, rng)
        self.inflight = _RefInflight()

    def route(self, request, view):
        bs = view.kv_block_size_tokens
        L = request.num_prompt_tokens
        best, best_cost = -1, math.inf
        for w in view.eligible_worker_ids(request):
            active = view.num_queued_new_tokens(w) + view.num_running_new_tokens(w)
            prefill = max(0.0, (active + L) / bs - view.cached_blocks(w, request))
            cost = prefill + -(-self.inflight.inflight(view, w) // bs) + len(request.block_hashes)
            if cost < best_cost:
                best, best_cost = w, cost
        return best

    def on_dispatch(self, request, worker_id, view):
        self.inflight.record(worker_id, request.num_prompt_tokens)


@pytest.mark.parametrize("fast,ref", [(LlmdRouter, RefLlmd), (DynamoKVRouter, RefDynamo)])
def test_fast_industry_router_matches_reference(small_prefix_workload, fast, ref):
    from envs.workloads import scale_rate

    wl = scale_rate(small_prefix_workload, 4.0)
    cfg = SimConfig(pool=PoolConfig(num_gpus=16, composition="cp4x2,cp2x4"), seed=5)
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
