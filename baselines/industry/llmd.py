"""llm-d's inference scheduler: weighted prefix, queue and KV-utilisation scorers (llm-d
inference-scheduling chart defaults; gateway-api-inference-extension scorers).

Part of the industry baselines (:mod:`baselines.industry`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from baselines.industry.prefix_index import ApproxPrefixIndex
from envs.sim.request import Request
from envs.sim.router import PoolView, Router
from envs.sim.worker import Worker


@dataclass(frozen=True)
class LlmdParams:
    """llm-d inference-scheduler weights and prefix-plugin settings.

    Weights: the llm-d ``inference-scheduling`` well-lit path (llm-d/llm-d
    ``guides/inference-scheduling/scheduler/inference-scheduling.values.yaml``: queue-scorer 2,
    kv-cache-utilization-scorer 2, prefix-cache-scorer 3, default max-score picker).

    Prefix index capacity: the prefix-cache-scorer's default ``autoTune: true``
    (kubernetes-sigs/gateway-api-inference-extension
    ``pkg/epp/scheduling/framework/plugins/prefixcachescorer/plugin.go``, commit a172f54) sizes
    each server's LRU to the server's own KV cache, ``CacheNumGPUBlocks`` entries of one KV block
    each: ``lru_capacity_tokens=None`` (default) does the same with each worker's KV capacity
    [blocks]. An integer is a fixed per-worker capacity [tokens], converted to the workload's
    block size (upstream's fallback without the metric, ``lruCapacityPerServer`` 31,250 entries of
    a 64-character, ~16-token block, is ~500,000 tokens).

    Raises:
        ValueError: on a negative weight or capacity.
    """

    prefix_weight: float = 3.0
    queue_weight: float = 2.0
    kv_utilization_weight: float = 2.0
    lru_capacity_tokens: int | None = None

    def __post_init__(self) -> None:
        for name in ("prefix_weight", "queue_weight", "kv_utilization_weight"):
            if getattr(self, name) < 0:
                raise ValueError(f"llm-d {name} must be >= 0, got {getattr(self, name)}")
        if self.lru_capacity_tokens is not None and self.lru_capacity_tokens < 0:
            raise ValueError(f"llm-d lru_capacity_tokens must be >= 0, got {self.lru_capacity_tokens}")


class LlmdRouter(Router):
    """llm-d / Gateway API Inference Extension endpoint picker with weighted scorers.

    Scores in [0, 1], summed with weights, max-score picker (ties: the run's seeded generator,
    as upstream's random tie-break):

    * prefix-cache-scorer (GAIE ``prefixcachescorer/plugin.go`` ``Score`` / ``matchLongestPrefix``,
      ``indexer.go``): matched blocks / blocks of the request, over the router's approximate
      per-server LRU index of its own routing history (capacity as :class:`LlmdParams`; each
      dispatch adds the request's blocks in prompt order). Matched blocks: walking the request's
      blocks while any server holds the block, one for each server holding it
      (:meth:`ApproxPrefixIndex.match_counts`);
    * queue-scorer: ``(max_waiting - waiting) / (max_waiting - min_waiting)`` over the candidates
      (1 when all equal), waiting = queued (not yet running) requests;
    * kv-cache-utilization-scorer (GAIE ``kvcache_utilization.go``): ``1 - KV usage``, usage =
      distinct KV blocks of the running step's requests / the worker's KV capacity [blocks]
      (vLLM's ``kv_cache_usage_perc``, ``vllm/v1/core/block_pool.py`` ``get_usage``: one minus the
      free share of the block pool; a block shared by running requests is held once, cached
      blocks no request references count as free).

    Translation: the index keys are the workload's block hashes (with autoTune upstream hashes
    one entry per KV block too); cpgym's blocks include the partial last block, which upstream
    leaves unhashed, and upstream's cap of 256 blocks per prompt is not applied.
    """

    name = "llm-d"

    def __init__(self, params: LlmdParams | None = None) -> None:
        self.params = params or LlmdParams()

    def reset(self, view: PoolView, rng: np.random.Generator) -> None:
        super().reset(view, rng)
        cap = self.params.lru_capacity_tokens
        self.index = ApproxPrefixIndex(None if cap is None else max(1, cap // view.kv_block_size_tokens))
        self.index.sync_workers(view)
        self._epoch = view.epoch

    @staticmethod
    def kv_usage(w: Worker) -> float:
        """Distinct KV blocks of ``w``'s running requests / its KV capacity, in [0, 1]."""
        cap = w.cache.capacity_blocks
        if not cap:
            return 1.0
        batch = w.batch
        if not batch:
            return 0.0
        used = len(batch[0].block_hashes) if len(batch) == 1 else len(set().union(*(r.block_hashes for r in batch)))
        return used / cap if used < cap else 1.0

    def route(self, request: Request, view: PoolView) -> int:
        p = self.params
        if view.epoch != self._epoch:  # a split/merge committed: forget retired workers
            self.index.sync_workers(view)
            self._epoch = view.epoch
        cands = view.eligible_worker_ids(request)
        workers = view.workers
        ws = [workers[w] for w in cands]
        waits = [len(w.queue) for w in ws]
        lo, hi = min(waits), max(waits)
        hashes = request.block_hashes
        nb = len(hashes)
        matched = self.index.match_counts(hashes)
        usage = self.kv_usage
        pw, qw, kw = p.prefix_weight, p.queue_weight, p.kv_utilization_weight
        scores = []
        for i, w in enumerate(ws):
            prefix = matched.get(w.worker_id, 0) / nb
            queue = 1.0 if hi == lo else (hi - waits[i]) / (hi - lo)
            scores.append(pw * prefix + qw * queue + kw * (1.0 - usage(w)))
        top = max(scores) - 1e-12
        best = [i for i, x in enumerate(scores) if x >= top]
        return cands[best[0] if len(best) == 1 else best[int(self.rng.integers(len(best)))]]

    def on_dispatch(self, request: Request, worker_id: int, view: PoolView) -> None:
        self.index.insert(worker_id, request.block_hashes, view.now_s, head_first=True)
        if self.params.lru_capacity_tokens is None:  # autoTune: the worker's KV capacity
            self.index.evict(worker_id, view.workers[worker_id].cache.capacity_blocks)
