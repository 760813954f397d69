"""Faults in the prefill pool and their recovery through the reconfiguration protocol.

The fault model (:class:`envs.sim.fault_config.FaultConfig`: a schedule of fault events plus
optional random processes, its file format and the defaults' sources) is in
``envs/sim/fault_config.py``. ``SimConfig.faults`` attaches a :class:`FaultManager` to the
simulator; without it (the default) no code path below runs and a run is unchanged.

Fault kinds:

* ``gpu_failure`` (``gpu``): the GPU stops. Its worker (one synchronous CP group) stops at once:
  the running engine step is lost (its GPU time so far is *recompute work*, ``recompute_gpu_time_s``
  = elapsed step time x C), its requests lose their progress, and its KV cache is gone. The
  failure is *not yet known*: until the detection delay has passed the worker still looks ACTIVE
  to routers (a hung NCCL group looks like a slow worker), so requests may still be dispatched to
  it; they wait there.
* ``node_failure`` (``node``): every GPU of the node fails at once, and the node's host memory
  is lost: its KV DRAM tier (``envs/sim/tiers.py``) empties and the transfers pending on its
  links end (the pool-wide KV store keeps its blocks). A ``gpu_failure`` keeps the host memory.
* ``straggler`` (``gpu``, ``factor``, ``duration_s``): engine steps of the worker holding the GPU
  that *start* in ``[time_s, time_s + duration_s)`` take ``factor`` times as long (the slowest
  rank sets the pace of a synchronous group). Routers are not told (their predictions keep the
  calibrated cost model); observations flag the worker as degraded.
* ``link_slowdown`` / ``link_failure`` (``link``: ``"intra:<node>"``, ``"out:<node>"`` or
  ``"in:<node>"``; ``factor`` for a slowdown; ``duration_s``): KV transfers (reconciliation,
  replication) on that link run at ``factor`` x bandwidth, or stall until the link is back.

Recovery (after ``detection_delay_s``), with the existing split/drain/epoch rules
(``envs/sim/reconfig.py``):

1. the stopped worker leaves the pool (RETIRED); the requests that were running or queued on it
   are re-routed by the active router (``Simulator.redirect``, counted in ``num_routings``) and
   recomputed from scratch — or from a prefix copy that survives on another worker; its cache
   entries are removed (eviction listeners, so the global cache manager sees it);
2. its surviving GPUs are re-formed into the largest valid workers of the same placement rules
   as a split (aligned, supported degree, inside the failed worker's GPU span; a GPU that fits no
   valid group stays a healthy spare). The new workers are REBUILDING (not schedulable) for
   ``rebuild_s`` (process start, weight load, CUDA graph capture); then the global epoch
   increments and they become ACTIVE — only then can the router choose them;
3. the failed GPU is repaired ``repair_s`` after detection and rejoins: the free healthy GPUs of
   the failed worker's span form workers again (REBUILDING for ``rebuild_s``, then a new epoch).

A fault that hits a worker taking part in a split/merge aborts that operation
(:meth:`envs.sim.reconfig.Reconfigurator.abort_for`): a dead rank never reaches the common step
boundary. A new operation never starts on a stopped worker.

Random processes are drawn once when the manager is attached, from their own stream
(``numpy.random.SeedSequence(config.seed, spawn_key=(FAULT_STREAM,))``: the run's other streams
are unchanged), over ``[0, last arrival]`` (or the horizon): same seed, same faults.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

import numpy as np

from envs.sim.events import EventPriority
from envs.sim.fault_config import (
    GPU_FAILURE,
    LINK_FAILURE,
    LINK_SLOWDOWN,
    NODE_FAILURE,
    STRAGGLER,
    FaultConfig,
    FaultEvent,
    parse_link,
)
from envs.sim.worker import WorkerState

if TYPE_CHECKING:  # pragma: no cover
    from envs.sim.simulator import Simulator
    from envs.sim.worker import Worker

#: spawn key of the random-fault stream (independent of the simulator's own streams).
FAULT_STREAM = 7


# ---------------------------------------------------------------------------------- records
@dataclass
class FaultRecord:
    """What one fault did (times in simulated seconds; NaN while not reached).

    ``recovery_time_s``: fault -> the pool serves again on every GPU the fault did not break
    (the re-formed workers are ACTIVE; for a fault that left no survivor — a node, a CP-1 worker —
    that is the detection, when its requests are re-routed); for a straggler / link fault: its
    duration. ``full_recovery_time_s``: fault -> the repaired GPUs serve again (NaN if not within
    the run).
    """

    index: int
    kind: str
    time_s: float
    gpus: tuple[int, ...] = ()
    worker_ids: tuple[int, ...] = ()
    detected_s: float = math.nan
    rebuilt_s: float = math.nan
    repaired_s: float = math.nan
    rejoined_s: float = math.nan
    num_affected_requests: int = 0
    recompute_gpu_time_s: float = 0.0
    num_rebuilt_workers: int = 0
    num_spare_gpus: int = 0
    aborted_operations: tuple[int, ...] = ()
    ttft_before_s: float = math.nan
    ttft_after_s: float = math.nan
    slo_attainment_before: float = math.nan
    slo_attainment_after: float = math.nan
    end_s: float = math.nan
    affected: set = field(default_factory=set, repr=False)
    spans: list = field(default_factory=list, repr=False)  # (first GPU, degree) of each stopped worker

    @property
    def recovery_time_s(self) -> float:
        if self.kind in (STRAGGLER, LINK_SLOWDOWN, LINK_FAILURE):
            return self.end_s - self.time_s
        return self.rebuilt_s - self.time_s  # 0 if every GPU it named had failed already

    @property
    def full_recovery_time_s(self) -> float:
        return self.rejoined_s - self.time_s

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("affected", "spans")}
        d["gpus"] = list(self.gpus)
        d["worker_ids"] = list(self.worker_ids)
        d["aborted_operations"] = list(self.aborted_operations)
        d["recovery_time_s"] = self.recovery_time_s
        d["full_recovery_time_s"] = self.full_recovery_time_s
        return d


def decompose_span(pool, first_gpu: int, degree: int, unavailable: set[int]) -> list[tuple[int, int]]:
    """Largest valid workers on the available GPUs of the aligned span ``first_gpu ..
    first_gpu + degree - 1`` (buddy decomposition: the whole span if it is a valid, fully
    available group, else each half recursively) — the placement rules of a split.

    Returns:
        ``[(degree, first_gpu), ...]`` in GPU order; GPUs in no valid group are left out.
    """
    gpus = range(first_gpu, first_gpu + degree)
    if not any(g in unavailable for g in gpus) and degree in pool.supported_degrees:
        try:
            pool.check_group(degree, first_gpu)
            return [(degree, first_gpu)]
        except ValueError:
            pass
    if degree <= 1:
        return []
    h = degree // 2
    return decompose_span(pool, first_gpu, h, unavailable) + decompose_span(pool, first_gpu + h, h, unavailable)


# ---------------------------------------------------------------------------------- manager
class FaultManager:
    """Injects the faults of a :class:`FaultConfig` into a simulator and runs the recovery.

    Attached by the simulator when ``SimConfig.faults`` is set (``sim.attachments["faults"]``).
    ``SimResult.extras`` gains ``faults`` (one :meth:`FaultRecord.to_dict` per fault) and the
    totals ``num_fault_affected_requests``, ``recompute_gpu_time_s``, ``recovery_time_s``.

    Raises:
        ValueError: if an event names a GPU, node or link outside the pool.
    """

    def __init__(self, sim: Simulator, config: FaultConfig) -> None:
        self.sim = sim
        self.config = config
        pool = sim.config.pool
        self.num_nodes = -(-pool.num_gpus // pool.gpus_per_node)
        self.failed: set[int] = set()  # GPUs broken and not yet repaired
        self.records: list[FaultRecord] = []
        self._stopped: dict[int, tuple[Worker, FaultRecord]] = {}  # id(worker) -> (worker, record), until detection
        self._straggler_factors: list[list[float]] = [[] for _ in range(pool.num_gpus)]
        self._stragglers: list[FaultRecord] = []
        self.num_completions = 0
        self._priority = EventPriority.RECONFIG
        events = sorted(list(config.events) + self._random_events(), key=lambda e: e.time_s)
        for i, e in enumerate(events):
            self._check_event(i, e)
        if any(e.kind == STRAGGLER for e in events):
            sim.gpu_step_factor = [1.0] * pool.num_gpus
        sim.attachments["faults"] = self
        sim.extras_providers.append(self.extras)
        sim.finish_listeners.append(self._on_finish)
        if events:
            sim.stop_when_idle = self.work_done
            # a request no current worker holds waits (parked) for the workers a repair re-forms
            sim.returning_kv_capacity_tokens = max(w.kv_capacity_tokens for w in sim.workers.values())
        for e in events:
            sim.schedule(e.time_s, self._priority, self._on_fault, e)

    # ------------------------------------------------------------------ schedule
    def _random_events(self) -> list[FaultEvent]:
        cfg = self.config
        if not cfg.has_random:
            return []
        sim = self.sim
        pool = sim.config.pool
        reqs = sim.workload.requests
        end_s = reqs[-1].arrival_time_s if reqs else 0.0
        if sim.config.horizon_s is not None:
            end_s = min(end_s, sim.config.horizon_s)
        rng = np.random.default_rng(np.random.SeedSequence(sim.config.seed, spawn_key=(FAULT_STREAM,)))
        out: list[FaultEvent] = []

        def poisson(rate_per_hour: float, num_units: int, make) -> None:
            if rate_per_hour <= 0 or end_s <= 0:
                return
            n = int(rng.poisson(rate_per_hour / 3600.0 * num_units * end_s))
            for t, unit in zip(np.sort(rng.uniform(0.0, end_s, n)), rng.integers(0, num_units, n)):
                out.append(make(float(t), int(unit)))

        poisson(cfg.gpu_failure_rate_per_gpu_hour, pool.num_gpus, lambda t, g: FaultEvent(GPU_FAILURE, t, gpu=g))
        poisson(cfg.node_failure_rate_per_node_hour, self.num_nodes, lambda t, n: FaultEvent(NODE_FAILURE, t, node=n))
        poisson(cfg.straggler_rate_per_gpu_hour, pool.num_gpus, lambda t, g: FaultEvent(
            STRAGGLER, t, gpu=g, factor=cfg.straggler_factor, duration_s=cfg.straggler_duration_s))
        return out

    def _check_event(self, i: int, e: FaultEvent) -> None:
        pool = self.sim.config.pool
        where = f"{self.config.source or 'faults'}: events[{i}] ({e.kind} at {e.time_s} s)"
        if e.gpu >= pool.num_gpus:
            raise ValueError(f"{where}: gpu {e.gpu} is outside the pool of {pool.num_gpus} GPUs")
        if e.node >= self.num_nodes:
            raise ValueError(f"{where}: node {e.node} is outside the pool of {self.num_nodes} nodes")
        if e.link and parse_link(e.link)[1] >= self.num_nodes:
            raise ValueError(f"{where}: link {e.link} names a node outside the pool of {self.num_nodes} nodes")

    # ------------------------------------------------------------------ queries
    def work_done(self) -> bool:
        """Every request finished or was rejected: pending recovery events need not run."""
        sim = self.sim
        return self.num_completions + sim.num_rejected >= sim.workload.num_requests

    def owner(self, gpu: int) -> Worker | None:
        for w in self.sim.workers.values():
            if w.first_gpu <= gpu < w.first_gpu + w.degree:
                return w
        return None

    def gpu_counts(self) -> dict[str, int]:
        """``num_healthy_gpus`` (in a serving worker, a spare, or a surviving rank of a stopped
        worker awaiting detection), ``num_failed_gpus``, ``num_rebuilding_gpus`` (in a
        REBUILDING worker that is not stopped); they sum to the pool size."""
        rebuilding = sum(w.degree for w in self.sim.workers.values() if w.state == WorkerState.REBUILDING and not w.stopped)
        failed = len(self.failed)
        return {"num_healthy_gpus": self.sim.config.pool.num_gpus - failed - rebuilding,
                "num_failed_gpus": failed, "num_rebuilding_gpus": rebuilding}

    def detected_failed_gpus(self) -> set[int]:
        """The broken, not yet repaired GPUs whose failure is detected (an undetected failure is
        invisible, as to a real router)."""
        known = set(self.failed)
        for w, _ in self._stopped.values():  # failed but not yet detected
            known.difference_update(w.gpus)
        return known

    def is_degraded(self, w: Worker) -> bool:
        """A straggler GPU slows the worker's steps now."""
        f = self.sim.gpu_step_factor
        return f is not None and any(f[g] > 1.0 for g in w.gpus)

    # ------------------------------------------------------------------ faults
    def _on_fault(self, e: FaultEvent) -> None:
        sim = self.sim
        rec = FaultRecord(len(self.records), e.kind, sim.env.now)
        self.records.append(rec)
        sim._log(f"fault:{e.kind}:{e.gpu if e.gpu >= 0 else e.node if e.node >= 0 else e.link}")
        if e.kind == GPU_FAILURE:
            self._fail(rec, [e.gpu])
        elif e.kind == NODE_FAILURE:
            g0 = e.node * sim.config.pool.gpus_per_node
            gpus = list(range(g0, min(g0 + sim.config.pool.gpus_per_node, sim.config.pool.num_gpus)))
            self._fail(rec, gpus)
            self._lose_node_memory(e.node, gpus)
        elif e.kind == STRAGGLER:
            rec.gpus = (e.gpu,)
            rec.end_s = e.end_s
            self._straggler_factors[e.gpu].append(e.factor)
            self._refresh_factor(e.gpu)
            self._stragglers.append(rec)
            sim.schedule(e.duration_s, self._priority, self._straggler_end, (e.gpu, e.factor))
        else:
            rec.end_s = e.end_s
            sim.links.set_fault(parse_link(e.link), sim.env.now, e.end_s, 0.0 if e.kind == LINK_FAILURE else e.factor)

    def _lose_node_memory(self, node: int, gpus: list[int]) -> None:
        """A node failure (unlike a GPU failure) takes the node's host memory with it: its KV
        DRAM tier empties (``TieredKV.on_node_failure``) and the transfers pending on its links
        (host-to-GPU PCIe, NIC, intra-node fabric) end now."""
        sim = self.sim
        if sim.kv_tiers is not None:
            sim.kv_tiers.on_node_failure(node)
        sim.links.cancel([("pcie", g) for g in gpus] + [("intra", node), ("in", node), ("out", node)], sim.env.now)

    def _refresh_factor(self, gpu: int) -> None:
        fs = self._straggler_factors[gpu]
        self.sim.gpu_step_factor[gpu] = max(fs) if fs else 1.0

    def _straggler_end(self, payload) -> None:
        gpu, factor = payload
        self._straggler_factors[gpu].remove(factor)
        self._refresh_factor(gpu)

    def _fail(self, rec: FaultRecord, gpus: list[int]) -> None:
        new = [g for g in gpus if g not in self.failed]
        rec.gpus = tuple(new)
        if not new:
            rec.detected_s = rec.rebuilt_s = rec.repaired_s = rec.rejoined_s = rec.time_s
            return
        self.failed.update(new)
        stopped = []
        for g in new:
            w = self.owner(g)
            if w is not None and w not in stopped:
                stopped.append(w)
        rec.worker_ids = tuple(w.worker_id for w in stopped)
        for w in stopped:
            self._stop(w, rec)
        self.sim.schedule(self.config.detection_delay_s, self._priority, self._detect, rec)

    def _stop(self, w: Worker, rec: FaultRecord) -> None:
        """The worker's synchronous group halts: its running step is lost (recompute work)."""
        sim = self.sim
        if w.stopped:  # stopped by an earlier, undetected fault: that detection handles it
            return
        w.stopped = True
        self._stopped[id(w)] = (w, rec)
        reconfig = sim.attachments.get("reconfig")
        if reconfig is not None:
            op = reconfig.abort_for(w)
            if op is not None:
                rec.aborted_operations += (op,)
        if w.batch:
            elapsed = sim.env.now - w.step_start_s
            w.step_event.callbacks.clear()  # the step never ends
            w.busy_time_s += elapsed
            w.gpu_time_s += elapsed * w.degree
            rec.recompute_gpu_time_s += elapsed * w.degree
            rec.affected.update(r.request_id for r in w.batch)
        rec.affected.update(r.request_id for r in w.queue)
        sim._log(f"stop:w{w.worker_id}")

    def _detect(self, rec: FaultRecord) -> None:
        """Detection: stopped workers leave, their requests are re-routed, survivors rebuild."""
        sim = self.sim
        rec.detected_s = sim.env.now
        news: list[Worker] = []
        for wid in rec.worker_ids:
            entry = next(((w, r) for w, r in self._stopped.values() if r is rec and w.worker_id == wid), None)
            if entry is None:
                continue
            w = entry[0]
            del self._stopped[id(w)]
            news += self._remove(w, rec)
        rec.num_rebuilt_workers = len(news)
        sim._log(f"detect:fault{rec.index}")
        if news:
            sim.schedule(self.config.rebuild_s, self._priority, self._rebuilt, (rec, news, "rebuilt_s"))
        else:
            rec.rebuilt_s = sim.env.now
        if rec.gpus:
            sim.schedule(self.config.repair_s, self._priority, self._repair, rec)

    def _remove(self, w: Worker, rec: FaultRecord) -> list[Worker]:
        sim = self.sim
        requests = list(w.batch) + list(w.queue)
        rec.affected.update(r.request_id for r in requests)
        w.batch = []
        w.queue.clear()
        w.queued_predicted_s = 0.0
        w.num_queued_new_tokens = 0
        for r in requests:
            sim.redirect(r)
        listeners = (list(w.cache.insert_listeners), list(w.cache.evict_listeners))
        for h in w.cache.blocks():
            for fn in listeners[1]:
                fn(w.worker_id, h)
        sim.reconcile_hooks.pop(w.worker_id, None)
        reconfig = sim.attachments.get("reconfig")
        if reconfig is not None:
            reconfig.forget_worker(w.worker_id)
        span = (w.first_gpu, w.degree)
        rec.spans.append(span)
        sim.retire_worker(w.worker_id)
        news, spare = self._form(span, listeners)
        rec.num_spare_gpus += spare
        return news

    def _form(self, span: tuple[int, int], listeners) -> tuple[list[Worker], int]:
        """REBUILDING workers on the free healthy GPUs of ``span``; returns them and the number
        of free healthy GPUs of the span left as spares (in no valid group)."""
        sim = self.sim
        first, degree = span
        busy = set(self.failed)
        for o in sim.workers.values():
            busy.update(o.gpus)
        groups = decompose_span(sim.config.pool, first, degree, busy)
        news = []
        for d, f in groups:
            nw = sim.add_worker(d, f)
            nw.state = WorkerState.REBUILDING
            nw.cache.insert_listeners.extend(listeners[0])
            nw.cache.evict_listeners.extend(listeners[1])
            news.append(nw)
        used = sum(d for d, _ in groups)
        return news, sum(1 for g in range(first, first + degree) if g not in busy) - used

    def _rebuilt(self, payload) -> None:
        """Rebuild done: a new epoch; the re-formed workers become ACTIVE (schedulable)."""
        rec, news, stamp = payload
        sim = self.sim
        live = [w for w in news if sim.workers.get(w.worker_id) is w and not w.stopped and w.state == WorkerState.REBUILDING]
        if live:
            sim.epoch += 1
            for w in live:
                w.epoch = sim.epoch
                w.state = WorkerState.ACTIVE
            sim._log(f"rebuilt:fault{rec.index}:epoch{sim.epoch}")
            sim.unpark()
        setattr(rec, stamp, sim.env.now)

    def _repair(self, rec: FaultRecord) -> None:
        """The failed GPUs are healthy again and rejoin the free GPUs of their spans."""
        sim = self.sim
        rec.repaired_s = sim.env.now
        self.failed.difference_update(rec.gpus)
        pool = sim.config.pool
        spans = list(rec.spans)
        for g in rec.gpus:  # a GPU that failed as a spare rejoins its smallest aligned group
            if not any(f <= g < f + d for f, d in spans):
                spans.append((g - g % pool.min_degree, pool.min_degree))
        listeners = ([], [])
        ref = next(iter(sim.workers.values()), None)
        if ref is not None:
            listeners = (list(ref.cache.insert_listeners), list(ref.cache.evict_listeners))
        news = []
        for span in spans:
            news += self._form(span, listeners)[0]
        sim._log(f"repair:fault{rec.index}")
        if news:
            sim.schedule(self.config.rebuild_s, self._priority, self._rebuilt, (rec, news, "rejoined_s"))
        else:
            rec.rejoined_s = sim.env.now

    # ------------------------------------------------------------------ accounting
    def _on_finish(self, sim: Simulator, batch, w: Worker) -> None:
        self.num_completions += len(batch)
        if self._stragglers and w.num_steps:
            t0 = w.step_start_s
            for rec in self._stragglers:
                if rec.time_s <= t0 < rec.end_s and rec.gpus[0] in w.gpus:
                    rec.affected.update(r.request_id for r in batch)

    def _impact(self, rec: FaultRecord) -> None:
        sim = self.sim
        W = self.config.impact_window_s
        arr = np.asarray(sim._arrival, dtype=float)
        ttft = np.asarray(sim._ttft, dtype=float)
        slo = np.asarray(sim._slo, dtype=float)
        L = np.asarray([r.num_prompt_tokens for r in sim.workload.requests], dtype=float)
        for lo, hi, suffix in ((rec.time_s - W, rec.time_s, "before"), (rec.time_s, rec.time_s + W, "after")):
            m = (arr >= lo) & (arr < hi) & (arr <= sim.env.now)
            if not m.any():
                continue
            done = m & ~np.isnan(ttft)
            setattr(rec, f"ttft_{suffix}_s", float(ttft[done].mean()) if done.any() else math.nan)
            met = done & (ttft <= slo)
            setattr(rec, f"slo_attainment_{suffix}", float(L[met].sum() / L[m].sum()))

    def extras(self) -> dict:
        """``SimResult.extras`` entries (see the class docstring)."""
        for rec in self.records:
            rec.num_affected_requests = len(rec.affected)
            self._impact(rec)
        affected = set().union(*(r.affected for r in self.records)) if self.records else set()
        rec_times = [r.recovery_time_s for r in self.records]
        recovered = [t for t in rec_times if not math.isnan(t)]
        return {"faults": [r.to_dict() for r in self.records],
                "num_faults": len(self.records),
                "num_fault_affected_requests": len(affected),
                "recompute_gpu_time_s": float(sum(r.recompute_gpu_time_s for r in self.records)),
                "recovery_time_s": max(recovered) if recovered else (math.nan if rec_times else 0.0),
                "num_unrecovered_faults": len(rec_times) - len(recovered),
                **self.gpu_counts()}
