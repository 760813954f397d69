"""The registry of named synthetic workloads: :data:`WORKLOADS` (name -> factory) and
:func:`get_workload`. Each entry is a generator of :mod:`envs.workloads.synthetic` with documented
defaults; :class:`envs.workloads.WorkloadSource` is the one place that calls it for the CLI,
specs, trainers and environments."""

from __future__ import annotations

import inspect
from typing import Any, Callable

from envs.sim.request import Workload

from .arrivals import GammaArrivals
from .distributions import SeedLike
from .production_day import production_day
from .synthetic import (
    long_document_questions,
    matched_load_phases,
    mixed_workload,
    multi_turn_sessions,
    phase_changes,
    system_prompt_requests,
    tool_agent_sessions,
)

__all__ = ["WORKLOADS", "get_workload"]


def _check_override_type(workload: str, param: str, value: Any, default: Any) -> None:
    """Raises ValueError naming ``param`` when an override's type does not fit its default's: a
    number for a numeric default, true/false for a boolean one (the generator checks the range)."""
    if isinstance(default, bool):
        ok, what = isinstance(value, bool), "true or false"
    elif isinstance(default, (int, float)):
        ok, what = isinstance(value, (int, float)) and not isinstance(value, bool), "a number"
    else:
        return
    if not ok:
        raise ValueError(f"workload {workload!r}: parameter {param} must be {what}, got {value!r}")


def _named(name: str, fn: Callable[..., Workload], summary: str, **defaults: Any) -> Callable[..., Workload]:
    def make(seed: SeedLike = 0, **overrides: Any) -> Workload:
        params = inspect.signature(fn).parameters
        unknown = sorted(k for k in overrides if k not in params or k == "seed")
        if unknown:
            accepted = sorted(k for k in params if k != "seed")
            raise ValueError(f"workload {name!r}: unknown parameter(s) {unknown}; accepted: {accepted}")
        for k, v in overrides.items():
            _check_override_type(name, k, v, defaults[k] if k in defaults else params[k].default)
        kwargs = {"name": name, **defaults, **overrides}
        return fn(seed=seed, **kwargs)

    shown = ", ".join(f"{k}={v!r}" for k, v in defaults.items())
    make.__name__ = make.__qualname__ = "workload_" + name.replace("-", "_")
    make.generator = fn  # for validating overrides without generating (experiments/spec.py)
    make.__doc__ = f"{summary}\n\n``{fn.__name__}({shown}, seed=seed)``; keyword overrides go to :func:`{fn.__name__}`."
    return make


#: Named, ready-made synthetic workloads: ``WORKLOADS[name](seed=0, **overrides) -> Workload``.
#: Each is a generator with its documented defaults (which are sized, like the entries here, for
#: the reference pool — 40 GPUs × 13k uncached tokens/s — at roughly 50–70 % load with ideal
#: prefix reuse) and ``duration_s`` = 600 s of arrivals. Overrides go to the generator.
WORKLOADS: dict[str, Callable[..., Workload]] = {
    "mixed-default": _named(
        "mixed-default",
        mixed_workload,
        "The embedded default of `cpgym simulate`: 5 minutes of system-prompt chat (16 req/s), multi-turn chat "
        "(3.6 sessions/s), L-Eval-like documents (3 docs/s, 3 questions each) and tool-agent sessions "
        "(0.48 sessions/s of ~30 calls); prompts ~500 to ~60k tokens; ~50 req/s. Sized by simulation on the default pool and "
        "calibration (40 H20 GPUs, cp4x6,cp2x8, Qwen3-30B-A3B roofline): least-work reaches ~0.86 GPU "
        "utilisation and Vertumnus ~0.61 (it keeps more prefix hits), so routers differ visibly without "
        "the pool being saturated (tests/workloads: test_mixed_default_sizing).",
        duration_s=300.0,
        system_prompt_rate_rps=16.0,
        multi_turn_session_rate=3.6,
        long_document_rate=3.0,
        tool_agent_session_rate=0.48,
    ),
    "system-prompts": _named(
        "system-prompts",
        system_prompt_requests,
        "Independent requests sharing 4 system prompts (~3k tokens) + a user message (median 800), Poisson 215 req/s.",
        duration_s=600.0,
    ),
    "multi-turn": _named(
        "multi-turn",
        multi_turn_sessions,
        "Multi-turn chat sessions (mean 6 turns, median 20 s think time), Poisson 52 session starts/s.",
        duration_s=600.0,
    ),
    "tool-agent": _named(
        "tool-agent",
        tool_agent_sessions,
        "Tool-agent sessions living minutes (mean 30 calls ~5.5 s apart) on 8 shared agent prompts (system prompt + "
        "tool definitions, ~3.5k tokens) + a task; Mooncake tool&agent-like sizes (input ~8.6k, output ~180, reuse ~0.6); "
        "Poisson 3.1 session starts/s, ~93 req/s from t = 0 (warm start).",
        duration_s=600.0,
    ),
    "leval-like": _named(
        "leval-like",
        long_document_questions,
        "L-Eval-like long documents (5k-60k tokens, mean ~10k) with ~7 questions each, Poisson 28 documents/s.",
        duration_s=600.0,
    ),
    "phases": _named(
        "phases",
        phase_changes,
        "Four 150 s phases alternating short-heavy (90 req/s) and long-heavy (18 req/s) traffic (Vertumnus §9 dynamic test).",
        num_phases=4,
        phase_duration_s=150.0,
    ),
    "matched-phases": _named(
        "matched-phases",
        matched_load_phases,
        "Randomised dynamic reconfiguration scenarios below saturation: per seed, rising rates or alternating "
        "short-/long-request-heavy phases (3-6 phases of 60-180 s), loads 0.4-0.8 of the mix's capacity on the "
        "reference pool (matched load). Train on seeds < 1000, evaluate on seeds >= 1000.",
    ),
    "production-day": _named(
        "production-day",
        production_day,
        "A production day compressed 60x into 1,440 s (reconfig/production-day-v1, paper §2): a diurnal rate from 19.5 "
        "to 78 req/s (peak 0.92 of the reference pool's capacity for the peak hour's mix), long requests (> 8,192 "
        "tokens) ~6 % of the day's arrivals (5-7.8 % by hour) but ~42 % of its input tokens (35-54 % in 4-hour bins), "
        "infinite-cache prefix hit rate moving within ~36-54 %; 24 hourly phases. Train on seeds < 1000, evaluate on "
        "seeds >= 1000.",
    ),
    "bursty": _named(
        "bursty",
        system_prompt_requests,
        "The system-prompts workload with bursty Gamma inter-arrivals (mean 215 req/s, CV 4).",
        duration_s=600.0,
        arrivals=GammaArrivals(215.0, cv=4.0),
    ),
}


def get_workload(name: str, seed: SeedLike = 0, **overrides: Any) -> Workload:
    """Build the named synthetic workload ``name`` (a key of :data:`WORKLOADS`) with ``seed``.

    Raises:
        ValueError: unknown name (the message lists the known names) or unknown override.
    """
    try:
        factory = WORKLOADS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown workload {name!r}; known workloads: {', '.join(sorted(WORKLOADS))}") from None
    return factory(seed=seed, **overrides)
