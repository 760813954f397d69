"""Industry and paper baselines (paper §9; issue #3): routers, pool compositions and the TP-4 cost form.

Every router chooses among ``PoolView.eligible_worker_ids`` only. Defaults come from the
upstream projects' command-line / chart defaults, named in each class docstring. Block hashes
stand in for text or token ids: one Mooncake block (512 tokens by default) is the unit of every
prefix index below, so "matched characters" of SGLang or "matched blocks" of llm-d become
matched KV blocks of the request.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from dataclasses import dataclass, replace
from itertools import islice

import numpy as np

from baselines.tiered import dynamo_pull_overlap, mooncake_pull_route
from envs.sim.cost_model import Calibration, CostCoefficients, CostModel
from envs.sim.pool import PoolConfig
from envs.sim.request import Request
from envs.sim.router import PoolView, Router
from envs.sim.worker import Worker


# ----------------------------------------------------------------------------------------- pools
def homogeneous_composition(degree: int):
    """Composition callable for a homogeneous CP-``degree`` pool of the run's size.

    Returns ``f(pool) -> "cp{degree}x{num_gpus // degree}"`` (e.g. ``cp4x10`` for the paper's
    40-GPU prefill pool, ``cp2x20`` for CP-2).

    Raises:
        ValueError (from the callable): if ``num_gpus`` is not a multiple of ``degree``.
    """

    def composition(pool: PoolConfig) -> str:
        if pool.num_gpus % degree:
            raise ValueError(f"a homogeneous CP-{degree} pool needs a GPU count divisible by {degree}, got {pool.num_gpus}")
        return f"cp{degree}x{pool.num_gpus // degree}"

    composition.__name__ = f"homogeneous_cp{degree}"
    return composition


# ------------------------------------------------------------------------------- TP-4 cost form
@dataclass(frozen=True)
class TensorParallelCostForm:
    """Cost form of a tensor-parallel (TP) worker expressed in the CP cost model (``vllm-tp4``).

    The simulator knows only ``E_C(R,P) = d + a*R + b*P + (c*R + alpha*W)/C``. A TP-t worker on t
    GPUs splits the linear layers (projections, experts) and the attention heads t ways, so ``c``
    and ``alpha`` are divided by t exactly like CP (the worker has degree t in the pool), and the
    CP-undivided share of the per-token work (``cp_serial_fraction`` of the roofline calibration,
    ``kernels_ref/roofline.py``: smaller per-rank GEMMs, norms, routing) is kept in ``a`` as well.
    TP does *not* all-gather KV across ranks (each rank owns its KV heads), so the CP KV
    all-gather terms ``kv_bytes_per_token / link`` are removed from ``a`` and ``b``; instead every
    token pays two all-reduces per layer of its hidden-size activations (after attention and after
    the MLP; Megatron-LM, Shoeybi et al. 2019, §3), a ring all-reduce moving ``2 (t-1)/t`` of the
    buffer per GPU::

        gather = kv_bytes_per_token / link_bytes_per_s
        a_TP   = max(0, a - gather) + 2 * num_layers * hidden_size * dtype_bytes * 2 (t-1)/t / link_bytes_per_s
        b_TP   = max(0, b - gather)      (keep the HBM read of the prefix)

    ``link_bytes_per_s`` defaults to the link the calibration used for the CP all-gather: its
    provenance ``datasheet.link_bandwidth_bytes_per_s * efficiency.link`` (roofline calibrations),
    else ``kv_bytes_per_token / a`` (all of ``a`` taken as the all-gather). Defaults: Qwen3-30B-A3B
    (48 layers, hidden 2048, bf16; its Hugging Face ``config.json``), t = 4 (paper §9 vLLM baseline).

    Raises:
        ValueError: on non-positive sizes.
    """

    tp_degree: int = 4
    num_layers: int = 48
    hidden_size: int = 2048
    dtype_bytes: int = 2
    link_bytes_per_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("tp_degree", "num_layers", "hidden_size", "dtype_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"TensorParallelCostForm.{name} must be >= 1, got {getattr(self, name)}")
        if self.link_bytes_per_s is not None and not self.link_bytes_per_s > 0:
            raise ValueError(f"TensorParallelCostForm.link_bytes_per_s must be > 0, got {self.link_bytes_per_s}")

    def allreduce_bytes_per_token(self) -> float:
        t = self.tp_degree
        return 2 * self.num_layers * self.hidden_size * self.dtype_bytes * 2 * (t - 1) / t

    @staticmethod
    def calibration_link_bytes_per_s(calibration: Calibration) -> float:
        """Effective inter-GPU link bandwidth of the calibration's CP all-gather [bytes/s]."""
        prov = calibration.provenance
        try:
            link = float(prov["datasheet"]["link_bandwidth_bytes_per_s"]) * float(prov.get("efficiency", {}).get("link", 1.0))
            if link > 0:
                return link
        except (KeyError, TypeError, ValueError):
            pass
        a = calibration.coefficients.a_s_per_token
        if a <= 0:
            raise ValueError("TensorParallelCostForm: the calibration has a = 0 and no datasheet link bandwidth; "
                             "set link_bytes_per_s")
        return calibration.kv_bytes_per_token / a

    def __call__(self, calibration: Calibration) -> Calibration:
        co = calibration.coefficients
        link = self.link_bytes_per_s or self.calibration_link_bytes_per_s(calibration)
        gather = calibration.kv_bytes_per_token / link
        a_tp = max(0.0, co.a_s_per_token - gather) + self.allreduce_bytes_per_token() / link
        b_tp = max(0.0, co.b_s_per_token - gather)
        coeff = CostCoefficients(d_s=co.d_s, a_s_per_token=a_tp, b_s_per_token=b_tp, c_s_per_token=co.c_s_per_token,
                                 alpha_s_per_pair=co.alpha_s_per_pair)
        prov = dict(calibration.provenance)
        prov["tensor_parallel_transform"] = {"tp_degree": self.tp_degree, "num_layers": self.num_layers,
                                             "hidden_size": self.hidden_size, "link_bytes_per_s": link}
        return replace(calibration, coefficients=coeff, provenance=prov)


