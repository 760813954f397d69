"""Global prefix-cache manager (paper §7, ``../shared/DESIGN.md`` "Global prefix-cache manager").

The manager is an *attachment* (``attach(sim)``): it watches the workers' own LRU caches and the
dispatch decisions, keeps a global prefix trie with per-degree statistics, and every
``scan_interval_s`` replicates hot prefixes over the KV links and reclaims underused replicas.
It never routes: the router (e.g. :class:`baselines.vertumnus.VertumnusRouter`) benefits because
replicas add workers on which a request keeps its prefix hit (more cache-preserving choices).

**Trie.** One node per KV block hash (Mooncake convention: a hash names the whole prefix ending
at its block, so a node's parent is the previous block of any request that contains it). Per
node: the set of workers whose cache holds the block (kept equal to the caches' contents through
``PrefixCache.insert_listeners`` / ``evict_listeners``), children, and decayed statistics.
``ReplicaCount(z, C)`` (paper §7) = number of degree-C workers holding the *complete* prefix
ending at z = degree-C workers in the intersection of the holder sets along the root-to-z path
(:meth:`GlobalCacheManager.replica_count`).

**Per-request statistics** (at dispatch, paper §7 "Per-Request Statistics"):

* globally matched path: the longest leading run of the request's blocks that some worker holds
  completely; the part actually reused is the selected worker's ready hit. Both are summed in
  ``stats()`` (``matched_tokens`` vs ``reused_tokens``).
* access: every node z on the matched path gets ``access[z][C_sel] += 1`` (C_sel = the selected
  worker's degree): demand for z at that degree, whether or not the chosen worker held it.
* missed benefit: the request's *preferred degree* C* is the degree the Vertumnus cost would pick
  without the transient queue term (``q_w = 0``) if the matched prefix were available at every
  degree: ``argmin_C beta*E_C(R,P) + lambda*(C*E_C(R,P) - C_min*E_{C_min}(R,P))`` with
  ``P`` = matched tokens, ``R = L - P`` and C over the degrees of ACTIVE workers able to hold the
  prompt (paper §5 cost, issue #5). For each node z_i (i-th block, 0-based) on the matched path
  with ``ReplicaCount(z_i, C*) == 0``, ``missed[z_i][C*] += E_{C*}(L-P_{i-1}, P_{i-1}) -
  E_{C*}(L-P_i, P_i)`` with ``P_i = min((i+1)*block, L-1)``: the marginal service-time saving of
  extending the parent prefix by one block. The sum over a path telescopes to the saving of the
  whole prefix, so a long prefix's benefit is not counted again at every node (paper §7,
  walk-through "missed benefit").
* decay: every scan multiplies all statistics by ``decay`` (entries below 1e-3 are dropped).

**Periodic scan** (paper §7/§8: fixed interval, 20 s in the paper's deployment):

1. inter-degree replication: nodes with ``missed[z][C] >= inter_degree_threshold_s`` and no
   complete replica (nor one in flight) at degree C; of those, the deepest (an ancestor is
   covered by replicating its descendant's path) are ranked by the missed benefit summed along
   their path.
2. intra-degree replication: nodes with ``ReplicaCount(z, C) >= 1`` and per-replica demand
   ``access[z][C] / (ReplicaCount + in-flight) >= intra_degree_threshold``; deepest first, ranked
   by per-replica demand.
3. reclamation: a worker's block z is reclaimed when its per-replica demand at the worker's
   degree is ``< reclaim_threshold``, at least one other complete degree-C replica remains, and
   the worker holds no child of z (never breaking descendants still needed: reclamation works
   from the leaves up). At most ``max_reclamations_per_scan`` blocks.

Replications of one scan are capped at ``max_replications_per_scan``.

**Replication** (paper §7 "Replication and Reclamation", §8 asynchronous KV transfers): the
destination is an ACTIVE worker of the target degree without the complete prefix, chosen by
(longest retained ancestor path, then least outstanding work), among those where the missing
blocks fit in ``max_replica_share`` of its capacity and can be made free. The source is a
complete holder (same node preferred: NVLink-class instead of RDMA). Only the blocks not ready at
the destination are copied; the source's path blocks and the destination's retained ancestors
are pinned (``PrefixCache.pin``) for the transfer, and the destination reserves the space at
start (its usable capacity shrinks by the number of missing blocks, evicting LRU unpinned blocks
if needed). The transfer takes ``sim.links.reserve`` time (bytes / bandwidth, FIFO per link, so
concurrent transfers on a shared link queue); its end is an event of priority
``EventPriority.TRANSFER_END``, at which the blocks are inserted READY in one call — the replica
is visible to routing only after all blocks are installed. If the destination was retired in the
meantime (reconfiguration) the replica is dropped.

**Cross-degree copies** repartition the KV shards: a degree-Cs source holds every token's KV
split over Cs ranks, a degree-Cd destination needs it split over Cd ranks (for the zigzag
layout, different token chunks per rank). Every byte still crosses the link exactly once —
each source rank sends each of its chunks to the destination rank owning those positions — so
the modelled cost is ``num_blocks * kv_block_bytes * cross_degree_bytes_factor`` (default factor
1.0) on the same links as a same-degree copy. The rank-level fan-out (Cs*Cd/gcd-many smaller
messages) and any re-layout kernel on the destination are not modelled; set the factor > 1 to
charge them.

Source: paper §7/§8 (``../shared/paper/vertumnus-summary.en.txt``,
``vertumnus-walkthrough.zh.txt``); the paper gives no threshold values, so the defaults of
:class:`CacheManagerConfig` are this implementation's (documented there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from envs.sim.cache import READY, PrefixCache
from envs.sim.request import Request
from envs.sim.simulator import EventPriority, Simulator
from envs.sim.worker import Worker, WorkerState

_DROP = 1e-3  # decayed statistics below this are dropped


@dataclass(frozen=True)
class CacheManagerConfig:
    """Parameters of the global prefix-cache manager.

    Args:
        scan_interval_s: period of the replication/reclamation scan [s]. Paper §7/§8: fixed
            interval; 20 s in the paper's deployment.
        decay: factor in (0, 1] applied to every statistic at every scan. 0.5 halves the weight
            of older windows each scan (half-life = one scan interval), so a decayed count just
            after a scan is about one window's worth of steady-state demand.
        inter_degree_threshold_s: missed benefit [s of predicted service time] a node needs at a
            degree without replica to trigger a first replica there. Default 0.2 s: a prefix
            block saves roughly 0.01-0.03 s per request on the shipped calibration, so about ten
            missed requests per window through the node.
        intra_degree_threshold: per-replica demand [decayed requests] that triggers one more
            replica at the same degree. Default 8: eight requests per window per replica.
        reclaim_threshold: per-replica demand [decayed requests] below which a duplicate
            replica is reclaimed. Default 0.5 (well below the replication threshold: hysteresis).
        max_replications_per_scan: cap on replications started per scan (paper: per-round cap).
        max_reclamations_per_scan: cap on blocks reclaimed per scan.
        max_replica_share: a replica may need at most this share of the destination's capacity
            in new blocks (keeps a replication from flushing the destination's cache).
        beta, lambda_: weights of the Vertumnus cost used for the preferred degree (paper §5;
            defaults of :class:`baselines.vertumnus.VertumnusParams`).
        cross_degree_bytes_factor: multiplies the bytes of a copy between different CP degrees
            (shard repartitioning; module docstring). Default 1.0.

    Raises:
        ValueError: naming the offending field.
    """

    scan_interval_s: float = 20.0
    decay: float = 0.5
    inter_degree_threshold_s: float = 0.2
    intra_degree_threshold: float = 8.0
    reclaim_threshold: float = 0.5
    max_replications_per_scan: int = 8
    max_reclamations_per_scan: int = 64
    max_replica_share: float = 0.25
    beta: float = 1.0
    lambda_: float = 1.0
    cross_degree_bytes_factor: float = 1.0

    def __post_init__(self) -> None:
        def check(ok: bool, msg: str) -> None:
            if not ok:
                raise ValueError(f"cache manager {msg}")

        check(self.scan_interval_s > 0 and math.isfinite(self.scan_interval_s), f"scan_interval_s must be a finite number > 0, got {self.scan_interval_s!r}")
        check(0 < self.decay <= 1, f"decay must be in (0, 1], got {self.decay!r}")
        check(self.inter_degree_threshold_s > 0, f"inter_degree_threshold_s must be > 0, got {self.inter_degree_threshold_s!r}")
        check(self.intra_degree_threshold > 0, f"intra_degree_threshold must be > 0, got {self.intra_degree_threshold!r}")
        check(0 <= self.reclaim_threshold < self.intra_degree_threshold,
              f"reclaim_threshold must be >= 0 and below intra_degree_threshold ({self.intra_degree_threshold}), got {self.reclaim_threshold!r}")
        check(isinstance(self.max_replications_per_scan, int) and self.max_replications_per_scan >= 0,
              f"max_replications_per_scan must be an integer >= 0, got {self.max_replications_per_scan!r}")
        check(isinstance(self.max_reclamations_per_scan, int) and self.max_reclamations_per_scan >= 0,
              f"max_reclamations_per_scan must be an integer >= 0, got {self.max_reclamations_per_scan!r}")
        check(0 < self.max_replica_share <= 1, f"max_replica_share must be in (0, 1], got {self.max_replica_share!r}")
        check(self.beta >= 1 and math.isfinite(self.beta), f"beta must be a finite number >= 1 (paper §5), got {self.beta!r}")
        check(self.lambda_ >= 0 and math.isfinite(self.lambda_), f"lambda_ must be a finite number >= 0 (paper §5), got {self.lambda_!r}")
        check(self.cross_degree_bytes_factor >= 1, f"cross_degree_bytes_factor must be >= 1, got {self.cross_degree_bytes_factor!r}")


class _Node:
    """One trie node (one KV block): parent hash (None at the root level), holders, children,
    decayed statistics per degree."""

    __slots__ = ("parent", "holders", "children", "access", "missed")

    def __init__(self, parent: int | None) -> None:
        self.parent = parent
        self.holders: set[int] = set()
        self.children: set[int] = set()
        self.access: dict[int, float] = {}
        self.missed: dict[int, float] = {}


class _Transfer:
    __slots__ = ("path", "node", "degree", "src", "dst", "dst_cache", "src_cache", "num_blocks", "num_bytes",
                 "retained", "start_s", "end_s", "kind")

    def __init__(self, **kw) -> None:
        for k, v in kw.items():
            setattr(self, k, v)


class GlobalCacheManager:
    """The global prefix-cache manager (paper §7); see the module docstring.

    Args:
        config: :class:`CacheManagerConfig`.

    Use: ``GlobalCacheManager().attach(sim)`` before the run (``PolicySpec.make_attachments``).
    One instance per run.
    """

    def __init__(self, config: CacheManagerConfig | None = None) -> None:
        self.config = config or CacheManagerConfig()
        self.sim: Simulator | None = None
        self.nodes: dict[int, _Node] = {}
        self._parent_of: dict[int, int | None] = {}
        self._caches: dict[int, PrefixCache] = {}  # worker id -> attached cache object
        self._degree: dict[int, int] = {}  # worker id -> degree (of attached workers)
        self._active: set[int] = set()  # nodes with statistics
        self._in_flight: dict[tuple[int, int], int] = {}  # (node, degree) -> transfers in flight
        self._in_flight_dst: set[tuple[int, int]] = set()  # (node, dst worker)
        self._transfers: list[_Transfer] = []  # in flight
        self._seen_epoch = -1
        self._seen_num_workers = -1
        self._degree_caps: list[tuple[int, int]] = []
        self._last_arrival_s = 0.0
        self.counters = {"num_scans": 0, "num_inter_degree_replications": 0, "num_intra_degree_replications": 0,
                         "num_replicas_installed": 0, "num_replicas_dropped": 0, "num_blocks_replicated": 0,
                         "num_blocks_reclaimed": 0, "replication_bytes": 0, "matched_tokens": 0, "reused_tokens": 0,
                         "prompt_tokens": 0, "missed_benefit_s": 0.0}
        self.log: list[dict] = []  # one entry per replication started (time, kind, node, src, dst, blocks, bytes)

    # ------------------------------------------------------------------ attach / sync
    def attach(self, sim: Simulator) -> None:
        """Subscribes to ``sim``'s caches and dispatches and schedules the first scan."""
        if self.sim is not None:
            raise RuntimeError("a GlobalCacheManager attaches to one simulator only; build one per run")
        self.sim = sim
        reqs = sim.workload.requests
        self._last_arrival_s = reqs[-1].arrival_time_s if reqs else 0.0
        self._sync_workers()
        sim.dispatch_listeners.append(self._on_dispatch)
        if hasattr(sim, "attachments"):
            sim.attachments["cache_manager"] = self
            sim.extras_providers.append(lambda: {"cache_manager": self.stats()})
        if reqs:
            sim.schedule(self.config.scan_interval_s, EventPriority.CONTROL, self._on_scan, None)

    def _sync_workers(self) -> None:
        """Attaches to caches of new workers, detaches from retired ones (after a reconfiguration)."""
        sim = self.sim
        for wid in list(self._caches):
            w = sim.workers.get(wid)
            cache = self._caches[wid]
            if w is None or w.cache is not cache:
                self._detach(wid, cache)
        for wid in sim.worker_ids:
            w = sim.workers[wid]
            if wid not in self._caches:
                self._caches[wid] = w.cache
                self._degree[wid] = w.degree
                w.cache.insert_listeners.append(self._on_insert)
                w.cache.evict_listeners.append(self._on_evict)
                for h in w.cache.blocks():
                    self._on_insert(wid, h)
        self._seen_epoch = sim.epoch
        self._seen_num_workers = len(sim.workers)
        caps: dict[int, int] = {}
        for w in sim.workers.values():
            if w.state == WorkerState.ACTIVE:
                caps[w.degree] = max(caps.get(w.degree, 0), w.kv_capacity_tokens)
        self._degree_caps = sorted(caps.items())

    def _detach(self, wid: int, cache: PrefixCache) -> None:
        if self._on_insert in cache.insert_listeners:
            cache.insert_listeners.remove(self._on_insert)
        if self._on_evict in cache.evict_listeners:
            cache.evict_listeners.remove(self._on_evict)
        for h in cache.blocks():
            self._on_evict(wid, h)
        del self._caches[wid]
        del self._degree[wid]

    def _maybe_sync(self) -> None:
        sim = self.sim
        if sim.epoch != self._seen_epoch or len(sim.workers) != self._seen_num_workers:
            self._sync_workers()

    # ------------------------------------------------------------------ trie maintenance
    def _on_insert(self, worker_id: int, block_hash: int) -> None:
        node = self.nodes.get(block_hash)
        if node is None:
            node = self._create(block_hash)
        node.holders.add(worker_id)

    def _create(self, block_hash: int) -> _Node:
        parent = self._parent_of.get(block_hash)
        node = _Node(parent)
        self.nodes[block_hash] = node
        if parent is not None:
            pnode = self.nodes.get(parent)
            if pnode is None:
                pnode = self._create(parent)
            pnode.children.add(block_hash)
        return node

    def _on_evict(self, worker_id: int, block_hash: int) -> None:
        node = self.nodes.get(block_hash)
        if node is None:
            return
        node.holders.discard(worker_id)
        self._gc(block_hash, node)

    def _gc(self, block_hash: int, node: _Node) -> None:
        """Drops nodes with no holders and no children (walking up)."""
        nodes = self.nodes
        while not node.holders and not node.children:
            del nodes[block_hash]
            self._active.discard(block_hash)
            parent = node.parent
            if parent is None:
                return
            pnode = nodes.get(parent)
            if pnode is None:
                return
            pnode.children.discard(block_hash)
            block_hash, node = parent, pnode

    def path_to(self, block_hash: int) -> list[int]:
        """Block hashes from the root to ``block_hash`` (inclusive)."""
        path = [block_hash]
        nodes = self.nodes
        p = nodes[block_hash].parent
        while p is not None:
            path.append(p)
            node = nodes.get(p)
            if node is None:
                break
            p = node.parent
        path.reverse()
        return path

    def complete_holders(self, block_hash: int, memo: dict[int, set[int]] | None = None) -> set[int]:
        """Workers holding every block of the prefix ending at ``block_hash`` (a new set).

        ``memo`` (hash -> complete holders) shares the ancestors' sets between calls of one scan.
        """
        nodes = self.nodes
        if memo is not None:
            got = memo.get(block_hash)
            if got is not None:
                return got
            node = nodes.get(block_hash)
            if node is None:
                return set()
            if node.parent is None or node.parent not in nodes:
                out = set(node.holders) if node.parent is None else set()
            else:
                out = self.complete_holders(node.parent, memo) & node.holders
            memo[block_hash] = out
            return out
        held: set[int] | None = None
        for h in self.path_to(block_hash):
            node = nodes.get(h)
            if node is None:
                return set()
            held = set(node.holders) if held is None else held & node.holders
            if not held:
                return held
        return held or set()

    def replica_count(self, block_hash: int, degree: int, memo: dict[int, set[int]] | None = None) -> int:
        """``ReplicaCount(z, C)`` (paper §7): degree-C workers holding the complete prefix ending at z."""
        if block_hash not in self.nodes:
            return 0
        deg = self._degree
        return sum(1 for w in self.complete_holders(block_hash, memo) if deg.get(w) == degree)

    def holders(self, block_hash: int) -> set[int]:
        """Workers whose cache holds this block (a copy; empty if unknown)."""
        node = self.nodes.get(block_hash)
        return set(node.holders) if node is not None else set()

    # ------------------------------------------------------------------ per-request statistics
    def preferred_degree(self, num_prompt_tokens: int, num_cached_tokens: int) -> int:
        """Degree the Vertumnus cost picks with ``q_w = 0`` (module docstring), among the degrees
        of ACTIVE workers able to hold the prompt; 0 if there is none."""
        cm = self.sim.cost_model
        L = num_prompt_tokens
        P = num_cached_tokens
        R = L - P
        degrees = [d for d, cap in self._degree_caps if cap >= L]
        if not degrees:
            return 0
        c_min = degrees[0]
        s_min = cm.service_time_s(c_min, R, P)
        beta, lam = self.config.beta, self.config.lambda_
        best, best_j = 0, math.inf
        for c in degrees:
            s = cm.service_time_s(c, R, P)
            j = beta * s + lam * (c * s - c_min * s_min)
            if j < best_j:
                best, best_j = c, j
        return best

    def register_prefix(self, block_hashes) -> None:
        """Learns the trie shape of one prompt's block hashes (called at every dispatch).

        A hash names its whole prefix, so its parent is unique (the first parent seen is kept)
        and a known hash has known ancestors: new hashes are registered from the tail back to
        the first known one, O(new blocks).
        """
        parent_of = self._parent_of
        nodes = self.nodes
        k = len(block_hashes) - 1
        while k >= 0 and block_hashes[k] not in parent_of:
            h = block_hashes[k]
            p = block_hashes[k - 1] if k > 0 else None
            parent_of[h] = p
            node = nodes.get(h)
            if node is not None and p is not None and node.parent is None:
                # inserted before its shape was known (e.g. a cache filled before attach): link it
                node.parent = p
                pnode = nodes.get(p)
                if pnode is None:
                    pnode = self._create(p)
                pnode.children.add(h)
            k -= 1

    def _on_dispatch(self, sim: Simulator, req: Request, w: Worker) -> None:
        if sim.epoch != self._seen_epoch or len(sim.workers) != self._seen_num_workers:
            self._sync_workers()
        hashes = req.block_hashes
        nodes = self.nodes
        self.register_prefix(hashes)
        # globally matched path: running intersection of holder sets along the path
        held: set[int] | None = None
        path_nodes: list[_Node] = []
        path_held: list[set[int]] = []
        for h in hashes:
            node = nodes.get(h)
            if node is None or not node.holders:
                break
            held = node.holders if held is None else held & node.holders
            if not held:
                break
            path_nodes.append(node)
            path_held.append(held)
        m = len(path_nodes)
        bs = sim.kv_block_size_tokens
        L = req.num_prompt_tokens
        c = self.counters
        c["prompt_tokens"] += L
        if m == 0:
            return
        matched = min(m * bs, L - 1)
        reused = min(w.cache.match_ready(hashes) * bs, L - 1)
        c["matched_tokens"] += matched
        c["reused_tokens"] += reused
        c_sel = w.degree
        active = self._active
        for i in range(m):
            acc = path_nodes[i].access
            acc[c_sel] = acc.get(c_sel, 0.0) + 1.0
            active.add(hashes[i])
        c_star = self.preferred_degree(L, matched)
        if not c_star:
            return
        # first path index without a complete degree-C* holder (holder sets shrink along the path)
        deg = self._degree
        lo, hi = 0, m
        while lo < hi:
            mid = (lo + hi) // 2
            if any(deg.get(x) == c_star for x in path_held[mid]):
                lo = mid + 1
            else:
                hi = mid
        if lo == m:
            return
        cm = sim.cost_model
        prev_p = min(lo * bs, L - 1)
        prev_s = cm.service_time_s(c_star, L - prev_p, prev_p)
        total = 0.0
        for i in range(lo, m):
            p = min((i + 1) * bs, L - 1)
            if p <= prev_p:
                break
            s = cm.service_time_s(c_star, L - p, p)
            missed = path_nodes[i].missed
            missed[c_star] = missed.get(c_star, 0.0) + (prev_s - s)
            total += prev_s - s
            prev_p, prev_s = p, s
        c["missed_benefit_s"] += total

    # ------------------------------------------------------------------ scan
    def _on_scan(self, _payload) -> None:
        sim = self.sim
        self._maybe_sync()
        self.counters["num_scans"] += 1
        self.scan()
        # like the controller's windows: scans continue while arrivals do (the last scan is at most
        # one interval after the last arrival, so it may extend the simulated time by that much)
        if sim.env.now < self._last_arrival_s:
            sim.schedule(self.config.scan_interval_s, EventPriority.CONTROL, self._on_scan, None)

    def scan(self) -> None:
        """One replication/reclamation round, then decay (module docstring)."""
        cfg = self.config
        nodes = self.nodes
        deg = self._degree
        budget = cfg.max_replications_per_scan
        started: set[int] = set()
        memo: dict[int, set[int]] = {}
        # 1. inter-degree: first replica at a degree with none
        inter: dict[tuple[int, int], float] = {}
        for h in self._active:
            node = nodes[h]
            for c, v in node.missed.items():
                if v >= cfg.inter_degree_threshold_s and not self._in_flight.get((h, c)):
                    inter[(h, c)] = v
        for h, c in self._deepest(inter):
            if budget <= 0:
                break
            if h in started or h not in nodes or self.replica_count(h, c, memo) > 0:
                continue
            if self.replicate(h, c, "inter"):
                started.add(h)
                budget -= 1
                memo.clear()  # the destination's reservation may have evicted blocks
        # 2. intra-degree: per-replica demand
        intra: dict[tuple[int, int], float] = {}
        for h in self._active:
            node = nodes[h]
            for c, v in node.access.items():
                if v < cfg.intra_degree_threshold:
                    continue
                rc = self.replica_count(h, c, memo)
                if rc == 0:
                    continue
                demand = v / (rc + self._in_flight.get((h, c), 0))
                if demand >= cfg.intra_degree_threshold:
                    intra[(h, c)] = demand
        for h, c in self._deepest(intra):
            if budget <= 0:
                break
            if h in started or h not in nodes:
                continue
            if self.replicate(h, c, "intra"):
                started.add(h)
                budget -= 1
                memo.clear()
        # 3. reclamation (leaves first, duplicates only)
        memo.clear()
        self._reclaim(memo)
        # decay
        d = cfg.decay
        if d < 1.0:
            drop = []
            for h in self._active:
                node = nodes[h]
                for stat in (node.access, node.missed):
                    for k in list(stat):
                        v = stat[k] * d
                        if v < _DROP:
                            del stat[k]
                        else:
                            stat[k] = v
                if not node.access and not node.missed:
                    drop.append(h)
            self._active.difference_update(drop)

    def _deepest(self, cands: dict[tuple[int, int], float]) -> list[tuple[int, int]]:
        """Candidates none of whose descendants (same degree) is a candidate, ranked by value
        summed along the path (ties: node hash for determinism)."""
        nodes = self.nodes
        covered: set[tuple[int, int]] = set()
        for (h, c) in cands:
            p = nodes[h].parent
            while p is not None and (p, c) not in covered:
                covered.add((p, c))
                pn = nodes.get(p)
                p = pn.parent if pn is not None else None
        out = []
        for (h, c), v in cands.items():
            if (h, c) in covered:
                continue
            total = sum(cands.get((x, c), 0.0) for x in self.path_to(h))
            out.append((-total, h, c))
        out.sort()
        return [(h, c) for _, h, c in out]

    def _reclaim(self, memo: dict[int, set[int]]) -> None:
        cfg = self.config
        budget = cfg.max_reclamations_per_scan
        if budget <= 0:
            return
        nodes = self.nodes
        deg = self._degree
        sim = self.sim
        # leaves first: process deeper nodes before their ancestors
        cands = []
        for h, node in nodes.items():
            if len(node.holders) < 2:
                continue
            cands.append(h)
        depth_cache: dict[int, int] = {}

        def depth(h: int) -> int:
            d = depth_cache.get(h)
            if d is None:
                p = nodes[h].parent
                d = 0 if p is None or p not in nodes else depth(p) + 1
                depth_cache[h] = d
            return d

        cands.sort(key=lambda h: (-depth(h), h))
        for h in cands:
            if budget <= 0:
                return
            node = nodes.get(h)
            if node is None or len(node.holders) < 2:
                continue
            complete = self.complete_holders(h, memo)
            by_degree: dict[int, list[int]] = {}
            for w in complete:
                by_degree.setdefault(deg[w], []).append(w)
            for c, ws in sorted(by_degree.items()):
                if len(ws) < 2:
                    continue
                demand = node.access.get(c, 0.0) / len(ws)
                if demand >= cfg.reclaim_threshold:
                    continue
                # drop from the most loaded holder(s) whose copy is a leaf, keep at least one
                ws.sort(key=lambda w: (-self._load(w), w))
                for w in ws[:-1]:
                    if budget <= 0:
                        return
                    if any(w in nodes[ch].holders for ch in node.children if ch in nodes):
                        continue
                    if (h, w) in self._in_flight_dst:
                        continue
                    cache = sim.workers[w].cache
                    if cache.remove(h):
                        complete.discard(w)  # memo entry of h; w held no descendant of h
                        budget -= 1
                        self.counters["num_blocks_reclaimed"] += 1
                    node = nodes.get(h)
                    if node is None:
                        break

    def _load(self, wid: int) -> float:
        return self.sim.view.outstanding_work_s(wid)

    # ------------------------------------------------------------------ replication
    def replicate(self, block_hash: int, degree: int, kind: str = "manual") -> bool:
        """Starts one replication of the prefix ending at ``block_hash`` to a degree-``degree``
        worker (destination and source chosen as in the module docstring). The scan calls it
        with ``kind`` "inter" / "intra". Returns whether a transfer started (False: unknown
        prefix, no holder, no destination with room)."""
        if block_hash not in self.nodes:
            return False
        sim = self.sim
        cfg = self.config
        path = self.path_to(block_hash)
        if any(h not in self.nodes for h in path):
            return False
        complete = self.complete_holders(block_hash)
        sources = [w for w in complete if w in sim.workers]
        if not sources:
            return False
        best = None
        for wid in sim.worker_ids:
            w = sim.workers[wid]
            if w.degree != degree or w.state != WorkerState.ACTIVE or wid in complete:
                continue
            if (block_hash, wid) in self._in_flight_dst:
                continue
            cache = w.cache
            retained = cache.match_ready(path)
            missing = len(path) - retained
            if missing <= 0 or missing > cfg.max_replica_share * cache.capacity_blocks:
                continue
            key = (-retained, self._load(wid), wid)
            if best is None or key < best[0]:
                best = (key, w, retained)
        if best is None:
            return False
        _, dst, retained = best
        src = min(sources, key=lambda x: (sim.workers[x].node != dst.node, x))
        src_w = sim.workers[src]
        missing_path = path[retained:]
        n = len(missing_path)
        dcache = dst.cache
        scache = src_w.cache
        for h in path[:retained]:
            dcache.pin(h)
        if not self._reserve(dcache, n):
            for h in path[:retained]:
                dcache.unpin(h)
            return False
        for h in path:
            scache.pin(h)
        factor = 1.0 if src_w.degree == dst.degree else cfg.cross_degree_bytes_factor
        num_bytes = int(n * sim.kv_block_bytes * factor)
        now = sim.env.now
        start, end = sim.links.reserve(now, src_w.node, dst.node, num_bytes)
        t = _Transfer(path=path, node=block_hash, degree=degree, src=src, dst=dst.worker_id, dst_cache=dcache,
                      src_cache=scache, num_blocks=n, num_bytes=num_bytes, retained=retained, start_s=start,
                      end_s=end, kind=kind)
        self._transfers.append(t)
        key = (block_hash, degree)
        self._in_flight[key] = self._in_flight.get(key, 0) + 1
        self._in_flight_dst.add((block_hash, dst.worker_id))
        c = self.counters
        c["num_inter_degree_replications" if kind == "inter" else "num_intra_degree_replications"] += 1
        c["num_blocks_replicated"] += n
        c["replication_bytes"] += num_bytes
        self.log.append({"time_s": now, "kind": kind, "node": block_hash, "degree": degree, "src": src,
                         "dst": dst.worker_id, "num_blocks": n, "num_bytes": num_bytes, "end_s": end})
        sim.schedule(end - now, EventPriority.TRANSFER_END, self._on_transfer_end, t)
        return True

    @staticmethod
    def _reserve(cache: PrefixCache, num_blocks: int) -> bool:
        """Reserves ``num_blocks`` free blocks: shrinks the usable capacity and evicts LRU unpinned
        blocks until the resident blocks fit. Returns False (nothing changed) if pins prevent it."""
        excess = len(cache) + num_blocks - cache.capacity_blocks
        if excess > 0:
            victims = []
            for h in cache.blocks():  # LRU first
                if len(victims) == excess:
                    break
                if h not in cache._pinned:  # noqa: SLF001 - read-only check, eviction goes through remove()
                    victims.append(h)
            if len(victims) < excess:
                return False
            for h in victims:
                cache.remove(h)
        cache.capacity_blocks -= num_blocks
        return True

    def _on_transfer_end(self, t: _Transfer) -> None:
        sim = self.sim
        sim.num_events += 1
        self._transfers.remove(t)
        key = (t.node, t.degree)
        k = self._in_flight.get(key, 0) - 1
        if k > 0:
            self._in_flight[key] = k
        else:
            self._in_flight.pop(key, None)
        self._in_flight_dst.discard((t.node, t.dst))
        for h in t.path:
            t.src_cache.unpin(h)
        dcache = t.dst_cache
        for h in t.path[:t.retained]:
            dcache.unpin(h)
        dcache.capacity_blocks += t.num_blocks
        w = sim.workers.get(t.dst)
        if w is None or w.cache is not dcache:
            self.counters["num_replicas_dropped"] += 1
            return
        dcache.insert(t.path, READY)  # all blocks at once: visible only when complete
        self.counters["num_replicas_installed"] += 1

    # ------------------------------------------------------------------ reporting
    @property
    def num_transfers_in_flight(self) -> int:
        return len(self._transfers)

    def stats(self) -> dict:
        """Counters: scans, replications by kind, installed/dropped replicas, blocks and bytes
        replicated, blocks reclaimed, matched vs reused tokens [tokens], missed benefit [s]."""
        return dict(self.counters) | {"num_trie_nodes": len(self.nodes)}


def with_global_cache(base, config: CacheManagerConfig | None = None, name: str | None = None):
    """A copy of the policy spec ``base`` (a ``baselines.registry.PolicySpec``) with a
    :class:`GlobalCacheManager` added to its attachments. The manager's preferred-degree weights
    (beta, lambda) follow the base router's ``params`` when it has them (Vertumnus)."""
    cfg = config
    if cfg is None:
        params = getattr(base.make_router(), "params", None)
        cfg = CacheManagerConfig()
        if params is not None and hasattr(params, "beta") and hasattr(params, "lambda_"):
            cfg = replace(cfg, beta=params.beta, lambda_=params.lambda_)
    base_attachments = base.make_attachments
    base_router = base.make_router
    new_name = name or f"{base.name}-global-cache"

    def make_attachments() -> list:
        return [*base_attachments(), GlobalCacheManager(cfg)]

    def make_router():
        router = base_router()
        router.name = new_name  # the run's policy label
        return router

    build_with = None
    if getattr(base, "build_with", None) is not None:
        def build_with(**params):  # the base policy with new parameters, plus the manager
            return with_global_cache(base.with_params(**params), config, new_name)

    return replace(base, name=new_name, make_router=make_router, make_attachments=make_attachments,
                   description=f"{base.description} + global prefix-cache manager (replication/reclamation)",
                   source=f"{base.source}; paper §7 global prefix-cache manager", build_with=build_with)


__all__ = ["CacheManagerConfig", "GlobalCacheManager", "with_global_cache"]
