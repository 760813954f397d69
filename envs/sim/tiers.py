"""Multi-tier KV cache: host DRAM per node, an optional pool-wide remote KV store, and the KV
pull (fetch) path that overlaps queueing.

Tiers (``TierConfig.levels``; off by default, ``("hbm",)``):

* ``hbm``: the workers' own prefix caches (:class:`envs.sim.cache.PrefixCache`), unchanged.
* ``dram``: one host-memory tier per node, shared by the node's workers, read into a worker's
  HBM over its GPUs' PCIe links (a degree-C worker reads its C KV shards over C links in
  parallel: ``C x dram_bytes_per_s_per_gpu``).
* ``store``: one remote KV store shared by the pool (Mooncake Store style), reached over the
  reading node's RDMA NIC ingress: the *same* ``("in", node)`` link as replication and
  reconciliation transfers (:class:`envs.sim.links.KVLinks`, FIFO contention), after a fixed
  metadata lookup latency.

Demotion policy (on eviction, inclusive on reads): a block evicted from a worker's HBM is
written to its node's DRAM tier (GPU->host is the other PCIe direction, so demotion does not
delay fetches; its bytes are counted) and, with a store, also put into the store unless it is
there already (Mooncake puts KV into the shared store so that every node can pull it), over the
node's NIC egress ``("out", node)``, contended like any inter-node transfer. A DRAM eviction
drops the node-local copy only. A fetch copies blocks up and leaves the lower-tier copy in place
(refreshed as recently used).

Fetch or recompute (per request, at routing): the request's prefix beyond its HBM hit is
matched block by block in the node's DRAM and the store (leading run, either source). The
options "recompute" (P = HBM hit), "fetch the DRAM-only leading run" and "fetch the whole run"
are compared by predicted first-step finish, with ``Q = now + q_w`` (the predicted time the
worker can start it), ``R`` (predicted ready time: link queue + lookup + bytes / bandwidth) and
``C = E_C(L - P, P)``::

    finish = max(Q, R) + C                                 (whole-prefix loading)
    finish = max(Q + C, R + C*B/N, t0 + T*B/N + C)          (layer-wise, B of N layers per chunk)

where ``t0``/``T`` are the fetch start and duration: with layer-wise loading the compute of a
chunk of B layers starts once that chunk is loaded, so only the last chunk's compute (and the
first chunk's load) cannot overlap (LMCache / Mooncake layer-wise KV loading; B is the GPU
staging buffer in layers). The minimum wins; the decision is recorded per request
(``kv_fetch_decision``: 0 no lower-tier hit, 1 fetch, 2 recompute). With an idle worker and no
lookup latency, fetching P tokens beats recomputing them exactly when the link bandwidth exceeds
the rate at which the GPU produces that KV, ``bytes(P) / (E_C(L, 0) - E_C(L - P, P))``.

The fetch starts at routing time (``prefetch="routing"``) or when the request enters the first
``prefetch_depth_requests`` positions of its worker's queue (``"queue-head"``, a bounded HBM
staging area); the engine step that admits the request starts no earlier than its ready time
(whole-prefix loading) or, layer-wise, than the bound above with C the step's *actual* compute
time (the batch's, prediction error included: :meth:`TieredKV.step_ready_s`), so that no layer
is computed before it arrived, however the step's time compares with its prediction.
Fetched KV waits in the worker's staging area (its activation reserve) and enters the HBM
prefix cache with the rest of the prompt's blocks at the end of the step.

Eviction rules of the DRAM tiers and the store (``eviction``): ``"lru"`` (baseline), or
``"next-use"``: blocks (in either tier) that a queued, not yet fetched request still needs are
kept; blocks no queued request needs go first
(LRU among them: their next use is unknown, so later than any known one), then the needed block
whose earliest needing request was dispatched last (the block whose next use is latest; Belady's
rule with the queues as the oracle). Blocks that are the source of an in-flight fetch are pinned.

Cost: O(blocks touched) per dispatch, step start and eviction; nothing scans a queue beyond
``prefetch_depth_requests`` entries, so per-event cost does not grow with queue length.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Sequence
from itertools import filterfalse, islice, repeat
from typing import TYPE_CHECKING

from envs.sim.tier_config import TierConfig

if TYPE_CHECKING:  # pragma: no cover
    from envs.sim.request import Request
    from envs.sim.simulator import Simulator
    from envs.sim.worker import Worker

FETCH_NONE, FETCH_PULL, FETCH_RECOMPUTE = 0, 1, 2

# Tier record columns (per request) added to ``SimResult.records`` when tiers are on.
RECORD_KEYS = ("kv_fetch_decision", "hbm_hit_tokens", "dram_hit_tokens", "store_hit_tokens", "dram_fetch_bytes",
               "store_fetch_bytes", "fetch_start_s", "fetch_ready_s", "fetch_hidden_s", "fetch_exposed_s",
               "predicted_fetch_s")


def overlap_finish_s(q_s: float, fetch_start_s: float, ready_s: float, compute_s: float,
                     layerwise_fraction: float = 1.0) -> float:
    """Finish time [s] of a step that needs fetched KV (module docstring).

    Args:
        q_s: when the GPU can start the step (queueing done).
        fetch_start_s / ready_s: start and end of the fetch.
        compute_s: the step's compute time C.
        layerwise_fraction: B/N, the share of layers per loading chunk (1 = whole-prefix
            loading: ``max(Q, R) + C``).
    """
    if layerwise_fraction >= 1.0:
        return (q_s if q_s > ready_s else ready_s) + compute_s
    f = layerwise_fraction
    return max(q_s + compute_s, ready_s + compute_s * f, fetch_start_s + (ready_s - fetch_start_s) * f + compute_s)


class BlockTier:
    """One lower KV tier (a node's DRAM or the store): a set of blocks with an eviction rule.

    Args:
        capacity_blocks: blocks it holds (>= 0).
        queue_aware: use the next-use rule (else LRU).

    Blocks no queued request needs live in ``_lru``, a plain dict in recency order (least
    recently used first; "move to the MRU end" is delete + re-insert); blocks needed by queued
    requests in ``_needed`` (block -> number of needing requests, in order of the first
    registration, i.e. of the earliest next use). ``_pinned`` maps a block to the end time of
    the in-flight fetch reading it (never evicted before).

    Cost: every operation is O(blocks it is given + blocks it evicts), done by C-level bulk dict
    operations in the common cases (no Python bytecode per block). A plain dict has no
    per-entry linked-list node (less memory than an ``OrderedDict``); the LRU end is found by
    iterating the dict from its front, which skips the slots of deleted entries, so after
    ``64 + len / 4`` deletions the dict is compacted in place (amortised O(1) per deletion, and
    an eviction skips at most that many dead slots). Evictions, refreshes and touches keep
    exactly the order of the former ``OrderedDict`` version (``tests/sim/test_tiers.py``).
    """

    __slots__ = ("capacity_blocks", "queue_aware", "_lru", "_needed", "_pinned_until", "_pins_end_s", "num_evicted",
                 "_num_deleted")

    def __init__(self, capacity_blocks: int, queue_aware: bool = False) -> None:
        if capacity_blocks < 0:
            raise ValueError(f"capacity_blocks must be >= 0, got {capacity_blocks}")
        self.capacity_blocks = capacity_blocks
        self.queue_aware = queue_aware
        self._lru: dict[int, None] = {}
        self._needed: OrderedDict[int, int] = OrderedDict()
        self._pinned_until: dict[int, float] = {}
        self._pins_end_s = -math.inf  # latest pin end: after it no block is pinned
        self.num_evicted = 0
        self._num_deleted = 0  # deletions from _lru since its last compaction

    def __len__(self) -> int:
        return len(self._lru) + len(self._needed)

    def __contains__(self, block_hash: int) -> bool:
        return block_hash in self._lru or block_hash in self._needed

    def _deleted(self, num: int) -> None:
        """Counts deletions from ``_lru``; compacts it (same object, same order) when the dead
        slots at its front could exceed a quarter of its size."""
        self._num_deleted += num
        lru = self._lru
        if self._num_deleted > 64 + (len(lru) >> 2):
            live = dict(lru)
            lru.clear()
            lru.update(live)
            self._num_deleted = 0

    def _move_to_end(self, block_hashes) -> None:
        """Moves present blocks to the MRU end in the order of their last occurrence (as
        ``OrderedDict.move_to_end`` called for each in turn)."""
        lru = self._lru
        order = list(filter(lru.__contains__, block_hashes))
        if not order:
            return
        if len(order) > 1:
            order = dict.fromkeys(reversed(order))  # last occurrence wins ...
            order = list(reversed(order))  # ... in forward order
        deque(map(lru.__delitem__, order), 0)
        lru.update(zip(order, repeat(None)))
        self._deleted(len(order))

    def put(self, block_hashes: Sequence[int], now_s: float) -> list[int]:
        """Inserts (or refreshes) blocks, oldest first; returns the blocks it evicted. New blocks
        go to the MRU end in order (first occurrence), then the refreshed ones (blocks demoted
        together are equally recent)."""
        lru = self._lru
        needed = self._needed
        if needed:
            for h in block_hashes:
                if h in lru:
                    del lru[h]
                    lru[h] = None
                    self._num_deleted += 1
                elif h not in needed:
                    lru[h] = None
            self._deleted(0)
        else:  # C-level bulk operations, no Python loop per block
            before = len(lru)
            lru.update(zip(block_hashes, repeat(None)))  # new blocks go to the MRU end (present ones stay)
            num_new = len(lru) - before
            if num_new < len(block_hashes):  # some were present: they follow the new ones
                new = set(islice(reversed(lru), num_new)) if num_new else ()
                self._move_to_end(filterfalse(new.__contains__, block_hashes) if new else block_hashes)
        if len(lru) + len(needed) > self.capacity_blocks:
            return self._evict(now_s)
        return []

    def touch(self, block_hashes: Sequence[int]) -> None:
        """Marks blocks as just used (most recently used)."""
        self._move_to_end(block_hashes)

    def pin(self, block_hashes: Sequence[int], until_s: float) -> None:
        """Keeps blocks resident until ``until_s`` (sources of an in-flight fetch)."""
        pins = self._pinned_until
        for h in block_hashes:
            if pins.get(h, -1.0) < until_s:
                pins[h] = until_s
        if until_s > self._pins_end_s:
            self._pins_end_s = until_s

    def need(self, block_hashes: Sequence[int]) -> None:
        """A queued request will read these blocks (next-use rule; no-op for LRU)."""
        if not self.queue_aware:
            return
        lru = self._lru
        needed = self._needed
        num_deleted = 0
        for h in block_hashes:
            c = needed.get(h)
            if c is not None:
                needed[h] = c + 1
            elif h in lru:
                del lru[h]
                num_deleted += 1
                needed[h] = 1
        self._deleted(num_deleted)

    def release(self, block_hashes: Sequence[int]) -> None:
        """Undoes :meth:`need` (the request fetched them or left the queue)."""
        if not self.queue_aware:
            return
        lru = self._lru
        needed = self._needed
        for h in block_hashes:
            c = needed.get(h)
            if c is None:
                continue
            if c > 1:
                needed[h] = c - 1
            else:
                del needed[h]
                lru[h] = None

    def _evict(self, now_s: float) -> list[int]:
        lru = self._lru
        needed = self._needed
        pins = self._pinned_until
        excess = len(lru) + len(needed) - self.capacity_blocks
        if pins and now_s >= self._pins_end_s:  # every fetch has ended: nothing is pinned
            pins.clear()
        if not pins and excess <= len(lru):  # fast path: the excess least recently used, C-level loops
            out = list(islice(lru, excess))
            deque(map(lru.__delitem__, out), 0)
            self.num_evicted += excess
            self._deleted(excess)
            return out
        out: list[int] = []
        if excess > 0 and lru:  # least recently used first; sources of in-flight fetches stay in place
            for h in lru:
                t = pins.get(h) if pins else None
                if t is not None and t > now_s:
                    continue
                out.append(h)
                if len(out) == excess:
                    break
            deque(map(lru.__delitem__, out), 0)
            self._deleted(len(out))
            excess -= len(out)
        while excess > 0 and needed:  # then the latest next use
            victim = None
            for h in reversed(needed):
                t = pins.get(h)
                if t is None or t <= now_s:
                    victim = h
                    break
            if victim is None:
                break  # everything pinned: stay over capacity until the fetches end
            del needed[victim]
            pins.pop(victim, None)
            out.append(victim)
            excess -= 1
        self.num_evicted += len(out)
        return out

    def clear(self) -> int:
        """Drops every block, need and pin (the memory is lost: a node failure); returns how many
        blocks it held. The membership dicts stay the same objects (:meth:`dicts`)."""
        n = len(self)
        self._lru.clear()
        self._needed.clear()
        self._pinned_until.clear()
        self._pins_end_s = -math.inf
        self._num_deleted = 0
        return n

    def dicts(self) -> tuple[dict, ...]:
        """The membership dicts (``h in d`` for any of them <=> ``h in self``), for routers' hot loops."""
        return (self._lru, self._needed) if self.queue_aware else (self._lru,)


class _Plan:
    """A request's fetch plan on the worker it was routed to."""

    __slots__ = ("worker", "decision", "hbm_blocks", "num_blocks", "dram_blocks", "store_blocks", "started",
                 "fetch_start_s", "ready_s", "needs_registered", "predicted_s")

    def __init__(self, worker: Worker, decision: int, hbm_blocks: int, num_blocks: int, dram_blocks: list[int],
                 store_blocks: list[int], predicted_s: float) -> None:
        self.worker = worker
        self.decision = decision
        self.hbm_blocks = hbm_blocks
        self.num_blocks = num_blocks  # HBM hit + fetched blocks (the step's hit if fetched)
        self.dram_blocks = dram_blocks
        self.store_blocks = store_blocks
        self.started = False
        self.fetch_start_s = math.nan
        self.ready_s = math.nan
        self.needs_registered = False
        self.predicted_s = predicted_s


class TieredKV:
    """Runtime of the lower KV tiers for one simulator (attached by :class:`Simulator` when
    ``SimConfig.kv_tiers.enabled``).

    Args:
        sim: the simulator (its links, workers, cost model, block size and clock).
        config: the tier configuration.
    """

    def __init__(self, sim: Simulator, config: TierConfig) -> None:
        self.sim = sim
        self.config = config
        self.block_bytes = sim.kv_block_bytes
        self.bs = sim.kv_block_size_tokens
        num_nodes = sim.links.num_nodes
        queue_aware = config.eviction == "next-use"
        self.dram: list[BlockTier] | None = None
        if "dram" in config.levels:
            cap = int(config.dram_capacity_bytes_per_node // self.block_bytes)
            self.dram = [BlockTier(cap, queue_aware) for _ in range(num_nodes)]
        self.store: BlockTier | None = None
        if "store" in config.levels:
            self.store = BlockTier(int(config.store_capacity_bytes // self.block_bytes), queue_aware)
        self.store_bw = config.store_bytes_per_s_per_node or sim.config.links.inter_node_bytes_per_s
        self.lookup_s = config.store_lookup_latency_s
        self.layer_fraction = min(1.0, config.layerwise_buffer_layers / config.num_layers) if config.layerwise else 1.0
        self.queue_head = config.prefetch == "queue-head"
        self.depth = config.prefetch_depth_requests
        self._plans: dict[int, _Plan] = {}
        self._route_memo: dict[tuple[int, int], tuple] = {}
        self._route_memo_rid = -1
        n = sim.workload.num_requests
        nan = math.nan
        self.rec = {k: ([nan] * n if k.endswith("_s") else [0] * n) for k in RECORD_KEYS}
        self.demoted_bytes = {"dram": 0, "store": 0}
        # per node: the dicts whose union is "blocks a worker of the node can pull" (routers' fast check)
        store_dicts = self.store.dicts() if self.store is not None else ()
        self.lower_dicts = [(self.dram[n].dicts() if self.dram is not None else ()) + store_dicts for n in range(num_nodes)]
        for w in sim.workers.values():
            self.watch(w)

    # ------------------------------------------------------------------ demotion
    def watch(self, w: Worker) -> None:
        """Demotes the worker's HBM evictions (call for every new worker)."""
        w.cache.evict_batch_listeners.append(self._on_hbm_evict)

    def _on_hbm_evict(self, worker_id: int, block_hashes: list[int]) -> None:
        w = self.sim.workers.get(worker_id)
        node = w.node if w is not None else 0
        now = self.sim.env.now
        if self.dram is not None:
            self.demoted_bytes["dram"] += len(block_hashes) * self.block_bytes
            self.dram[node].put(block_hashes, now)
        if self.store is not None:
            self._to_store(node, block_hashes, now)

    def _to_store(self, node: int, block_hashes: list[int], now_s: float) -> None:
        store = self.store
        before = len(store)
        num_evicted = len(store.put(block_hashes, now_s))
        num_new = len(store) - before + num_evicted  # blocks that were not in the store
        if num_new:
            num_bytes = num_new * self.block_bytes
            self.demoted_bytes["store"] += num_bytes
            self.sim.links.reserve_keys(now_s, (("out", node),), num_bytes, self.store_bw, "store_put")

    # ------------------------------------------------------------------ planning
    def _chain(self, node: int, hashes: Sequence[int], k0: int) -> tuple[int, int, list[int], list[int]]:
        """Lower-tier leading run after the HBM hit: ``(dram-only run end, run end, dram blocks,
        store blocks)`` (block indices are ends, exclusive)."""
        dram = self.dram[node] if self.dram is not None else None
        store = self.store
        n = len(hashes)
        k = k0
        d_blocks: list[int] = []
        s_blocks: list[int] = []
        k_dram = k0
        while k < n:
            h = hashes[k]
            if dram is not None and h in dram:
                d_blocks.append(h)
                if not s_blocks:
                    k_dram = k + 1
            elif store is not None and h in store:
                s_blocks.append(h)
            else:
                break
            k += 1
        return k_dram, k, d_blocks, s_blocks

    def _fetch_times(self, w: Worker, now_s: float, num_dram: int, num_store: int) -> tuple[float, float]:
        """Predicted ``(start, ready)`` [s] of fetching that many blocks now (current link queues)."""
        links = self.sim.links
        ready = now_s
        if num_dram:
            start = links.free_at_s(("pcie", w.first_gpu))
            start = start if start > now_s else now_s
            end = start + num_dram * self.block_bytes / (self.config.dram_bytes_per_s_per_gpu * w.degree)
            ready = end if end > ready else ready
        if num_store:
            t = now_s + self.lookup_s
            start = links.free_at_s(("in", w.node))
            start = start if start > t else t
            end = start + num_store * self.block_bytes / self.store_bw
            ready = end if end > ready else ready
        return now_s, ready

    def _best(self, w: Worker, L: int, k0: int, chain: tuple, q_s: float, now_s: float) -> tuple[int, float, float]:
        """Chooses among recompute / DRAM-only run / whole run: ``(num hit blocks, ready_s, finish_s)``."""
        k_dram, k, d_blocks, s_blocks = chain
        cm = w.cost_model  # the worker's node's GPU type (heterogeneous pools)
        bs = self.bs
        C = w.degree
        cap = L - 1
        p0 = min(k0 * bs, cap)
        best_k, best_ready = k0, now_s
        best_finish = q_s + cm.service_time_s(C, L - p0, p0)
        policy = self.config.fetch_policy
        if policy == "never":
            return best_k, best_ready, best_finish
        options = [(k, len(d_blocks), len(s_blocks))]
        if k_dram > k0 and k_dram < k:
            options.append((k_dram, k_dram - k0, 0))
        for kk, nd, ns in options:
            t0, ready = self._fetch_times(w, now_s, nd, ns)
            p = min(kk * bs, cap)
            finish = overlap_finish_s(q_s, t0, ready, cm.service_time_s(C, L - p, p), self.layer_fraction)
            if finish < best_finish or (policy == "always" and best_k == k0):
                best_k, best_ready, best_finish = kk, ready, finish
        return best_k, best_ready, best_finish

    def route_estimate(self, w: Worker, request: Request, hbm_blocks: int, q_s: float) -> tuple[int, float]:
        """For routers: ``(P, start_delay_s)`` of ``request`` on ``w`` with the pull path: P the
        prefix hit [tokens] after the fetch-or-recompute choice (capped at L - 1), start delay
        the predicted wait before its step can start, ``max(q_w, R - now)`` [s] (whole-prefix
        loading; with layer-wise loading the overlap credit is folded into the delay)."""
        now = self.sim.env.now
        L = request.num_prompt_tokens
        if request.request_id != self._route_memo_rid:
            self._route_memo_rid = request.request_id
            self._route_memo.clear()
        key = (w.node, hbm_blocks)
        chain = self._route_memo.get(key)
        if chain is None:
            chain = self._chain(w.node, request.block_hashes, hbm_blocks)
            self._route_memo[key] = chain
        cap = L - 1
        if chain[1] == hbm_blocks:
            p = hbm_blocks * self.bs
            return (p if p < cap else cap), q_s
        k, ready, finish = self._best(w, L, hbm_blocks, chain, now + q_s, now)
        p = min(k * self.bs, cap)
        compute = w.cost_model.service_time_s(w.degree, L - p, p)
        return p, finish - compute - now

    # ------------------------------------------------------------------ simulator hooks
    def on_dispatch(self, request: Request, w: Worker, hbm_blocks: int, q_s: float) -> int:
        """Plans (and maybe starts) the request's fetch; returns the prefix hit [tokens] to
        predict its service with (capped at L - 1)."""
        rid = request.request_id
        old = self._plans.pop(rid, None)
        if old is not None:
            self._release(old)
        L = request.num_prompt_tokens
        cap = L - 1
        bs = self.bs
        p0 = hbm_blocks * bs
        p0 = p0 if p0 < cap else cap
        rec = self.rec
        chain = self._chain(w.node, request.block_hashes, hbm_blocks)
        if chain[1] == hbm_blocks:
            rec["kv_fetch_decision"][rid] = FETCH_NONE
            return p0
        now = self.sim.env.now
        k, ready, _ = self._best(w, L, hbm_blocks, chain, now + q_s, now)
        if k == hbm_blocks:
            rec["kv_fetch_decision"][rid] = FETCH_RECOMPUTE
            return p0
        rec["kv_fetch_decision"][rid] = FETCH_PULL
        k_dram, _, d_blocks, s_blocks = chain
        if k < chain[1]:  # the DRAM-only run
            d_blocks = d_blocks[:k - hbm_blocks]
            s_blocks = []
        plan = _Plan(w, FETCH_PULL, hbm_blocks, k, d_blocks, s_blocks, ready - now)
        rec["predicted_fetch_s"][rid] = ready - now
        self._plans[rid] = plan
        if not self.queue_head or len(w.queue) < self.depth:  # its queue index is len(queue)
            self._start(plan, rid, now)
        elif d_blocks or s_blocks:  # next-use rule: the blocks its deferred fetch will read, in either tier
            if d_blocks:
                self.dram[w.node].need(d_blocks)
            if s_blocks:
                self.store.need(s_blocks)
            plan.needs_registered = True
        p = k * bs
        return p if p < cap else cap

    def _release(self, plan: _Plan) -> None:
        if plan.needs_registered:
            if plan.dram_blocks:
                self.dram[plan.worker.node].release(plan.dram_blocks)
            if plan.store_blocks:
                self.store.release(plan.store_blocks)
            plan.needs_registered = False

    def _start(self, plan: _Plan, rid: int, now_s: float) -> None:
        """Starts the fetch: re-matches the planned blocks (a deferred fetch may find some
        evicted; the run stops at the first lost block) and reserves the links."""
        w = plan.worker
        self._release(plan)
        plan.started = True
        dram = self.dram[w.node] if self.dram is not None else None
        store = self.store
        d_blocks = plan.dram_blocks
        s_blocks = plan.store_blocks
        if self.queue_head:  # blocks may have been evicted since routing
            d_ok, s_ok = [], []
            d_set = set(d_blocks)
            k = plan.hbm_blocks
            req_hashes = self.sim.workload.requests[rid].block_hashes
            while k < plan.num_blocks:
                h = req_hashes[k]
                if h in d_set and dram is not None and h in dram:
                    d_ok.append(h)
                elif h not in d_set and store is not None and h in store:
                    s_ok.append(h)
                else:
                    break
                k += 1
            plan.num_blocks = k
            d_blocks, s_blocks = d_ok, s_ok
            plan.dram_blocks, plan.store_blocks = d_blocks, s_blocks
        links = self.sim.links
        ready = now_s
        if d_blocks:
            nbytes = len(d_blocks) * self.block_bytes
            _, end = links.reserve_keys(now_s, (("pcie", w.first_gpu),), nbytes,
                                        self.config.dram_bytes_per_s_per_gpu * w.degree, "dram_fetch")
            dram.touch(d_blocks)
            dram.pin(d_blocks, end)
            self.rec["dram_fetch_bytes"][rid] += nbytes
            ready = end if end > ready else ready
        if s_blocks:
            nbytes = len(s_blocks) * self.block_bytes
            _, end = links.reserve_keys(now_s + self.lookup_s, (("in", w.node),), nbytes, self.store_bw, "store_fetch")
            store.touch(s_blocks)
            store.pin(s_blocks, end)
            self.rec["store_fetch_bytes"][rid] += nbytes
            ready = end if end > ready else ready
        plan.fetch_start_s = now_s
        plan.ready_s = ready

    def on_admit(self, w: Worker, request: Request, hbm_blocks: int) -> tuple[int, tuple[float, float] | None]:
        """Called when an engine step admits ``request``: returns ``(usable hit blocks, fetch)``,
        ``fetch`` the ``(start_s, ready_s)`` of the fetch its hit relies on (``None`` when it
        relies on none), and records the hit per tier. How long the step waits for the fetch
        depends on the step's actual duration (layer-wise loading): :meth:`step_ready_s`."""
        rid = request.request_id
        now = self.sim.env.now
        rec = self.rec
        plan = self._plans.get(rid)  # kept until the step starts: a request over the token budget is retried
        cap = request.num_prompt_tokens - 1
        bs = self.bs
        if plan is not None and plan.worker is w and plan.hbm_blocks <= hbm_blocks < plan.num_blocks and not plan.started:
            self._start(plan, rid, now)
        if plan is None or plan.worker is not w or hbm_blocks < plan.hbm_blocks or hbm_blocks >= plan.num_blocks:
            p = hbm_blocks * bs
            rec["hbm_hit_tokens"][rid] = p if p < cap else cap
            rec["dram_hit_tokens"][rid] = rec["store_hit_tokens"][rid] = 0
            return hbm_blocks, None
        # hit per tier in chain order; the L-1 cap trims the last blocks
        p_total = min(plan.num_blocks * bs, cap)
        p_hbm = min(hbm_blocks * bs, p_total)
        p_dram = min(len(plan.dram_blocks) * bs, p_total - p_hbm)
        rec["hbm_hit_tokens"][rid] = p_hbm
        rec["dram_hit_tokens"][rid] = p_dram
        rec["store_hit_tokens"][rid] = p_total - p_hbm - p_dram
        t0, ready = plan.fetch_start_s, plan.ready_s
        rec["fetch_start_s"][rid] = t0
        rec["fetch_ready_s"][rid] = ready
        # exposed / hidden as if the request ran alone as predicted; the step that reads the fetch
        # sets them from its actual duration (step_ready_s)
        compute = w.cost_model.service_time_s(w.degree, cap + 1 - p_total, p_total) if self.layer_fraction < 1.0 else 0.0
        self._record_exposure(rid, t0, ready, compute, now)
        return plan.num_blocks, (t0, ready)

    def _eff_ready_s(self, t0: float, ready: float, step_s: float) -> float:
        """Earliest start [s] of a step of ``step_s`` that reads a fetch from ``t0`` to ``ready``
        (:meth:`step_ready_s`)."""
        f = self.layer_fraction
        if f >= 1.0:
            return ready
        a = ready - step_s * (1.0 - f)
        b = t0 + (ready - t0) * f
        return a if a > b else b

    def _record_exposure(self, rid: int, t0: float, ready: float, step_s: float, now_s: float) -> float:
        eff = self._eff_ready_s(t0, ready, step_s)
        rec = self.rec
        exposed = eff - now_s if eff > now_s else 0.0
        rec["fetch_exposed_s"][rid] = exposed
        hidden = (ready - t0) - exposed
        rec["fetch_hidden_s"][rid] = hidden if hidden > 0.0 else 0.0
        return eff

    def step_ready_s(self, fetches: list[tuple[int, float, float]], step_s: float, now_s: float,
                     record: bool = True) -> float:
        """The earliest start [s] of an engine step that takes ``step_s`` and reads the fetched
        KV of ``fetches`` (``(request id, fetch start, fetch ready)`` each, from :meth:`on_admit`).

        Whole-prefix loading: the last fetch's ready time. Layer-wise loading (chunks of B of N
        layers, ``f = B / N``, each layer ``step_s / N`` of compute, the fetch streaming its
        bytes evenly): chunk j's compute may start only once chunk j is loaded, so a step
        starting at S ends at ``S + step_s >= max(t0 + T*f + step_s, R + f*step_s)`` for every
        fetch (T = R - t0; the chunks in between lie on the line through those two, and a short
        last chunk only loosens the second bound), i.e. ``S >= max(t0 + T*f, R - (1 - f)*step_s)``.
        ``step_s`` must be the step's *actual* duration: with the predicted one, a step faster than
        predicted would compute its last layers before they arrived.

        With ``record``, records each request's exposed (``S_r - now``, its own bound) and hidden
        (the rest of its fetch) time.
        """
        start = now_s
        for rid, t0, ready in fetches:
            eff = self._record_exposure(rid, t0, ready, step_s, now_s) if record else self._eff_ready_s(t0, ready, step_s)
            if eff > start:
                start = eff
        return start

    def on_step_started(self, w: Worker) -> None:
        """Drops the plans of the step's requests; queue-head prefetch: starts the deferred
        fetches of the first queued requests. O(batch + prefetch depth)."""
        plans = self._plans
        for req in w.batch:
            plan = plans.pop(req.request_id, None)
            if plan is not None:
                self._release(plan)
        if not self.queue_head:
            return
        q = w.queue
        now = self.sim.env.now
        for i in range(min(self.depth, len(q))):
            rid = q[i].request_id
            plan = plans.get(rid)
            if plan is not None and not plan.started and plan.worker is w:
                self._start(plan, rid, now)

    def on_node_failure(self, node: int) -> int:
        """A node failed (``envs/sim/faults.py``): its host memory is lost, so its DRAM tier
        empties (blocks, next-use needs and fetch pins; the plans of the requests queued on its
        stopped workers are replaced when they are re-routed, and releasing a need the tier no
        longer holds is a no-op). Its links' pending transfers are cancelled by the fault manager
        (:meth:`envs.sim.links.KVLinks.cancel`). The pool-wide store is a separate service and keeps
        its blocks. Returns the number of DRAM blocks lost."""
        return self.dram[node].clear() if self.dram is not None else 0

    # ------------------------------------------------------------------ results
    def request_records(self) -> dict:
        import numpy as np

        return {k: np.asarray(v, dtype=float if k.endswith("_s") else np.int64) for k, v in self.rec.items()}

    def extras(self) -> dict:
        """Per-run totals for ``SimResult.extras["kv_tiers"]``."""
        sim = self.sim
        links = sim.links
        elapsed = sim.env.now
        util = links.utilization(elapsed) if elapsed > 0 else {}
        return {"kv_tiers": {
            "levels": list(self.config.levels),
            "eviction": self.config.eviction,
            "prefetch": self.config.prefetch,
            "layerwise": self.config.layerwise,
            "dram_capacity_blocks_per_node": self.dram[0].capacity_blocks if self.dram else 0,
            "store_capacity_blocks": self.store.capacity_blocks if self.store else 0,
            "dram_fetch_bytes": int(links.bytes_by_kind.get("dram_fetch", 0)),
            "store_fetch_bytes": int(links.bytes_by_kind.get("store_fetch", 0)),
            "dram_demoted_bytes": int(self.demoted_bytes["dram"]),
            "store_demoted_bytes": int(self.demoted_bytes["store"]),
            "num_dram_evictions": sum(t.num_evicted for t in self.dram) if self.dram else 0,
            "link_utilization": util,
        }}


__all__ = ["TieredKV", "BlockTier", "overlap_finish_s", "RECORD_KEYS", "FETCH_NONE", "FETCH_PULL", "FETCH_RECOMPUTE"]
