"""Mooncake FAST'25 JSONL traces (kvcache-ai/Mooncake ``FAST25-release/traces``).

Facts from ``shared/data/traces/SOURCES.md``: ``conversation_trace.jsonl`` (12,031 requests) and
``synthetic_trace.jsonl`` (3,993): ``timestamp`` [ms], ``input_length``, ``output_length``
[tokens], ``hash_ids`` (one id per **512-token** block, ``len == ceil(input_length/512)`` on
every row). The conversation trace's timestamps are quantised to ~3 s buckets (1,180 distinct
values, gaps 2.997–3.003 s, 90.2 % of requests share the previous timestamp);
:func:`load_mooncake_jsonl` detects such a quantisation and spreads the requests inside each
bucket (see :func:`spread_quantised_timestamps`). The synthetic trace (Poisson) is left
unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from envs.sim.request import Request, Workload, num_blocks_for

from .common import (
    JSON_ERRORS,
    BlockSizeChecker,
    BlockSizeConflict,
    LineError,
    Skipper,
    TraceFormatError,
    iter_raw_lines,
    json_loads,
    json_number,
    json_tokens,
    trace_name,
    type_name,
)

#: Tokens per ``hash_ids`` entry in the Mooncake FAST'25 traces (SOURCES.md).
MOONCAKE_BLOCK_SIZE_TOKENS = 512


# ---------------------------------------------------------------------------------------------
# quantised timestamps


def detect_timestamp_bucket_ms(timestamps_ms: np.ndarray, *, min_tie_fraction: float = 0.5,
                               tolerance: float = 0.02) -> float | None:
    """Detect timestamps quantised to fixed-width buckets; return the bucket width [ms] or None.

    Quantised means: at least ``min_tie_fraction`` of the requests share their timestamp with
    the previous request, and every gap between consecutive distinct timestamps is an integer
    multiple (>= 1, within ``tolerance`` of the bucket) of the median gap. The Mooncake
    conversation trace gives 3000 ms (SOURCES.md: gaps 2.999–3.003 s, 90.2 % ties); the Mooncake
    synthetic (Poisson) trace is not quantised (0.3 % ties).
    """
    ts = np.asarray(timestamps_ms, dtype=float)
    if ts.size < 3:
        return None
    distinct = np.unique(ts)
    if distinct.size < 2:
        return None
    tie_fraction = 1.0 - distinct.size / ts.size
    if tie_fraction < min_tie_fraction:
        return None
    gaps = np.diff(distinct)
    bucket = float(np.median(gaps))
    if bucket <= 0:
        return None
    ratio = gaps / bucket
    if np.any(ratio < 1 - tolerance) or np.any(np.abs(ratio - np.round(ratio)) > tolerance):
        return None
    return bucket


def spread_quantised_timestamps(timestamps_ms: np.ndarray, bucket_ms: float, rng: np.random.Generator) -> np.ndarray:
    """Spread requests that share a quantised timestamp uniformly inside their bucket [ms].

    The ``n`` requests with timestamp ``t`` get ``t + sorted(U_1..U_n)`` with ``U_i`` uniform on
    ``[0, w)``, ``w = min(bucket_ms, next distinct timestamp - t)``; given their count, these are
    exactly the arrival times of a Poisson process inside the bucket. Offsets are sorted and
    assigned in file order, so the original order is kept and every request stays inside
    ``[t, t + w)``. The very first request keeps offset 0, so the trace still starts at its first
    timestamp. Input must be non-decreasing. Returns float milliseconds.
    """
    ts = np.asarray(timestamps_ms, dtype=float)
    if ts.size == 0:
        return ts.copy()
    starts = np.flatnonzero(np.r_[True, ts[1:] != ts[:-1]])  # first index of each bucket
    group = np.cumsum(np.r_[True, ts[1:] != ts[:-1]]) - 1
    bucket_t = ts[starts]
    width = np.full(bucket_t.size, float(bucket_ms))
    if bucket_t.size > 1:
        width[:-1] = np.minimum(width[:-1], np.diff(bucket_t))
    u = rng.uniform(0.0, 1.0, ts.size)
    order = np.lexsort((u, group))  # groups are contiguous, so this sorts u within each group
    offsets = u[order] * width[group]
    offsets[0] = 0.0
    return ts + offsets



# ---------------------------------------------------------------------------------------------
# Mooncake JSONL


def _reblock_mooncake(hashes: list[tuple[int, ...]], lengths: list[int], dst_bs: int) -> list[tuple[int, ...]]:
    """Re-express 512-token Mooncake block ids at another block size (a divisor or multiple of 512).

    Divisor ``512/k``: sub-block ``s`` of original block ``h`` gets id ``h*k + s``. Multiple
    ``512*k``: a group of ``k`` original blocks gets a dense id keyed by (last original id, group
    size); Mooncake ids encode their whole prefix, so both keep prefix consistency.
    """
    src = MOONCAKE_BLOCK_SIZE_TOKENS
    out: list[tuple[int, ...]] = []
    if src % dst_bs == 0:
        k = src // dst_bs
        for hs, length in zip(hashes, lengths):
            ids: list[int] = []
            for p, h in enumerate(hs):
                tokens = min(src, length - p * src)
                base = h * k
                ids.extend(range(base, base + -(-tokens // dst_bs)))
            out.append(tuple(ids))
        return out
    k = dst_bs // src
    table: dict[tuple[int, int], int] = {}
    for hs in hashes:
        ids = []
        for g in range(0, len(hs), k):
            grp = hs[g : g + k]
            key = (grp[-1], len(grp))
            h = table.get(key)
            if h is None:
                h = table[key] = len(table)
            ids.append(h)
        out.append(tuple(ids))
    return out


#: Largest accepted ``timestamp`` [ms]: 1e9 s. A double then still resolves ~0.1 µs, so TTFTs stay
#: exact to well under a microsecond; a timestamp of 1e300 ms made that request's TTFT ~0.
MAX_TIMESTAMP_MS = 1e12


def _parse_mooncake_line(obj: Any, prev_ts: float | None) -> tuple[float, int, int, tuple[int, ...]]:
    if not isinstance(obj, dict):
        raise LineError(None, f"got a JSON {type_name(obj)}; "
                              "expected a JSON object with timestamp, input_length, output_length, hash_ids")
    ts = json_number(obj, "timestamp", "a number of milliseconds >= 0")
    if ts > MAX_TIMESTAMP_MS:  # the simulator's float clock would lose TTFT resolution (1e300 gave TTFT ~0)
        raise LineError("timestamp", f"got {obj['timestamp']}; expected at most {MAX_TIMESTAMP_MS:.0e} ms (~31.7 years: "
                                     "beyond it the simulator's clock resolves less than a microsecond)")
    if prev_ts is not None and ts < prev_ts:
        raise LineError("timestamp", f"got {obj['timestamp']}, earlier than the previous request's {prev_ts:g}; "
                                     "expected non-decreasing timestamps [ms]")
    length = json_tokens(obj, "input_length")
    out_len = json_tokens(obj, "output_length")
    if "hash_ids" not in obj:
        raise LineError("hash_ids", "missing; expected a list of integer block ids")
    hs = obj["hash_ids"]
    if not isinstance(hs, list):
        raise LineError("hash_ids", f"got {type_name(hs)}; expected a list of integer block ids")
    for x in hs:
        if type(x) is not int:
            raise LineError("hash_ids", f"contains {x!r} ({type_name(x)}); expected integer block ids")
    if len(set(hs)) != len(hs):
        # one id twice in a prompt would be cached once but hit once per position
        first = next(i for i, x in enumerate(hs) if hs.index(x) != i)
        raise LineError("hash_ids", f"repeats id {hs[first]} (positions {hs.index(hs[first])} and {first}); "
                                    "expected distinct ids, one per 512-token block of the prompt")
    expected = num_blocks_for(length, MOONCAKE_BLOCK_SIZE_TOKENS)
    if len(hs) != expected:
        raise LineError(
            "hash_ids",
            f"has {len(hs)} ids for input_length={length}; expected ceil({length}/{MOONCAKE_BLOCK_SIZE_TOKENS})={expected} "
            f"({MOONCAKE_BLOCK_SIZE_TOKENS}-token blocks)",
        )
    return ts, length, out_len, tuple(hs)


def _block_size_problem(c: BlockSizeConflict, input_length: int) -> str:
    return (f"block id {c.block_id} holds {c.tokens} tokens here (input_length={input_length}) but {c.first_tokens} tokens "
            f"on line {c.first_row}; expected every hash_id to name one {MOONCAKE_BLOCK_SIZE_TOKENS}-token block "
            f"(a partial last block's id may not reappear as a full block or at another size)")


def load_mooncake_jsonl(
    path: str | Path,
    *,
    kv_block_size_tokens: int | None = None,
    skip_invalid: bool = False,
    spread_seed: int = 0,
    spread: bool = True,
    name: str | None = None,
) -> Workload:
    """Load a Mooncake FAST'25 JSONL trace (kvcache-ai/Mooncake ``FAST25-release/traces``).

    Args:
        path: ``.jsonl`` (or ``.jsonl.gz``) file, one JSON object a line with ``timestamp`` [ms],
            ``input_length``, ``output_length`` [tokens] and ``hash_ids`` (one id per 512-token block).
            Blank lines are ignored.
        kv_block_size_tokens: block size of the returned hashes [tokens]; None or 512 keeps the
            trace's ids, a divisor or multiple of 512 re-blocks them (prefix-consistently).
        skip_invalid: skip invalid lines (counted in ``metadata["num_skipped_invalid"]``, warned)
            instead of raising :class:`TraceFormatError`.
        spread_seed: seed of the in-bucket spreading of quantised timestamps.
        spread: if True (default), detect quantised timestamps (:func:`detect_timestamp_bucket_ms`)
            and spread them (:func:`spread_quantised_timestamps`); traces that are not quantised
            (e.g. the Poisson synthetic trace) are never altered.
        name: workload name (default: file name without extension).

    Returns:
        Workload with arrival times [s] from the first request (0 s), session_id -1 (the traces
        have none). ``metadata``: ``format``, ``timestamp_bucket_ms`` (None if not quantised),
        ``spread_seed``, ``num_skipped_invalid``, ``native_kv_block_size_tokens`` (512).

    Raises:
        TraceFormatError: naming the file, line and field: a malformed line, a field of the
            wrong type or range, decreasing timestamps, a ``hash_ids`` length other than
            ``ceil(input_length/512)``, one hash id holding two different token counts (a
            partial last block in one row, a full block or another size in another: see
            :class:`~envs.workloads.traces.common.BlockSizeChecker`; the message names the id,
            both lines and both sizes), or gzip data that is not gzip, truncated or corrupt.
        ValueError: a ``kv_block_size_tokens`` that neither divides 512 nor is a multiple of it.
    """
    path = Path(path)
    bs = MOONCAKE_BLOCK_SIZE_TOKENS if kv_block_size_tokens is None else int(kv_block_size_tokens)
    if bs < 1 or (MOONCAKE_BLOCK_SIZE_TOKENS % bs and bs % MOONCAKE_BLOCK_SIZE_TOKENS):
        raise ValueError(f"kv_block_size_tokens must divide {MOONCAKE_BLOCK_SIZE_TOKENS} or be a multiple of it "
                         f"for a Mooncake trace, got {kv_block_size_tokens}")
    err = Skipper(path, skip_invalid)
    ts_list: list[float] = []
    lengths: list[int] = []
    outputs: list[int] = []
    hashes: list[tuple[int, ...]] = []
    prev_ts: float | None = None
    num_lines = 0
    block_sizes = BlockSizeChecker(MOONCAKE_BLOCK_SIZE_TOKENS)
    for lineno, raw in iter_raw_lines(path):
        num_lines += 1
        if not raw.strip():
            continue
        try:
            obj = json_loads(raw)
        except JSON_ERRORS as e:
            detail = getattr(e, "msg", None) or str(e)
            if isinstance(e, UnicodeDecodeError):
                detail = f"not UTF-8 text ({e.reason})"
            err(lineno, None, f"malformed JSON ({detail}); expected one JSON object per line")
            continue
        try:
            ts, length, out_len, hs = _parse_mooncake_line(obj, prev_ts)
        except LineError as e:
            err(lineno, e.field, e.problem)
            continue
        conflict = block_sizes.add(lineno, length, hs)
        if conflict is not None:
            err(lineno, "hash_ids", _block_size_problem(conflict, length))
            continue
        prev_ts = ts
        ts_list.append(ts)
        lengths.append(length)
        outputs.append(out_len)
        hashes.append(hs)
    if num_lines == 0 or (not ts_list and err.num_skipped == 0):
        raise TraceFormatError(path, None, None,
                               "file is empty; expected one JSON request object per line (Mooncake FAST'25 format)")
    if not ts_list:
        raise TraceFormatError(path, None, None, f"all {err.num_skipped} non-blank line(s) are invalid; first: {err.first}")
    ts_ms = np.asarray(ts_list, dtype=float)
    bucket_ms = detect_timestamp_bucket_ms(ts_ms) if spread else None
    if bucket_ms is not None:
        ts_ms = spread_quantised_timestamps(ts_ms, bucket_ms, np.random.default_rng(spread_seed))
    arrivals_s = ((ts_ms - ts_ms[0]) / 1000.0).tolist()
    if bs != MOONCAKE_BLOCK_SIZE_TOKENS:
        hashes = _reblock_mooncake(hashes, lengths, bs)
    requests = tuple(
        Request(i, t, length, out_len, hs)
        for i, (t, length, out_len, hs) in enumerate(zip(arrivals_s, lengths, outputs, hashes))
    )
    metadata = {
        "format": "mooncake-jsonl",
        "timestamp_bucket_ms": bucket_ms,
        "spread_seed": spread_seed if bucket_ms is not None else None,
        "native_kv_block_size_tokens": MOONCAKE_BLOCK_SIZE_TOKENS,
    }
    err.finish(metadata)
    return Workload(name or trace_name(path), requests, bs, str(path), metadata)

