"""Metrics of simulation runs (TTFT, SLO attainment, hit rate, GPU-time)."""

from envs.metrics.summary import SUMMARY_KEYS, request_table, summarize

__all__ = ["SUMMARY_KEYS", "request_table", "summarize"]
