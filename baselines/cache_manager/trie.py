"""The global prefix trie of the cache manager (docs/cache_manager.md "Trie").

One node per KV block hash; a hash names the whole prefix ending at its block (Mooncake
convention), so a node's parent is the previous block of any request that contains it. Per node:
the workers whose cache holds the block, the children, and decayed per-degree statistics (filled
by :mod:`baselines.cache_manager.statistics`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


class TrieNode:
    """One trie node (one KV block): parent hash (None at the root level), holders, children,
    decayed statistics per degree (``access`` [decayed requests], ``missed`` [s]), and
    ``child_holders`` (worker id -> number of children it holds; no zero entries)."""

    __slots__ = ("parent", "holders", "children", "access", "missed", "child_holders")

    def __init__(self, parent: int | None) -> None:
        self.parent = parent
        self.holders: set[int] = set()
        self.children: set[int] = set()
        self.access: dict[int, float] = {}
        self.missed: dict[int, float] = {}
        self.child_holders: dict[int, int] = {}


class PrefixTrie:
    """Block hash -> :class:`TrieNode`, with the holder sets kept equal to the workers' caches by
    :meth:`insert` / :meth:`evict` (called from ``PrefixCache`` listeners)."""

    def __init__(self) -> None:
        self.nodes: dict[int, TrieNode] = {}
        self.parent_of: dict[int, int | None] = {}  # learnt from dispatched prompts (register_prefix)
        self.shared: set[int] = set()  # nodes with >= 2 holders (reclamation candidates), kept incrementally
        # nodes whose holders, children or children's holders changed since the owner last cleared it
        self.touched: set[int] = set()

    # ------------------------------------------------------------------ holders
    def insert(self, worker_id: int, block_hash: int) -> None:
        """``worker_id``'s cache now holds ``block_hash`` (creates the node and missing ancestors)."""
        node = self.nodes.get(block_hash)
        if node is None:
            node = self.create(block_hash)
        if worker_id in node.holders:
            return
        node.holders.add(worker_id)
        self.touched.add(block_hash)
        if node.parent is not None:
            self.touched.add(node.parent)
            pnode = self.nodes.get(node.parent)
            if pnode is not None:
                counts = pnode.child_holders
                counts[worker_id] = counts.get(worker_id, 0) + 1
        if len(node.holders) == 2:
            self.shared.add(block_hash)

    def create(self, block_hash: int) -> TrieNode:
        """A new node for ``block_hash``, linked to its parent (created if missing) when the parent is known."""
        parent = self.parent_of.get(block_hash)
        node = TrieNode(parent)
        self.nodes[block_hash] = node
        if parent is not None:
            pnode = self.nodes.get(parent)
            if pnode is None:
                pnode = self.create(parent)
            pnode.children.add(block_hash)
            self.touched.add(parent)
        return node

    def evict(self, worker_id: int, block_hash: int) -> list[int]:
        """``worker_id``'s cache dropped ``block_hash``; returns the hashes of the nodes dropped from
        the trie (no holders and no children left, walking up)."""
        node = self.nodes.get(block_hash)
        if node is None:
            return []
        if worker_id in node.holders:
            node.holders.discard(worker_id)
            self.touched.add(block_hash)
            if node.parent is not None:
                self.touched.add(node.parent)
                pnode = self.nodes.get(node.parent)
                if pnode is not None:
                    counts = pnode.child_holders
                    k = counts[worker_id] - 1
                    if k:
                        counts[worker_id] = k
                    else:
                        del counts[worker_id]
        if len(node.holders) < 2:
            self.shared.discard(block_hash)
        return self._gc(block_hash, node)

    def _gc(self, block_hash: int, node: TrieNode) -> list[int]:
        nodes = self.nodes
        dropped: list[int] = []
        while not node.holders and not node.children:
            del nodes[block_hash]
            dropped.append(block_hash)
            parent = node.parent
            if parent is None:
                break
            pnode = nodes.get(parent)
            if pnode is None:
                break
            pnode.children.discard(block_hash)
            self.touched.add(parent)
            block_hash, node = parent, pnode
        return dropped

    def register_prefix(self, block_hashes) -> None:
        """Learns the trie shape of one prompt's block hashes (called at every dispatch).

        A hash names its whole prefix, so its parent is unique (the first parent seen is kept)
        and a known hash has known ancestors: new hashes are registered from the tail back to
        the first known one, O(new blocks).
        """
        parent_of = self.parent_of
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
                    pnode = self.create(p)
                pnode.children.add(h)
                self.touched.add(p)
                counts = pnode.child_holders
                for w in node.holders:
                    counts[w] = counts.get(w, 0) + 1
            k -= 1

    # ------------------------------------------------------------------ queries
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

    def _complete_holders_memo(self, block_hash: int, memo: dict[int, set[int]]) -> set[int]:
        got = memo.get(block_hash)
        if got is not None:
            return got
        nodes = self.nodes
        node = nodes.get(block_hash)
        if node is None:
            return set()
        if node.parent is None or node.parent not in nodes:
            out = set(node.holders) if node.parent is None else set()
        else:
            out = self._complete_holders_memo(node.parent, memo) & node.holders
        memo[block_hash] = out
        return out

    def complete_holders(self, block_hash: int, memo: dict[int, set[int]] | None = None) -> set[int]:
        """Workers holding every block of the prefix ending at ``block_hash`` (a new set).

        ``memo`` (hash -> complete holders) shares the ancestors' sets between calls of one scan.
        """
        if memo is not None:
            return self._complete_holders_memo(block_hash, memo)
        held: set[int] | None = None
        for h in self.path_to(block_hash):
            node = self.nodes.get(h)
            if node is None:
                return set()
            held = set(node.holders) if held is None else held & node.holders
            if not held:
                return held
        return held or set()

    def replica_count(self, block_hash: int, degree: int, degree_of: Mapping[int, int],
                      memo: dict[int, set[int]] | None = None) -> int:
        """``ReplicaCount(z, C)`` (paper §7): degree-C workers (``degree_of``: worker id -> CP degree)
        holding the complete prefix ending at z."""
        if block_hash not in self.nodes:
            return 0
        return sum(1 for w in self.complete_holders(block_hash, memo) if degree_of.get(w) == degree)

    def holders(self, block_hash: int) -> set[int]:
        """Workers whose cache holds this block (a copy; empty if unknown)."""
        node = self.nodes.get(block_hash)
        return set(node.holders) if node is not None else set()

    def depth(self, block_hash: int, cache: dict[int, int]) -> int:
        """Number of known ancestors of ``block_hash`` present in the trie (0 at the root level);
        ``cache`` (hash -> depth) shares the ancestors' depths between calls."""
        d = cache.get(block_hash)
        if d is None:
            p = self.nodes[block_hash].parent
            d = 0 if p is None or p not in self.nodes else self.depth(p, cache) + 1
            cache[block_hash] = d
        return d

    def leaves_first(self, hashes: Iterable[int]) -> list[int]:
        """``hashes`` sorted deepest first (ties: by hash, for determinism)."""
        depth_cache: dict[int, int] = {}
        return sorted(hashes, key=lambda h: (-self.depth(h, depth_cache), h))

    def deepest(self, cands: dict[tuple[int, int], float]) -> list[tuple[int, int]]:
        """``(node, degree)`` candidates none of whose descendants (same degree) is a candidate,
        ranked by value summed along the path (ties: node hash for determinism)."""
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