# ------------------------------------------------------------------------------------ helpers
class InflightTracker:
    """Per-worker in-flight (queued + running) prompt tokens, tracked from the router's own
    dispatches. (The built-in routers count KV blocks instead: Dynamo with
    :class:`ActiveSequences`, llm-d from the running step, :meth:`LlmdRouter.kv_usage`.)

    Workers run FCFS, so the in-flight requests of a worker are the last
    ``PoolView.num_inflight_requests`` dispatched to it; older entries are dropped lazily
    (amortised O(1)). The running ones are the oldest ``inflight - queued`` (O(batch)).
    Under drain redirections (paper §6) the counts stay exact for every *eligible* worker: a
    drained worker is no longer a candidate, a redirected request is recorded again at its new
    dispatch, and a new worker reusing a retired worker's id only gets entries after the old ones
    (which the lazy drop discards). Per-decision cost is independent of queue lengths.
    """

    def __init__(self) -> None:
        self._q: dict[int, deque[int]] = {}
        self._sum: dict[int, int] = {}

    def record(self, worker_id: int, num_tokens: int) -> None:
        self._q.setdefault(worker_id, deque()).append(num_tokens)
        self._sum[worker_id] = self._sum.get(worker_id, 0) + num_tokens

    def _sync(self, view: PoolView, worker_id: int) -> deque[int]:
        return self._sync_worker(view.workers[worker_id])

    def _sync_worker(self, w: Worker) -> deque[int]:
        wid = w.worker_id
        dq = self._q.get(wid)
        if dq is None:
            dq = self._q[wid] = deque()
            self._sum[wid] = 0
        k = len(w.queue) + len(w.batch)
        if len(dq) > k:
            total = self._sum[wid]
            while len(dq) > k:
                total -= dq.popleft()
            self._sum[wid] = total
        return dq

    def inflight_tokens(self, view: PoolView, worker_id: int) -> int:
        return self.inflight_tokens_of(view.workers[worker_id])

    def inflight_tokens_of(self, w: Worker) -> int:
        """Prompt tokens of ``w``'s queued and running requests [tokens]."""
        self._sync_worker(w)
        return self._sum[w.worker_id]

    def running_tokens(self, view: PoolView, worker_id: int) -> int:
        return self.running_tokens_of(view.workers[worker_id])

    def running_tokens_of(self, w: Worker) -> int:
        """Prompt tokens of ``w``'s running step [tokens] (the oldest in-flight entries)."""
        dq = self._sync_worker(w)
        n_run = len(w.batch)
        if not n_run:
            return 0
        return sum(islice(dq, min(n_run, len(dq))))


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


