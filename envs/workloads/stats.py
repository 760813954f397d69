"""Workload statistics: lengths, arrival rate, ideal prefix reuse, offered load.

"Ideal prefix reuse" follows SOURCES.md (shared/data/traces): with an infinite cache, a
request reuses the leading run of its block hashes that appeared in any earlier request,
``min(run × kv_block_size_tokens, L)`` tokens. The rest of the prompt is *uncached*.

The offered load is measured against a reference prefill pool: 40 GPUs (Qwen3-30B-A3B on CP-2 /
CP-4 workers) at about 13,000 uncached prompt tokens/s per GPU (the project's planning figure),
i.e. 520,000 uncached tokens/s in total. With ideal reuse this is a lower bound on the real
load: a finite or mis-routed cache re-computes more tokens.
"""

from __future__ import annotations

import numpy as np

from envs.sim.request import Workload

from .arrivals import inter_arrival_cv

__all__ = [
    "REFERENCE_POOL_NUM_GPUS",
    "REFERENCE_GPU_PREFILL_TOKENS_PER_S",
    "ideal_prefix_reuse_per_request",
    "workload_stats",
]

#: GPUs in the reference prefill pool used to size the named synthetic workloads.
REFERENCE_POOL_NUM_GPUS = 40
#: Uncached prompt tokens one GPU prefills per second (Qwen3-30B-A3B, planning figure) [tokens/s].
REFERENCE_GPU_PREFILL_TOKENS_PER_S = 13_000.0


def ideal_prefix_reuse_per_request(workload: Workload) -> np.ndarray:
    """Per request, the tokens an infinite cache would reuse (leading run of seen blocks) [tokens]."""
    bs = workload.kv_block_size_tokens
    seen: set[int] = set()
    out = np.zeros(workload.num_requests, dtype=np.int64)
    for i, r in enumerate(workload.requests):
        run = 0
        for h in r.block_hashes:
            if h in seen:
                run += 1
            else:
                break
        out[i] = min(run * bs, r.num_prompt_tokens)
        seen.update(r.block_hashes)
    return out


def workload_stats(
    workload: Workload,
    *,
    num_gpus: int = REFERENCE_POOL_NUM_GPUS,
    gpu_prefill_tokens_per_s: float = REFERENCE_GPU_PREFILL_TOKENS_PER_S,
) -> dict:
    """Summary statistics of a workload (a flat dict, units in the key names).

    Keys: ``num_requests``, ``duration_s`` (first→last arrival), ``mean_rate_rps``,
    ``inter_arrival_cv``, ``input_mean_tokens``, ``input_p50_tokens``, ``input_p90_tokens``,
    ``input_p99_tokens``, ``input_min_tokens``, ``input_max_tokens``, ``output_mean_tokens``,
    ``num_input_tokens``, ``ideal_reuse_tokens``, ``ideal_reuse_fraction`` (token-weighted),
    ``num_uncached_tokens``, ``uncached_tokens_per_s``, ``reference_pool_load`` (uncached tokens/s
    over ``num_gpus × gpu_prefill_tokens_per_s``), ``num_sessions``.
    """
    n = workload.num_requests
    lengths = np.fromiter((r.num_prompt_tokens for r in workload.requests), np.int64, n)
    outputs = np.fromiter((r.num_output_tokens for r in workload.requests), np.int64, n)
    times = np.fromiter((r.arrival_time_s for r in workload.requests), float, n)
    reuse = ideal_prefix_reuse_per_request(workload)
    total = int(lengths.sum())
    uncached = total - int(reuse.sum())
    duration_s = workload.duration_s
    rate_tokens = uncached / duration_s if duration_s > 0 else float("nan")
    sessions = {r.session_id for r in workload.requests if r.session_id >= 0}
    pct = np.percentile(lengths, [50, 90, 99]) if n else [float("nan")] * 3
    return {
        "num_requests": n,
        "duration_s": duration_s,
        "mean_rate_rps": workload.mean_rate_rps,
        "inter_arrival_cv": inter_arrival_cv(times),
        "input_mean_tokens": float(lengths.mean()) if n else float("nan"),
        "input_p50_tokens": float(pct[0]),
        "input_p90_tokens": float(pct[1]),
        "input_p99_tokens": float(pct[2]),
        "input_min_tokens": int(lengths.min()) if n else 0,
        "input_max_tokens": int(lengths.max()) if n else 0,
        "output_mean_tokens": float(outputs.mean()) if n else float("nan"),
        "num_input_tokens": total,
        "ideal_reuse_tokens": int(reuse.sum()),
        "ideal_reuse_fraction": (1.0 - uncached / total) if total else 0.0,
        "num_uncached_tokens": uncached,
        "uncached_tokens_per_s": rate_tokens,
        "reference_pool_load": rate_tokens / (num_gpus * gpu_prefill_tokens_per_s),
        "num_sessions": len(sessions),
    }
