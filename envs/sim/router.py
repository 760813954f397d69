"""The one router interface used by every routing policy, and the read-only pool view.

At each decision (an arrival, or a queued request redirected away from a draining worker) the
policy gets the request and a :class:`PoolView` and returns a worker id. Heuristics implement
:class:`Router`; learned policies act through the Gymnasium environment, which fulfils the same
decision point (``Simulator.run_until_decision`` / ``Simulator.decide``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from envs.sim.request import Request
from envs.sim.worker import Worker, WorkerState

if TYPE_CHECKING:  # pragma: no cover
    from envs.sim.cost_model import CostModel
    from envs.sim.simulator import Simulator


class PoolView:
    """Read-only view of the pool for routing decisions.

    Worker ids are listed in ``worker_ids`` (ascending first GPU: the tie-break order every
    built-in policy uses). All times are *predicted* (the router never sees actual times).
    """

    __slots__ = ("_sim",)

    def __init__(self, sim: Simulator) -> None:
        self._sim = sim

    # --- pool -----------------------------------------------------------------------------
    @property
    def now_s(self) -> float:
        """Current simulated time [s]."""
        return self._sim.env.now

    @property
    def worker_ids(self) -> list[int]:
        """Ids of the current (non-retired) workers, ascending first GPU. Do not mutate."""
        return self._sim.worker_ids

    @property
    def workers(self) -> dict[int, Worker]:
        """Worker id -> :class:`Worker` (current workers). Read-only by contract: for policies
        whose per-decision cost matters (hot path) and that read several fields per worker
        (queue, running step times, cache). Never mutate a worker or this dict."""
        return self._sim.workers

    @property
    def cost_model(self) -> CostModel:
        """The pool's predicted cost model ``E_C(R, P)`` (of the run's calibration). In a
        heterogeneous pool each worker has its own: use :meth:`worker_cost_model`."""
        return self._sim.cost_model

    def worker_cost_model(self, worker_id: int) -> CostModel:
        """The predicted cost model of the worker's GPU type (``Worker.cost_model``)."""
        return self._sim.workers[worker_id].cost_model

    @property
    def kv_block_size_tokens(self) -> int:
        return self._sim.kv_block_size_tokens

    @property
    def max_num_workers(self) -> int:
        return self._sim.config.pool.max_num_workers

    @property
    def epoch(self) -> int:
        return self._sim.epoch

    @property
    def kv_tiers(self):
        """The run's :class:`envs.sim.tiers.TieredKV` (KV tiers below HBM and the pull path:
        ``kv_tiers.route_estimate(worker, request, hbm_blocks, q_s)``), or ``None`` when tiers
        are off."""
        return self._sim.kv_tiers

    # --- one worker -----------------------------------------------------------------------
    def degree(self, worker_id: int) -> int:
        return self._sim.workers[worker_id].degree

    def first_gpu(self, worker_id: int) -> int:
        return self._sim.workers[worker_id].first_gpu

    def node(self, worker_id: int) -> int:
        return self._sim.workers[worker_id].node

    def state(self, worker_id: int) -> WorkerState:
        return self._sim.workers[worker_id].state

    def outstanding_work_s(self, worker_id: int) -> float:
        """``q_w``: predicted outstanding work [s] = predicted remaining time of the running
        step + routing-time predicted service times of the queued requests (paper §5)."""
        w = self._sim.workers[worker_id]
        rem = w.step_predicted_end_s - self._sim.env.now if w.batch else 0.0
        return w.queued_predicted_s + (rem if rem > 0.0 else 0.0)

    def num_queued_requests(self, worker_id: int) -> int:
        return len(self._sim.workers[worker_id].queue)

    def num_inflight_requests(self, worker_id: int) -> int:
        """Queued plus running requests (SGLang's router load)."""
        w = self._sim.workers[worker_id]
        return len(w.queue) + len(w.batch)

    def num_queued_new_tokens(self, worker_id: int) -> int:
        """Routing-time new tokens of the queued requests [tokens]."""
        return self._sim.workers[worker_id].num_queued_new_tokens

    def num_running_new_tokens(self, worker_id: int) -> int:
        """New tokens of the running step [tokens]."""
        return self._sim.running_new_tokens(worker_id)

    def kv_usage(self, worker_id: int) -> float:
        """Share of the worker's KV cache blocks in use, in [0, 1]."""
        c = self._sim.workers[worker_id].cache
        return len(c) / c.capacity_blocks if c.capacity_blocks else 1.0

    def kv_capacity_blocks(self, worker_id: int) -> int:
        return self._sim.workers[worker_id].cache.capacity_blocks

    # --- one request on one worker --------------------------------------------------------
    def cached_blocks(self, worker_id: int, request: Request) -> int:
        """Leading blocks of ``request`` present and ready on the worker."""
        return self._sim.workers[worker_id].cache.match_ready(request.block_hashes)

    def cached_tokens(self, worker_id: int, request: Request) -> int:
        """``P``: ready prefix hit [tokens], capped at ``L - 1`` so at least one token is computed."""
        n = self._sim.workers[worker_id].cache.match_ready(request.block_hashes) * self._sim.kv_block_size_tokens
        cap = request.num_prompt_tokens - 1
        return n if n < cap else cap

    def pending_blocks(self, worker_id: int, request: Request) -> int:
        """Leading blocks present (ready or pending reconciliation) on the worker."""
        return self._sim.workers[worker_id].cache.match_present(request.block_hashes)

    def predicted_service_s(self, worker_id: int, request: Request) -> float:
        """``s = E_{C_w}(R_{i,w}, P_{i,w})`` with this worker's ready hit and its own cost model [s]."""
        w = self._sim.workers[worker_id]
        p = self.cached_tokens(worker_id, request)
        return w.cost_model.service_time_s(w.degree, request.num_prompt_tokens - p, p)

    def is_eligible(self, worker_id: int, request: Request) -> bool:
        """ACTIVE and able to hold the prompt (model max length and the worker's KV memory).
        A cache miss never makes a worker ineligible (paper §5)."""
        return self._sim.is_eligible(self._sim.workers[worker_id], request)

    def eligible_worker_ids(self, request: Request) -> list[int]:
        """Eligible workers in tie-break order (may be empty if no worker can hold the prompt)."""
        sim = self._sim
        ws = sim.workers
        L = request.num_prompt_tokens
        active = WorkerState.ACTIVE
        out = []
        for wid in sim.worker_ids:
            w = ws[wid]
            if w.state == active and L <= w.max_prompt_tokens:
                out.append(wid)
        return out


