"""Discrete-event simulator of a fixed-GPU prefill pool (SimPy).

One clock, one tie-break: SimPy orders its event queue by ``(time, priority, insertion
sequence)``. cpgym gives every event kind a fixed priority (:class:`EventPriority`), so events
at the same time run in this order: engine-step ends, KV-transfer ends, reconfiguration
steps, arrivals, periodic control (controller windows, cache scans); events of one kind at the
same time run in the order they were scheduled. A step that ends at the same instant as an
arrival therefore frees its worker and inserts its blocks before the router sees the arrival.

The loop is driven by decisions (Decima/Park style): :meth:`Simulator.run_until_decision`
advances the clock until a request needs a routing decision, :meth:`Simulator.decide`
dispatches it. :meth:`Simulator.run` drives the same two calls with a :class:`Router`, so a
heuristic run and a Gymnasium-driven run of the same policy are the same computation.

Per-event cost is O(batch + blocks touched), independent of queue lengths: queues are deques,
outstanding work is maintained incrementally, and arrivals are chained (one pending arrival
event at a time).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import simpy
from simpy.events import Event

from envs.sim.cache import PrefixCache
from envs.sim.config import SimConfig
from envs.sim.cost_model import Calibration
from envs.sim.events import EventPriority
from envs.sim.faults import FaultManager
from envs.sim.links import KVLinks
from envs.sim.request import Request, Workload
from envs.sim.router import PoolView, Router
from envs.sim.tiers import TieredKV
from envs.sim.worker import Worker, WorkerState


class _Call(Event):
    """A SimPy event that runs ``fn(payload)`` when processed (a Timeout with a callback).

    Relies on SimPy 4 internals (``Event._value`` / ``_ok`` / ``callbacks`` and
    ``Environment.schedule``), hence the ``simpy<5`` cap in pyproject.toml.

    Raises:
        ValueError: ``delay`` is negative or not finite (SimPy's own ``Timeout`` refuses a
            negative delay; scheduling into the past would move the clock backwards).
    """

    def __init__(self, env: simpy.Environment, delay: float, priority: int, fn: Callable, payload) -> None:
        if not (delay >= 0 and math.isfinite(delay)):
            raise ValueError(f"cannot schedule an event {delay!r} s from now (at t = {env.now!r} s): "
                             "the delay must be a finite number >= 0")
        self.env = env
        self.callbacks = [self._fire]
        self._value = None
        self._ok = True
        self.fn = fn
        self.payload = payload
        env.schedule(self, priority, delay)

    def _fire(self, _event) -> None:
        self.fn(self.payload)


@dataclass
class SimResult:
    """Outcome of one run: per-request records (numpy arrays, indexed by request id) and totals.

    Record arrays (NaN / -1 where a request never got there):
        arrival_s, first_dispatch_s, start_s, finish_s [s]; ttft_s [s] (finish + KV hand-off +
        first decode - arrival); ttft_slo_s [s]; worker_id, degree (of the worker that ran it);
        num_prompt_tokens, num_cached_tokens, num_new_tokens [tokens];
        routed_cached_tokens [tokens] (ready hit seen at routing); predicted_service_s [s]
        (router's ``E_C(R,P)`` at routing); actual_service_s [s] (duration of the engine step
        that ran it); predicted_wait_s [s] (``q_w`` at routing); num_routings. With KV tiers on
        also the columns of ``envs.sim.tiers.RECORD_KEYS`` (fetch decision, hit tokens and fetched
        bytes per tier, fetch start / ready / hidden / exposed times).
    """

    policy: str
    workload: str
    config: SimConfig
    calibration: Calibration
    records: dict[str, np.ndarray]
    sim_time_s: float
    wall_time_s: float
    num_gpus: int
    gpu_time_s: float
    num_events: int
    extras: dict = field(default_factory=dict)

    @property
    def num_requests(self) -> int:
        return len(self.records["arrival_s"])


class Simulator:
    """The prefill-pool simulator.

    Args:
        workload: requests to replay (not modified).
        config: run configuration (pool, engine, latency, prediction error, SLO, seed, horizon).
        calibration: cost model and memory figures; default: ``config.calibration_path`` or the
            shipped default file.
        policy_name: label stored in the result.
        slo_cost_model: cost model of the "scaled" TTFT SLO rule; default the run's own. A policy
            that changes the cost form (e.g. a TP-4 calibration transform) passes the original
            one so that all policies are judged against the same SLOs.

    Raises:
        ValueError: on an invalid composition, a pool whose smallest supported degree is not a
            multiple of the calibration's weight shard group, or a workload whose prompts no worker can hold
            (reported at dispatch time as an unroutable request instead, see ``num_rejected``).
    """

    def __init__(self, workload: Workload, config: SimConfig | None = None, calibration: Calibration | None = None,
                 policy_name: str = "external", slo_cost_model=None,
                 node_calibrations: list[Calibration] | None = None) -> None:
        self.config = config = config or SimConfig()
        if calibration is None:
            calibration = Calibration.resolve(config.calibration_path)
        config.pool.check_weight_shard(calibration.weight_shard_gpus)
        self.calibration = calibration
        self.cost_model = calibration.cost_model()
        # heterogeneous pools: one calibration per node (default: config.node_calibration_paths)
        if node_calibrations is None and config.node_calibration_paths:
            node_calibrations = [Calibration.load(p) if p else calibration for p in config.node_calibration_paths]
        for c in node_calibrations or ():
            config.pool.check_weight_shard(c.weight_shard_gpus)
        self.node_calibrations: list[Calibration] | None = node_calibrations
        self._node_cost_models = [c.cost_model() if c is not calibration else self.cost_model
                                  for c in node_calibrations] if node_calibrations else None
        self._slo_cost_model = slo_cost_model  # cost model of the "scaled" SLO rule (default: cost_model)
        self.workload = workload
        self.policy_name = policy_name
        self.kv_block_size_tokens = workload.kv_block_size_tokens
        self.env = simpy.Environment()
        seeds = np.random.SeedSequence(config.seed).spawn(3)
        self.noise_rng = np.random.default_rng(seeds[0])
        self.policy_rng = np.random.default_rng(seeds[1])
        self.aux_rng = np.random.default_rng(seeds[2])
        self.epoch = 0
        self.workers: dict[int, Worker] = {}
        self.worker_ids: list[int] = []
        self.kv_tiers = None  # envs.sim.tiers.TieredKV when config.kv_tiers.enabled (set below)
        self.retired_workers: list[Worker] = []
        for degree, first_gpu in config.pool.placements():
            self.add_worker(degree, first_gpu)
        self.view = PoolView(self)
        pool = config.pool
        self.links = KVLinks(-(-pool.num_gpus // pool.gpus_per_node), config.links)
        self.kv_block_bytes = self.kv_block_size_tokens * calibration.kv_bytes_per_token
        self.trace: list[tuple[str, float]] | None = [] if config.record_events else None
        # listeners: fn(sim, request, worker) on dispatch / on finish
        self.dispatch_listeners: list[Callable] = []
        self.finish_listeners: list[Callable] = []
        # worker id -> fn(sim, worker, request, num_ready_blocks) -> (num_usable_blocks, ready_at_s):
        # reconciles pending KV blocks before a step (paper §6.2; envs/sim/reconfig.py).
        self.reconcile_hooks: dict[int, Callable] = {}
        # fn() -> dict merged into SimResult.extras; attachments by name (e.g. "reconfig")
        self.extras_providers: list[Callable[[], dict]] = []
        self.attachments: dict[str, object] = {}
        self._init_records()
        self._decisions: deque[Request] = deque()
        self._parked: deque[Request] = deque()
        self._horizon = config.horizon_s if config.horizon_s is not None else math.inf
        self._done = False
        self.num_events = 0
        self.num_rejected = 0
        self._max_prompt_tokens = max(c.max_prompt_tokens for c in (node_calibrations or [calibration]))
        pe = config.prediction_error
        self._noise_sigma = pe.noise_sigma
        self._noise_mu = -0.5 * pe.noise_sigma ** 2
        self._degree_factor = {d: pe.factor_for(d) for d in config.pool.supported_degrees}
        self._handoff_s_per_token = calibration.kv_bytes_per_token / config.latency.kv_handoff_bandwidth_bytes_per_s
        self._first_decode_s = config.latency.first_decode_step_s
        if config.kv_tiers.enabled:
            self.kv_tiers = TieredKV(self, config.kv_tiers)
            self.extras_providers.append(self.kv_tiers.extras)
        self._next_arrival = 0
        # Fault hooks (envs/sim/faults.py), inert without SimConfig.faults: per-GPU step-time
        # factor (stragglers) and a check that ends the run once only recovery events remain.
        self.gpu_step_factor: list[float] | None = None
        self.stop_when_idle: Callable[[], bool] | None = None
        # largest KV capacity [tokens] of a worker that failed GPUs will form again after repair
        self.returning_kv_capacity_tokens = 0
        if config.faults is not None:
            FaultManager(self, config.faults)
        if workload.requests:
            self.schedule(workload.requests[0].arrival_time_s, EventPriority.ARRIVAL, self._on_arrival, 0)
        self._wall_start = time.perf_counter()

    # ------------------------------------------------------------------ workers
    def add_worker(self, degree: int, first_gpu: int) -> Worker:
        """Creates a worker on ``degree`` GPUs from ``first_gpu`` (validated) and makes it ACTIVE."""
        pool = self.config.pool
        pool.check_group(degree, first_gpu)
        wid = pool.worker_id_for(first_gpu)
        if wid in self.workers:
            raise ValueError(f"worker id {wid} (GPU {first_gpu}) already exists")
        node = first_gpu // pool.gpus_per_node
        cal = self.calibration_of_node(node)
        w = Worker(wid, degree, first_gpu, node, PrefixCache(self.kv_capacity_blocks(degree, first_gpu), wid),
                   cal.kv_capacity_tokens(degree), epoch=self.epoch,
                   created_s=self.env.now if hasattr(self, "env") else 0.0)
        w.max_prompt_tokens = min(cal.max_prompt_tokens, w.kv_capacity_tokens)
        w.cost_model = self._node_cost_models[node] if self._node_cost_models else self.cost_model
        w.gpu_type = cal.gpu_type
        if self.kv_tiers is not None:
            self.kv_tiers.watch(w)
        self.workers[wid] = w
        self.worker_ids.append(wid)
        self.worker_ids.sort(key=lambda i: self.workers[i].first_gpu)
        return w

    def kv_capacity_blocks(self, degree: int, first_gpu: int) -> int:
        """Prefix-cache capacity [KV blocks] of a worker of ``degree`` GPUs from ``first_gpu``: its
        node's calibration (``Calibration.kv_capacity_blocks``) times ``cache_capacity_scale``."""
        cal = self.calibration_of_node(first_gpu // self.config.pool.gpus_per_node)
        return int(cal.kv_capacity_blocks(degree, self.kv_block_size_tokens) * self.config.cache_capacity_scale)

    def calibration_of_node(self, node: int) -> Calibration:
        """The calibration of the GPUs of ``node`` (the run's one in a homogeneous pool)."""
        return self.node_calibrations[node] if self.node_calibrations else self.calibration

    def retire_worker(self, worker_id: int) -> Worker:
        """Removes an idle worker with an empty queue (after a drain)."""
        w = self.workers[worker_id]
        if w.batch or w.queue:
            raise RuntimeError(f"worker {worker_id} cannot retire with {len(w.batch)} running "
                               f"and {len(w.queue)} queued requests")
        w.state = WorkerState.RETIRED
        del self.workers[worker_id]
        self.worker_ids.remove(worker_id)
        self.retired_workers.append(w)
        return w

    def num_gpus_in_use(self) -> int:
        return sum(w.degree for w in self.workers.values())

    def is_eligible(self, w: Worker, request: Request) -> bool:
        return w.state == WorkerState.ACTIVE and request.num_prompt_tokens <= w.max_prompt_tokens

    def running_new_tokens(self, worker_id: int) -> int:
        return sum(self._num_new[r.request_id] for r in self.workers[worker_id].batch)

    # ------------------------------------------------------------------ events
    def schedule(self, delay_s: float, priority: int, fn: Callable, payload=None) -> Event:
        """Runs ``fn(payload)`` after ``delay_s`` simulated seconds with the given priority.

        Raises:
            ValueError: ``delay_s`` is negative or not finite (NaN, inf).
        """
        return _Call(self.env, delay_s, priority, fn, payload)

    def _log(self, name: str) -> None:
        if self.trace is not None:
            self.trace.append((name, self.env.now))

    # ------------------------------------------------------------------ records
    def _init_records(self) -> None:
        n = self.workload.num_requests
        nan = math.nan
        reqs = self.workload.requests
        self._arrival = [r.arrival_time_s for r in reqs]
        self._first_dispatch = [nan] * n
        self._start = [nan] * n
        self._finish = [nan] * n
        self._ttft = [nan] * n
        self._worker = [-1] * n
        self._degree = [0] * n
        self._num_cached = [0] * n
        self._num_new = [0] * n
        self._routed_cached = [0] * n
        self._pred_service = [nan] * n
        self._actual_service = [nan] * n
        self._pred_wait = [nan] * n
        self._num_routings = [0] * n
        self._slo = self._slo_per_request()

    def _slo_per_request(self) -> list[float]:
        slo = self.config.slo
        reqs = self.workload.requests
        if slo.kind == "fixed":
            return [slo.ttft_slo_s] * len(reqs)
        cm = self._slo_cost_model or self.cost_model
        lat = self.config.latency
        out = []
        for r in reqs:
            L = r.num_prompt_tokens
            iso = (cm.service_time_s(1, L, 0) + L * self.calibration.kv_bytes_per_token / lat.kv_handoff_bandwidth_bytes_per_s
                   + lat.first_decode_step_s)
            out.append(max(slo.min_ttft_slo_s, slo.slo_scale * iso))
        return out

    def ttft_slo_s(self, request_id: int) -> float:
        return self._slo[request_id]

    def num_cached_tokens(self, request_id: int) -> int:
        """Prefix hit P [tokens] the request's engine step used (0 before it started)."""
        return self._num_cached[request_id]

    def ttft_s(self, request_id: int) -> float:
        """TTFT [s] of the request (prefill finish + KV hand-off + first decode - arrival; NaN
        before its prefill finished)."""
        return float(self._ttft[request_id])

    # ------------------------------------------------------------------ arrivals / decisions
    def _on_arrival(self, idx: int) -> None:
        reqs = self.workload.requests
        req = reqs[idx]
        self.num_events += 1
        # the clock reaches t as now + (t - now), which may differ from t by one ulp: record the
        # simulated instant so that start >= arrival holds exactly
        self._arrival[idx] = self.env.now
        if self.trace is not None:
            self.trace.append((f"arrival:{idx}", self.env.now))
        self._decisions.append(req)
        nxt = idx + 1
        self._next_arrival = nxt
        if nxt < len(reqs):
            # equal arrival times can sit one ulp behind the clock (see above): never a negative delay
            self.schedule(max(0.0, reqs[nxt].arrival_time_s - self.env.now), EventPriority.ARRIVAL, self._on_arrival, nxt)

    def redirect(self, request: Request) -> None:
        """Puts a queued request back on the decision queue (drain redirection, §6), at its back:
        behind any request already awaiting a decision at this instant (an arrival of the same
        time); requests redirected together keep their order."""
        self._decisions.append(request)

    @property
    def pending_request(self) -> Request | None:
        """The request awaiting a routing decision, if any."""
        return self._decisions[0] if self._decisions else None

    @property
    def done(self) -> bool:
        return self._done

    def run_until_decision(self, until_s: float = math.inf) -> Request | None:
        """Advances the simulation until a request needs a routing decision.

        Args:
            until_s: also stop (returning ``None`` without ending the run, ``done`` stays
                False) before processing any event later than this time [s] — used by the
                reconfiguration environment to stop at observation-window boundaries.

        Returns:
            The request awaiting a decision, or ``None`` when the run is over (no events left or
            the horizon reached) or the next event is after ``until_s``. Requests that no worker
            can hold are rejected (recorded as unfinished, counted in ``num_rejected``) without
            asking the policy.
        """
        env = self.env
        horizon = self._horizon
        step = env.step
        decisions = self._decisions
        while True:
            while decisions:
                req = decisions[0]
                verdict = self._eligibility(req)
                if verdict == 1:
                    return req
                decisions.popleft()
                if verdict == 0:
                    self._parked.append(req)  # waits until a worker becomes ACTIVE (see unpark)
                else:
                    self.num_rejected += 1
            t = env.peek()
            if t > horizon or t == math.inf or (self.stop_when_idle is not None and self.stop_when_idle()):
                self._done = True
                return None
            if t > until_s:
                return None
            step()

    def _eligibility(self, req: Request) -> int:
        """1: some worker is eligible now; 0: none now but one could hold it later (all such
        workers draining/switching); -1: no worker of the pool can ever hold the prompt."""
        ws = self.workers
        for wid in self.worker_ids:
            if self.is_eligible(ws[wid], req):
                return 1
        if req.num_prompt_tokens <= self._max_prompt_tokens and (any(
                req.num_prompt_tokens <= w.kv_capacity_tokens for w in ws.values())
                or req.num_prompt_tokens <= self.returning_kv_capacity_tokens):
            return 0
        return -1

    def unpark(self) -> None:
        """Moves requests parked for lack of an ACTIVE worker back to the decision queue
        (call after a worker becomes ACTIVE, e.g. when a reconfiguration commits)."""
        while self._parked:
            self._decisions.append(self._parked.popleft())

    def decide(self, worker_id: int) -> None:
        """Dispatches the pending request to ``worker_id``.

        Raises:
            RuntimeError: if no request is pending.
            ValueError: if the worker does not exist or is not eligible for the request.
        """
        if not self._decisions:
            raise RuntimeError("no request is waiting for a routing decision; call run_until_decision() first")
        req = self._decisions[0]
        w = self.workers.get(worker_id)
        if w is None or not self.is_eligible(w, req):
            raise ValueError(f"worker {worker_id} is not an eligible choice for request {req.request_id} "
                             f"(eligible: {self.view.eligible_worker_ids(req)})")
        self._decisions.popleft()
        self._dispatch(req, w)

    def _dispatch(self, req: Request, w: Worker) -> None:
        rid = req.request_id
        now = self.env.now
        L = req.num_prompt_tokens
        nhit = w.cache.match_ready(req.block_hashes)
        p = nhit * self.kv_block_size_tokens
        if p > L - 1:
            p = L - 1
        rem = w.step_predicted_end_s - now if w.batch else 0.0
        q = self._pred_wait[rid] = w.queued_predicted_s + (rem if rem > 0.0 else 0.0)
        if self.kv_tiers is not None:  # fetch or recompute; a fetch may start now (envs/sim/tiers.py)
            p = self.kv_tiers.on_dispatch(req, w, nhit, q)
        s = w.cost_model.service_time_s(w.degree, L - p, p)
        self._pred_service[rid] = s
        self._routed_cached[rid] = p
        if self._num_routings[rid] == 0:
            self._first_dispatch[rid] = now
        self._num_routings[rid] += 1
        self._worker[rid] = w.worker_id
        w.queue.append(req)
        w.queued_predicted_s += s
        w.num_queued_new_tokens += L - p
        for fn in self.dispatch_listeners:
            fn(self, req, w)
        if not w.batch and w.state != WorkerState.SWITCHING:
            self._start_step(w)

    # ------------------------------------------------------------------ engine
    def _start_step(self, w: Worker) -> None:
        """Forms an FCFS batch under the token budget and schedules its end."""
        q = w.queue
        if not q or w.stopped:
            return
        now = self.env.now
        cm = w.cost_model
        bs = self.kv_block_size_tokens
        budget = self.config.engine.max_batch_tokens
        max_req = self.config.engine.max_batch_requests
        cache = w.cache
        C = w.degree
        a, b, c, alpha = cm.a, cm.b, cm.c, cm.alpha
        pred = cm.d
        tokens = 0
        batch = w.batch
        pred_service = self._pred_service
        recon = self.reconcile_hooks.get(w.worker_id) if self.reconcile_hooks else None
        tiers = self.kv_tiers
        ready_at = now
        t_ready = now
        while q and len(batch) < max_req:
            req = q[0]
            L = req.num_prompt_tokens
            nhit = cache.match_ready(req.block_hashes)
            if recon is not None:
                nhit, t_ready = recon(self, w, req, nhit)
            num_resident = nhit  # blocks in the HBM cache (fetched ones enter it at the step end)
            if tiers is not None:  # fetched KV from DRAM / the store: ready no earlier than its fetch
                nhit, t_fetch = tiers.on_admit(w, req, nhit)
                if t_fetch > t_ready:
                    t_ready = t_fetch
            P = nhit * bs
            if P > L - 1:
                P = L - 1
            R = L - P
            if batch and tokens + R > budget:
                break
            q.popleft()
            rid = req.request_id
            w.queued_predicted_s -= pred_service[rid]
            w.num_queued_new_tokens -= L - self._routed_cached[rid]
            if num_resident:
                cache.touch(req.block_hashes, num_resident)
            self._start[rid] = now
            self._num_cached[rid] = P
            self._num_new[rid] = R
            self._degree[rid] = C
            self._worker[rid] = w.worker_id
            pred += a * R + b * P + (c * R + alpha * (R * P + R * (R + 1) * 0.5)) / C
            tokens += R
            batch.append(req)
            if t_ready > ready_at:
                ready_at = t_ready
        if not q:
            w.queued_predicted_s = 0.0
            w.num_queued_new_tokens = 0
        if tiers is not None:
            tiers.on_step_started(w)
        actual = self._actual_step_s(w, pred)
        # A step whose requests reuse pending blocks waits for their reconciliation transfers.
        wait = ready_at - now
        w.step_start_s = now
        w.step_predicted_end_s = now + wait + pred
        if self.trace is not None:
            if wait > 0.0:
                self.trace.append((f"reconcile_wait:w{w.worker_id}", now))
            self.trace.append((f"step_start:w{w.worker_id}:n{len(batch)}", now))
        w.step_event = self.schedule(wait + actual, EventPriority.STEP_END, self._on_step_end, w)

    def _actual_step_s(self, w: Worker, predicted_step_s: float) -> float:
        """Simulated (actual) duration [s] of a step of ``w`` predicted to take ``predicted_step_s``:
        the per-degree bias, the log-normal noise (one draw from ``noise_rng`` when its sigma > 0;
        :class:`~envs.sim.config.PredictionErrorConfig`) and, with stragglers, the slowest rank's factor."""
        actual = predicted_step_s * self._degree_factor[w.degree]
        if self._noise_sigma > 0.0:
            actual *= math.exp(self.noise_rng.normal(self._noise_mu, self._noise_sigma))
        if self.gpu_step_factor is not None:  # stragglers: the slowest rank paces the group
            actual *= max(self.gpu_step_factor[g] for g in w.gpus)
        return actual

    def _on_step_end(self, w: Worker) -> None:
        now = self.env.now
        self.num_events += 1
        if self.trace is not None:
            self.trace.append((f"step_end:w{w.worker_id}", now))
        duration = now - w.step_start_s
        w.busy_time_s += duration
        w.gpu_time_s += duration * w.degree
        w.num_steps += 1
        insert = w.cache.insert
        handoff = self._handoff_s_per_token
        first_decode = self._first_decode_s
        arrival = self._arrival
        batch = w.batch
        w.batch = []
        for req in batch:
            rid = req.request_id
            insert(req.block_hashes)
            self._finish[rid] = now
            self._actual_service[rid] = duration
            self._ttft[rid] = now - arrival[rid] + req.num_prompt_tokens * handoff + first_decode
        if self.finish_listeners:
            for fn in self.finish_listeners:
                fn(self, batch, w)
        if w.queue and w.state != WorkerState.SWITCHING:
            self._start_step(w)

    # ------------------------------------------------------------------ driving
    def run(self, router: Router) -> SimResult:
        """Runs to the end (or the horizon) with ``router`` deciding every dispatch."""
        self.policy_name = getattr(router, "name", self.policy_name)
        view = self.view
        router.reset(view, self.policy_rng)
        decide = self.decide
        route = router.route
        on_dispatch = router.on_dispatch
        while (req := self.run_until_decision()) is not None:
            wid = route(req, view)
            decide(wid)
            on_dispatch(req, wid, view)
        return self.result()

    def request_accounting(self) -> dict[str, int]:
        """Where every request of the workload is now: ``num_finished``, ``num_waiting``
        (awaiting a routing decision, or parked for lack of an ACTIVE worker), ``num_queued``,
        ``num_running``, ``num_not_arrived``, ``num_rejected``. Each request is in exactly one
        of them, so they sum to ``num_requests`` (checked by :meth:`result`)."""
        ws = list(self.workers.values())
        return {"num_finished": sum(1 for t in self._finish if t == t),
                "num_waiting": len(self._decisions) + len(self._parked),
                "num_queued": sum(len(w.queue) for w in ws),
                "num_running": sum(len(w.batch) for w in ws),
                "num_not_arrived": self.workload.num_requests - self._next_arrival,
                "num_rejected": self.num_rejected}

    def result(self) -> SimResult:
        """Snapshot of the records and totals at the current time.

        Raises:
            RuntimeError: if a request is lost or counted twice (:meth:`request_accounting`).
        """
        acct = self.request_accounting()
        if sum(acct.values()) != self.workload.num_requests:
            raise RuntimeError(f"request accounting broken: {acct} does not sum to {self.workload.num_requests} requests")
        f = np.asarray
        reqs = self.workload.requests
        records = {
            "request_id": np.arange(len(reqs), dtype=np.int64),
            "arrival_s": f(self._arrival, dtype=float),
            "first_dispatch_s": f(self._first_dispatch, dtype=float),
            "start_s": f(self._start, dtype=float),
            "finish_s": f(self._finish, dtype=float),
            "ttft_s": f(self._ttft, dtype=float),
            "ttft_slo_s": f(self._slo, dtype=float),
            "worker_id": f(self._worker, dtype=np.int64),
            "degree": f(self._degree, dtype=np.int64),
            "num_prompt_tokens": f([r.num_prompt_tokens for r in reqs], dtype=np.int64),
            "num_cached_tokens": f(self._num_cached, dtype=np.int64),
            "num_new_tokens": f(self._num_new, dtype=np.int64),
            "routed_cached_tokens": f(self._routed_cached, dtype=np.int64),
            "predicted_service_s": f(self._pred_service, dtype=float),
            "actual_service_s": f(self._actual_service, dtype=float),
            "predicted_wait_s": f(self._pred_wait, dtype=float),
            "num_routings": f(self._num_routings, dtype=np.int64),
        }
        if self.kv_tiers is not None:
            records.update(self.kv_tiers.request_records())
        all_workers = list(self.workers.values()) + self.retired_workers
        last_arrival = reqs[-1].arrival_time_s if reqs else 0.0
        return SimResult(
            policy=self.policy_name,
            workload=self.workload.name,
            config=self.config,
            calibration=self.calibration,
            records=records,
            sim_time_s=(max(self.env.now, last_arrival) if self._horizon == math.inf
                        else min(self._horizon, max(self.env.now, last_arrival))),
            wall_time_s=time.perf_counter() - self._wall_start,
            num_gpus=self.config.pool.num_gpus,
            gpu_time_s=sum(w.gpu_time_s for w in all_workers),
            num_events=self.num_events,
            extras={"num_rejected": self.num_rejected, "kv_transfer_bytes": self.links.total_bytes,
                    "num_kv_transfers": self.links.num_transfers, "num_workers": len(self.workers),
                    "composition": [(w.degree, w.first_gpu) for w in (self.workers[i] for i in self.worker_ids)],
                    **{k: v for fn in self.extras_providers for k, v in fn().items()}},
        )
