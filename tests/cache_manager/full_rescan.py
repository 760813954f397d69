"""A full-rescan (pre-incremental) global prefix-cache manager: the oracle of
``tests/cache_manager/test_incremental_scan.py`` (the incremental scan of
:class:`baselines.cache_manager.GlobalCacheManager` must make exactly its decisions).

Every scan it visits every trie node: it decays every node's statistics eagerly (one
multiplication per scan, entries below ``DROP`` dropped), takes the replication candidates from
every node's statistics, recomputes complete holders and depths by walking each node's root path,
and offers every multi-holder node to reclamation, deepest first. Only the transfer mechanics
(:class:`baselines.cache_manager.Replicator` ``replicate`` / ``on_transfer_end``) and the
per-dispatch increments (``DemandStatistics.record``, which with the decay epoch held at 0 reads
and writes the eager values) are shared with the manager under test.
"""

from __future__ import annotations

from collections.abc import Mapping

from baselines.cache_manager import GlobalCacheManager
from baselines.cache_manager.statistics import DROP

__all__ = ["FullRescanManager"]


class FullRescanManager(GlobalCacheManager):
    """:class:`GlobalCacheManager` with the scan recomputed from scratch over the whole trie."""

    def __init__(self, config=None) -> None:
        super().__init__(config)
        self.trie.complete_holders = self._path_complete  # replicate() picks sources by the path walk too
        self.candidates: list[tuple[dict, dict]] = []  # per scan: (inter-degree, intra-degree) candidates

    # ------------------------------------------------------------------ path walks (no kept state)
    def _path_complete(self, h: int) -> set[int]:
        held = None
        for x in self.trie.path_to(h):
            node = self.trie.nodes.get(x)
            if node is None:
                return set()
            held = set(node.holders) if held is None else held & node.holders
        return held or set()

    def _path_depth(self, h: int) -> int:
        return len(self.trie.path_to(h)) - 1

    def replica_count(self, block_hash: int, degree: int) -> int:
        if block_hash not in self.trie.nodes:
            return 0
        return sum(1 for w in self._path_complete(block_hash) if self._degree.get(w) == degree)

    # ------------------------------------------------------------------ scan
    def scan(self) -> None:
        budget = self.config.max_replications_per_scan
        started: set[int] = set()
        inter = self._inter_degree_candidates()
        budget = self._replicate_ranked(inter, "inter", budget, started)
        intra = self._intra_degree_candidates()
        self._replicate_ranked(intra, "intra", budget, started)
        self.candidates.append((inter, intra))
        self._reclaim(self._degree)
        self._decay_every_node()

    def _inter_degree_candidates(self) -> dict[tuple[int, int], float]:
        in_flight = self.replicator.in_flight
        out = {}
        for h, node in self.trie.nodes.items():
            for c, v in node.missed.items():
                if v >= self.config.inter_degree_threshold_s and not in_flight.get((h, c)):
                    out[(h, c)] = v
        return out

    def _intra_degree_candidates(self) -> dict[tuple[int, int], float]:
        threshold = self.config.intra_degree_threshold
        in_flight = self.replicator.in_flight
        out = {}
        for h, node in self.trie.nodes.items():
            for c, v in node.access.items():
                if v < threshold:
                    continue
                rc = self.replica_count(h, c)
                if rc and v / (rc + in_flight.get((h, c), 0)) >= threshold:
                    out[(h, c)] = v / (rc + in_flight.get((h, c), 0))
        return out

    def _decay_every_node(self) -> None:
        d = self.config.decay
        if d >= 1.0:
            return
        for node in self.trie.nodes.values():
            for stat in (node.access, node.missed):
                for k, v in list(stat.items()):
                    v *= d
                    if v < DROP:
                        del stat[k]
                    else:
                        stat[k] = v

    def _reclaim(self, degree_of: Mapping[int, int]) -> None:
        """Every node with >= 2 holders, deepest first (ties: by hash), drops duplicate leaf copies
        of cold degrees (most loaded first, one kept), at most ``max_reclamations_per_scan`` blocks."""
        rep = self.replicator
        budget = self.config.max_reclamations_per_scan
        nodes = self.trie.nodes
        order = sorted((h for h, n in nodes.items() if len(n.holders) >= 2), key=lambda h: (-self._path_depth(h), h))
        for h in order:
            if budget <= 0:
                break
            node = nodes.get(h)
            if node is None or len(node.holders) < 2:
                continue
            by_degree: dict[int, list[int]] = {}
            for w in self._path_complete(h):
                by_degree.setdefault(degree_of[w], []).append(w)
            for c, ws in sorted(by_degree.items()):
                node = nodes.get(h)
                if node is None or budget <= 0:
                    break
                if len(ws) < 2 or node.access.get(c, 0.0) / len(ws) >= self.config.reclaim_threshold:
                    continue
                ws.sort(key=lambda w: (-rep.load(w), w))
                for w in ws[:-1]:
                    node = nodes.get(h)
                    if node is None or budget <= 0:
                        break
                    holds_child = any(w in nodes[x].holders for x in node.children)
                    if holds_child or (h, w) in rep.in_flight_dst:
                        continue
                    if self.sim.workers[w].cache.remove(h):
                        budget -= 1
                        self.counters["num_blocks_reclaimed"] += 1
