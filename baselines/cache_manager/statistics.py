"""Per-request demand statistics of the cache manager (docs/cache_manager.md "Per-request statistics").

At each dispatch: the globally matched path, ``access[z][C_sel]`` along it, and the missed benefit
``missed[z][C*]`` at the request's preferred degree ``C*`` where no complete replica exists; every
scan decays them (paper §7 "Per-Request Statistics").

The decay is lazy: a scan only advances the decay epoch, and a node's statistics are brought up
to the current epoch (:meth:`DemandStatistics.current`) when they are read or added to, by the
same multiplications, one per missed scan, and the same drops below :data:`DROP` as an eager decay
of every node at every scan, so the values are bit-identical (``v * decay**k`` would round
differently; for a power-of-two decay such as the default 0.5 every multiplication is exact and
``ldexp`` gives the same number in one step). The entries at or above the scan's thresholds are
kept in two hot sets, so a scan visits those and not every node with statistics.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from math import ldexp

from baselines.cache_manager.config import CacheManagerConfig
from baselines.cache_manager.trie import PrefixTrie, TrieNode
from envs.sim.cost_model import CostModel
from envs.sim.worker import Worker

DROP = 1e-3  # decayed statistics below this are dropped


def _decay_in_place(stat: dict[int, float], factor: float, times: int, exponent: int | None) -> None:
    """Multiplies every value of ``stat`` by ``factor`` ``times`` times, one multiplication at a
    time, and deletes those that fall below :data:`DROP` (surviving keys keep their order).

    ``exponent``: ``n`` when ``factor == 2**-n``; then each multiplication is exact (the values
    stay normal floats above :data:`DROP`), so ``ldexp(v, -n * times)`` is the same number in one
    step. A value only shrinks, so it is dropped at some step iff the last one is below DROP."""
    if exponent is not None:
        shift = -exponent * times
        for k, v in list(stat.items()):
            v = ldexp(v, shift)
            if v < DROP:
                del stat[k]
            else:
                stat[k] = v
        return
    for k, v in list(stat.items()):
        for _ in range(times):
            v *= factor
            if v < DROP:
                break
        if v < DROP:
            del stat[k]
        else:
            stat[k] = v


class DemandStatistics:
    """The decayed ``access`` / ``missed`` statistics stored on the trie's nodes, the decay epoch,
    the hot entries, and the token / benefit counters.

    Args:
        config: the manager's parameters (``beta``, ``lambda_``, ``decay``, and the thresholds
            ``intra_degree_threshold`` / ``inter_degree_threshold_s`` that define the hot sets).
        counters: the manager's counter dict; ``prompt_tokens``, ``matched_tokens``,
            ``reused_tokens`` [tokens] and ``missed_benefit_s`` [s] are added to here.

    Attributes:
        epoch: number of decays so far (one per scan when ``decay < 1``).
        hot_access: ``(node, degree)`` entries whose ``access`` was at or above
            ``intra_degree_threshold`` when last added to or scanned; contains every entry at or
            above it now (a value only grows when it is added to, which inserts it here).
        hot_missed: the same for ``missed`` and ``inter_degree_threshold_s``.
    """

    def __init__(self, config: CacheManagerConfig, counters: dict) -> None:
        self.config = config
        self.counters = counters
        self.epoch = 0
        self.hot_access: set[tuple[int, int]] = set()
        self.hot_missed: set[tuple[int, int]] = set()
        self.degree_caps: list[tuple[int, int]] = []  # (degree, max KV capacity [tokens]) of ACTIVE workers
        mantissa, exp = math.frexp(config.decay)
        self._decay_exponent = 1 - exp if mantissa == 0.5 else None  # n when decay == 2**-n (0.5: n = 1)

    def current(self, node: TrieNode) -> TrieNode:
        """Applies to ``node``'s statistics the decays since it was last brought up to date
        (eagerly equivalent: one multiplication per decay, entries below :data:`DROP` dropped)
        and returns it. Cost: O(entries) for a power-of-two decay, else O(entries x decays missed,
        up to each entry's drop)."""
        k = self.epoch - node.stats_epoch
        if k:
            node.stats_epoch = self.epoch
            access = node.access
            if access:
                exponent = self._decay_exponent
                if exponent is not None and len(access) == 1:  # the usual case: one degree (_decay_in_place's ldexp)
                    [(d, v)] = access.items()
                    v = ldexp(v, -exponent * k)
                    if v < DROP:
                        del access[d]
                    else:
                        access[d] = v
                else:
                    _decay_in_place(access, self.config.decay, k, exponent)
            if node.missed:
                _decay_in_place(node.missed, self.config.decay, k, self._decay_exponent)
        return node

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
        get = trie.nodes.get
        for h in hashes:
            node = get(h)
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
        current = self.current
        epoch = self.epoch
        hot = self.hot_access
        threshold = self.config.intra_degree_threshold
        for i in range(m):
            node = path_nodes[i]
            if node.stats_epoch != epoch:  # else current(node) has nothing to apply
                current(node)
            acc = node.access
            v = acc.get(c_sel, 0.0) + 1.0
            acc[c_sel] = v
            if v >= threshold:
                hot.add((block_hashes[i], c_sel))
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
            c["missed_benefit_s"] += self._add_missed(path_nodes, block_hashes, lo, c_star, cost_model, bs, L)

    def _add_missed(self, path_nodes: list[TrieNode], block_hashes, first: int, c_star: int, cost_model: CostModel,
                    bs: int, L: int) -> float:
        """Adds the marginal service-time saving of each block from ``first`` on to its node's
        ``missed[C*]`` (the nodes are up to date: :meth:`record` added to their ``access``);
        returns the total (it telescopes to the saving of the whole prefix) [s]."""
        hot = self.hot_missed
        threshold = self.config.inter_degree_threshold_s
        prev_p = min(first * bs, L - 1)
        prev_s = cost_model.service_time_s(c_star, L - prev_p, prev_p)
        total = 0.0
        for i in range(first, len(path_nodes)):
            p = min((i + 1) * bs, L - 1)
            if p <= prev_p:
                break
            s = cost_model.service_time_s(c_star, L - p, p)
            missed = path_nodes[i].missed
            v = missed.get(c_star, 0.0) + (prev_s - s)
            missed[c_star] = v
            if v >= threshold:
                hot.add((block_hashes[i], c_star))
            total += prev_s - s
            prev_p, prev_s = p, s
        return total

    def decay(self) -> None:
        """Multiplies every statistic by ``config.decay`` (dropping entries below :data:`DROP`):
        advances the decay epoch; :meth:`current` applies it to a node when it is next read. O(1)."""
        if self.config.decay < 1.0:
            self.epoch += 1

    def hot_values(self, hot: set[tuple[int, int]], stat: str, threshold: float,
                   nodes: Mapping[int, TrieNode]) -> list[tuple[int, int, float]]:
        """``(node, degree, value)`` of the entries of ``hot`` (:attr:`hot_access` or
        :attr:`hot_missed`) whose current ``stat`` ("access" or "missed") value is at or above
        ``threshold``; the others (decayed below it, or their node dropped from the trie) leave
        ``hot``. Cost: O(len(hot)) plus the decays :meth:`current` applies."""
        current = self.current
        out = []
        cold = []
        for key in hot:
            node = nodes.get(key[0])
            v = None if node is None else getattr(current(node), stat).get(key[1])
            if v is None or v < threshold:
                cold.append(key)
            else:
                out.append((key[0], key[1], v))
        hot.difference_update(cold)
        return out
