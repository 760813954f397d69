"""Trace loaders, one module per format: Mooncake FAST'25 JSONL (:mod:`.mooncake`), Azure LLM
inference 2023 CSV (:mod:`.azure`), L-Eval derived lengths CSV (:mod:`.leval`); shared error
types, file access and checks in :mod:`envs.workloads.traces.common`.

Entry point :func:`load_trace` (:mod:`.load`) picks the loader from the file type. All loaders
return an :class:`envs.sim.request.Workload` whose arrival times are in seconds from the first
request (the first request arrives at 0 s), with ``request_id`` 0..n-1 in arrival order. Files
whose name ends in ``.gz`` are read through gzip.

Bad input raises one :class:`TraceFormatError` naming the file, the 1-based line number, the
field and what was expected (also for gzip data that is not gzip, truncated or corrupt);
``skip_invalid=True`` skips invalid lines instead, counts them in
``Workload.metadata["num_skipped_invalid"]`` and emits a :class:`TraceWarning`.
"""

from __future__ import annotations

from .azure import AZURE_COLUMNS, load_azure_csv
from .common import BlockSizeChecker, BlockSizeConflict, TraceFormatError, TraceWarning, find_block_size_conflict
from .leval import DEFAULT_LEVAL_MEAN_QUERY_GAP_S, DEFAULT_LEVAL_RATE_RPS, LEVAL_COLUMNS, load_leval_lengths_csv
from .load import load_trace
from .mooncake import (
    MOONCAKE_BLOCK_SIZE_TOKENS,
    detect_timestamp_bucket_ms,
    load_mooncake_jsonl,
    spread_quantised_timestamps,
)

__all__ = [
    "AZURE_COLUMNS",
    "BlockSizeChecker",
    "BlockSizeConflict",
    "DEFAULT_LEVAL_MEAN_QUERY_GAP_S",
    "DEFAULT_LEVAL_RATE_RPS",
    "LEVAL_COLUMNS",
    "MOONCAKE_BLOCK_SIZE_TOKENS",
    "TraceFormatError",
    "TraceWarning",
    "detect_timestamp_bucket_ms",
    "find_block_size_conflict",
    "load_azure_csv",
    "load_leval_lengths_csv",
    "load_mooncake_jsonl",
    "load_trace",
    "spread_quantised_timestamps",
]
