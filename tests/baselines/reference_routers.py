"""Direct (pre-optimisation) implementations of the Vertumnus, llm-d and Dynamo routers through
the public ``PoolView`` methods: the oracles of ``tests/baselines/test_*_fast.py`` (the optimised
routers must make exactly their decisions)."""

from __future__ import annotations

import math
from collections import OrderedDict, deque

import numpy as np

from baselines.industry import LlmdRouter
from baselines.vertumnus import StaleLoadView, VertumnusParams
from envs.sim.router import PoolView, Router

__all__ = ["RefDynamo", "RefLlmd", "ReferenceVertumnus"]


class ReferenceVertumnus:
    """Straightforward J = q + beta*s + lambda*(C*s - C_min*E_Cmin) through the public PoolView
    methods (the pre-optimisation implementation)."""

    def __init__(self, params: VertumnusParams, stale: StaleLoadView | None) -> None:
        self.params = params
        self.stale = stale

    def route(self, request, view: PoolView) -> int:
        cands = view.eligible_worker_ids(request)
        cm = view.cost_model
        c_min = min(view.degree(w) for w in cands)
        L = request.num_prompt_tokens
        best, best_j = -1, math.inf
        for wid in cands:
            c = view.degree(wid)
            p = view.cached_tokens(wid, request)
            r = L - p
            s = cm.service_time_s(c, r, p)
            s_min = s if c == c_min else cm.service_time_s(c_min, r, p)
            q = view.outstanding_work_s(wid) if self.stale is None else self.stale.outstanding_work_s(view, wid)
            j = q + self.params.beta * s + self.params.lambda_ * (c * s - c_min * s_min)
            if j < best_j:
                best, best_j = wid, j
        return best


class RefLlmd(Router):
    """llm-d's weighted scorers with the prefix index as plain per-worker LRU dicts (GAIE's
    per-pod LRU, blocks added in prompt order, sized to the worker's KV capacity) and the
    matched blocks counted position by position while any worker holds the block."""

    name = "ref-llm-d"

    def reset(self, view, rng):
        super().reset(view, rng)
        self.p = LlmdRouter().params
        self.lru: dict[int, OrderedDict] = {}

    def _matched(self, hashes) -> dict[int, int]:
        out: dict[int, int] = {}
        for h in hashes:
            holders = [w for w, lru in self.lru.items() if h in lru]
            if not holders:
                break
            for w in holders:
                out[w] = out.get(w, 0) + 1
        return out

    def route(self, request, view):
        p = self.p
        cands = view.eligible_worker_ids(request)
        waits = [view.num_queued_requests(w) for w in cands]
        lo, hi = min(waits), max(waits)
        nb = len(request.block_hashes)
        matched = self._matched(request.block_hashes)
        scores = np.empty(len(cands))
        for i, w in enumerate(cands):
            prefix = matched.get(w, 0) / nb
            queue = 1.0 if hi == lo else (hi - waits[i]) / (hi - lo)
            cap = view.kv_capacity_blocks(w)
            held = set()
            for r in view.workers[w].batch:
                held.update(r.block_hashes)
            usage = min(1.0, len(held) / cap) if cap else 1.0
            scores[i] = p.prefix_weight * prefix + p.queue_weight * queue + p.kv_utilization_weight * (1.0 - usage)
        best = np.flatnonzero(scores >= scores.max() - 1e-12)
        return cands[int(best[0] if len(best) == 1 else best[self.rng.integers(len(best))])]

    def on_dispatch(self, request, worker_id, view):
        lru = self.lru.setdefault(worker_id, OrderedDict())
        for h in request.block_hashes:
            lru.pop(h, None)
            lru[h] = None
        while len(lru) > view.kv_capacity_blocks(worker_id):
            lru.popitem(last=False)


class RefDynamo(Router):
    """Dynamo's logit with the active blocks as a plain set of the in-flight requests' blocks
    (Dynamo's older ``new_blocks``: the request's blocks not in that set)."""

    name = "ref-dynamo"

    def reset(self, view, rng):
        super().reset(view, rng)
        self.q: dict[int, deque] = {}

    def _active(self, view, w) -> set:
        dq = self.q.setdefault(w, deque())
        while len(dq) > view.num_inflight_requests(w):
            dq.popleft()
        return set().union(*dq)

    def route(self, request, view):
        bs = view.kv_block_size_tokens
        L = request.num_prompt_tokens
        costs = {}
        for w in view.eligible_worker_ids(request):
            active_tokens = view.num_queued_new_tokens(w) + view.num_running_new_tokens(w)
            new_tokens = max(0, L - view.cached_blocks(w, request) * bs)
            blocks = self._active(view, w)
            potential = len(blocks) + sum(h not in blocks for h in request.block_hashes)
            costs[w] = (active_tokens + new_tokens) / bs + potential
        low = min(costs.values())
        ties = [w for w, c in costs.items() if c == low]
        sizes = {w: len(view.workers[w].cache) for w in ties}
        ties = [w for w in ties if sizes[w] == min(sizes.values())]
        return ties[0] if len(ties) == 1 else ties[int(self.rng.integers(len(ties)))]

    def on_dispatch(self, request, worker_id, view):
        self.q.setdefault(worker_id, deque()).append(tuple(request.block_hashes))
