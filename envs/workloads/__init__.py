"""Workloads: trace loaders, transforms and seeded synthetic generators (issue #2).

* :mod:`.traces` — :func:`load_trace` for Mooncake FAST'25 JSONL, Azure LLM inference 2023
  CSV and the L-Eval derived lengths CSV (``shared/data/traces``, see its SOURCES.md), one
  module per format; bad input raises
  :class:`TraceFormatError` (file, line, field).
* :mod:`.transforms` — rate scaling, time windows, train/eval split, episode windows, merge.
* :mod:`.arrivals` — Poisson, Gamma (bursty), MMPP and inhomogeneous Poisson arrival processes.
* :mod:`.synthetic` — generators (system prompts, multi-turn, tool agents, long documents,
  phase changes, mixes); :mod:`.distributions` — their token-count distributions;
  :mod:`.registry` — the named workloads :data:`WORKLOADS` / :func:`get_workload`.
* :mod:`.source` — :class:`WorkloadSource` / :func:`build_workload`, the one builder every
  entry point uses (source + rate scaling + arrival window).
* :mod:`.stats` — :func:`workload_stats` (lengths, rate, ideal prefix reuse, reference-pool load),
  :func:`prefix_reuse_stats` (cross- vs within-session reuse, block lifetimes, session structure).

All results are :class:`envs.sim.request.Workload` objects.
"""

from __future__ import annotations

from pathlib import Path

from .arrivals import (
    ArrivalProcess,
    GammaArrivals,
    InhomogeneousPoissonArrivals,
    MMPPArrivals,
    PoissonArrivals,
    inter_arrival_cv,
)
from .distributions import LEVAL_DOC_TOKENS, TruncatedLogNormal
from .prefix import BlockHasher, PromptContext
from .registry import WORKLOADS, get_workload
from .source import WorkloadSource, build_workload
from .stats import (
    REFERENCE_GPU_PREFILL_TOKENS_PER_S,
    REFERENCE_POOL_NUM_GPUS,
    ideal_prefix_reuse_per_request,
    prefix_reuse_stats,
    workload_stats,
)
from .synthetic import (
    long_document_questions,
    matched_load_phases,
    mixed_capacity_rps,
    mixed_workload,
    multi_turn_sessions,
    phase_changes,
    system_prompt_requests,
    tool_agent_sessions,
)
from .traces import (
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
from .transforms import merge, scale_rate, scale_to_rate, split, window, windows

#: The named synthetic workload of a run given neither a trace nor a workload: of ``cpgym
#: simulate`` and the other simulation commands (``experiments.common.add_workload_arguments``) and
#: of a ``policies.routing.episodes.EpisodeSource`` built in code without a source.
DEFAULT_WORKLOAD = "mixed-default"

#: File name, in :func:`default_traces_dir`, of the default trace (:func:`default_trace_path`).
DEFAULT_TRACE_FILE = "conversation_trace.jsonl"


def default_traces_dir() -> Path:
    """The shared trace directory ``<repo>/../shared/data/traces`` (pass explicit paths to use others).

    ``<repo>`` is the checkout holding this package (``envs/workloads/__init__.py`` → two levels
    up). Trace files are never copied into the repository.
    """
    repo = Path(__file__).resolve().parents[2]
    return (repo / ".." / "shared" / "data" / "traces").resolve()


def default_trace_path() -> Path:
    """The default trace: the Mooncake conversation trace (:data:`DEFAULT_TRACE_FILE` in
    :func:`default_traces_dir`), the episode source of routing training and evaluation given
    neither ``--trace`` nor ``--workload``, of the registered routing environment and the routing
    protocol, and the default trace of ``cpgym bench``, ``bench-env`` and ``kv-tiers``."""
    return default_traces_dir() / DEFAULT_TRACE_FILE


__all__ = [
    "ArrivalProcess",
    "BlockHasher",
    "DEFAULT_LEVAL_MEAN_QUERY_GAP_S",
    "DEFAULT_LEVAL_RATE_RPS",
    "GammaArrivals",
    "InhomogeneousPoissonArrivals",
    "LEVAL_DOC_TOKENS",
    "MMPPArrivals",
    "MOONCAKE_BLOCK_SIZE_TOKENS",
    "PoissonArrivals",
    "PromptContext",
    "REFERENCE_GPU_PREFILL_TOKENS_PER_S",
    "REFERENCE_POOL_NUM_GPUS",
    "TraceFormatError",
    "TraceWarning",
    "TruncatedLogNormal",
    "WORKLOADS",
    "WorkloadSource",
    "build_workload",
    "DEFAULT_TRACE_FILE",
    "DEFAULT_WORKLOAD",
    "default_trace_path",
    "default_traces_dir",
    "detect_timestamp_bucket_ms",
    "get_workload",
    "ideal_prefix_reuse_per_request",
    "inter_arrival_cv",
    "load_azure_csv",
    "load_leval_lengths_csv",
    "load_mooncake_jsonl",
    "load_trace",
    "long_document_questions",
    "merge",
    "mixed_workload",
    "multi_turn_sessions",
    "phase_changes",
    "matched_load_phases",
    "mixed_capacity_rps",
    "scale_rate",
    "scale_to_rate",
    "split",
    "spread_quantised_timestamps",
    "system_prompt_requests",
    "tool_agent_sessions",
    "window",
    "windows",
    "workload_stats",
    "prefix_reuse_stats",
]
