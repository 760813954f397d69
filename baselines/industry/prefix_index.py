"""The approximate prefix index shared by the cache-aware industry routers (SGLang's radix tree,
llm-d's prefix scorer): matched KV blocks per worker.

Part of the industry baselines (:mod:`baselines.industry`)."""

from __future__ import annotations

from collections import OrderedDict

from envs.sim.router import PoolView


class ApproxPrefixIndex:
    """Router-side approximate prefix index over KV block hashes, built only from the router's
    own routing history (no feedback from the workers' real caches).

    A Mooncake block hash identifies the whole prefix up to its block, so the per-worker radix
    tree of SGLang's router (text prefix) or the per-server LRU of llm-d's prefix plugin reduce to
    a per-worker LRU set of hashes. Insert touches tail first (the head is the most recent), so
    size-limited eviction removes leaves (suffix blocks) before shared heads, as LRU-leaf eviction
    of a radix tree does.

    Args:
        capacity_blocks: per-worker limit [blocks]; ``None`` = unlimited.
    """

    def __init__(self, capacity_blocks: int | None) -> None:
        self.capacity_blocks = capacity_blocks
        self._tenants: dict[int, OrderedDict[int, float]] = {}
        self._holders: dict[int, dict[int, float]] = {}  # hash -> {worker: last access time}
        self._created: dict[int, float] = {}  # worker id -> creation time at the last sync_workers

    def size(self, worker_id: int) -> int:
        return len(self._tenants.get(worker_id, ()))

    def match(self, worker_id: int, block_hashes) -> int:
        """Leading blocks of ``block_hashes`` the index attributes to ``worker_id``."""
        t = self._tenants.get(worker_id)
        if not t:
            return 0
        n = 0
        for h in block_hashes:
            if h not in t:
                break
            n += 1
        return n

    def longest_match(self, block_hashes, candidates: set[int]) -> tuple[int, int]:
        """``(worker, matched blocks)`` of the deepest node held by a candidate; the holder with the
        most recent access wins (ties: smaller worker id). ``(-1, 0)`` when nothing matches."""
        alive = None
        depth = 0
        best_holders: dict[int, float] = {}
        for h in block_hashes:
            holders = self._holders.get(h)
            if not holders:
                break
            nxt = {w: t for w, t in holders.items() if w in candidates and (alive is None or w in alive)}
            if not nxt:
                break
            alive = nxt
            best_holders = nxt
            depth += 1
        if not depth:
            return -1, 0
        wid = min(best_holders, key=lambda w: (-best_holders[w], w))
        return wid, depth

    def match_counts(self, block_hashes) -> dict[int, int]:
        """Worker -> matched blocks by the GAIE prefix scorer's rule (``matchLongestPrefix``):
        walk the request's blocks while *some* worker holds the block, counting one for every
        worker holding it (a worker that lost an early block to its LRU still counts the later
        ones)."""
        holders = self._holders
        counts: dict[int, int] = {}
        for h in block_hashes:
            hs = holders.get(h)
            if not hs:
                break
            for w in hs:
                counts[w] = counts.get(w, 0) + 1
        return counts

    def insert(self, worker_id: int, block_hashes, now_s: float, head_first: bool = False) -> None:
        """Records ``block_hashes`` for ``worker_id``. Default: tail first, so the head is the
        most recent (radix-tree leaf eviction); ``head_first``: in prompt order, so the last
        block is the most recent (a plain LRU ``Add`` per block, as GAIE's indexer)."""
        t = self._tenants.setdefault(worker_id, OrderedDict())
        holders = self._holders
        order = range(len(block_hashes)) if head_first else range(len(block_hashes) - 1, -1, -1)
        for i in order:
            h = block_hashes[i]
            t[h] = now_s
            t.move_to_end(h)
            holders.setdefault(h, {})[worker_id] = now_s
        if self.capacity_blocks is not None:
            self.evict(worker_id, self.capacity_blocks)

    def evict(self, worker_id: int, max_blocks: int) -> None:
        t = self._tenants.get(worker_id)
        if not t:
            return
        while len(t) > max_blocks:
            h, _ = t.popitem(last=False)
            hs = self._holders.get(h)
            if hs is not None:
                hs.pop(worker_id, None)
                if not hs:
                    del self._holders[h]

    def remove_worker(self, worker_id: int) -> None:
        self.evict(worker_id, 0)

    def sync_workers(self, view: PoolView) -> None:
        """Drops the entries of workers that were retired by a split/merge (paper §6), including
        an id reused by a newly created worker (whose cache starts without them), as the upstream
        routers remove a deleted worker's tenant. Call when ``view.epoch`` changes."""
        current = {wid: w.created_s for wid, w in view.workers.items()}
        seen = self._created
        for wid in list(self._tenants):
            if wid not in current or seen.get(wid, current[wid]) != current[wid]:
                self.remove_worker(wid)
        seen.clear()
        seen.update(current)
