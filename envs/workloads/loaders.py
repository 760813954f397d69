"""Trace loaders (compatibility path): the implementation lives in :mod:`envs.workloads.traces`,
one module per format; every public name stays importable from here."""

from __future__ import annotations

from envs.workloads.traces import (
    DEFAULT_LEVAL_MEAN_QUERY_GAP_S,
    DEFAULT_LEVAL_RATE_RPS,
    MOONCAKE_BLOCK_SIZE_TOKENS,
    TraceFormatError,
    TraceWarning,
    detect_timestamp_bucket_ms,
    load_azure_csv,
    load_leval_lengths_csv,
    load_mooncake_jsonl,
    load_trace,
    spread_quantised_timestamps,
)

__all__ = [
    "TraceFormatError",
    "TraceWarning",
    "MOONCAKE_BLOCK_SIZE_TOKENS",
    "DEFAULT_LEVAL_RATE_RPS",
    "DEFAULT_LEVAL_MEAN_QUERY_GAP_S",
    "load_trace",
    "load_mooncake_jsonl",
    "load_azure_csv",
    "load_leval_lengths_csv",
    "detect_timestamp_bucket_ms",
    "spread_quantised_timestamps",
]
