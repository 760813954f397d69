"""Simple routing baselines (issue #2): round-robin, random, least-work, prefix-affinity.

All choose among the eligible workers only (``PoolView.eligible_worker_ids``) and break ties by
the pool's worker order (ascending first GPU).
"""

from __future__ import annotations

import numpy as np

from envs.sim.request import Request
from envs.sim.router import PoolView, Router
from envs.sim.worker import WorkerState


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


class PrefixAffinityRouter(Router):
    """Longest ready prefix hit; ties (including no hit anywhere) go to less outstanding work."""

    name = "prefix-affinity"

    def route(self, request: Request, view: PoolView) -> int:
        best = -1
        best_key = None
        L = request.num_prompt_tokens
        hashes = request.block_hashes
        now = view.now_s
        workers = view.workers
        active = WorkerState.ACTIVE
        for wid in view.worker_ids:
            w = workers[wid]
            if w.state != active or L > w.max_prompt_tokens:
                continue
            rem = w.step_predicted_end_s - now if w.batch else 0.0
            key = (-w.cache.match_ready(hashes), w.queued_predicted_s + (rem if rem > 0.0 else 0.0))
            if best_key is None or key < best_key:
                best, best_key = wid, key
        return best
