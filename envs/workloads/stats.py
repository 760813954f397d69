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
    "prefix_reuse_stats",
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


def _dist(values) -> dict:
    a = np.asarray(values, float)
    if not a.size:
        return {"mean": float("nan"), "p50": float("nan"), "p90": float("nan")}
    p50, p90 = np.percentile(a, [50, 90])
    return {"mean": float(a.mean()), "p50": float(p50), "p90": float(p90)}


def prefix_reuse_stats(workload: Workload) -> dict:
    """How a workload reuses prefixes: across sessions (shared prompts) vs inside a session,
    how long reusable blocks stay in use, and the session structure.

    Per request, the ideal reuse (leading run of blocks seen earlier, as in
    :func:`ideal_prefix_reuse_per_request`) is split block by block into *cross-session*
    tokens (the block was first used by another session, e.g. shared tool definitions) and
    *within-session* tokens (first used by the same session, e.g. its task). Requests with
    ``session_id`` -1 count as one session each.

    Returns:
        A flat-ish dict: ``ideal_reuse_fraction`` (token-weighted share in [0, 1]),
        ``cross_session_reuse_fraction`` and ``within_session_reuse_fraction`` (shares of all
        prompt tokens; they sum to ``ideal_reuse_fraction`` up to the L-1 cap),
        ``num_shared_prefix_roots`` (distinct first blocks used by >= 2 sessions: the number of
        distinct shared prefixes), ``shared_prefix_tokens`` (mean/p50/p90 length of the run of
        blocks shared by >= 2 sessions, per root [tokens]), ``shared_block_lifetime_s``
        (mean/p50/p90 of last use - first use of blocks used by >= 2 sessions [s]),
        ``reuse_interval_s`` (mean/p50/p90 time between consecutive uses of a block, over
        every reuse [s]), ``num_sessions``, ``calls_per_session`` and ``session_lifetime_s``
        (mean/p50/p90; lifetime = last - first arrival inside the workload [s]).
    """
    bs = workload.kv_block_size_tokens
    first_session: dict[int, int] = {}
    sessions_of: dict[int, set] = {}
    first_use: dict[int, float] = {}
    last_use: dict[int, float] = {}
    intervals: list[float] = []
    cross = within = total = 0
    by_session: dict[int, list[float]] = {}
    for i, r in enumerate(workload.requests):
        sid = r.session_id if r.session_id >= 0 else -1 - i
        t = r.arrival_time_s
        by_session.setdefault(sid, []).append(t)
        total += r.num_prompt_tokens
        budget = r.num_prompt_tokens - 1 if r.num_prompt_tokens > 0 else 0
        leading = True
        for h in r.block_hashes:
            owner = first_session.get(h)
            if owner is None:
                leading = False
                first_session[h] = sid
                sessions_of[h] = {sid}
                first_use[h] = t
            else:
                intervals.append(t - last_use[h])
                sessions_of[h].add(sid)
                if leading and budget > 0:
                    n = min(bs, budget)
                    budget -= n
                    if owner == sid:
                        within += n
                    else:
                        cross += n
            last_use[h] = t
    shared = {h for h, ss in sessions_of.items() if len(ss) >= 2}
    roots: dict[int, int] = {}
    for r in workload.requests:
        hs = r.block_hashes
        if hs and hs[0] in shared:
            n = 0
            for h in hs:
                if h not in shared:
                    break
                n += 1
            roots[hs[0]] = max(roots.get(hs[0], 0), n)
    times = list(by_session.values())
    return {
        "ideal_reuse_fraction": (cross + within) / total if total else 0.0,
        "cross_session_reuse_fraction": cross / total if total else 0.0,
        "within_session_reuse_fraction": within / total if total else 0.0,
        "num_shared_prefix_roots": len(roots),
        "shared_prefix_tokens": _dist([n * bs for n in roots.values()]),
        "shared_block_lifetime_s": _dist([last_use[h] - first_use[h] for h in shared]),
        "reuse_interval_s": _dist(intervals),
        "num_sessions": len(by_session),
        "calls_per_session": _dist([len(v) for v in times]),
        "session_lifetime_s": _dist([v[-1] - v[0] for v in times]),
    }
