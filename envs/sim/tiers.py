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
staging area); the engine step that admits the request starts no earlier than its ready time.
Fetched KV waits in the worker's staging area (its activation reserve) and enters the HBM
prefix cache with the rest of the prompt's blocks at the end of the step.

Host-memory eviction rules (``eviction``): ``"lru"`` (baseline), or ``"next-use"``: blocks that
a queued, not yet fetched request still needs are kept; blocks no queued request needs go first
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
from dataclasses import dataclass
from itertools import filterfalse, islice, repeat
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from envs.sim.request import Request
    from envs.sim.simulator import Simulator
    from envs.sim.worker import Worker

TIER_NAMES = ("hbm", "dram", "store")
FETCH_NONE, FETCH_PULL, FETCH_RECOMPUTE = 0, 1, 2
EVICTION_RULES = ("lru", "next-use")
PREFETCH_MODES = ("routing", "queue-head")
FETCH_POLICIES = ("predicted", "always", "never")

# Tier record columns (per request) added to ``SimResult.records`` when tiers are on.
RECORD_KEYS = ("kv_fetch_decision", "hbm_hit_tokens", "dram_hit_tokens", "store_hit_tokens", "dram_fetch_bytes",
               "store_fetch_bytes", "fetch_start_s", "fetch_ready_s", "fetch_hidden_s", "fetch_exposed_s",
               "predicted_fetch_s")


def parse_levels(text: str) -> tuple[str, ...]:
    """``"hbm,dram,store"`` -> ``("hbm", "dram", "store")``.

    Raises:
        ValueError: unless the list starts with ``hbm`` and names known tiers in order
            (``hbm``, ``dram``, ``store``) without repeats or empty items (``"hbm,,dram"``, a
            trailing comma: never silently dropped).
    """
    levels = tuple(x.strip() for x in text.split(","))
    if "" in levels and levels != ("",):
        raise ValueError(f"--kv-tiers {text!r}: an empty item (doubled, leading or trailing comma); "
                         "expected e.g. hbm,dram,store")
    _check_levels(tuple(x for x in levels if x), f"--kv-tiers {text!r}")
    return levels


def _check_levels(levels: tuple[str, ...], where: str) -> None:
    order = [TIER_NAMES.index(x) if x in TIER_NAMES else -1 for x in levels]
    if not levels or levels[0] != "hbm" or -1 in order or order != sorted(set(order)):
        raise ValueError(f"{where}: KV tiers must be 'hbm' followed by 'dram' and/or 'store' in that order "
                         f"(e.g. hbm,dram,store), got {','.join(levels) or '(empty)'}")


