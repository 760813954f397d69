"""Split/merge reconfiguration of CP workers inside the simulator (paper §6, §6.2, §8).

This module holds the *mechanics* of a reconfiguration; the decision rule (when to split or
merge which worker) lives in ``baselines/controller/`` and the Gymnasium reconfiguration
environment calls the same two functions: :func:`eligible_operations` (what may be applied now,
for action masks) and :func:`apply_operation` (start one).

Operations (paper §6 "Reconfiguration Operations"):

* **split** of one ACTIVE degree-2C worker on GPUs ``f .. f+2C-1`` into two degree-C workers on
  ``f .. f+C-1`` and ``f+C .. f+2C-1`` (the same GPUs);
* **merge** of two ACTIVE sibling degree-C workers on ``f`` and ``f+C`` with ``f % 2C == 0``
  into one degree-2C worker on ``f`` — only along the pre-built, aligned topology groups of
  :class:`envs.sim.pool.PoolConfig` (never across a node unless the pool allows it).

GPU count is preserved by construction. A worker takes part in at most one operation at a time
(only ACTIVE workers are eligible, and a worker leaves ACTIVE when its operation starts).

Protocol, simulated step by step (paper §6 / §8; the walk-through's five-stage diagram):

1. *drain start* (``start_s``): the participating workers become DRAINING — removed from the
   router's candidates, no admission — and their queued requests are redirected through the
   router (``Simulator.redirect``; each is routed again, ``num_routings`` counts it);
2. *in-flight steps finish under the old geometry*: each participant's running engine step
   completes normally (its requests finish and insert their KV blocks);
3. *common step boundary* (``drain_end_s``): when the last participant is idle, the ranks
   agree on one step boundary, which takes ``drain_sync_s`` (default 0.2 s); the workers then
   become SWITCHING and the ranks switch to the pre-built CP groups, which takes ``switch_s``
   (default 0.9 s: paper §9 measured a switch < 1 s);
4. *switch end* (``switch_end_s``): the old workers are retired and the new ones exist, still
   SWITCHING (not schedulable); every rank confirms the new configuration epoch, modelled as
   ``confirm_s_per_rank`` per participating rank, collected one after the other by the
   controller (default 5 ms/rank: an assumption, the paper gives no figure);
5. *commit* (``commit_s``): the global epoch increments, the new workers take it and become
   ACTIVE — only now can the router choose them — and requests parked for lack of an ACTIVE
   worker are released.

KV state (paper §6.2 "Cache Coordination", §8; DESIGN.md "KV state across reconfiguration"):
retained prefixes stay resident but are *pending reconciliation* — they are not ready hits
(``PrefixCache.match_ready`` ignores them, routing sees them only through
``PoolView.pending_blocks``):

* **merge**: metadata of the two siblings is combined. A block held by *both* siblings is READY
  on the merged worker (every byte already exists on the new worker's ranks; the re-addressing
  is local metadata). A block held by *one* sibling is PENDING: the other sibling's ranks lack
  their shards, i.e. a fraction ``1/2`` of the block's bytes, whose valid source is the holder's
  ranks inside the merged worker itself (intra-node link; for a merge across two nodes,
  ``PoolConfig.allow_cross_node``, the inter-node links from the holder's node to the other).
  Exception: a sibling born of a split holds its PENDING blocks as half of the shards only, the
  other half having been on the other sibling; if that one no longer holds the block, no valid
  source is left and the block is not retained (counted in ``num_source_lost_blocks``).
* **split**: each half holds half of every block's shards. Prefixes are assigned by demand and
  capacity: each half retains, as PENDING, the most recently used blocks of the old worker that
  fit in its own (halved) capacity, so hot prefixes are retained on both halves and cold ones
  beyond a half's capacity are dropped (the cache tracks no prefix tree, so recency is the
  demand signal and whole prefixes stay together). The missing half of a block's bytes comes
  from the sibling half, which is a valid source while it still holds the block (ready or
  pending) — if the sibling evicted it or no longer exists, the source is gone.

Shard masks (chains of operations before a reconciliation). The fractions above hold for
participants whose blocks are READY. A block is cut into ``K`` content slices (``K`` = the
largest supported degree); a block READY on a worker of degree ``C`` from GPU ``f`` has
``K/C`` slices on each rank (GPU ``f+j`` holds slices ``[j K/C, (j+1) K/C)``). Every PENDING
block keeps, per rank of its worker, the slices that GPU still holds (``_shards``), and its
*origin*: the span of the worker it was last READY on, widened to every span it has since been
merged into — the GPUs its other slices can be on. Then, for a block on a worker of degree ``C``:

* missing bytes = ``num_missing_slices / K x kv_block_bytes``, the larger of the slices its
  ranks lack of their ``K/C`` shares (bytes a rank holds stay, re-addressing being metadata) and
  the slices none of its ranks holds (those must come from outside): ``1/2`` after one split of
  a READY block, ``1 - 2**-k`` after ``k`` splits with no reconciliation in between (``3/4``
  for a CP-2 half of a CP-4 half of a CP-8 worker), ``1/2`` for the two quarter-holding halves
  merged back, 0 (READY) where every rank holds its share;
* sources: the slices none of its ranks holds come from the workers now on the other GPUs of
  its origin span that hold them (READY: all slices; PENDING: their masks; a worker with a
  failed rank: none) — the sibling *and*, after a split of a split, the first split's other
  half (or, if that one was split too, its halves). If these do not hold every slice, the
  block has no valid source: a split or merge does not retain it (``num_source_lost_blocks``),
  a first reuse treats it and what follows as an ordinary miss;
* a split half holding none of a block's slices (a merged worker's block that only the other
  half's GPUs hold) does not retain it; one holding its whole share has it READY.

Everything an operation did is kept in :class:`OperationRecord` and, with the composition time
series, returned in ``SimResult.extras["reconfig"]``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from envs.sim.cache import PENDING, READY
from envs.sim.events import EventPriority
from envs.sim.worker import Worker, WorkerState

if TYPE_CHECKING:  # pragma: no cover
    from envs.sim.simulator import Simulator

SPLIT = "split"
MERGE = "merge"

#: Fraction of a pending block's bytes missing after *one* split of a worker holding it READY (each
#: half holds half of the shards) or after a merge of a holder with a sibling that lacks it (the
#: sibling's ranks, half of the merged ranks, lack theirs). Chains of operations before the
#: reconciliation give other fractions (``1 - 2**-k`` after ``k`` splits): the exact fraction of
#: every pending block follows from its shard masks (module docstring, "Shard masks").
MISSING_FRACTION = 0.5


@dataclass(frozen=True)
class ReconfigConfig:
    """Costs of the reconfiguration protocol.

    Calibration (paper §9 "Worker Reconfiguration" and the news summary: "each split or merge
    takes 1.1-5.1 s ... the switch itself < 1 s, the rest is the drain waiting for in-flight
    requests"). An operation takes ``drain + switch + confirm`` where the drain is the longest
    remaining in-flight step of the participants (simulated, 0 for idle workers) plus
    ``drain_sync_s``. The fixed part ``drain_sync_s + switch_s + confirm`` (1.12 s for a CP-4
    worker with the defaults) is the paper's fastest operation, 1.1 s, i.e. one drained with
    nothing in flight; the variable part (in-flight prefill steps of up to a few seconds) gives
    the spread up to the paper's 5.1 s.

    Args:
        switch_s: time for all participating ranks to switch to the pre-built CP groups at the
            common step boundary [s]. Default 0.9 s: paper §9, "< 1 s" (communicators are
            pre-built and warmed, §8, so no NCCL group creation is on this path).
        drain_sync_s: time, after the participants' last in-flight step ends, for the
            controller to confirm that every participating rank stands at the same step
            boundary (admission stopped, queue redirected, barrier over the ranks) [s].
            Default 0.2 s: the paper's fastest operation (1.1 s) minus ``switch_s`` and the
            confirmation; the paper gives no separate figure.
        confirm_s_per_rank: epoch confirmation latency per participating rank, collected
            serially by the controller [s]; default 0.005 s (assumption: one control RPC).

    Raises:
        ValueError: if a field is negative or not finite.
    """

    switch_s: float = 0.9
    confirm_s_per_rank: float = 0.005
    drain_sync_s: float = 0.2

    def __post_init__(self) -> None:
        for name in ("switch_s", "confirm_s_per_rank", "drain_sync_s"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not v >= 0 or v == float("inf"):
                raise ValueError(f"reconfig.{name} must be a finite number >= 0, got {v!r}")


@dataclass(frozen=True, order=True)
class Operation:
    """One split or merge.

    Attributes:
        kind: ``"split"`` or ``"merge"``.
        worker_ids: the participating (old) workers: one for a split, the sibling pair
            (lower first GPU first) for a merge.
    """

    kind: str
    worker_ids: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.kind not in (SPLIT, MERGE):
            raise ValueError(f"operation kind must be 'split' or 'merge', got {self.kind!r}")
        n = 1 if self.kind == SPLIT else 2
        if len(self.worker_ids) != n:
            raise ValueError(f"a {self.kind} takes {n} worker id(s), got {self.worker_ids!r}")

    @staticmethod
    def split(worker_id: int) -> Operation:
        return Operation(SPLIT, (worker_id,))

    @staticmethod
    def merge(worker_id_a: int, worker_id_b: int) -> Operation:
        return Operation(MERGE, tuple(sorted((worker_id_a, worker_id_b))))

    def __str__(self) -> str:
        return f"{self.kind}({','.join(map(str, self.worker_ids))})"


@dataclass
class OperationRecord:
    """What one operation did and when (all times simulated seconds; NaN while not reached).

    ``drain_s = drain_end_s - start_s`` (redirect + in-flight steps + step-boundary sync), ``switch_s = switch_end_s
    - drain_end_s``, ``confirm_s = commit_s - switch_end_s``, ``total_s = commit_s - start_s``
    (the paper's "drain + switch", 1.1-5.1 s in §9). ``pending_blocks_created``: blocks left
    PENDING on the new workers (``ready_blocks_retained``: READY ones); ``reconciliation_bytes``
    [bytes] / ``num_reconciled_blocks``: traffic of their later first reuses (grows after the
    commit); ``expected_reconciliation_bytes`` [bytes]: the upper bound used to rank operations
    (every pending block reconciled once, for its missing fraction); ``num_source_lost_blocks``:
    pending blocks found without a valid source, at a first reuse or, when a participant holds
    partial (PENDING) blocks, at the switch (not retained).
    """

    index: int
    kind: str
    old_worker_ids: tuple[int, ...]
    old_degree: int
    new_degree: int
    first_gpu: int
    start_s: float
    new_worker_ids: tuple[int, ...] = ()
    drain_end_s: float = float("nan")
    switch_end_s: float = float("nan")
    commit_s: float = float("nan")
    epoch: int = -1
    num_redirected_requests: int = 0
    predicted_drain_s: float = 0.0
    expected_reconciliation_bytes: int = 0
    pending_blocks_created: int = 0
    ready_blocks_retained: int = 0
    reconciliation_bytes: int = 0
    num_reconciled_blocks: int = 0
    num_source_lost_blocks: int = 0
    aborted_s: float = float("nan")

    @property
    def drain_s(self) -> float:
        return self.drain_end_s - self.start_s

    @property
    def switch_s(self) -> float:
        return self.switch_end_s - self.drain_end_s

    @property
    def confirm_s(self) -> float:
        return self.commit_s - self.switch_end_s

    @property
    def total_s(self) -> float:
        return self.commit_s - self.start_s

    @property
    def committed(self) -> bool:
        return self.commit_s == self.commit_s

    def to_dict(self) -> dict:
        d = asdict(self)
        d["old_worker_ids"] = list(self.old_worker_ids)
        d["new_worker_ids"] = list(self.new_worker_ids)
        d.update(drain_s=self.drain_s, switch_s=self.switch_s, confirm_s=self.confirm_s, total_s=self.total_s)
        return d


@dataclass
class _InFlight:
    op: Operation
    record: OperationRecord
    workers: list[Worker]
    waiting: set[int] = field(default_factory=set)  # participants still running a step
    aborted: bool = False  # a rank failed (envs/sim/faults.py); later stages do nothing


class Reconfigurator:
    """Per-simulator reconfiguration state: in-flight operations, records, reconciliation.

    Created and attached by :func:`get_reconfigurator` (one per simulator, stored in
    ``sim.attachments["reconfig"]``). Hot-path cost: one dict lookup per engine-step end
    (finish listener) and, on workers holding pending blocks, an O(1) check per request at step
    start (plus the pending run when there is one).
    """

    def __init__(self, sim: Simulator, config: ReconfigConfig | None = None) -> None:
        self.sim = sim
        self.config = config or ReconfigConfig()
        self.records: list[OperationRecord] = []
        self._inflight: dict[int, _InFlight] = {}  # participating worker id -> operation
        self._recon: dict[int, int] = {}  # new worker holding PENDING blocks -> index of the record that made it
        # worker id -> block hash -> shard info (masks, origin first GPU, origin degree) of its PENDING blocks
        # (module docstring, "Shard masks"); an entry is dropped when its block is reconciled
        self._shards: dict[int, dict[int, tuple]] = {}
        pool = sim.config.pool
        self._num_slices = max(pool.supported_degrees)  # K: content slices of a block
        self._all_slices = (1 << self._num_slices) - 1
        self._memo: dict = {}  # pure functions of shard masks / spans (few distinct keys)
        # worker id -> block hash -> end [s] of the reconciliation transfer still bringing its
        # missing bytes (the block is READY in the cache from the reservation on; a request admitted
        # later must still wait for the bytes: one whose step the token budget closed, for instance)
        self._arriving: dict[int, dict[int, float]] = {}
        self._committing: dict[int, _InFlight] = {}  # new worker id -> operation, switch end .. commit
        self.composition_series: list[dict] = []
        self.commit_listeners: list = []  # fn(sim, record) after every commit
        sim.finish_listeners.append(self._on_step_finished)
        sim.extras_providers.append(self.extras)
        sim.attachments["reconfig"] = self
        self._snapshot()

    # ------------------------------------------------------------------ queries
    def in_flight(self) -> list[OperationRecord]:
        """Records of operations started and not yet past their switch (DRAINING or SWITCHING old
        workers still in the pool); an operation between its switch end and its commit is in
        :meth:`uncommitted` only."""
        seen = {id(f.record): f.record for f in self._inflight.values()}
        return list(seen.values())

    def uncommitted(self) -> list[OperationRecord]:
        """Records of operations started and neither committed nor aborted: :meth:`in_flight`
        plus those whose new workers await the epoch confirmation."""
        seen = {id(f.record): f.record for f in (*self._inflight.values(), *self._committing.values())}
        return list(seen.values())

    def predicted_drain_s(self, op: Operation) -> float:
        """Predicted drain of ``op`` [s]: the longest predicted remaining time of the
        participants' running steps (queued requests are redirected, not waited for)."""
        sim = self.sim
        now = sim.env.now
        out = 0.0
        for wid in op.worker_ids:
            w = sim.workers[wid]
            if w.batch:
                out = max(out, w.step_predicted_end_s - now)
        return out

    def expected_reconciliation_bytes(self, op: Operation) -> int:
        """Upper bound of the KV-reconciliation traffic ``op`` creates [bytes]: every block it
        leaves pending reconciled once, each for its missing fraction (``MISSING_FRACTION`` of a
        block after one split or merge of READY blocks; the exact fraction from the shard masks
        when a participant holds PENDING blocks)."""
        sim = self.sim
        if not any(self._shards.get(wid) for wid in op.worker_ids):  # READY blocks only
            return int(self._pending_blocks_after(op) * MISSING_FRACTION * sim.kv_block_bytes)
        num_slices = self._num_slices
        if op.kind == SPLIT:
            w = sim.workers[op.worker_ids[0]]
            kept, _ = self._plan_split(w, self._half_capacities(w.degree // 2, w.first_gpu))
        else:
            kept, _ = self._plan_merge([sim.workers[i] for i in op.worker_ids])
            kept = (kept,)
        num_missing = sum(self._missing_slices(info[0])[0] for blocks in kept for _, info in blocks if info is not None)
        return int(num_missing * sim.kv_block_bytes / num_slices)

    def _pending_blocks_after(self, op: Operation) -> int:
        """Blocks ``op`` leaves PENDING when its participants hold READY blocks only."""
        sim = self.sim
        if op.kind == SPLIT:
            w = sim.workers[op.worker_ids[0]]
            return sum(min(len(w.cache), cap) for cap in self._half_capacities(w.degree // 2, w.first_gpu))
        a, b = (sim.workers[i].cache for i in op.worker_ids)
        common = a.num_common_blocks(b)
        return len(a) + len(b) - 2 * common

    def _half_capacities(self, half_degree: int, first_gpu: int) -> tuple[int, int]:
        """KV capacities [blocks] of the two halves of a split of the worker from ``first_gpu``
        (``Simulator.kv_capacity_blocks``: each half's node calibration)."""
        return tuple(self.sim.kv_capacity_blocks(half_degree, first_gpu + i * half_degree) for i in (0, 1))

    # ------------------------------------------------------------------ eligibility
    def eligible_operations(self) -> list[Operation]:
        """Operations that may start now, in pool order (splits and merges interleaved by
        first GPU): splits of ACTIVE workers whose half degree is supported, merges of ACTIVE
        aligned sibling pairs whose double degree is supported and forms a valid group."""
        sim = self.sim
        pool = sim.config.pool
        supported = set(pool.supported_degrees)
        ws = sim.workers
        by_gpu = {w.first_gpu: w for w in ws.values()}
        out: list[Operation] = []
        for wid in sim.worker_ids:
            w = ws[wid]
            if w.state != WorkerState.ACTIVE or w.stopped:  # a dead rank never reaches a step boundary
                continue
            C = w.degree
            if C % 2 == 0 and C // 2 in supported:
                out.append(Operation.split(wid))
            if 2 * C in supported and w.first_gpu % (2 * C) == 0:
                sib = by_gpu.get(w.first_gpu + C)
                if (sib is not None and sib.degree == C and sib.state == WorkerState.ACTIVE and not sib.stopped
                        and _valid_group(pool, 2 * C, w.first_gpu)):
                    out.append(Operation.merge(wid, sib.worker_id))
        return out

    def check(self, op: Operation) -> None:
        """Raises ValueError (with the reason) unless ``op`` is eligible now."""
        sim = self.sim
        for wid in op.worker_ids:
            w = sim.workers.get(wid)
            if w is None:
                raise ValueError(f"{op}: worker {wid} does not exist")
            if w.state != WorkerState.ACTIVE:
                raise ValueError(f"{op}: worker {wid} is {w.state.name}, not ACTIVE (at most one operation per worker)")
        if op not in self.eligible_operations():
            raise ValueError(f"{op} is not eligible: needs a supported degree and an aligned sibling group "
                             f"(eligible now: {[str(o) for o in self.eligible_operations()]})")

    # ------------------------------------------------------------------ protocol
    def apply(self, op: Operation) -> OperationRecord:
        """Starts ``op`` (stage 1: stop admission and redirect queues); the rest follows as
        simulation events. Returns its (live) record.

        Raises:
            ValueError: if ``op`` is not eligible now.
        """
        self.check(op)
        sim = self.sim
        now = sim.env.now
        workers = [sim.workers[i] for i in op.worker_ids]
        C = workers[0].degree
        rec = OperationRecord(
            index=len(self.records), kind=op.kind, old_worker_ids=op.worker_ids, old_degree=C,
            new_degree=C // 2 if op.kind == SPLIT else 2 * C, first_gpu=workers[0].first_gpu, start_s=now,
            predicted_drain_s=self.predicted_drain_s(op), expected_reconciliation_bytes=self.expected_reconciliation_bytes(op))
        self.records.append(rec)
        flight = _InFlight(op, rec, workers)
        for w in workers:
            w.state = WorkerState.DRAINING
            self._inflight[w.worker_id] = flight
            q = w.queue
            rec.num_redirected_requests += len(q)
            while q:
                sim.redirect(q.popleft())
            w.queued_predicted_s = 0.0
            w.num_queued_new_tokens = 0
            if w.batch:
                flight.waiting.add(w.worker_id)
        sim._log(f"drain_start:{op}")
        self._snapshot()
        if not flight.waiting:
            self._boundary(flight)
        return rec

    def _on_step_finished(self, sim: Simulator, batch, w: Worker) -> None:
        flight = self._inflight.get(w.worker_id)
        if flight is None or w.worker_id not in flight.waiting:
            return
        flight.waiting.discard(w.worker_id)
        if not flight.waiting:
            self._boundary(flight)

    def _boundary(self, flight: _InFlight) -> None:
        """Stage 3: every participant idle; after ``drain_sync_s`` they stand at a common step
        boundary and switch to the new groups."""
        sync_s = self.config.drain_sync_s
        if sync_s > 0:
            self.sim.schedule(sync_s, EventPriority.RECONFIG, self._switch_start, flight)
        else:
            self._switch_start(flight)

    def _switch_start(self, flight: _InFlight) -> None:
        if flight.aborted:  # a rank failed during the step-boundary sync: the survivors are ACTIVE again
            return
        sim = self.sim
        flight.record.drain_end_s = sim.env.now
        for w in flight.workers:
            w.state = WorkerState.SWITCHING
        sim._log(f"switch_start:{flight.op}")

        sim.schedule(self.config.switch_s, EventPriority.RECONFIG, self._switch_end, flight)

    def _switch_end(self, flight: _InFlight) -> None:
        """Stage 4: old workers retired, new workers exist (SWITCHING) with their KV state."""
        if flight.aborted:
            return
        sim = self.sim
        rec = flight.record
        rec.switch_end_s = sim.env.now
        olds = flight.workers
        for w in olds:
            if w.batch or w.queue:  # pragma: no cover - guarded by DRAINING/SWITCHING
                raise RuntimeError(f"worker {w.worker_id} has work at the switch of {flight.op}")
        listeners = (list(olds[0].cache.insert_listeners), list(olds[0].cache.evict_listeners))
        if flight.op.kind == SPLIT:  # the new workers' KV state, from the old workers' (before they go)
            C = rec.new_degree
            kept, num_lost = self._plan_split(olds[0], self._half_capacities(C, rec.first_gpu))
        else:
            merged, num_lost = self._plan_merge(olds)
            kept = (merged,)
        rec.num_source_lost_blocks += num_lost
        for w in olds:
            for h in w.cache.blocks():  # LRU first
                for fn in w.cache.evict_listeners:
                    fn(w.worker_id, h)
            sim.retire_worker(w.worker_id)
            self._inflight.pop(w.worker_id, None)
            sim.reconcile_hooks.pop(w.worker_id, None)
            self.forget_worker(w.worker_id)
        if flight.op.kind == SPLIT:
            C = rec.new_degree
            news = [sim.add_worker(C, rec.first_gpu), sim.add_worker(C, rec.first_gpu + C)]
        else:
            news = [sim.add_worker(rec.new_degree, rec.first_gpu)]
        for w in news:
            w.state = WorkerState.SWITCHING
            w.cache.insert_listeners.extend(listeners[0])
            w.cache.evict_listeners.extend(listeners[1])
        rec.new_worker_ids = tuple(w.worker_id for w in news)
        for w, blocks in zip(news, kept):
            self._install(w, blocks, rec)
        ranks = sum(w.degree for w in news)
        for w in news:
            self._committing[w.worker_id] = flight
        sim._log(f"switch_end:{flight.op}")
        self._snapshot()
        sim.schedule(self.config.confirm_s_per_rank * ranks, EventPriority.RECONFIG, self._commit, (flight, news))

    def _install(self, w: Worker, blocks: list[tuple[int, tuple | None]], rec: OperationRecord) -> None:
        """Inserts ``blocks`` ((hash, shard info or None for READY), LRU first) into the new worker
        ``w``, records their shard masks and counts them on ``rec``."""
        pend = {h: info for h, info in blocks if info is not None}
        states = [(h, READY if info is None else PENDING) for h, info in blocks]
        if not w.cache.fill(states):
            for h, st in states:
                w.cache.insert((h,), st)
        rec.pending_blocks_created += len(pend)
        rec.ready_blocks_retained += len(blocks) - len(pend)
        if pend:
            self._shards[w.worker_id] = pend
            self._register(w, rec.index)

    # ------------------------------------------------------------------ shard masks
    def _ready_info(self, first_gpu: int, degree: int) -> tuple:
        """Shard info of a block READY on the worker of ``degree`` from ``first_gpu``: its GPU ``j``
        holds content slices ``[j K/degree, (j+1) K/degree)``; the origin is the worker itself."""
        key = ("ready", first_gpu, degree)
        info = self._memo.get(key)
        if info is None:
            info = self._memo[key] = (_layout_masks(first_gpu, degree, first_gpu, degree, self._num_slices),
                                      first_gpu, degree)
        return info

    def _info(self, w: Worker, h: int) -> tuple | None:
        """Shard info (masks, origin first GPU, origin degree) of block ``h`` on ``w``; None if absent."""
        st = w.cache.state(h)
        if st is None:
            return None
        if st == READY:
            return self._ready_info(w.first_gpu, w.degree)
        return self._shards[w.worker_id][h]

    def _missing_slices(self, masks: tuple[int, ...]) -> tuple[int, int]:
        """(number of missing slices, mask of the slices needed from outside) of a block held with ``masks`` by a worker of
        ``len(masks)`` ranks, in content slices of ``1/K`` of a block (K = largest supported degree).

        Every rank must end with ``K/C`` slices of the block; bytes a rank already holds stay where
        they are (re-addressing is local metadata, paper §6.2): the ranks lack
        ``sum(max(0, K/C - held))`` slices, and the slices none of them holds must come from outside
        the worker. The missing slices are the larger of the two (each is a lower bound on the bytes
        moved): ``K/2`` after one split of a READY block (``MISSING_FRACTION``), ``K (1 - 2**-k)``
        after ``k`` splits, ``K/2`` on a merge of a holder with a sibling lacking the block."""
        out = self._memo.get(masks)
        if out is None:
            share = self._num_slices // len(masks)
            deficit = 0
            union = 0
            for m in masks:
                held = m.bit_count()
                if held < share:
                    deficit += share - held
                union |= m
            outside = self._all_slices & ~union
            n_out = outside.bit_count()
            out = self._memo[masks] = (deficit if deficit > n_out else n_out, outside)
        return out

    def _holders(self, first_gpu: int, degree: int, origin_first_gpu: int, origin_degree: int, h: int) -> list:
        """[(worker, content slices of ``h`` it holds)] of the workers on the GPUs of the origin span
        outside the span ``first_gpu .. first_gpu+degree-1``, GPU order; a worker with a failed rank
        holds nothing. O(origin degree / smallest degree)."""
        sim = self.sim
        workers = sim.workers
        step = sim.config.pool.min_degree
        end = first_gpu + degree
        g, origin_end = origin_first_gpu, origin_first_gpu + origin_degree
        out = []
        while g < origin_end:
            if first_gpu <= g < end:
                g = end
                continue
            o = workers.get(g // step)
            if o is None or o.first_gpu != g:
                g += step
                continue
            g += o.degree
            st = o.cache.state(h)
            if st is None or o.stopped:
                continue
            if st == READY:
                out.append((o, self._all_slices))
            else:
                union = 0
                for m in self._shards[o.worker_id][h][0]:
                    union |= m
                out.append((o, union))
        return out

    def _covered(self, outside: int, holders: list) -> bool:
        for _, content in holders:
            outside &= ~content
        return not outside

    def _plan_split(self, w: Worker, caps: tuple[int, int]) -> tuple[tuple[list, list], int]:
        """KV state of the two halves of ``w`` after its split: per half, [(hash, shard info or None
        for READY)], LRU first, at most ``caps[i]`` blocks; and the number of blocks not retained for
        want of a valid source. Each half keeps its GPUs' shards of the most recently used blocks
        that it holds any shard of; a block is READY on a half whose ranks hold their whole share,
        and a block whose shards neither ``w`` nor the other workers of its origin span still hold
        is not retained."""
        C = w.degree // 2
        memo: dict = {}
        kept: tuple[list, list] = ([], [])
        num_lost = 0
        for h in reversed(w.cache.blocks()):  # MRU first
            if len(kept[0]) >= caps[0] and len(kept[1]) >= caps[1]:
                break
            info = self._info(w, h)
            out = memo.get(info)
            if out is None:
                out = memo[info] = self._split_info(info, C)
            if out[2] and not self._covered(out[2], self._holders(w.first_gpu, w.degree, info[1], info[2], h)):
                num_lost += 1
                continue
            for i in (0, 1):
                if out[i] is not False and len(kept[i]) < caps[i]:
                    kept[i].append((h, out[i]))
        return (kept[0][::-1], kept[1][::-1]), num_lost

    def _split_info(self, info: tuple, half_degree: int) -> tuple:
        """(lower half's shard info, upper half's, slices ``w`` lacks) for a block of shard info ``info``
        on a worker being split: a half's info is None if READY there, False if it holds no shard."""
        masks, origin_first_gpu, origin_degree = info
        out = []
        for part in (masks[:half_degree], masks[half_degree:]):
            if not any(part):
                out.append(False)
            elif self._missing_slices(part)[0] == 0:
                out.append(None)
            else:
                out.append((part, origin_first_gpu, origin_degree))
        union = 0
        for m in masks:
            union |= m
        out.append(self._all_slices & ~union)
        return tuple(out)

    def _plan_merge(self, olds: list[Worker]) -> tuple[list, int]:
        """KV state of the worker merged from the siblings ``olds`` (lower first GPU first):
        [(hash, shard info or None for READY)], LRU first, and the number of blocks not retained for
        want of a valid source. The masks of the two siblings are put side by side: a block is
        READY if every rank holds its share (held by both siblings as READY, for instance),
        PENDING otherwise; a block of which slices are on none of the merged ranks nor on the other
        workers of its origin span (a split half's block whose sibling dropped it) is not retained."""
        a_w, b_w = olds
        C = a_w.degree
        W_first, W_degree = a_w.first_gpu, 2 * C
        a, b = a_w.cache.blocks(), b_w.cache.blocks()  # LRU first
        in_a, in_b = set(a), set(b)
        absent = (0,) * C
        memo: dict = {}
        state: dict[int, tuple | None] = {}
        lost: set[int] = set()
        blocks = in_a | in_b
        if not self._shards.get(a_w.worker_id) and not self._shards.get(b_w.worker_id):
            # READY blocks only (the usual case): a block's result depends only on which sibling
            # holds it, so three keys cover every block; the loop below is needed only when one of
            # them leaves slices that must come from outside (a per-block check)
            ra, rb = self._ready_info(a_w.first_gpu, C), self._ready_info(b_w.first_gpu, C)
            classes = ((in_a & in_b, (ra, rb)), (in_a - in_b, (ra, None)), (in_b - in_a, (None, rb)))
            outs = [self._merge_info(key, absent, W_first, W_degree) for _, key in classes]
            if not any(outside for _, outside in outs):
                for (hashes, _), (info, _) in zip(classes, outs):
                    state.update(dict.fromkeys(hashes, info))
                blocks = ()
        for h in blocks:
            ia = self._info(a_w, h) if h in in_a else None
            ib = self._info(b_w, h) if h in in_b else None
            key = (ia, ib)
            out = memo.get(key)
            if out is None:
                out = memo[key] = self._merge_info(key, absent, W_first, W_degree)
            info, outside = out
            if outside and not self._covered(outside, self._holders(W_first, W_degree, info[1], info[2], h)):
                lost.add(h)
            else:
                state[h] = info
        if lost:
            a = [h for h in a if h not in lost]
            b = [h for h in b if h not in lost]
            in_a = set(a)
        # Interleave the two recency orders by relative rank (LRU first).
        order = sorted([(i / len(a), 0, h) for i, h in enumerate(a)]
                       + [(i / len(b), 1, h) for i, h in enumerate(b) if h not in in_a])
        return [(h, state[h]) for _, _, h in order], len(lost)

    def _merge_info(self, key: tuple, absent: tuple, first_gpu: int, degree: int) -> tuple:
        """``(shard info on the merged worker or None if READY, slices needed from outside)`` of a
        block with shard infos ``key = (lower sibling's, upper sibling's)`` (None where absent),
        merged into the degree-``degree`` worker from ``first_gpu`` (:meth:`_plan_merge`)."""
        ia, ib = key
        masks = (ia[0] if ia else absent) + (ib[0] if ib else absent)
        origin = max((o[2], o[1]) for o in (ia, ib, (None, first_gpu, degree)) if o)
        num_missing, outside = self._missing_slices(masks)
        return (None if num_missing == 0 else (masks, origin[1], origin[0]), outside)

    def _commit(self, payload) -> None:
        """Stage 5: every rank confirmed; new epoch; the new workers become schedulable."""
        flight, news = payload
        if flight.aborted:
            return
        for w in news:
            self._committing.pop(w.worker_id, None)
        sim = self.sim
        sim.epoch += 1
        for w in news:
            w.epoch = sim.epoch
            w.state = WorkerState.ACTIVE
        rec = flight.record
        rec.commit_s = sim.env.now
        rec.epoch = sim.epoch
        sim._log(f"commit:{flight.op}:epoch{sim.epoch}")
        self._snapshot()
        sim.unpark()
        for fn in self.commit_listeners:
            fn(sim, rec)

    # ------------------------------------------------------------------ faults
    def abort_for(self, worker: Worker) -> int | None:
        """A rank of ``worker`` failed (``envs/sim/faults.py``): aborts the operation it takes
        part in, if any — a dead rank never reaches the common step boundary. Before the switch
        end the surviving participants resume under the old geometry (ACTIVE again); after it
        the surviving new workers commit at once (a new epoch). The failed worker is left to the
        fault manager. Returns the aborted operation's record index, or None."""
        sim = self.sim
        flight = self._inflight.get(worker.worker_id)
        if flight is not None and sim.workers.get(worker.worker_id) is worker:
            for w in flight.workers:
                self._inflight.pop(w.worker_id, None)
                if w is not worker and not w.stopped:
                    w.state = WorkerState.ACTIVE
                    if w.queue and not w.batch:
                        sim._start_step(w)
            survivors = []
        else:
            flight = self._committing.get(worker.worker_id)
            if flight is None:
                return None
            news = [sim.workers[i] for i in flight.record.new_worker_ids if i in sim.workers]
            for w in news:
                self._committing.pop(w.worker_id, None)
            survivors = [w for w in news if w is not worker and not w.stopped]
            if survivors:
                sim.epoch += 1
                for w in survivors:
                    w.epoch = sim.epoch
                    w.state = WorkerState.ACTIVE
        flight.aborted = True
        flight.record.aborted_s = sim.env.now
        sim._log(f"abort:{flight.op}")
        self._snapshot()
        sim.unpark()
        return flight.record.index

    def forget_worker(self, worker_id: int) -> None:
        """Drops the reconciliation state of a worker removed after a fault."""
        self._recon.pop(worker_id, None)
        self._shards.pop(worker_id, None)
        self._arriving.pop(worker_id, None)
        self._committing.pop(worker_id, None)

    # ------------------------------------------------------------------ KV reconciliation
    def _register(self, w: Worker, record_index: int) -> None:
        self._recon[w.worker_id] = record_index
        self.sim.reconcile_hooks[w.worker_id] = self._reconcile

    def _reconcile(self, sim: Simulator, w: Worker, req, nhit: int) -> tuple[int, float]:
        """``Simulator.reconcile_hooks`` entry: extends the ready hit over pending blocks with a
        valid source, transferring their missing bytes; returns (usable blocks, ready time): no
        earlier than the end of any transfer still bringing one of the usable blocks.

        A pending block's missing bytes are ``num_missing_slices / K x kv_block_bytes`` (:meth:`_missing_slices`); the
        slices none of ``w``'s ranks holds come from the workers now on the other GPUs of the
        block's origin span that still hold them (pinned until the transfer ends); if they do not
        hold them all, the block has no valid source and ends the reusable run. O(run length x
        origin degree), independent of the queue."""
        now = sim.env.now
        hashes = req.block_hashes
        n = len(hashes)
        cache = w.cache
        arriving = self._arriving.get(w.worker_id)
        t_ready = _arrival_s(arriving, hashes, nhit, now) if arriving else now
        if nhit >= n or cache.state(hashes[nhit]) != PENDING:
            return nhit, t_ready
        rec = self.records[self._recon[w.worker_id]]
        shards = self._shards[w.worker_id]
        num_slices_by_link: dict[tuple[int, int], int] = {}
        pins: dict[int, tuple] = {}  # source worker id -> (its cache, blocks pinned)
        k = nhit
        pending: list[int] = []
        while k < n:
            h = hashes[k]
            st = cache.state(h)
            if st is None:
                break
            if st == PENDING and not self._plan_block(w, h, shards[h], num_slices_by_link, pins):
                rec.num_source_lost_blocks += 1
                break
            if st == PENDING:
                pending.append(h)
            k += 1
        if not pending:
            return nhit, t_ready
        block_bytes = sim.kv_block_bytes
        num_slices = self._num_slices
        num_bytes, end = 0, now
        for (src_node, dst_node), num in sorted(num_slices_by_link.items()):
            b = int(num * block_bytes / num_slices)
            _, e = sim.links.reserve(now, src_node, dst_node, b)
            num_bytes += b
            end = e if e > end else end
        for h in pending:
            cache.set_state(h, READY)
            del shards[h]
        self._book_transfer(w, list(pins.values()), pending, now, end)
        rec.reconciliation_bytes += num_bytes
        rec.num_reconciled_blocks += len(pending)
        sim._log(f"reconcile:w{w.worker_id}:b{len(pending)}")
        return k, (end if end > t_ready else t_ready)

    def _plan_block(self, w: Worker, h: int, info: tuple, num_slices_by_link: dict, pins: dict) -> bool:
        """Adds the reconciliation of pending block ``h`` (shard info ``info``) on ``w`` to
        ``num_slices_by_link`` ((source node, destination node) -> slices) and its sources to ``pins``;
        returns False (and adds nothing) when it has no valid source. Slices from outside ``w`` go
        from their holder's node (holders on ``w``'s node first) to the node of ``w``'s ranks that
        lack the most; the rest is redistribution among ``w``'s ranks (:meth:`_moves_within`)."""
        masks = info[0]
        outside = self._missing_slices(masks)[1]
        moves, dst_node = self._moves_within(w.first_gpu, masks)
        if outside:
            holders = self._holders(w.first_gpu, w.degree, info[1], info[2], h)
            if not self._covered(outside, holders):
                return False
            holders.sort(key=lambda hc: hc[0].node != dst_node)  # stable: GPU order otherwise
            for o, content in holders:
                take = outside & content
                if take:
                    outside &= ~content
                    key = (o.node, dst_node)
                    num_slices_by_link[key] = num_slices_by_link.get(key, 0) + take.bit_count()
                    p = pins.get(o.worker_id)
                    if p is None:
                        p = pins[o.worker_id] = (o.cache, [])
                    p[1].append(h)
                    if not outside:
                        break
        for key, u in moves:
            num_slices_by_link[key] = num_slices_by_link.get(key, 0) + u
        return True

    def _moves_within(self, first_gpu: int, masks: tuple[int, ...]) -> tuple[tuple, int]:
        """Redistribution of a pending block among the ranks of a worker from ``first_gpu`` holding it
        with ``masks``: ((((source node, destination node), slices), ...), node receiving the slices from
        outside). The slices beyond those from outside (:meth:`_missing_slices`) are lacked on each node by its
        ranks; a node serves its own ranks from the distinct slices it holds beyond its ranks'
        shares, the other nodes (in order) the rest. One node (the usual case): all on that node."""
        key = ("moves", first_gpu, masks)
        out = self._memo.get(key)
        if out is not None:
            return out
        num_missing, outside = self._missing_slices(masks)
        internal = num_missing - outside.bit_count()
        per_node = self.sim.config.pool.gpus_per_node
        share = self._num_slices // len(masks)
        lack: dict[int, int] = {}
        surplus: dict[int, int] = {}
        union: dict[int, int] = {}
        kept: dict[int, int] = {}
        for j, m in enumerate(masks):
            node = (first_gpu + j) // per_node
            held = m.bit_count()
            lack[node] = lack.get(node, 0) + (share - held if held < share else 0)
            union[node] = union.get(node, 0) | m
            kept[node] = kept.get(node, 0) + (held if held < share else share)
        nodes = sorted(lack)
        dst = max(nodes, key=lambda nd: (lack[nd], -nd))
        for nd in nodes:
            surplus[nd] = max(0, union[nd].bit_count() - kept[nd])
        lack[dst] = max(0, lack[dst] - outside.bit_count())
        moves: dict[tuple[int, int], int] = {}
        for nd in nodes:
            need = lack[nd]
            for src in [nd] + [x for x in nodes if x != nd]:
                if internal <= 0 or need <= 0:
                    break
                u = min(need, surplus[src], internal)
                if u > 0:
                    moves[(src, nd)] = moves.get((src, nd), 0) + u
                    surplus[src] -= u
                    need -= u
                    internal -= u
        if internal > 0:  # cannot happen with nested layouts; keep the total exact regardless
            nd = nodes[0]
            moves[(nd, nd)] = moves.get((nd, nd), 0) + internal
        out = self._memo[key] = (tuple(moves.items()), dst)
        return out

    def _book_transfer(self, w: Worker, pins: list[tuple], pending: list[int], now: float, end: float) -> None:
        """Bookkeeping of a reconciliation transfer of ``pending`` blocks to ``w`` ending at ``end``
        [s]: the blocks' arrival time (while bytes are in flight) and the pins of the source blocks
        (``pins``: [(source cache, block hashes)]), both released by :meth:`_transfer_end` (no event
        when there is neither)."""
        if end > now:
            arriving = self._arriving.setdefault(w.worker_id, {})
            for h in pending:
                arriving[h] = end
        for src_cache, hashes in pins:
            for h in hashes:
                src_cache.pin(h)
        if pins or end > now:
            self.sim.schedule(end - now, EventPriority.TRANSFER_END, self._transfer_end, (w.worker_id, pins, pending, end))

    def _transfer_end(self, payload) -> None:
        """A reconciliation transfer ended: its source blocks are unpinned, its blocks' bytes are in."""
        worker_id, pins, hashes, end = payload
        for p in pins:
            _unpin(p)
        arriving = self._arriving.get(worker_id)
        if arriving is not None:
            for h in hashes:
                if arriving.get(h) == end:
                    del arriving[h]
            if not arriving:
                del self._arriving[worker_id]

    # ------------------------------------------------------------------ records
    def _snapshot(self) -> None:
        sim = self.sim
        by_degree: dict[str, int] = {}
        transitioning = 0
        for w in sim.workers.values():
            if w.state == WorkerState.ACTIVE:
                key = f"cp{w.degree}"
                by_degree[key] = by_degree.get(key, 0) + 1
            else:
                transitioning += w.degree
        entry = {"time_s": sim.env.now, "num_workers_by_degree": dict(sorted(by_degree.items())),
                 "num_reconfiguring_gpus": transitioning, "num_gpus": sim.num_gpus_in_use(), "epoch": sim.epoch}
        if self.composition_series and self.composition_series[-1]["time_s"] == entry["time_s"]:
            self.composition_series[-1] = entry
        else:
            self.composition_series.append(entry)

    def extras(self) -> dict:
        """``SimResult.extras`` entries: ``reconfig_operations`` (list of record dicts) and
        ``composition_series`` (time series of ACTIVE workers per degree and GPUs in transition)."""
        return {"reconfig_operations": [r.to_dict() for r in self.records],
                "composition_series": list(self.composition_series),
                "num_reconfigurations": sum(1 for r in self.records if r.committed)}


def _arrival_s(arriving: dict[int, float], hashes, num_blocks: int, now_s: float) -> float:
    """Latest end [s] (at least ``now_s``) of the transfers in ``arriving`` (block hash -> end)
    that still bring bytes of the first ``num_blocks`` of ``hashes``; O(num_blocks)."""
    t = now_s
    get = arriving.get
    for i in range(num_blocks):
        e = get(hashes[i])
        if e is not None and e > t:
            t = e
    return t


def _unpin(payload) -> None:
    cache, hashes = payload
    for h in hashes:
        cache.unpin(h)


def _valid_group(pool, degree: int, first_gpu: int) -> bool:
    try:
        pool.check_group(degree, first_gpu)
    except ValueError:
        return False
    return True


def get_reconfigurator(sim: Simulator, config: ReconfigConfig | None = None) -> Reconfigurator:
    """The simulator's :class:`Reconfigurator`, created and attached on first use.

    Raises:
        ValueError: if one exists already with a different ``config``.
    """
    r = sim.attachments.get("reconfig")
    if r is None:
        return Reconfigurator(sim, config)
    if config is not None and config != r.config:
        raise ValueError(f"this simulator already has a reconfigurator with {r.config}, not {config}")
    return r


def eligible_operations(sim: Simulator) -> list[Operation]:
    """Operations that may start now on ``sim`` (for action masks); see
    :meth:`Reconfigurator.eligible_operations`."""
    return get_reconfigurator(sim).eligible_operations()


def apply_operation(sim: Simulator, op: Operation) -> OperationRecord:
    """Starts ``op`` on ``sim`` (the protocol then runs as simulation events).

    Raises:
        ValueError: if ``op`` is not eligible now (names the reason).
    """
    return get_reconfigurator(sim).apply(op)


def _layout_masks(first_gpu: int, degree: int, span_first_gpu: int, span_degree: int, num_slices: int) -> tuple[int, ...]:
    """Content slices (bit ``i``: slice ``[i/K, (i+1)/K)`` of a block, ``K = num_slices``) that each
    GPU of the span ``span_first_gpu ..`` holds of a block laid out READY on the worker of ``degree``
    from ``first_gpu``: its ``j``-th GPU holds ``K/degree`` slices from ``j K/degree``, others none."""
    width = num_slices // degree
    one = (1 << width) - 1
    out = []
    for g in range(span_first_gpu, span_first_gpu + span_degree):
        j = g - first_gpu
        out.append(one << (j * width) if 0 <= j < degree else 0)
    return tuple(out)
