"""SGLang's ``cache_aware`` router (sgl-router ``cache_aware.rs``; paper §9 SGLang baseline).

Part of the industry baselines (:mod:`baselines.industry`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from baselines.industry.prefix_index import ApproxPrefixIndex
from envs.sim.request import Request
from envs.sim.router import PoolView, Router


@dataclass(frozen=True)
class SGLangParams:
    """sgl-router ``cache_aware`` policy parameters: the router CLI defaults
    (sgl-project/sglang ``sgl-model-gateway/src/main.rs``: cache_threshold 0.3,
    balance_abs_threshold 64, balance_rel_threshold 1.5, eviction_interval 120 s, max_tree_size
    67,108,864 characters; ``max_tree_size`` bounds each tenant's character count,
    ``tree.rs`` ``evict_tenant_by_size``).

    ``max_tree_size_blocks``: the character limit converted to KV blocks at 4 characters per
    token (typical BPE) and 512 tokens per block: 67,108,864 / 4 / 512 = 32,768 blocks.

    Raises:
        ValueError: on a threshold outside its range.
    """

    cache_threshold: float = 0.3
    balance_abs_threshold: int = 64
    balance_rel_threshold: float = 1.5
    eviction_interval_s: float = 120.0
    max_tree_size_blocks: int = 32768

    def __post_init__(self) -> None:
        if not 0.0 <= self.cache_threshold <= 1.0:
            raise ValueError(f"sglang cache_threshold must be in [0, 1], got {self.cache_threshold}")
        if self.balance_abs_threshold < 0:
            raise ValueError(f"sglang balance_abs_threshold must be >= 0, got {self.balance_abs_threshold}")
        if self.balance_rel_threshold < 1.0:
            raise ValueError(f"sglang balance_rel_threshold must be >= 1, got {self.balance_rel_threshold}")
        if self.eviction_interval_s <= 0 or self.max_tree_size_blocks < 0:
            raise ValueError("sglang eviction_interval_s must be > 0 and max_tree_size_blocks >= 0")


class SGLangCacheAwareRouter(Router):
    """SGLang router ``cache_aware`` policy (sgl-project/sglang
    ``sgl-model-gateway/src/policies/cache_aware.rs`` ``select_worker``, commit b93974f), on block
    hashes.

    Load = in-flight requests per worker (routed, prefill not finished). Per request:

    1. imbalanced if ``max_load - min_load > balance_abs_threshold`` **and**
       ``max_load > balance_rel_threshold * min_load`` -> the least-loaded worker;
    2. else the approximate tree's best match: if ``matched tokens / L > cache_threshold`` -> the
       worker holding the deepest match; else the least-loaded worker.

    The chosen worker's tree gets the request's blocks (also in the imbalanced case). Every
    ``eviction_interval_s`` each worker's tree is trimmed to ``max_tree_size_blocks`` by LRU
    (checked lazily at the next decision). The tree never learns about real evictions, so it can
    over-estimate hits, as upstream. Ties of least load: pool order (Rust ``min_by_key`` keeps
    the first of the worker list).

    Choices where upstream is loose or cpgym's abstraction differs:

    * below the threshold the current code takes the least-loaded worker; the file's header
      comment and earlier releases (``sgl-router/src/policies/cache_aware.rs`` at b6f2064,
      ``sgl-router/src/router.rs``: ``get_smallest_tenant``) take the worker with the smallest
      tree instead. cpgym follows the current code.
    * the deepest node's holder: upstream takes the first tenant of that node's hash map
      (arbitrary); cpgym the most recently used holder, then the smaller id
      (:meth:`ApproxPrefixIndex.longest_match`).
    * min/max load and the match run over the eligible workers (upstream: all registered workers
      for the load range, the whole tree for the match, falling back to the first healthy worker
      when the matched one is unhealthy).
    * load ends when the prefill ends (cpgym's pool has no decode phase; upstream decrements a
      worker's load when the response completes).
    """

    name = "sglang-cache-aware"

    def __init__(self, params: SGLangParams | None = None) -> None:
        self.params = params or SGLangParams()

    def reset(self, view: PoolView, rng: np.random.Generator) -> None:
        super().reset(view, rng)
        self.tree = ApproxPrefixIndex(None)
        self.tree.sync_workers(view)
        self._epoch = view.epoch
        self._next_eviction_s = self.params.eviction_interval_s

    def route(self, request: Request, view: PoolView) -> int:
        p = self.params
        now = view.now_s
        if view.epoch != self._epoch:  # a split/merge committed: forget retired workers
            self.tree.sync_workers(view)
            self._epoch = view.epoch
        if now >= self._next_eviction_s:
            for wid in list(self.tree._tenants):
                self.tree.evict(wid, p.max_tree_size_blocks)
            self._next_eviction_s = now + p.eviction_interval_s
        cands = view.eligible_worker_ids(request)
        loads = {w: view.num_inflight_requests(w) for w in cands}
        lo, hi = min(loads.values()), max(loads.values())
        least = min(cands, key=lambda w: loads[w])
        if hi - lo > p.balance_abs_threshold and hi > p.balance_rel_threshold * lo:
            choice = least
        else:
            wid, nblocks = self.tree.longest_match(request.block_hashes, set(cands))
            matched = min(nblocks * view.kv_block_size_tokens, request.num_prompt_tokens)
            choice = wid if wid >= 0 and matched / request.num_prompt_tokens > p.cache_threshold else least
        self.tree.insert(choice, request.block_hashes, now)
        return choice
