"""The global prefix trie of the cache manager (docs/cache_manager.md "Trie").

One node per KV block hash; a hash names the whole prefix ending at its block (Mooncake
convention), so a node's parent is the previous block of any request that contains it. Per node:
the workers whose cache holds the block, the children, its depth, and decayed per-degree
statistics (filled and decayed by :mod:`baselines.cache_manager.statistics`).

Invariant: a node's parent, when it has one, is in the trie (:meth:`PrefixTrie.create` and
:meth:`PrefixTrie.register_prefix` create it, and a node is dropped only without children), so a
node's depth is fixed when it is created and changes only when :meth:`PrefixTrie.register_prefix`
links a parentless node below a parent (then its subtree's depths are updated).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


class TrieNode:
    """One trie node (one KV block): parent hash (None at the root level), holders, children,
    ``depth`` (number of ancestors; 0 at the root level), ``complete`` (the holders that also hold
    every ancestor: the complete replicas of the prefix ending here), decayed statistics per degree
    (``access`` [decayed requests], ``missed`` [s]) as of the statistics' decay epoch
    ``stats_epoch`` (read them through ``DemandStatistics.current``, which applies the decays
    since), and ``child_holders`` (worker id -> number of children it holds; no zero entries)."""

    __slots__ = ("parent", "holders", "children", "depth", "complete", "access", "missed", "stats_epoch",
                 "child_holders")

    def __init__(self, parent: int | None, depth: int = 0) -> None:
        self.parent = parent
        self.holders: set[int] = set()
        # child hashes, as the keys of a dict (values None): a dict of ints is invisible to the garbage
        # collector (a set is not), and a node per KV block makes those collections add up
        self.children: dict[int, None] = {}
        self.depth = depth
        self.complete: set[int] = set()
        self.access: dict[int, float] = {}
        self.missed: dict[int, float] = {}
        self.stats_epoch = 0
        self.child_holders: dict[int, int] = {}


class PrefixTrie:
    """Block hash -> :class:`TrieNode`, with the holder sets kept equal to the workers' caches by
    :meth:`insert` / :meth:`evict` (called from ``PrefixCache`` listeners), and each node's
    ``complete`` set (``holders`` intersected along the root path) kept with them: an insert or
    eviction of worker w's block walks down only through the descendants w holds, so with the
    caches' order (a prefix inserted root first, evicted suffix first) it is O(1)."""

    def __init__(self) -> None:
        self.nodes: dict[int, TrieNode] = {}
        self.parent_of: dict[int, int | None] = {}  # learnt from dispatched prompts (register_prefix)
        self.shared: set[int] = set()  # nodes with >= 2 holders (reclamation candidates), kept incrementally
        # nodes whose holders, children, children's holders or depth changed since the owner last
        # cleared it, among those with >= 2 holders after the change or in ``watched``: a node with
        # fewer holders that the owner does not watch is not recorded (the owner, the replicator's
        # leaf-copy refresh, only looks for multi-holder nodes, and a node that gains a second
        # holder is recorded by that insert)
        self.touched: set[int] = set()
        self.watched: set[int] = set()  # the owner's: nodes recorded in touched whatever their holders
        # nodes dropped from the trie, reused by create(): the trie's nodes churn (one per new KV
        # block, dropped when its last holder evicts it), and reusing them keeps the garbage
        # collector from running (and walking the whole heap) every few hundred new blocks
        self._free: list[TrieNode] = []

    # ------------------------------------------------------------------ holders
    def insert(self, worker_id: int, block_hash: int) -> None:
        """``worker_id``'s cache now holds ``block_hash`` (creates the node and missing ancestors)."""
        nodes = self.nodes
        node = nodes.get(block_hash)
        if node is None:
            node = self.create(block_hash)
        holders = node.holders
        if worker_id in holders:
            return
        holders.add(worker_id)
        touched = self.touched
        watched = self.watched
        if len(holders) >= 2 or block_hash in watched:
            touched.add(block_hash)
        parent = node.parent
        if parent is None:
            complete = True
        else:
            pnode = nodes[parent]
            if len(pnode.holders) >= 2 or parent in watched:
                touched.add(parent)
            counts = pnode.child_holders
            counts[worker_id] = counts.get(worker_id, 0) + 1
            complete = worker_id in pnode.complete
        if complete:
            if worker_id in node.child_holders:
                self._add_complete(worker_id, node)
            else:  # the usual case (a prefix is inserted root first): no held descendant to complete
                node.complete.add(worker_id)
        if len(holders) == 2:
            self.shared.add(block_hash)

    def _add_complete(self, worker_id: int, node: TrieNode) -> None:
        """``worker_id`` now holds the complete prefix ending at ``node``: adds it to the
        ``complete`` set there and at every descendant it holds through an unbroken path."""
        nodes = self.nodes
        stack = [node]
        while stack:
            n = stack.pop()
            n.complete.add(worker_id)
            if worker_id in n.child_holders:
                for c in n.children:
                    cn = nodes[c]
                    if worker_id in cn.holders and worker_id not in cn.complete:
                        stack.append(cn)

    def _remove_complete(self, worker_id: int, node: TrieNode) -> None:
        """``worker_id`` no longer holds the complete prefix ending at ``node``: removes it from the
        ``complete`` set there and at every descendant."""
        nodes = self.nodes
        stack = [node]
        while stack:
            n = stack.pop()
            n.complete.discard(worker_id)
            if worker_id in n.child_holders:
                for c in n.children:
                    cn = nodes[c]
                    if worker_id in cn.complete:
                        stack.append(cn)

    def create(self, block_hash: int) -> TrieNode:
        """A new node for ``block_hash``, linked to its parent (created if missing) when the parent is known."""
        parent = self.parent_of.get(block_hash)
        free = self._free
        if free:
            node = free.pop()  # emptied by _gc: as good as new
            node.parent = parent
        else:
            node = TrieNode(parent)
        nodes = self.nodes
        nodes[block_hash] = node
        if parent is not None:
            pnode = nodes.get(parent)
            if pnode is None:
                pnode = self.create(parent)
            node.depth = pnode.depth + 1
            pnode.children[block_hash] = None
            if len(pnode.holders) >= 2 or parent in self.watched:
                self.touched.add(parent)
        return node

    def evict(self, worker_id: int, block_hash: int) -> list[int]:
        """``worker_id``'s cache dropped ``block_hash``; returns the hashes of the nodes dropped from
        the trie (no holders and no children left, walking up)."""
        nodes = self.nodes
        node = nodes.get(block_hash)
        if node is None:
            return []
        holders = node.holders
        if worker_id in holders:
            holders.discard(worker_id)
            complete = node.complete
            if worker_id in complete:
                if worker_id in node.child_holders:
                    self._remove_complete(worker_id, node)
                else:  # the usual case (a suffix block, or a reclaimed leaf copy)
                    complete.discard(worker_id)
            touched = self.touched
            watched = self.watched
            if len(holders) >= 2 or block_hash in watched:
                touched.add(block_hash)
            parent = node.parent
            if parent is not None:
                pnode = nodes[parent]
                if len(pnode.holders) >= 2 or parent in watched:
                    touched.add(parent)
                counts = pnode.child_holders
                k = counts[worker_id] - 1
                if k:
                    counts[worker_id] = k
                else:
                    del counts[worker_id]
        if len(holders) < 2:
            self.shared.discard(block_hash)
            if not holders and not node.children:
                return self._gc(block_hash, node)
        return []

    def _gc(self, block_hash: int, node: TrieNode) -> list[int]:
        """Drops ``node`` and then its ancestors while they have no holders and no children; a
        dropped node is emptied (its sets and dicts cleared, which also gives them back their
        initial size, so they iterate as new ones would) and kept for :meth:`create`; its
        ``parent`` stays readable until then."""
        nodes = self.nodes
        free = self._free
        dropped: list[int] = []
        while not node.holders and not node.children:
            del nodes[block_hash]
            dropped.append(block_hash)
            node.holders.clear()
            node.children.clear()
            node.complete.clear()
            node.access.clear()
            node.missed.clear()
            node.child_holders.clear()
            node.depth = 0
            node.stats_epoch = 0
            free.append(node)
            parent = node.parent
            if parent is None:
                break
            pnode = nodes.get(parent)
            if pnode is None:
                break
            pnode.children.pop(block_hash, None)
            if len(pnode.holders) >= 2 or parent in self.watched:
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
                pnode.children[h] = None
                if len(pnode.holders) >= 2 or p in self.watched:
                    self.touched.add(p)
                counts = pnode.child_holders
                for w in node.holders:
                    counts[w] = counts.get(w, 0) + 1
                self._relink_subtree(h, pnode)
            k -= 1

    def _relink_subtree(self, block_hash: int, pnode: TrieNode) -> None:
        """Recomputes the depth and ``complete`` set of node ``block_hash`` and its descendants
        (and marks them touched) after the parentless node was linked below ``pnode``."""
        nodes = self.nodes
        stack = [(block_hash, pnode)]
        while stack:
            h, p = stack.pop()
            n = nodes[h]
            n.depth = p.depth + 1
            n.complete = n.holders & p.complete
            if len(n.holders) >= 2 or h in self.watched:
                self.touched.add(h)
            stack.extend((c, n) for c in n.children)

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

    def complete_holders(self, block_hash: int) -> set[int]:
        """Workers holding every block of the prefix ending at ``block_hash`` (a new set; empty if
        unknown). O(replicas): read from the node's ``complete`` set."""
        node = self.nodes.get(block_hash)
        return set(node.complete) if node is not None else set()

    def replica_count(self, block_hash: int, degree: int, degree_of: Mapping[int, int]) -> int:
        """``ReplicaCount(z, C)`` (paper §7): degree-C workers (``degree_of``: worker id -> CP degree)
        holding the complete prefix ending at z."""
        node = self.nodes.get(block_hash)
        if node is None:
            return 0
        return sum(1 for w in node.complete if degree_of.get(w) == degree)

    def holders(self, block_hash: int) -> set[int]:
        """Workers whose cache holds this block (a copy; empty if unknown)."""
        node = self.nodes.get(block_hash)
        return set(node.holders) if node is not None else set()

    def depth(self, block_hash: int) -> int:
        """Number of ancestors of ``block_hash`` (0 at the root level), O(1) (kept on the node).

        Raises:
            KeyError: ``block_hash`` is not in the trie.
        """
        return self.nodes[block_hash].depth

    def leaves_first(self, hashes: Iterable[int]) -> list[int]:
        """``hashes`` sorted deepest first (ties: by hash, for determinism)."""
        nodes = self.nodes
        return sorted(hashes, key=lambda h: (-nodes[h].depth, h))

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
