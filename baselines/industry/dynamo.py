"""NVIDIA Dynamo's KV router: overlap-weighted prefill blocks plus active blocks (ai-dynamo KV
router cost, weight 1, temperature 0), with its active-sequence tracking.

Part of the industry baselines (:mod:`baselines.industry`)."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from baselines.tiered import dynamo_pull_overlap
from envs.sim.request import Request
from envs.sim.router import PoolView, Router
from envs.sim.worker import Worker


class ActiveSequences:
    """Per-worker KV blocks of the in-flight (queued + running) requests, each block counted once
    however many in-flight requests share it: Dynamo's active-sequence tracking
    (ai-dynamo/dynamo ``lib/llm/src/kv_router/sequence.rs`` ``ActiveSequences``, commit 581ee33:
    ``unique_blocks`` with reference counts, ``active_blocks()`` = their number, ``new_blocks(seq)`` = the blocks
    of ``seq`` not among them). Built from the router's own dispatches, dropped lazily as the
    FCFS workers finish requests: the in-flight requests of a worker are taken to be the last
    ``len(queue) + len(batch)`` dispatched to it. A drain's redirection of the queued requests
    breaks that for the draining worker until its running step ends (it is no candidate
    meanwhile, unless a fault aborts the operation and makes it ACTIVE again; no built-in policy
    runs this router with the split/merge controller).

    Block hashes are prefix-chained (a hash identifies the whole prefix up to its block), so the
    request's blocks already active on a worker are a leading run: ``new_blocks`` walks the
    request's hashes to the first one not active (as Dynamo's later ``lib/kv-router`` crate does:
    ``potential blocks = active_blocks + query_len - overlap_depth``).
    """

    def __init__(self) -> None:
        self._q: dict[int, deque] = {}
        self._ref: dict[int, dict[int, int]] = {}

    def record(self, worker_id: int, block_hashes) -> None:
        self._q.setdefault(worker_id, deque()).append(block_hashes)
        ref = self._ref.setdefault(worker_id, {})
        for h in block_hashes:
            ref[h] = ref.get(h, 0) + 1

    def _sync_worker(self, w: Worker) -> dict[int, int]:
        wid = w.worker_id
        dq = self._q.get(wid)
        if dq is None:
            self._q[wid] = deque()
            ref = self._ref[wid] = {}
            return ref
        ref = self._ref[wid]
        k = len(w.queue) + len(w.batch)
        while len(dq) > k:
            for h in dq.popleft():
                n = ref[h] - 1
                if n:
                    ref[h] = n
                else:
                    del ref[h]
        return ref

    def active_blocks_of(self, w: Worker) -> int:
        """Distinct KV blocks of ``w``'s in-flight requests [blocks]."""
        return len(self._sync_worker(w))

    def potential_blocks_of(self, w: Worker, block_hashes) -> int:
        """Active blocks of ``w`` if a request with ``block_hashes`` were added [blocks]."""
        ref = self._sync_worker(w)
        depth = 0
        for h in block_hashes:
            if h not in ref:
                break
            depth += 1
        return len(ref) + len(block_hashes) - depth


@dataclass(frozen=True)
class DynamoParams:
    """Dynamo KV router parameters (ai-dynamo/dynamo ``lib/kv-router/src/scheduling/config.rs``
    ``KvRouterConfig``; CLI ``--kv-overlap-score-weight`` default 1, ``--router-temperature``
    default 0 = the minimum-cost worker, no softmax sampling).

    Raises:
        ValueError: if the weight is negative.
    """

    overlap_score_weight: float = 1.0

    def __post_init__(self) -> None:
        if self.overlap_score_weight < 0:
            raise ValueError(f"dynamo overlap_score_weight must be >= 0, got {self.overlap_score_weight}")


class DynamoKVRouter(Router):
    """Dynamo KV router, temperature 0 (ai-dynamo/dynamo ``lib/kv-router/src/scheduling/selector.rs``
    ``DefaultWorkerSelector::select_worker``, commit ccd1706; earlier releases
    ``lib/llm/src/kv_router/scheduler.rs``; docs "KV Router", cost function)::

        logit_w = weight * prefill_tokens_w / block + potential_blocks_w
        prefill_tokens_w   = active prefill tokens_w + max(0, L - overlap_w * block)
        potential_blocks_w = distinct blocks of w's in-flight requests
                             + blocks of the request not among them

    active prefill tokens = new (uncached) tokens of w's queued and running requests (Dynamo adds
    a request's ``isl - overlap * block`` at routing and removes it when its prefill completes);
    overlap = the request's ready prefix blocks on w (KV events keep Dynamo's index exact);
    potential blocks as :class:`ActiveSequences`. The minimum logit wins; ties go to the worker
    with the fewest cached blocks (Dynamo's tie-break on the indexer's per-worker tree size),
    then to the run's seeded generator (Dynamo: random when the tree sizes are equal; an
    arbitrary one of several smallest otherwise).

    Translation: cpgym's blocks include the request's partial last block (the Mooncake traces
    hash it); Dynamo hashes full blocks only, so its logits differ by at most one block.
    """

    name = "dynamo-kv"

    def __init__(self, params: DynamoParams | None = None) -> None:
        self.params = params or DynamoParams()

    def reset(self, view: PoolView, rng: np.random.Generator) -> None:
        super().reset(view, rng)
        self.active = ActiveSequences()

    def route(self, request: Request, view: PoolView) -> int:
        overlap = None
        if view.kv_tiers is not None:  # KV-overlap over all tiers (baselines/tiered.py)

            overlap = dynamo_pull_overlap(request, view, view.kv_tiers)
        ties: list[int] = []
        best_cost = math.inf
        for wid, cost in self.logits(request, view, overlap):
            if cost < best_cost:
                best_cost, ties = cost, [wid]
            elif cost == best_cost:
                ties.append(wid)
        return self.break_tie(ties, view)

    def logits(self, request: Request, view: PoolView, overlap_blocks=None) -> list[tuple[int, float]]:
        """``[(worker id, logit)]`` over the eligible workers, pool order.

        Args:
            overlap_blocks: ``f(worker) -> int``, the request's prefix blocks the worker holds
                [blocks]; default its ready HBM prefix (with KV tiers on, :meth:`route` passes
                :func:`baselines.tiered.dynamo_pull_overlap`: every tier).
        """
        bs = view.kv_block_size_tokens
        w8 = self.params.overlap_score_weight
        L = request.num_prompt_tokens
        hashes = request.block_hashes
        workers = view.workers
        potential = self.active.potential_blocks_of
        if overlap_blocks is None:
            def overlap_blocks(w: Worker) -> int:
                return w.cache.match_ready(hashes)
        out = []
        for wid in view.eligible_worker_ids(request):
            w = workers[wid]
            active = w.num_queued_new_tokens + (view.num_running_new_tokens(wid) if w.batch else 0)
            new = L - overlap_blocks(w) * bs
            out.append((wid, w8 * (active + (new if new > 0 else 0)) / bs + potential(w, hashes)))
        return out

    def break_tie(self, ties: list[int], view: PoolView) -> int:
        """Among equal minimum logits: fewest cached blocks, then the seeded generator."""
        if len(ties) == 1:
            return ties[0]
        workers = view.workers
        sizes = [len(workers[w].cache) for w in ties]
        low = min(sizes)
        ties = [w for w, n in zip(ties, sizes) if n == low]
        return ties[0] if len(ties) == 1 else ties[int(self.rng.integers(len(ties)))]

    def on_dispatch(self, request: Request, worker_id: int, view: PoolView) -> None:
        self.active.record(worker_id, request.block_hashes)
