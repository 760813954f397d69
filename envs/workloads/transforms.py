"""Workload transforms: rate scaling, time windows, train/eval splits, episode windows, merging.

Every transform returns a **new** :class:`envs.sim.request.Workload` (the input is immutable)
whose requests are renumbered ``0..n-1`` in arrival order; lengths, block hashes and session
ids are kept. Invalid arguments raise ``ValueError``. The applied transforms are appended to
``metadata["transforms"]`` (a list of strings), so a result can be traced back. Per-request
metadata (by convention: tuples with one entry per request) follow their requests; other
metadata (e.g. ``phase_boundaries_s``) describe the source workload and are copied unchanged.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

from envs.sim.request import Request, Workload

__all__ = ["scale_rate", "scale_to_rate", "window", "split", "windows", "merge"]


def _finite(name: str, value: float) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return v


def _derive(workload: Workload, moved: Iterable[tuple[Request, float]], name: str, step: str, **extra) -> Workload:
    """New workload from ordered ``(request, new arrival time [s])`` pairs, renumbered 0..n-1.

    Per-request metadata (tuples of length ``num_requests``, e.g. ``source_index``) are subset
    to the kept requests; other metadata are copied as they are.
    """
    pairs = list(moved)
    reqs = tuple(
        Request(i, t, r.num_prompt_tokens, r.num_output_tokens, r.block_hashes, r.session_id)
        for i, (r, t) in enumerate(pairs)
    )
    kept = [r.request_id for r, _ in pairs]
    n = workload.num_requests
    metadata = {}
    for key, value in workload.metadata.items():
        if isinstance(value, tuple) and len(value) == n:
            value = tuple(value[i] for i in kept)
        metadata[key] = value
    metadata["transforms"] = [*workload.metadata.get("transforms", []), step]
    metadata.update(extra)
    return Workload(name, reqs, workload.kv_block_size_tokens, workload.source, metadata)


def scale_rate(workload: Workload, rate_scale: float) -> Workload:
    """Multiply the arrival rate by ``rate_scale`` (> 0): every arrival time is divided by it.

    ``rate_scale = 2`` halves all inter-arrival gaps (twice the load); lengths, hashes and
    sessions are unchanged. The time origin (0 s) is kept.
    """
    f = _finite("rate_scale", rate_scale)
    if f <= 0:
        raise ValueError(f"rate_scale must be > 0, got {rate_scale!r}")
    reqs = ((r, r.arrival_time_s / f) for r in workload.requests)
    return _derive(workload, reqs, f"{workload.name}@x{f:g}", f"scale_rate({f:g})")


def scale_to_rate(workload: Workload, target_rps: float) -> Workload:
    """Time-compress (or stretch) arrivals so that ``mean_rate_rps`` equals ``target_rps`` [requests/s].

    The mean rate is ``(n - 1) / (last - first arrival)`` (:attr:`Workload.mean_rate_rps`), so
    the workload needs at least two requests with distinct arrival times.
    """
    target = _finite("target_rps", target_rps)
    if target <= 0:
        raise ValueError(f"target_rps must be > 0 [requests/s], got {target_rps!r}")
    current = workload.mean_rate_rps
    if current <= 0:
        raise ValueError(
            f"workload {workload.name!r} has no defined arrival rate ({workload.num_requests} request(s) over "
            f"{workload.duration_s} s); scale_to_rate needs >= 2 requests with distinct arrival times"
        )
    f = target / current
    reqs = ((r, r.arrival_time_s / f) for r in workload.requests)
    return _derive(workload, reqs, f"{workload.name}@{target:g}rps", f"scale_to_rate({target:g})")


def window(workload: Workload, start_s: float, end_s: float = math.inf) -> Workload:
    """Requests arriving in ``[start_s, end_s)`` [s], re-based so that ``start_s`` becomes 0 s.

    The gap between ``start_s`` and the first request in the window is kept (so the arrival
    process is not distorted); the result may be empty if no request falls in the window.
    """
    start = _finite("start_s", start_s)
    end = float(end_s)
    if math.isnan(end) or end <= start:
        raise ValueError(f"end_s must be > start_s, got start_s={start_s!r}, end_s={end_s!r}")
    reqs = ((r, max(0.0, r.arrival_time_s - start)) for r in workload.requests if start <= r.arrival_time_s < end)
    return _derive(workload, reqs, f"{workload.name}[{start:g}:{end:g}]", f"window({start:g}, {end:g})",
                   window_start_s=start, window_end_s=end)


def split(workload: Workload, eval_fraction: float | None = None, *,
          split_time_s: float | None = None) -> tuple[Workload, Workload]:
    """Split into a (train, eval) pair of contiguous time ranges: train first, eval after.

    Give exactly one of:
        eval_fraction: fraction of the requests (0 < f < 1) that go to eval — the last
            ``round(f × n)`` requests (at least one request on each side);
        split_time_s: requests arriving before it go to train, the others to eval
            [s].

    Train keeps its time origin; eval is re-based so that the split instant (``split_time_s``,
    or the first eval request's arrival for ``eval_fraction``) is 0 s. Both parts must be
    non-empty.
    """
    if (eval_fraction is None) == (split_time_s is None):
        raise ValueError("give exactly one of eval_fraction or split_time_s")
    n = workload.num_requests
    if eval_fraction is not None:
        frac = _finite("eval_fraction", eval_fraction)
        if not 0.0 < frac < 1.0:
            raise ValueError(f"eval_fraction must be in (0, 1), got {eval_fraction!r}")
        k = n - int(round(frac * n))
        k = min(max(k, 1), n - 1)
        if n < 2:
            raise ValueError(f"workload {workload.name!r} has {n} request(s); a split needs >= 2")
        t_split = workload.requests[k].arrival_time_s
        how = f"eval_fraction={frac:g}"
    else:
        t_split = _finite("split_time_s", split_time_s)
        k = next((i for i, r in enumerate(workload.requests) if r.arrival_time_s >= t_split), n)
        how = f"split_time_s={t_split:g}"
        if k == 0 or k == n:
            raise ValueError(
                f"split_time_s={t_split:g} leaves {'train' if k == 0 else 'eval'} empty; workload "
                f"{workload.name!r} spans {workload.requests[0].arrival_time_s if n else 0:g}.."
                f"{workload.requests[-1].arrival_time_s if n else 0:g} s"
            )
    train = _derive(workload, ((r, r.arrival_time_s) for r in workload.requests[:k]), f"{workload.name}:train",
                    f"split({how}) train")
    eval_reqs = ((r, max(0.0, r.arrival_time_s - t_split)) for r in workload.requests[k:])
    ev = _derive(workload, eval_reqs, f"{workload.name}:eval", f"split({how}) eval", split_time_s=t_split)
    return train, ev


def windows(workload: Workload, episode_window_s: float, *, min_num_requests: int = 1,
            include_partial: bool = True) -> list[Workload]:
    """Cut the workload into consecutive episode windows ``[j·w, (j+1)·w)`` [s], each re-based to 0.

    Args:
        episode_window_s: window length w [s], > 0.
        min_num_requests: windows with fewer requests are dropped (default 1: drop empty ones).
        include_partial: keep the last window, the one the end of the workload cuts short
            (it holds the last arrival, so it covers less than a full ``w`` of traffic); False
            drops it, so that every episode has full-length traffic.

    Returns:
        The windows in time order; ``metadata["window_index"]`` is ``j``.
    """
    w = _finite("episode_window_s", episode_window_s)
    if w <= 0:
        raise ValueError(f"episode_window_s must be > 0, got {episode_window_s!r}")
    if int(min_num_requests) < 0:
        raise ValueError(f"min_num_requests must be >= 0, got {min_num_requests!r}")
    if workload.num_requests == 0:
        return []
    last = workload.requests[-1].arrival_time_s
    num_windows = int(last // w) + 1
    buckets: list[list[Request]] = [[] for _ in range(num_windows)]
    for r in workload.requests:
        buckets[min(int(r.arrival_time_s // w), num_windows - 1)].append(r)
    out = []
    for j, reqs in enumerate(buckets):
        if len(reqs) < min_num_requests:
            continue
        if not include_partial and j == num_windows - 1:
            continue
        start = j * w
        moved = ((r, max(0.0, r.arrival_time_s - start)) for r in reqs)
        out.append(_derive(workload, moved, f"{workload.name}[w{j}]", f"windows({w:g})[{j}]", window_index=j,
                           window_start_s=start, window_end_s=start + w))
    return out


def merge(
    workloads: Sequence[Workload],
    *,
    name: str = "merged",
    disjoint: bool = True,
    source: str | None = None,
    metadata: dict | None = None,
) -> Workload:
    """Interleave several workloads by arrival time (ties: earlier workload first).

    Args:
        workloads: workloads with the same ``kv_block_size_tokens``, on a common time axis.
        name: name of the result.
        disjoint: if True (default), the sources are independent: their block hashes and
            session ids are shifted into disjoint ranges so that no prefix or session is shared
            across sources. If False, hashes and sessions are kept as they are (sources from one
            hash space, e.g. windows of the same trace).
        source: ``source`` of the result (default: the sources' ``source`` joined by "; ").
        metadata: extra metadata entries for the result.

    ``metadata["source_index"]`` gives, per request, the index of its source workload and
    ``metadata["sources"]`` their names.
    """
    if not workloads:
        raise ValueError("merge needs at least one workload")
    bs = workloads[0].kv_block_size_tokens
    for w in workloads:
        if w.kv_block_size_tokens != bs:
            raise ValueError(f"cannot merge workloads with different kv_block_size_tokens "
                             f"({bs} vs {w.kv_block_size_tokens} in {w.name!r})")
    tagged: list[tuple[float, int, int, tuple[int, ...], int, int, int]] = []
    hash_offset = 0
    session_offset = 0
    for src, w in enumerate(workloads):
        lo = min((min(r.block_hashes) for r in w.requests), default=0)
        hi = max((max(r.block_hashes) for r in w.requests), default=-1)
        shift_h = hash_offset - lo if disjoint else 0
        sess_hi = max((r.session_id for r in w.requests), default=-1)
        shift_s = session_offset if disjoint else 0
        for r in w.requests:
            hs = r.block_hashes if not shift_h else tuple([h + shift_h for h in r.block_hashes])
            sid = r.session_id + shift_s if r.session_id >= 0 else -1
            tagged.append((r.arrival_time_s, src, r.request_id, hs, sid, r.num_prompt_tokens, r.num_output_tokens))
        if hi >= lo:
            hash_offset = hi + shift_h + 1
        if sess_hi >= 0:
            session_offset = sess_hi + shift_s + 1
    tagged.sort(key=lambda x: (x[0], x[1], x[2]))
    reqs = tuple(Request(i, t, length, out, hs, sid) for i, (t, _, _, hs, sid, length, out) in enumerate(tagged))
    meta = {
        "transforms": [f"merge({', '.join(w.name for w in workloads)})"],
        "sources": [w.name for w in workloads],
        "source_index": tuple(x[1] for x in tagged),
        **(metadata or {}),
    }
    src_text = source if source is not None else "; ".join(w.source for w in workloads if w.source)
    return Workload(name, reqs, bs, src_text, meta)