# ------------------------------------------------------------------------------------ routers
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


class ActiveSequences:
    """Per-worker KV blocks of the in-flight (queued + running) requests, each block counted once
    however many in-flight requests share it: Dynamo's active-sequence tracking
    (ai-dynamo/dynamo ``lib/llm/src/kv_router/sequence.rs`` ``ActiveSequences``, commit 581ee33:
    ``unique_blocks`` with reference counts, ``active_blocks()`` = their number, ``new_blocks(seq)`` = the blocks
    of ``seq`` not among them). Built from the router's own dispatches, dropped lazily as the
    FCFS workers finish requests (as :class:`InflightTracker`).

    Block hashes are prefix-chained (a hash identifies the whole prefix up to its block), so the
    request's blocks already active on a worker are a leading run: ``new_blocks`` walks the
    request's hashes to the first one not active (as Dynamo's later ``lib/kv-router`` crate does:
    ``potential blocks = active_blocks + query_len - overlap_depth``).
    """

    def __init__(self) -> None:
        self._q: dict[int, deque] = {}
        self._ref: dict[int, dict[int, int]] = {}

    def record(self, worker_id: int, block_hashes) -> None:
        self._q.setdefault(worker_id, deque()).append(block_hashes)
        ref = self._ref.setdefault(worker_id, {})
        for h in block_hashes:
            ref[h] = ref.get(h, 0) + 1

    def _sync_worker(self, w: Worker) -> dict[int, int]:
        wid = w.worker_id
        dq = self._q.get(wid)
        if dq is None:
            self._q[wid] = deque()
            ref = self._ref[wid] = {}
            return ref
        ref = self._ref[wid]
        k = len(w.queue) + len(w.batch)
        while len(dq) > k:
            for h in dq.popleft():
                n = ref[h] - 1
                if n:
                    ref[h] = n
                else:
                    del ref[h]
        return ref

    def active_blocks_of(self, w: Worker) -> int:
        """Distinct KV blocks of ``w``'s in-flight requests [blocks]."""
        return len(self._sync_worker(w))

    def potential_blocks_of(self, w: Worker, block_hashes) -> int:
        """Active blocks of ``w`` if a request with ``block_hashes`` were added [blocks]."""
        ref = self._sync_worker(w)
        depth = 0
        for h in block_hashes:
            if h not in ref:
                break
            depth += 1
        return len(ref) + len(block_hashes) - depth


@dataclass(frozen=True)
class DynamoParams:
    """Dynamo KV router parameters (ai-dynamo/dynamo ``lib/kv-router/src/scheduling/config.rs``
    ``KvRouterConfig``; CLI ``--kv-overlap-score-weight`` default 1, ``--router-temperature``
    default 0 = the minimum-cost worker, no softmax sampling).

    Raises:
        ValueError: if the weight is negative.
    """

    overlap_score_weight: float = 1.0

    def __post_init__(self) -> None:
        if self.overlap_score_weight < 0:
            raise ValueError(f"dynamo overlap_score_weight must be >= 0, got {self.overlap_score_weight}")


