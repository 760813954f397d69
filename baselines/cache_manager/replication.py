"""Replication over the KV links and reclamation of duplicate replicas (docs/cache_manager.md
"Replication", "Cross-degree copies", "Periodic scan" step 3; paper §7 "Replication and
Reclamation", §8 asynchronous KV transfers)."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from baselines.cache_manager.config import CacheManagerConfig
from baselines.cache_manager.statistics import DemandStatistics
from baselines.cache_manager.trie import PrefixTrie, TrieNode
from envs.sim.cache import READY, PrefixCache
from envs.sim.events import EventPriority
from envs.sim.simulator import Simulator
from envs.sim.worker import Worker, WorkerState


@dataclass(eq=False)
class Transfer:
    """One replication in flight: the prefix ``path`` (root .. ``node``) copied from worker ``src``
    to worker ``dst`` over ``[start_s, end_s]``; the first ``retained`` blocks were already ready at
    the destination, ``num_blocks`` are copied (``num_bytes`` on the link). ``src_worker``: the
    source worker object (a rank failure during the transfer, ``Worker.stopped``, loses the copy)."""

    path: list[int]
    node: int
    degree: int
    src: int
    dst: int
    dst_cache: PrefixCache
    src_cache: PrefixCache
    num_blocks: int
    num_bytes: int
    retained: int
    start_s: float
    end_s: float
    kind: str
    src_worker: Worker | None = None


def reserve_blocks(cache: PrefixCache, num_blocks: int) -> bool:
    """Reserves ``num_blocks`` free blocks: shrinks the usable capacity and evicts LRU unpinned
    blocks until the resident blocks fit. Returns False (nothing changed) if pins prevent it."""
    excess = len(cache) + num_blocks - cache.capacity_blocks
    if excess > 0:
        victims = cache.lru_unpinned(excess)  # eviction goes through remove()
        if len(victims) < excess:
            return False
        for h in victims:
            cache.remove(h)
    cache.capacity_blocks -= num_blocks
    return True


class Replicator:
    """Starts and completes replications and reclaims duplicate replicas.

    Args:
        config: the manager's parameters.
        trie: the manager's prefix trie.
        counters: the manager's counter dict (replication / reclamation counters are added to here).
        statistics: the manager's demand statistics (reclamation reads ``access``).
    """

    def __init__(self, config: CacheManagerConfig, trie: PrefixTrie, counters: dict,
                 statistics: DemandStatistics) -> None:
        self.config = config
        self.trie = trie
        self.counters = counters
        self.statistics = statistics
        self.sim: Simulator | None = None
        self.in_flight: dict[tuple[int, int], int] = {}  # (node, degree) -> transfers in flight
        self.in_flight_dst: set[tuple[int, int]] = set()  # (node, dst worker)
        self.transfers: list[Transfer] = []  # in flight
        # multi-holder nodes with a leaf copy (see _has_leaf_copy), exact for every node not in trie.touched
        self.leaf_copy_nodes: set[int] = set()
        trie.watched = self.leaf_copy_nodes  # the trie records their changes even with < 2 holders left
        # the reclamation queue kept between scans: (-depth, node) with one live entry per leaf-copy node
        # (_live_depth: node -> depth of its live entry), plus entries of former ones and stale depths,
        # skipped when popped
        self._queue: list[tuple[int, int]] = []
        self._live_depth: dict[int, int] = {}
        self.queue_slack = 64  # rebuild the queue when it holds more than 2 x leaf-copy nodes + this
        self.log: list[dict] = []  # one entry per replication started (time, kind, node, src, dst, blocks, bytes)
        # the callback of the transfer-end event (the owning manager forwards to on_transfer_end)
        self.transfer_end_handler: Callable[[Transfer], None] = self.on_transfer_end

    def load(self, wid: int) -> float:
        """Outstanding work of worker ``wid`` [s] (the tie-breaker between destinations / victims)."""
        return self.sim.view.outstanding_work_s(wid)

    # ------------------------------------------------------------------ replication
    def _destination(self, path: list[int], block_hash: int, degree: int, complete: set[int]) -> tuple[Worker, int] | None:
        """(destination worker, its retained leading blocks of ``path``) or None: an ACTIVE degree-``degree``
        worker without the complete prefix (with ``backlog_bound``: and with at most ``scan_interval_s``
        of outstanding work, the demand horizon, docs/cache_manager.md "Replication"), most retained
        blocks first, then least loaded."""
        best = None
        sim = self.sim
        horizon_s = self.config.scan_interval_s if self.config.backlog_bound else float("inf")
        for wid in sim.worker_ids:
            w = sim.workers[wid]
            if w.degree != degree or w.state != WorkerState.ACTIVE or wid in complete:
                continue
            if (block_hash, wid) in self.in_flight_dst:
                continue
            load_s = self.load(wid)
            if load_s > horizon_s:  # a call routed here now starts after the demand that justified the replica
                continue
            retained = w.cache.match_ready(path)
            missing = len(path) - retained
            if missing <= 0 or missing > self.config.max_replica_share * w.cache.capacity_blocks:
                continue
            key = (-retained, load_s, wid)
            if best is None or key < best[0]:
                best = (key, w, retained)
        return None if best is None else (best[1], best[2])

    def replicate(self, block_hash: int, degree: int, kind: str = "manual") -> bool:
        """Starts one replication of the prefix ending at ``block_hash`` to a degree-``degree``
        worker (destination and source chosen as in docs/cache_manager.md). Returns whether a
        transfer started (False: unknown prefix, no holder, no destination with room, or with
        ``backlog_bound`` none with room and outstanding work within ``scan_interval_s``)."""
        trie = self.trie
        if block_hash not in trie.nodes:
            return False
        sim = self.sim
        path = trie.path_to(block_hash)
        if any(h not in trie.nodes for h in path):
            return False
        complete = trie.complete_holders(block_hash)
        sources = [w for w in complete if w in sim.workers]
        if not sources:
            return False
        found = self._destination(path, block_hash, degree, complete)
        if found is None:
            return False
        dst, retained = found
        src = min(sources, key=lambda x: (sim.workers[x].node != dst.node, x))
        src_w = sim.workers[src]
        n = len(path) - retained
        dcache = dst.cache
        scache = src_w.cache
        for h in path[:retained]:
            dcache.pin(h)
        if not reserve_blocks(dcache, n):
            for h in path[:retained]:
                dcache.unpin(h)
            return False
        for h in path:
            scache.pin(h)
        factor = 1.0 if src_w.degree == dst.degree else self.config.cross_degree_bytes_factor
        num_bytes = int(n * sim.kv_block_bytes * factor)
        now = sim.env.now
        start, end = sim.links.reserve(now, src_w.node, dst.node, num_bytes)
        t = Transfer(path=path, node=block_hash, degree=degree, src=src, dst=dst.worker_id, dst_cache=dcache,
                     src_cache=scache, num_blocks=n, num_bytes=num_bytes, retained=retained, start_s=start,
                     end_s=end, kind=kind, src_worker=src_w)
        self._start(t, now)
        return True

    def _start(self, t: Transfer, now: float) -> None:
        self.transfers.append(t)
        key = (t.node, t.degree)
        self.in_flight[key] = self.in_flight.get(key, 0) + 1
        self.in_flight_dst.add((t.node, t.dst))
        c = self.counters
        c["num_inter_degree_replications" if t.kind == "inter" else "num_intra_degree_replications"] += 1
        c["num_blocks_replicated"] += t.num_blocks
        c["replication_bytes"] += t.num_bytes
        self.log.append({"time_s": now, "kind": t.kind, "node": t.node, "degree": t.degree, "src": t.src,
                         "dst": t.dst, "num_blocks": t.num_blocks, "num_bytes": t.num_bytes, "end_s": t.end_s})
        self.sim.schedule(t.end_s - now, EventPriority.TRANSFER_END, self.transfer_end_handler, t)

    def on_transfer_end(self, t: Transfer) -> None:
        """Transfer ``t`` finished: unpins, releases the reservation and installs the replica READY in
        one call (dropped if the destination was retired meanwhile, or if a rank of the source or
        the destination failed: the source's KV, or what was copied so far, is gone)."""
        sim = self.sim
        sim.num_events += 1
        self.transfers.remove(t)
        key = (t.node, t.degree)
        k = self.in_flight.get(key, 0) - 1
        if k > 0:
            self.in_flight[key] = k
        else:
            self.in_flight.pop(key, None)
        self.in_flight_dst.discard((t.node, t.dst))
        for h in t.path:
            t.src_cache.unpin(h)
        dcache = t.dst_cache
        for h in t.path[:t.retained]:
            dcache.unpin(h)
        dcache.capacity_blocks += t.num_blocks
        w = sim.workers.get(t.dst)
        failed = (w is not None and w.stopped) or (t.src_worker is not None and t.src_worker.stopped)
        if w is None or w.cache is not dcache or failed:
            self.counters["num_replicas_dropped"] += 1
            return
        dcache.insert(t.path, READY)  # all blocks at once: visible only when complete
        self.counters["num_replicas_installed"] += 1

    # ------------------------------------------------------------------ reclamation
    def reclaim(self, degree_of: Mapping[int, int]) -> None:
        """Removes duplicate replicas with per-replica demand below ``reclaim_threshold``, leaves first,
        keeping at least one complete replica per degree; at most ``max_reclamations_per_scan`` blocks."""
        budget = self.config.max_reclamations_per_scan
        if budget <= 0:
            return
        trie = self.trie
        nodes = trie.nodes
        # Deepest first (ties: by hash) over the multi-holder nodes, which the trie keeps. Only nodes
        # with a leaf copy can lose a block, so only those are queued; a node gains one during the
        # scan only when a child of it is reclaimed, and then it is queued (it is shallower than the
        # child, so its turn is still to come). Same order and outcome as visiting every multi-holder
        # node. The queue persists between scans (entries pushed when a touched node becomes a
        # leaf-copy node, or after being popped), so a scan costs the nodes it visits and the
        # changes since the last one, not the number of leaf-copy nodes.
        self._refresh_leaf_copy_nodes()
        leafy = self.leaf_copy_nodes
        queue = self._queue
        live = self._live_depth
        parents: set[int] = set()  # queued during this scan as the parent of a reclaimed block
        popped: list[int] = []
        while queue and budget > 0:
            d, h = heapq.heappop(queue)
            if live.get(h) != -d:
                continue  # an entry superseded by one with the node's new depth
            del live[h]
            popped.append(h)
            if h not in leafy and h not in parents:
                continue  # no longer a leaf-copy node
            node = nodes.get(h)
            # untouched since the refresh: leaf_copy_nodes (which queued it) is still exact
            if node is None or len(node.holders) < 2 or (h in trie.touched and not self._has_leaf_copy(node)):
                continue
            left = self._reclaim_node(h, node, degree_of, budget)
            p = node.parent
            if left < budget and p is not None and p in trie.shared and p not in leafy and p not in parents:
                parents.add(p)
                self._push(p, nodes[p].depth)
            budget = left
        for h in popped:  # back in the queue for the next scans (the touched ones: see the next refresh)
            node = nodes.get(h)
            if h in leafy and node is not None and h not in live:
                self._push(h, node.depth)

    def _push(self, h: int, depth: int) -> None:
        """Queues node ``h`` at ``depth`` unless its live entry already has that depth."""
        if self._live_depth.get(h) != depth:
            self._live_depth[h] = depth
            heapq.heappush(self._queue, (-depth, h))

    def _reclaim_node(self, h: int, node: TrieNode, degree_of: Mapping[int, int], budget: int) -> int:
        """Reclaims duplicates of block ``h`` per degree whose per-replica demand is below
        ``reclaim_threshold``; returns the remaining budget."""
        complete = node.complete
        if len(complete) < 2:  # no degree with two complete replicas: nothing to reclaim
            return budget
        nodes = self.trie.nodes
        by_degree: dict[int, list[int]] = {}
        for w in complete:
            by_degree.setdefault(degree_of[w], []).append(w)
        access = self.statistics.current(node).access
        for c, ws in sorted(by_degree.items()):
            if len(ws) >= 2 and access.get(c, 0.0) / len(ws) < self.config.reclaim_threshold:
                budget = self._reclaim_duplicates(h, node, ws, budget)
                if budget <= 0:
                    return budget
                node = nodes.get(h)
                if node is None:
                    break
        return budget

    def _refresh_leaf_copy_nodes(self) -> None:
        """Brings :attr:`leaf_copy_nodes` (multi-holder nodes with a leaf copy; only these can lose a
        block to reclamation) and the reclamation queue up to date: re-evaluates only the trie's
        touched nodes (holders, children, children's holders or depth changed since the last
        refresh)."""
        trie = self.trie
        nodes = trie.nodes
        leafy = self.leaf_copy_nodes
        live = self._live_depth
        queue = self._queue
        push = heapq.heappush
        for h in trie.touched:
            node = nodes.get(h)
            # a multi-holder node with a leaf copy (_has_leaf_copy, inline: a holder without a child)
            if node is not None and len(node.holders) >= 2 and not node.child_holders.keys() >= node.holders:
                leafy.add(h)
                d = node.depth
                if live.get(h) != d:  # _push, inline
                    live[h] = d
                    push(queue, (-d, h))
            else:
                leafy.discard(h)
        trie.touched.clear()
        if len(self._queue) > 2 * len(leafy) + self.queue_slack:  # mostly entries of former leaf-copy nodes: rebuild
            self._live_depth = {h: nodes[h].depth for h in leafy}
            self._queue = [(-d, h) for h, d in self._live_depth.items()]
            heapq.heapify(self._queue)

    def _has_leaf_copy(self, node: TrieNode) -> bool:
        """Whether some holder of ``node`` holds none of its children. Only such copies can be
        reclaimed (:meth:`_reclaim_duplicates`), so nodes without one are skipped before their
        complete holders are computed. Evaluated when the node's turn comes: reclaiming a child
        earlier in the same scan can turn a copy into a leaf."""
        return not node.child_holders.keys() >= node.holders

    def _reclaim_duplicates(self, h: int, node: TrieNode, ws: list[int], budget: int) -> int:
        """Drops block ``h`` from the most loaded of the degree-C holders ``ws`` whose copy is a leaf,
        keeping at least one; returns the remaining budget."""
        nodes = self.trie.nodes
        load = self.sim.view.outstanding_work_s  # self.load, without the extra call
        ws.sort(key=lambda w: (-load(w), w))
        for w in ws[:-1]:
            if budget <= 0:
                return budget
            if w in node.child_holders:  # w holds a child of h: its copy is not a leaf
                continue
            if (h, w) in self.in_flight_dst:
                continue
            if self.sim.workers[w].cache.remove(h):  # the trie drops w from h's holders and complete set
                budget -= 1
                self.counters["num_blocks_reclaimed"] += 1
            node = nodes.get(h)
            if node is None:
                break
        return budget