class Router:
    """Base class of routing policies.

    Subclasses set ``name`` and implement :meth:`route`. A router may keep private state
    (e.g. an approximate prefix tree); :meth:`reset` is called once per run before the first
    decision with the run's seeded generator — the only randomness a router may use.
    """

    name: str = "router"

    def reset(self, view: PoolView, rng: np.random.Generator) -> None:
        self.rng = rng

    def route(self, request: Request, view: PoolView) -> int:  # pragma: no cover - interface
        """Returns the id of an eligible worker for ``request``."""
        raise NotImplementedError

    def on_dispatch(self, request: Request, worker_id: int, view: PoolView) -> None:
        """Called after every dispatch (also of decisions made by an external policy)."""


class LeastWorkRouter(Router):
    """Least predicted outstanding work ``q_w`` (ties: fewer queued requests, then pool order).

    Defined here, below the baselines, because it is the reference router of capacity
    profiling (:mod:`envs.planning.capacity`); registered as ``least-work`` in
    :mod:`baselines.registry`."""

    name = "least-work"

    def route(self, request: Request, view: PoolView) -> int:
        # hot path: reads the workers directly (same q_w as PoolView.outstanding_work_s)
        best = -1
        best_key = None
        L = request.num_prompt_tokens
        now = view.now_s
        workers = view.workers
        active = WorkerState.ACTIVE
        for wid in view.worker_ids:
            w = workers[wid]
            if w.state != active or L > w.max_prompt_tokens:
                continue
            rem = w.step_predicted_end_s - now if w.batch else 0.0
            key = (w.queued_predicted_s + (rem if rem > 0.0 else 0.0), len(w.queue))
            if best_key is None or key < best_key:
                best, best_key = wid, key
        return best