class DynamoKVRouter(Router):
    """Dynamo KV router, temperature 0 (ai-dynamo/dynamo ``lib/kv-router/src/scheduling/selector.rs``
    ``DefaultWorkerSelector::select_worker``, commit ccd1706; earlier releases
    ``lib/llm/src/kv_router/scheduler.rs``; docs "KV Router", cost function)::

        logit_w = weight * prefill_tokens_w / block + potential_blocks_w
        prefill_tokens_w   = active prefill tokens_w + max(0, L - overlap_w * block)
        potential_blocks_w = distinct blocks of w's in-flight requests
                             + blocks of the request not among them

    active prefill tokens = new (uncached) tokens of w's queued and running requests (Dynamo adds
    a request's ``isl - overlap * block`` at routing and removes it when its prefill completes);
    overlap = the request's ready prefix blocks on w (KV events keep Dynamo's index exact);
    potential blocks as :class:`ActiveSequences`. The minimum logit wins; ties go to the worker
    with the fewest cached blocks (Dynamo's tie-break on the indexer's per-worker tree size),
    then to the run's seeded generator (Dynamo: random when the tree sizes are equal; an
    arbitrary one of several smallest otherwise).

    Translation: cpgym's blocks include the request's partial last block (the Mooncake traces
    hash it); Dynamo hashes full blocks only, so its logits differ by at most one block.
    """

    name = "dynamo-kv"

    def __init__(self, params: DynamoParams | None = None) -> None:
        self.params = params or DynamoParams()

    def reset(self, view: PoolView, rng: np.random.Generator) -> None:
        super().reset(view, rng)
        self.active = ActiveSequences()

    def route(self, request: Request, view: PoolView) -> int:
        overlap = None
        if view.kv_tiers is not None:  # KV-overlap over all tiers (baselines/tiered.py)

            overlap = dynamo_pull_overlap(request, view, view.kv_tiers)
        ties: list[int] = []
        best_cost = math.inf
        for wid, cost in self.logits(request, view, overlap):
            if cost < best_cost:
                best_cost, ties = cost, [wid]
            elif cost == best_cost:
                ties.append(wid)
        return self.break_tie(ties, view)

    def logits(self, request: Request, view: PoolView, overlap_blocks=None) -> list[tuple[int, float]]:
        """``[(worker id, logit)]`` over the eligible workers, pool order.

        Args:
            overlap_blocks: ``f(worker) -> int``, the request's prefix blocks the worker holds
                [blocks]; default its ready HBM prefix (with KV tiers on, :meth:`route` passes
                :func:`baselines.tiered.dynamo_pull_overlap`: every tier).
        """
        bs = view.kv_block_size_tokens
        w8 = self.params.overlap_score_weight
        L = request.num_prompt_tokens
        hashes = request.block_hashes
        workers = view.workers
        potential = self.active.potential_blocks_of
        if overlap_blocks is None:
            def overlap_blocks(w: Worker) -> int:
                return w.cache.match_ready(hashes)
        out = []
        for wid in view.eligible_worker_ids(request):
            w = workers[wid]
            active = w.num_queued_new_tokens + (view.num_running_new_tokens(wid) if w.batch else 0)
            new = L - overlap_blocks(w) * bs
            out.append((wid, w8 * (active + (new if new > 0 else 0)) / bs + potential(w, hashes)))
        return out

    def break_tie(self, ties: list[int], view: PoolView) -> int:
        """Among equal minimum logits: fewest cached blocks, then the seeded generator."""
        if len(ties) == 1:
            return ties[0]
        workers = view.workers
        sizes = [len(workers[w].cache) for w in ties]
        low = min(sizes)
        ties = [w for w, n in zip(ties, sizes) if n == low]
        return ties[0] if len(ties) == 1 else ties[int(self.rng.integers(len(ties)))]

    def on_dispatch(self, request: Request, worker_id: int, view: PoolView) -> None:
        self.active.record(worker_id, request.block_hashes)


class MooncakeTTFTRouter(Router):
    """Mooncake conductor-style selection (Qin et al., FAST'25, §5 "KVCache-centric scheduling"):
    the worker with the minimum predicted TTFT = predicted queueing ``q_w`` + predicted prefill
    ``E_C(R, P)`` with the worker's own ready prefix hit (no remote-cache transfer in cpgym's
    per-worker caches). Equal to Vertumnus with beta = 1, lambda = 0. Ties: pool order.
    With KV tiers on, the predicted TTFT counts the pull of the prefix from host memory or the
    store (Mooncake's transfer-aware selection, baselines/tiered.py). Not modelled: the paper's
    early rejection of requests predicted to miss the TTFT/TBT SLO (cpgym serves every request)."""

    name = "mooncake-ttft"

    def route(self, request: Request, view: PoolView) -> int:
        tiers = view.kv_tiers
        if tiers is not None:
            return mooncake_pull_route(request, view, tiers)
        best, best_t = -1, math.inf
        for w in view.eligible_worker_ids(request):
            t = view.outstanding_work_s(w) + view.predicted_service_s(w, request)
            if t < best_t:
                best, best_t = w, t
        return best


