"""Simple routing baselines (issue #2): round-robin, random, least-work, prefix-affinity.

All choose among the eligible workers only (``PoolView.eligible_worker_ids``) and break ties by
the pool's worker order (ascending first GPU).
"""

from __future__ import annotations

import numpy as np

from envs.sim.request import Request
from envs.sim.router import PoolView, Router


class RoundRobinRouter(Router):
    """Cycles over the workers in pool order, skipping ineligible ones."""

    name = "round-robin"

    def reset(self, view: PoolView, rng: np.random.Generator) -> None:
        super().reset(view, rng)
        self._next = 0

    def route(self, request: Request, view: PoolView) -> int:
        ids = view.worker_ids
        n = len(ids)
        for k in range(n):
            wid = ids[(self._next + k) % n]
            if view.is_eligible(wid, request):
                self._next = (self._next + k + 1) % n
                return wid
        raise RuntimeError(f"no eligible worker for request {request.request_id}")


class RandomRouter(Router):
    """Uniformly random eligible worker (the run's seeded policy generator)."""

    name = "random"

    def route(self, request: Request, view: PoolView) -> int:
        cands = view.eligible_worker_ids(request)
        return cands[int(self.rng.integers(len(cands)))]


class LeastWorkRouter(Router):
    """Least predicted outstanding work ``q_w`` (ties: fewer queued requests, then pool order)."""

    name = "least-work"

    def route(self, request: Request, view: PoolView) -> int:
        best = -1
        best_key = None
        work = view.outstanding_work_s
        nq = view.num_queued_requests
        for wid in view.eligible_worker_ids(request):
            key = (work(wid), nq(wid))
            if best_key is None or key < best_key:
                best, best_key = wid, key
        return best


class PrefixAffinityRouter(Router):
    """Longest ready prefix hit; ties (including no hit anywhere) go to less outstanding work."""

    name = "prefix-affinity"

    def route(self, request: Request, view: PoolView) -> int:
        best = -1
        best_key = None
        work = view.outstanding_work_s
        hit = view.cached_blocks
        for wid in view.eligible_worker_ids(request):
            key = (-hit(wid, request), work(wid))
            if best_key is None or key < best_key:
                best, best_key = wid, key
        return best
