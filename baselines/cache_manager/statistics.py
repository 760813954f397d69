"""Per-request demand statistics of the cache manager (docs/cache_manager.md "Per-request statistics").

At each dispatch: the globally matched path, ``access[z][C_sel]`` along it, and the missed benefit
``missed[z][C*]`` at the request's preferred degree ``C*`` where no complete replica exists; every
scan decays them (paper §7 "Per-Request Statistics").
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from baselines.cache_manager.config import CacheManagerConfig
from baselines.cache_manager.trie import PrefixTrie, TrieNode
from envs.sim.cost_model import CostModel
from envs.sim.worker import Worker

DROP = 1e-3  # decayed statistics below this are dropped


def _decay_in_place(stat: dict[int, float], factor: float) -> None:
    """Multiplies every value of ``stat`` by ``factor`` and deletes those below :data:`DROP`
    (surviving keys keep their order)."""
    for k, v in list(stat.items()):
        v *= factor
        if v < DROP:
            del stat[k]
        else:
            stat[k] = v


class DemandStatistics:
    """The decayed ``access`` / ``missed`` statistics stored on the trie's nodes, the set of nodes
    that have any, and the token / benefit counters.

    Args:
        config: the manager's parameters (``beta``, ``lambda_``, ``decay``).
        counters: the manager's counter dict; ``prompt_tokens``, ``matched_tokens``,
            ``reused_tokens`` [tokens] and ``missed_benefit_s`` [s] are added to here.
    """

    def __init__(self, config: CacheManagerConfig, counters: dict) -> None:
        self.config = config
        self.counters = counters
        self.active: set[int] = set()  # nodes with statistics
        self.degree_caps: list[tuple[int, int]] = []  # (degree, max KV capacity [tokens]) of ACTIVE workers

    def preferred_degree(self, cost_model: CostModel, num_prompt_tokens: int, num_cached_tokens: int) -> int:
        """Degree the Vertumnus cost picks with ``q_w = 0`` (paper §5 cost), among the degrees of
        ACTIVE workers able to hold the prompt; 0 if there is none."""
        L = num_prompt_tokens
        P = num_cached_tokens
        R = L - P
        degrees = [d for d, cap in self.degree_caps if cap >= L]
        if not degrees:
            return 0
        c_min = degrees[0]
        s_min = cost_model.service_time_s(c_min, R, P)
        beta, lam = self.config.beta, self.config.lambda_
        best, best_j = 0, math.inf
        for c in degrees:
            s = cost_model.service_time_s(c, R, P)
            j = beta * s + lam * (c * s - c_min * s_min)
            if j < best_j:
                best, best_j = c, j
        return best

    @staticmethod
    def matched_path(trie: PrefixTrie, hashes) -> tuple[list[TrieNode], list[set[int]]]:
        """The globally matched path: nodes of the longest leading run of ``hashes`` that some worker
        holds completely, and the complete holders at each depth (shrinking sets)."""
        held: set[int] | None = None
        path_nodes: list[TrieNode] = []
        path_held: list[set[int]] = []
        for h in hashes:
            node = trie.nodes.get(h)
            if node is None or not node.holders:
                break
            held = node.holders if held is None else held & node.holders
            if not held:
                break
            path_nodes.append(node)
            path_held.append(held)
        return path_nodes, path_held

    def record(self, trie: PrefixTrie, degree_of: Mapping[int, int], cost_model: CostModel, block_size_tokens: int,
               block_hashes, num_prompt_tokens: int, worker: Worker) -> None:
        """Records one dispatch of a request (``block_hashes``, ``num_prompt_tokens``) to ``worker``."""
        path_nodes, path_held = self.matched_path(trie, block_hashes)
        m = len(path_nodes)
        bs = block_size_tokens
        L = num_prompt_tokens
        c = self.counters
        c["prompt_tokens"] += L
        if m == 0:
            return
        matched = min(m * bs, L - 1)
        c["matched_tokens"] += matched
        c["reused_tokens"] += min(worker.cache.match_ready(block_hashes) * bs, L - 1)
        c_sel = worker.degree
        for i in range(m):
            acc = path_nodes[i].access
            acc[c_sel] = acc.get(c_sel, 0.0) + 1.0
            self.active.add(block_hashes[i])
        c_star = self.preferred_degree(cost_model, L, matched)
        if not c_star:
            return
        # first path index without a complete degree-C* holder (holder sets shrink along the path)
        lo, hi = 0, m
        while lo < hi:
            mid = (lo + hi) // 2
            if any(degree_of.get(x) == c_star for x in path_held[mid]):
                lo = mid + 1
            else:
                hi = mid
        if lo < m:
            c["missed_benefit_s"] += self._add_missed(path_nodes, lo, c_star, cost_model, bs, L)

    @staticmethod
    def _add_missed(path_nodes: list[TrieNode], first: int, c_star: int, cost_model: CostModel, bs: int, L: int) -> float:
        """Adds the marginal service-time saving of each block from ``first`` on to its node's
        ``missed[C*]``; returns the total (it telescopes to the saving of the whole prefix) [s]."""
        prev_p = min(first * bs, L - 1)
        prev_s = cost_model.service_time_s(c_star, L - prev_p, prev_p)
        total = 0.0
        for i in range(first, len(path_nodes)):
            p = min((i + 1) * bs, L - 1)
            if p <= prev_p:
                break
            s = cost_model.service_time_s(c_star, L - p, p)
            missed = path_nodes[i].missed
            missed[c_star] = missed.get(c_star, 0.0) + (prev_s - s)
            total += prev_s - s
            prev_p, prev_s = p, s
        return total

    def decay(self, trie: PrefixTrie) -> None:
        """Multiplies every statistic by ``config.decay``; drops entries below :data:`DROP` and
        forgets nodes left without statistics."""
        d = self.config.decay
        if d >= 1.0:
            return
        drop = []
        nodes = trie.nodes
        for h in self.active:
            node = nodes[h]
            acc = node.access
            mis = node.missed
            if acc:
                _decay_in_place(acc, d)
            if mis:
                _decay_in_place(mis, d)
            if not acc and not mis:
                drop.append(h)
        self.active.difference_update(drop)
