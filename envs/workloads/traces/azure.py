"""Azure LLM inference trace 2023 CSV (Azure/AzurePublicDataset; Splitwise, ISCA'24).

Facts from ``shared/data/traces/SOURCES.md``: ``AzureLLMInferenceTrace_code.csv`` (8,819
requests) / ``_conv.csv`` (19,366): ``TIMESTAMP`` (``2023-11-16 18:17:03.9799600``, 100 ns
digits), ``ContextTokens``, ``GeneratedTokens``. No prefix information: every request gets its
own block hashes.
"""

from __future__ import annotations

import datetime as _dt
import re
from pathlib import Path

from envs.sim.request import Request, Workload

from .common import LineError, Skipper, TraceFormatError, csv_tokens, read_csv, trace_name

#: Columns an Azure 2023 trace must have.
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")

_AZURE_TS = re.compile(r"^\s*(\d{4}-\d{2}-\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?\s*$")


def _azure_timestamp_ns(s: str, day_cache: dict[str, int]) -> int:
    m = _AZURE_TS.match(s)
    if m is None:
        raise LineError("TIMESTAMP", f"got {s!r}; expected a datetime 'YYYY-MM-DD HH:MM:SS[.fffffff]'")
    day_str, hh, mm, ss, frac = m.groups()
    day = day_cache.get(day_str)
    if day is None:
        try:
            day = _dt.date.fromisoformat(day_str).toordinal()
        except ValueError:
            raise LineError("TIMESTAMP", f"got {s!r}; invalid date, expected 'YYYY-MM-DD HH:MM:SS[.fffffff]'") from None
        day_cache[day_str] = day
    h, mi, se = int(hh), int(mm), int(ss)
    if h > 23 or mi > 59 or se > 60:
        raise LineError("TIMESTAMP", f"got {s!r}; invalid time of day, expected 'HH:MM:SS'")
    frac_ns = int((frac or "0").ljust(9, "0"))
    return ((day * 24 + h) * 60 + mi) * 60_000_000_000 + se * 1_000_000_000 + frac_ns


def load_azure_csv(
    path: str | Path,
    *,
    kv_block_size_tokens: int | None = None,
    skip_invalid: bool = False,
    name: str | None = None,
) -> Workload:
    """Load an Azure LLM inference trace 2023 CSV (Azure/AzurePublicDataset, Splitwise ISCA'24).

    Columns ``TIMESTAMP`` (e.g. ``2023-11-16 18:17:03.9799600``), ``ContextTokens`` (prompt
    length, >= 1), ``GeneratedTokens`` (>= 1). The trace has no prefix information, so every
    request gets fresh block hashes (allocated from a per-call counter: no prefix reuse) and
    session_id -1. Use it for arrival processes and lengths only (SOURCES.md).

    Args:
        path: ``.csv`` (or ``.csv.gz``) file with the header above.
        kv_block_size_tokens: block size for the generated hashes [tokens], default 512.
        skip_invalid: skip invalid rows (counted, warned) instead of raising.
        name: workload name (default: file name without extension).

    Raises:
        TraceFormatError: naming the file (and line and column where it applies): a missing
            column, an invalid row, text that is not UTF-8, or ``.gz`` data that is not gzip,
            truncated or corrupt.
    """
    path = Path(path)
    bs = 512 if kv_block_size_tokens is None else int(kv_block_size_tokens)
    if bs < 1:
        raise ValueError(f"kv_block_size_tokens must be >= 1, got {kv_block_size_tokens}")
    err = Skipper(path, skip_invalid)
    day_cache: dict[str, int] = {}
    rows: list[tuple[int, int, int]] = []
    prev_ns: int | None = None
    description = "Azure LLM inference trace: TIMESTAMP,ContextTokens,GeneratedTokens"
    for lineno, row in read_csv(path, AZURE_COLUMNS, err, description):
        try:
            ns = _azure_timestamp_ns(row["TIMESTAMP"], day_cache)
            if prev_ns is not None and ns < prev_ns:
                raise LineError("TIMESTAMP", f"got {row['TIMESTAMP'].strip()!r}, earlier than the previous row; "
                                             "expected non-decreasing timestamps")
            length = csv_tokens(row, "ContextTokens")
            out_len = csv_tokens(row, "GeneratedTokens")
        except LineError as e:
            err(lineno, e.field, e.problem)
            continue
        prev_ns = ns
        rows.append((ns, length, out_len))
    if not rows:
        raise TraceFormatError(path, None, None, f"all {err.num_skipped} data row(s) are invalid; first: {err.first}")
    ns0 = rows[0][0]
    next_hash = 0
    requests = []
    for i, (ns, length, out_len) in enumerate(rows):
        nb = -(-length // bs)
        requests.append(Request(i, (ns - ns0) / 1e9, length, out_len, tuple(range(next_hash, next_hash + nb))))
        next_hash += nb
    trace_start = _dt.datetime.fromordinal(1) + _dt.timedelta(microseconds=(ns0 - 86_400_000_000_000) // 1000)
    metadata = {"format": "azure-2023-csv", "trace_start": trace_start.isoformat(sep=" ")}
    err.finish(metadata)
    return Workload(name or trace_name(path), tuple(requests), bs, str(path), metadata)