class VllmDPRouter(Router):
    """vLLM data-parallel load balancer (vllm-project/vllm ``vllm/v1/engine/core_client.py``
    ``DPLBAsyncMPClient.get_core_engine_for_request``): the engine with the least
    ``4 * waiting + running`` requests; not cache-aware (each engine still reuses its own prefix
    cache). Ties: pool order (upstream scans from ``eng_start_index``, 0 with one API server,
    keeping the first minimum). Upstream reads the counts from the DP coordinator's ~100 ms
    snapshots plus its own optimistic ``waiting += 1`` per routed request; cpgym reads the exact
    counts (both agree between snapshots for a single front end)."""

    name = "vllm-dp"

    def route(self, request: Request, view: PoolView) -> int:
        best, best_score = -1, math.inf
        for w in view.eligible_worker_ids(request):
            waiting = view.num_queued_requests(w)
            running = view.num_inflight_requests(w) - waiting
            score = 4 * waiting + running
            if score < best_score:
                best, best_score = w, score
        return best


def default_length_threshold_tokens(cost_model: CostModel, small_degree: int, large_degree: int,
                                    min_efficiency: float = 0.9, kv_block_size_tokens: int = 512,
                                    max_tokens: int = 131072) -> int:
    """Length threshold of ``static-threshold`` from the pool's profile (the cost model): the
    smallest uncached prompt length L (a multiple of the block size) at which the large degree's
    parallel efficiency ``small*E_small(L,0) / (large*E_large(L,0))`` reaches ``min_efficiency``,
    i.e. from where the larger worker spends at most ``1/min_efficiency`` times the GPU time.

    Raises:
        ValueError: if ``min_efficiency`` is not in (0, 1] or the degrees are not increasing.
    """
    if not 0.0 < min_efficiency <= 1.0:
        raise ValueError(f"min_efficiency must be in (0, 1], got {min_efficiency}")
    if not 1 <= small_degree < large_degree:
        raise ValueError(f"need 1 <= small_degree < large_degree, got {small_degree}, {large_degree}")
    cm = cost_model
    top = max_tokens
    L = kv_block_size_tokens
    while L <= top:
        eff = small_degree * cm.service_time_s(small_degree, L, 0) / (large_degree * cm.service_time_s(large_degree, L, 0))
        if eff >= min_efficiency:
            return L
        L += kv_block_size_tokens
    return top


class StaticThresholdRouter(Router):
    """Static heterogeneous pool with a length-threshold router (paper §9 "static-threshold"):
    prompts of at least ``threshold_tokens`` go to the largest-degree workers, shorter ones to the
    smallest-degree workers (if a class has no eligible worker, all eligible workers are used);
    within the class the least predicted outstanding work ``q_w`` (ties: pool order).

    Args:
        threshold_tokens: length threshold [tokens]; ``None`` = derived at reset from the pool's
            profile with :func:`default_length_threshold_tokens` (efficiency 0.9).
        min_efficiency: efficiency target of the derived threshold.
    """

    name = "static-threshold"

    def __init__(self, threshold_tokens: int | None = None, min_efficiency: float = 0.9) -> None:
        if threshold_tokens is not None and threshold_tokens < 1:
            raise ValueError(f"static-threshold threshold_tokens must be >= 1, got {threshold_tokens}")
        self.threshold_tokens = threshold_tokens
        self.min_efficiency = min_efficiency

    def reset(self, view: PoolView, rng: np.random.Generator) -> None:
        super().reset(view, rng)
        degrees = sorted({view.degree(w) for w in view.worker_ids})
        self.small, self.large = degrees[0], degrees[-1]
        if self.threshold_tokens is not None:
            self.threshold = self.threshold_tokens
        elif self.small == self.large:
            self.threshold = math.inf
        else:
            self.threshold = default_length_threshold_tokens(view.cost_model, self.small, self.large,
                                                             self.min_efficiency, view.kv_block_size_tokens)

    def route(self, request: Request, view: PoolView) -> int:
        cands = view.eligible_worker_ids(request)
        want = self.large if request.num_prompt_tokens >= self.threshold else self.small
        cls = [w for w in cands if view.degree(w) == want] or cands
        return min(cls, key=lambda w: view.outstanding_work_s(w))


__all__ = [
    "homogeneous_composition", "TensorParallelCostForm", "InflightTracker", "ApproxPrefixIndex", "SGLangParams",
    "SGLangCacheAwareRouter", "LlmdParams", "LlmdRouter", "ActiveSequences", "DynamoParams", "DynamoKVRouter",
    "MooncakeTTFTRouter", "VllmDPRouter", "default_length_threshold_tokens", "StaticThresholdRouter",
]
