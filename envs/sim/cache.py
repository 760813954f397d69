"""Per-worker block-level prefix cache (LRU).

A worker's cache holds KV blocks identified by prefix block hashes (Mooncake convention: a
hash identifies the whole prefix up to and including its block). Capacity is in blocks.

* A block is *ready* (immediately reusable) or *pending reconciliation* (resident after a
  split/merge but not yet owned/addressed under the new geometry, paper §6.2/§8). Only ready
  blocks count toward a hit.
* The hit of a request is the longest run of leading blocks present and ready.
* LRU eviction. When a request's blocks are (re)inserted they are touched tail first, so the
  head of a prefix is the most recently used and an eviction removes suffix blocks before the
  shared head (as vLLM's free-block queue does: ``vllm/v1/core/block_pool.py`` frees a
  request's blocks in reverse order).
* Pinned blocks (sources of in-flight transfers, paper §7) are never evicted.
* Listeners get ``(worker_id, block_hash)`` on every insert and eviction, so a global index
  (the prefix trie of paper §7) can stay consistent with the workers' own LRU decisions.
  Batch eviction listeners get ``(worker_id, [block_hash, ...])`` once per eviction round,
  least recently used first (demotion to a lower KV tier, ``envs/sim/tiers.py``).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from itertools import islice

READY = 0
PENDING = 1


class PrefixCache:
    """LRU cache of KV blocks for one worker.

    Args:
        capacity_blocks: maximum number of resident blocks (>= 0).
        worker_id: id reported to listeners.

    Complexity: lookups stop at the first miss; insert is O(blocks inserted + evicted).
    """

    __slots__ = ("capacity_blocks", "worker_id", "_blocks", "_pinned", "insert_listeners", "evict_listeners",
                 "evict_batch_listeners")

    def __init__(self, capacity_blocks: int, worker_id: int = 0) -> None:
        if capacity_blocks < 0:
            raise ValueError(f"capacity_blocks must be >= 0, got {capacity_blocks}")
        self.capacity_blocks = capacity_blocks
        self.worker_id = worker_id
        self._blocks: OrderedDict[int, int] = OrderedDict()  # hash -> READY/PENDING, LRU first
        self._pinned: dict[int, int] = {}
        self.insert_listeners: list[Callable[[int, int], None]] = []
        self.evict_listeners: list[Callable[[int, int], None]] = []
        self.evict_batch_listeners: list[Callable[[int, list[int]], None]] = []

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block_hash: int) -> bool:
        return block_hash in self._blocks

    @property
    def num_free_blocks(self) -> int:
        return self.capacity_blocks - len(self._blocks)

    def state(self, block_hash: int) -> int | None:
        """READY, PENDING or None (absent)."""
        return self._blocks.get(block_hash)

    def num_common_blocks(self, other: "PrefixCache") -> int:
        """Number of block hashes resident in both this cache and ``other`` (any state)."""
        return len(self._blocks.keys() & other._blocks.keys())

    def blocks(self) -> list[int]:
        """Resident block hashes, least recently used first (a copy)."""
        return list(self._blocks)

    def lru_unpinned(self, num_blocks: int) -> list[int]:
        """The ``num_blocks`` least recently used unpinned resident blocks, LRU first (fewer if
        there are not that many). Visits the blocks up to the last one returned, not all of them."""
        pinned = self._pinned
        out: list[int] = []
        if num_blocks <= 0:
            return out
        for h in self._blocks:
            if h not in pinned:
                out.append(h)
                if len(out) == num_blocks:
                    break
        return out

    def match_ready(self, block_hashes: Sequence[int]) -> int:
        """Number of leading blocks that are present and ready."""
        get = self._blocks.get
        n = 0
        for h in block_hashes:
            if get(h) != READY:
                return n
            n += 1
        return n

    def match_present(self, block_hashes: Sequence[int]) -> int:
        """Number of leading blocks that are present (ready or pending)."""
        blocks = self._blocks
        n = 0
        for h in block_hashes:
            if h not in blocks:
                break
            n += 1
        return n

    def touch(self, block_hashes: Sequence[int], num_blocks: int) -> None:
        """Marks the first ``num_blocks`` blocks as used now (tail first, head most recent)."""
        move = self._blocks.move_to_end
        for i in range(num_blocks - 1, -1, -1):
            move(block_hashes[i])

    def insert(self, block_hashes: Sequence[int], state: int = READY) -> None:
        """Inserts (or refreshes) the blocks of a completed prefill, evicting LRU blocks.

        At most ``capacity_blocks`` leading blocks are kept. A present pending block becomes
        ready when inserted as ready (its data was just recomputed).
        """
        blocks = self._blocks
        n = min(len(block_hashes), self.capacity_blocks)
        if n <= 0:
            return
        move = blocks.move_to_end
        listeners = self.insert_listeners
        new: list[int] = []
        for i in range(n - 1, -1, -1):
            h = block_hashes[i]
            old = blocks.get(h)
            if old is None:
                blocks[h] = state
                if listeners:
                    new.append(h)
            else:
                if old != state and state == READY:
                    blocks[h] = READY
                move(h)
        if len(blocks) > self.capacity_blocks:
            self._evict(len(blocks) - self.capacity_blocks)
        if listeners:
            for h in reversed(new):
                if h in blocks:
                    for fn in listeners:
                        fn(self.worker_id, h)

    def fill(self, blocks: Sequence[tuple[int, int]]) -> bool:
        """Loads ``blocks`` (``(hash, READY/PENDING)``, least recently used first) into this empty
        cache, as one :meth:`insert` of each block in that order would (same contents, recency and
        listener calls), when that needs no eviction: distinct hashes, at most ``capacity_blocks``.
        Returns False, changing nothing, when the cache is not empty or those conditions fail (the
        caller then inserts block by block). The KV state of a worker a split or merge creates."""
        if self._blocks or len(blocks) > self.capacity_blocks:
            return False
        loaded = OrderedDict(blocks)
        if len(loaded) != len(blocks):
            return False
        self._blocks = loaded
        listeners = self.insert_listeners
        if listeners:
            wid = self.worker_id
            for h, _ in blocks:
                for fn in listeners:
                    fn(wid, h)
        return True

    def set_state(self, block_hash: int, state: int) -> None:
        """Changes a resident block's state (e.g. pending -> ready after reconciliation)."""
        if block_hash not in self._blocks:
            raise KeyError(f"block {block_hash} is not resident on worker {self.worker_id}")
        self._blocks[block_hash] = state

    def remove(self, block_hash: int) -> bool:
        """Drops one block (reclamation); returns whether it was resident. Pinned blocks stay."""
        if block_hash in self._pinned or block_hash not in self._blocks:
            return False
        del self._blocks[block_hash]
        for fn in self.evict_listeners:
            fn(self.worker_id, block_hash)
        return True

    def pin(self, block_hash: int) -> None:
        self._pinned[block_hash] = self._pinned.get(block_hash, 0) + 1

    def unpin(self, block_hash: int) -> None:
        c = self._pinned.get(block_hash, 0)
        if c <= 1:
            self._pinned.pop(block_hash, None)
        else:
            self._pinned[block_hash] = c - 1

    def _evict(self, num_blocks: int) -> None:
        blocks = self._blocks
        pinned = self._pinned
        listeners = self.evict_listeners
        batch_listeners = self.evict_batch_listeners
        if not pinned:
            popitem = blocks.popitem
            if not listeners and not batch_listeners:
                for _ in range(num_blocks):
                    popitem(last=False)
                return
            # the num_blocks least recently used, dropped by C-level loops (no bytecode per block)
            evicted = list(islice(blocks, num_blocks))
            deque(map(blocks.__delitem__, evicted), 0)
        else:
            evicted = self.lru_unpinned(num_blocks)
            deque(map(blocks.__delitem__, evicted), 0)
        for h in evicted:
            for fn in listeners:
                fn(self.worker_id, h)
        for fn in batch_listeners:
            fn(self.worker_id, evicted)
