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

from envs.sim.lazy_exports import lazy_attributes

#: public name -> the sub-module defining it; loaded on first use (PEP 562 ``__getattr__``), so
#: that the light names below (the defaults, :data:`WORKLOAD_NAMES`) cost no numpy import (the
#: ``cpgym`` parser reads them).
_EXPORTS = {
    # .arrivals
    "ArrivalProcess": "arrivals",
    "GammaArrivals": "arrivals",
    "InhomogeneousPoissonArrivals": "arrivals",
    "MMPPArrivals": "arrivals",
    "PoissonArrivals": "arrivals",
    "inter_arrival_cv": "arrivals",
    # .distributions
    "LEVAL_DOC_TOKENS": "distributions",
    "TruncatedLogNormal": "distributions",
    # .prefix
    "BlockHasher": "prefix",
    "PromptContext": "prefix",
    # .registry
    "WORKLOADS": "registry",
    "get_workload": "registry",
    # .source
    "WorkloadSource": "source",
    "build_workload": "source",
    # .stats
    "REFERENCE_GPU_PREFILL_TOKENS_PER_S": "stats",
    "REFERENCE_POOL_NUM_GPUS": "stats",
    "ideal_prefix_reuse_per_request": "stats",
    "prefix_reuse_stats": "stats",
    "workload_stats": "stats",
    # .synthetic
    "long_document_questions": "synthetic",
    "matched_load_phases": "synthetic",
    "mixed_capacity_rps": "synthetic",
    "mixed_workload": "synthetic",
    "multi_turn_sessions": "synthetic",
    "phase_changes": "synthetic",
    "system_prompt_requests": "synthetic",
    "tool_agent_sessions": "synthetic",
    # .traces
    "DEFAULT_LEVAL_MEAN_QUERY_GAP_S": "traces",
    "DEFAULT_LEVAL_RATE_RPS": "traces",
    "MOONCAKE_BLOCK_SIZE_TOKENS": "traces",
    "TraceFormatError": "traces",
    "TraceWarning": "traces",
    "detect_timestamp_bucket_ms": "traces",
    "load_azure_csv": "traces",
    "load_leval_lengths_csv": "traces",
    "load_mooncake_jsonl": "traces",
    "load_trace": "traces",
    "spread_quantised_timestamps": "traces",
    # .transforms
    "merge": "transforms",
    "scale_rate": "transforms",
    "scale_to_rate": "transforms",
    "split": "transforms",
    "window": "transforms",
    "windows": "transforms",
}

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


#: The names of the registered synthetic workloads (:data:`WORKLOADS`, in its order), for help texts
#: that must not load the generators (``tests/experiments/test_cli_startup.py`` checks the two agree).
WORKLOAD_NAMES = ("mixed-default", "system-prompts", "multi-turn", "tool-agent", "leval-like", "phases",
                  "matched-phases", "production-day", "bursty")


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
    "WORKLOAD_NAMES",
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


__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS, __all__)