@dataclass(frozen=True)
class TierConfig:
    """KV tiers below HBM and the fetch path (module docstring: model and formulas).

    Args:
        levels: tiers in use, ``("hbm",)`` (default: tiers off, the simulator is unchanged),
            ``("hbm", "dram")``, ``("hbm", "store")`` or ``("hbm", "dram", "store")``.
        dram_capacity_bytes_per_node: host memory per node given to the KV tier [bytes].
            Default 1 TB: half of the 2 TB host memory of 8-GPU HGX nodes (MLPerf Inference
            v4.1 system descriptions ``H200-SXM-141GBx8`` and Dell ``XE9680_H100_SXM_80GBx8``:
            ``host_memory_capacity: 2 TB``); the other half is left to the OS and the engine.
        dram_bytes_per_s_per_gpu: host-to-GPU bandwidth of one GPU [bytes/s]. Default 50 GB/s:
            PCIe Gen5 x16 (the H20/H100/H200 host interconnect in the same listings) carries
            32 GT/s x 16 lanes x 128/130 = 63 GB/s per direction (PCI-SIG); 50 GB/s assumes
            about 80 % of it for pinned-memory copies.
        store_capacity_bytes: capacity of the pool-wide store [bytes]. Default 8 TB: the pooled
            host memory of four such 2 TB nodes (Mooncake Store pools the nodes' DRAM).
        store_bytes_per_s_per_node: store read bandwidth into one node [bytes/s]; ``None``
            (default) = the inter-node KV link (:class:`envs.sim.links.LinkConfig`, 25 GB/s, one
            200 Gbit/s RDMA NIC per node), which the store traffic shares.
        store_lookup_latency_s: fixed metadata lookup before a store read [s]. Default 0.5 ms:
            Mooncake master ``GetReplicaList`` latencies of 0.45-0.5 ms in the master log quoted
            in LMCache PR #498 (github.com/LMCache/LMCache/pull/498).
        eviction: host-memory eviction rule, ``"lru"`` (default) or ``"next-use"`` (queue-aware).
        prefetch: when a fetch starts: ``"routing"`` (default, overlaps all queueing) or
            ``"queue-head"`` (when the request is within the first ``prefetch_depth_requests``
            queue positions).
        prefetch_depth_requests: queue positions prefetched in ``"queue-head"`` mode (>= 1).
        layerwise: layer-wise loading (compute of a chunk of layers overlaps the read of later
            chunks).
        layerwise_buffer_layers: layers per staging chunk B (>= 1; B >= N is whole-prefix loading).
        num_layers: transformer layers N of the model (default 48, Qwen3-30B-A3B
            ``num_hidden_layers``; 36 for Qwen3-8B).
        fetch_policy: ``"predicted"`` (default: fetch only if predicted faster than recomputing),
            ``"always"`` or ``"never"`` (ablations).

    Raises:
        ValueError: on an invalid tier list, a non-positive capacity/bandwidth, or an unknown rule.
    """

    levels: tuple[str, ...] = ("hbm",)
    dram_capacity_bytes_per_node: float = 1.0e12
    dram_bytes_per_s_per_gpu: float = 50e9
    store_capacity_bytes: float = 8.0e12
    store_bytes_per_s_per_node: float | None = None
    store_lookup_latency_s: float = 0.0005
    eviction: str = "lru"
    prefetch: str = "routing"
    prefetch_depth_requests: int = 2
    layerwise: bool = False
    layerwise_buffer_layers: int = 4
    num_layers: int = 48
    fetch_policy: str = "predicted"

    def __post_init__(self) -> None:
        _check_levels(tuple(self.levels), "kv_tiers.levels")
        for name in ("dram_capacity_bytes_per_node", "dram_bytes_per_s_per_gpu", "store_capacity_bytes"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"kv_tiers.{name} must be a finite number > 0, got {v!r}")
        if self.store_bytes_per_s_per_node is not None and not self.store_bytes_per_s_per_node > 0:
            raise ValueError(f"kv_tiers.store_bytes_per_s_per_node must be > 0 or None, "
                             f"got {self.store_bytes_per_s_per_node!r}")
        if not (self.store_lookup_latency_s >= 0 and math.isfinite(self.store_lookup_latency_s)):
            raise ValueError(f"kv_tiers.store_lookup_latency_s must be >= 0, got {self.store_lookup_latency_s!r}")
        for name, allowed in (("eviction", EVICTION_RULES), ("prefetch", PREFETCH_MODES), ("fetch_policy", FETCH_POLICIES)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"kv_tiers.{name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        for name in ("prefetch_depth_requests", "layerwise_buffer_layers", "num_layers"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"kv_tiers.{name} must be an integer >= 1, got {v!r}")

    @property
    def enabled(self) -> bool:
        """True when a tier below HBM is configured."""
        return len(self.levels) > 1


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
        cm = self.sim.cost_model
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
        compute = self.sim.cost_model.service_time_s(w.degree, L - p, p)
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
        elif d_blocks:
            self.dram[w.node].need(d_blocks)
            plan.needs_registered = True
        p = k * bs
        return p if p < cap else cap

    def _release(self, plan: _Plan) -> None:
        if plan.needs_registered:
            self.dram[plan.worker.node].release(plan.dram_blocks)
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

    def on_admit(self, w: Worker, request: Request, hbm_blocks: int) -> tuple[int, float]:
        """Called when an engine step admits ``request``: returns ``(usable hit blocks, time
        the step must not start before)`` and records the hit per tier and the hidden/exposed
        fetch time."""
        rid = request.request_id
        now = self.sim.env.now
        rec = self.rec
        plan = self._plans.get(rid)  # kept until the step starts: a request over the token budget is retried
        L = request.num_prompt_tokens
        cap = L - 1
        bs = self.bs
        if plan is not None and plan.worker is w and plan.hbm_blocks <= hbm_blocks < plan.num_blocks and not plan.started:
            self._start(plan, rid, now)
        if plan is None or plan.worker is not w or hbm_blocks < plan.hbm_blocks or hbm_blocks >= plan.num_blocks:
            p = hbm_blocks * bs
            rec["hbm_hit_tokens"][rid] = p if p < cap else cap
            rec["dram_hit_tokens"][rid] = rec["store_hit_tokens"][rid] = 0
            return hbm_blocks, now
        # hit per tier in chain order; the L-1 cap trims the last blocks
        p_total = min(plan.num_blocks * bs, cap)
        p_hbm = min(hbm_blocks * bs, p_total)
        p_dram = min(len(plan.dram_blocks) * bs, p_total - p_hbm)
        rec["hbm_hit_tokens"][rid] = p_hbm
        rec["dram_hit_tokens"][rid] = p_dram
        rec["store_hit_tokens"][rid] = p_total - p_hbm - p_dram
        t0, ready = plan.fetch_start_s, plan.ready_s
        if self.layer_fraction < 1.0:
            compute = self.sim.cost_model.service_time_s(w.degree, L - p_total, p_total)
            f = self.layer_fraction
            eff = max(ready - compute * (1.0 - f), t0 + (ready - t0) * f)
        else:
            eff = ready
        exposed = eff - now if eff > now else 0.0
        rec["fetch_start_s"][rid] = t0
        rec["fetch_ready_s"][rid] = ready
        rec["fetch_exposed_s"][rid] = exposed
        hidden = (ready - t0) - exposed
        rec["fetch_hidden_s"][rid] = hidden if hidden > 0.0 else 0.0
        return plan.num_blocks, eff

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


__all__ = ["TierConfig", "TieredKV", "BlockTier", "overlap_finish_s", "parse_levels", "TIER_NAMES", "RECORD_KEYS",
           "FETCH_NONE", "FETCH_PULL", "FETCH_RECOMPUTE"]
