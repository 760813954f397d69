"""Seeded synthetic workload generators. The token-count distributions live in
:mod:`envs.workloads.distributions` and the registry of named workloads in
:mod:`envs.workloads.registry`; both are re-exported here so that old imports keep working.

Every generator is a function ``(..., seed) -> Workload``: the same arguments and seed give an
identical workload, a different seed a different one. Randomness comes only from
``numpy.random.default_rng(seed)`` created inside the call (``seed`` may be an int >= 0 or a
``numpy.random.SeedSequence``; anything else, ``None`` included, is a ValueError naming ``seed``).
Block hashes are prefix-consistent (:mod:`envs.workloads.prefix`): equal hash at position k ⇔
identical prompt up to and including block k. Hash ids and session ids are allocated from
per-call counters (no global state). Arrival times are in seconds in ``[0, duration_s)``;
``kv_block_size_tokens`` defaults to 512 (the Mooncake traces' block).

Generators (each models one traffic pattern; the default parameters are documented on each):

* :func:`system_prompt_requests` — a few system prompts of a few thousand tokens shared by many
  independent requests;
* :func:`multi_turn_sessions` — chat sessions, each turn's prompt = previous prompt + previous
  answer + new user message;
* :func:`tool_agent_sessions` — agent loops: many calls seconds apart, each extending a long
  shared context (agent prompt + task) by the latest action and tool output (Mooncake FAST'25
  Table 2, tool&agent: cache ratio 59 %, average input 8,596 tokens, average output 182);
* :func:`long_document_questions` — L-Eval-like documents (5k–60k tokens; requests matching the
  derived L-Eval lengths: mean ~10k, p50 ~7k, p90 ~20k, SOURCES.md) with several questions each;
* :func:`phase_changes` — alternating short-request-heavy and long-request-heavy phases
  (Vertumnus §9 dynamic test), optionally with a rising rate within each phase;
* :func:`mixed_workload` — a merge of the above (``"mixed-default"``).

Arrival processes (:mod:`envs.workloads.arrivals`) are reusable: Poisson, Gamma (bursty, CV > 1),
Markov-modulated Poisson and inhomogeneous Poisson.

**Load sizing.** The named workloads (:data:`WORKLOADS`) are sized for the reference prefill
pool of :mod:`envs.workloads.stats`: 40 GPUs of Qwen3-30B-A3B on CP-2/CP-4 workers at about
13,000 uncached prompt tokens/s per GPU (520k tokens/s). Their rates make the *uncached* tokens
(ideal infinite-cache prefix reuse) about 50–70 % of that capacity, which takes ~50–250 req/s:
a full 600 s named workload holds 30k–150k requests and takes 1–4 s to generate. For quick runs
override ``duration_s`` (e.g. ``get_workload("tool-agent", duration_s=30)``) — rates, and hence
the load, stay the same.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from envs.sim.request import Request, Workload

from .arrivals import (
    MAX_EXPECTED_ARRIVALS,
    ArrivalProcess,
    GammaArrivals,
    InhomogeneousPoissonArrivals,
    MMPPArrivals,
    PoissonArrivals,
)
from .distributions import LEVAL_DOC_TOKENS, SeedLike, TruncatedLogNormal, check_seed, seeded_rng
from .prefix import BlockHasher, PromptContext
from .transforms import merge

__all__ = [
    "TruncatedLogNormal",
    "LEVAL_DOC_TOKENS",
    "system_prompt_requests",
    "multi_turn_sessions",
    "tool_agent_sessions",
    "long_document_questions",
    "phase_changes",
    "matched_load_phases",
    "mixed_capacity_rps",
    "mixed_workload",
    "PoissonArrivals",
    "GammaArrivals",
    "MMPPArrivals",
    "InhomogeneousPoissonArrivals",
]

def _check_positive(name: str, value: float) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return v


def _check_count(name: str, value: int, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or int(value) != value or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _popularity(num: int, zipf_exponent: float) -> np.ndarray:
    p = 1.0 / np.arange(1, num + 1, dtype=float) ** zipf_exponent
    return p / p.sum()



def _phase_items(rng: np.random.Generator, times: np.ndarray, long_share: np.ndarray, long_prompt_tokens,
                 short_prompt_tokens, output_tokens, bases: list) -> tuple[list, np.ndarray]:
    """Requests of the phase workloads: each arrival is long with its phase's probability
    ``long_share`` (one per arrival, share in [0, 1]), gets a long or short body after one of the
    shared system prompts ``bases`` (Zipf-1 popularity) and an output length; returns the ``_build``
    items ``(arrival_s, prompt_tokens, output_tokens, block_hashes, -1)`` and the boolean long flags.  One draw order for
    ``phase_changes`` and ``matched_load_phases``."""
    n = times.size
    is_long = rng.uniform(size=n) < long_share
    bodies = np.where(is_long, long_prompt_tokens.sample_tokens(rng, n), short_prompt_tokens.sample_tokens(rng, n))
    which = rng.choice(len(bases), size=n, p=_popularity(len(bases), 1.0))
    outs = output_tokens.sample_tokens(rng, n)
    items = []
    for t, k, b, o in zip(times.tolist(), which.tolist(), bodies.tolist(), outs.tolist()):
        ctx = bases[k].fork()
        ctx.append_new(b)
        items.append((t, ctx.num_tokens, o, ctx.block_hashes(), -1))
    return items, is_long

def _build(name: str, items: list[tuple[float, int, int, tuple[int, ...], int]], bs: int, source: str,
           metadata: dict) -> Workload:
    """Sort ``(arrival_s, L, out, hashes, session)`` items by arrival (stable) into a Workload."""
    order = sorted(range(len(items)), key=lambda i: items[i][0])
    reqs = tuple(
        Request(i, float(items[k][0]), int(items[k][1]), int(items[k][2]), items[k][3], int(items[k][4]))
        for i, k in enumerate(order)
    )
    return Workload(name, reqs, bs, source, metadata)


def _session_event_times(starts_s: np.ndarray, counts: np.ndarray, gaps_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Event times of sessions: session ``i`` has ``counts[i]`` (>= 1) events, the first at
    ``starts_s[i]``, the next ones ``gaps_s`` apart (``gaps_s`` has ``counts.sum()`` entries; the
    one at each session's first event is ignored). Returns (times [s], offsets) where session
    ``i`` owns events ``offsets[i]:offsets[i+1]``."""
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    g = np.array(gaps_s, dtype=float)
    g[offsets[:-1]] = 0.0
    cs = np.cumsum(g)
    group = np.repeat(np.arange(counts.size), counts)
    return np.asarray(starts_s, float)[group] + cs - cs[offsets[:-1]][group], offsets


def _shared_prefixes(hasher: BlockHasher, tokens, rng: np.random.Generator, num: int,
                     max_tokens: int | None = None) -> list[PromptContext]:
    """``num`` shared prompt prefixes (system / agent prompts) with lengths drawn from
    ``tokens`` (capped at ``max_tokens``), their block hashes computed once."""
    out = []
    for n_tok in tokens.sample_tokens(rng, num):
        ctx = hasher.context()
        ctx.append_new(int(n_tok if max_tokens is None else min(n_tok, max_tokens)))
        ctx.block_hashes()
        out.append(ctx)
    return out


def _sessions(arrivals, duration_s: float, rng: np.random.Generator, mean_events: float, max_events: int,
              gaps) -> tuple[int, np.ndarray, int, list[float], np.ndarray]:
    """Session skeleton: starts from ``arrivals``, a geometric number of events per session
    (mean ``mean_events``, capped at ``max_events``) spaced by ``gaps``.

    Returns:
        ``(num_sessions, counts, num_events, event times [s], offsets)`` (see
        :func:`_session_event_times`).
    """
    starts = arrivals.sample(duration_s, rng)
    num_sessions = starts.size
    counts = np.minimum(rng.geometric(1.0 / mean_events, num_sessions), max_events)
    total = int(counts.sum())
    times, offsets = _session_event_times(starts, counts, gaps.sample(rng, total))
    return num_sessions, counts, total, times.tolist(), offsets


# ---------------------------------------------------------------------------------------------
# generators


def system_prompt_requests(
    *,
    duration_s: float = 600.0,
    arrivals: ArrivalProcess = PoissonArrivals(215.0),
    num_system_prompts: int = 4,
    system_prompt_tokens: TruncatedLogNormal = TruncatedLogNormal(3000.0, 0.35, 1500.0, 6000.0),
    popularity_zipf_exponent: float = 1.0,
    user_tokens: TruncatedLogNormal = TruncatedLogNormal(800.0, 1.0, 16.0, 16384.0),
    output_tokens: TruncatedLogNormal = TruncatedLogNormal(200.0, 0.9, 1.0, 2048.0),
    kv_block_size_tokens: int = 512,
    seed: SeedLike = 0,
    name: str = "system-prompts",
) -> Workload:
    """Independent requests sharing a few long system prompts.

    Each request = one of ``num_system_prompts`` system prompts (lengths drawn once from
    ``system_prompt_tokens``, default median 3,000 tokens in [1,500, 6,000]; chosen with Zipf
    popularity ``p_k ∝ 1/k^popularity_zipf_exponent``) + a fresh user message
    (``user_tokens``, default median 800). Only the system prompt's full blocks are reusable.
    Arrivals from ``arrivals`` (default Poisson 215 req/s: ~0.6 of the reference pool, ideal
    reuse ~68 %); ``session_id`` -1.

    ``metadata["system_prompt_of_request"]`` gives the system prompt index per request.
    """
    d = _check_positive("duration_s", duration_s)
    _check_count("num_system_prompts", num_system_prompts)
    rng = seeded_rng(seed)
    hasher = BlockHasher(kv_block_size_tokens)
    bases: list[PromptContext] = []
    for n_tok in system_prompt_tokens.sample_tokens(rng, num_system_prompts):
        ctx = hasher.context()
        ctx.append_new(int(n_tok))
        ctx.block_hashes()  # cache the shared full blocks once
        bases.append(ctx)
    times = arrivals.sample(d, rng)
    n = times.size
    which = rng.choice(num_system_prompts, size=n, p=_popularity(num_system_prompts, popularity_zipf_exponent))
    users = user_tokens.sample_tokens(rng, n)
    outs = output_tokens.sample_tokens(rng, n)
    items = []
    for t, k, u, o in zip(times.tolist(), which.tolist(), users.tolist(), outs.tolist()):
        ctx = bases[k].fork()
        ctx.append_new(u)
        items.append((t, ctx.num_tokens, o, ctx.block_hashes(), -1))
    meta = {"generator": "system_prompt_requests", "system_prompt_tokens": [b.num_tokens for b in bases],
            "system_prompt_of_request": tuple(which.tolist())}
    return _build(name, items, hasher.kv_block_size_tokens, f"synthetic:system_prompt_requests(seed={seed})", meta)


def multi_turn_sessions(
    *,
    duration_s: float = 600.0,
    session_arrivals: ArrivalProcess = PoissonArrivals(52.0),
    mean_turns: float = 6.0,
    max_turns: int = 40,
    think_time_s: TruncatedLogNormal = TruncatedLogNormal(20.0, 0.8, 2.0, 300.0),
    num_system_prompts: int = 0,
    system_prompt_tokens: TruncatedLogNormal = TruncatedLogNormal(1500.0, 0.4, 500.0, 4000.0),
    first_user_tokens: TruncatedLogNormal = TruncatedLogNormal(1500.0, 1.0, 500.0, 32768.0),
    user_tokens: TruncatedLogNormal = TruncatedLogNormal(150.0, 1.0, 4.0, 8192.0),
    output_tokens: TruncatedLogNormal = TruncatedLogNormal(300.0, 0.8, 1.0, 2048.0),
    max_prompt_tokens: int = 65536,
    kv_block_size_tokens: int = 512,
    seed: SeedLike = 0,
    name: str = "multi-turn",
) -> Workload:
    """Multi-turn chat sessions: turn k's prompt = turn k-1's prompt + its answer + a new user message.

    Sessions start by ``session_arrivals`` (default Poisson 52 sessions/s: ~244 req/s, ~0.6 of the
    reference pool, ideal reuse ~74 %); each has a geometric
    number of turns (mean ``mean_turns``, capped at ``max_turns``) separated by ``think_time_s``
    (time between consecutive turn arrivals [s], including the answer's generation; default
    median 20 s). The first prompt is an optional shared system prompt (``num_system_prompts`` >
    0) + ``first_user_tokens``; later turns add the previous answer (``num_output_tokens`` of the
    previous turn) and ``user_tokens``. A session ends early when the next prompt would exceed
    ``max_prompt_tokens`` or the next turn would arrive after ``duration_s``. Each turn extends
    the previous turn's blocks (only its partial last block changes); ``session_id`` = session
    index in order of start.
    """
    d = _check_positive("duration_s", duration_s)
    mean_turns = _check_positive("mean_turns", mean_turns)
    if mean_turns < 1:
        raise ValueError(f"mean_turns must be >= 1, got {mean_turns}")
    _check_count("max_turns", max_turns)
    _check_count("num_system_prompts", num_system_prompts, 0)
    _check_count("max_prompt_tokens", max_prompt_tokens)
    rng = seeded_rng(seed)
    hasher = BlockHasher(kv_block_size_tokens)
    bases = _shared_prefixes(hasher, system_prompt_tokens, rng, num_system_prompts, max_prompt_tokens // 2)
    num_sessions, counts, total, times, offsets = _sessions(session_arrivals, d, rng, mean_turns, max_turns, think_time_s)
    outs = output_tokens.sample_tokens(rng, total).tolist()
    users = user_tokens.sample_tokens(rng, total).tolist()
    firsts = first_user_tokens.sample_tokens(rng, num_sessions).tolist()
    sys_of = rng.integers(max(num_system_prompts, 1), size=num_sessions).tolist()
    items = []
    for sid in range(num_sessions):
        lo, hi = int(offsets[sid]), int(offsets[sid + 1])
        ctx = bases[sys_of[sid]].fork() if num_system_prompts else hasher.context()
        ctx.append_new(min(firsts[sid], max_prompt_tokens - ctx.num_tokens))
        for k in range(lo, hi):
            if times[k] >= d:
                break
            if k > lo:
                if ctx.num_tokens + outs[k - 1] + users[k] > max_prompt_tokens:
                    break
                ctx.append_new(outs[k - 1])  # the previous answer
                ctx.append_new(users[k])  # the new user message
            items.append((times[k], ctx.num_tokens, outs[k], ctx.block_hashes(), sid))
    meta = {"generator": "multi_turn_sessions", "num_sessions_started": int(num_sessions)}
    return _build(name, items, hasher.kv_block_size_tokens, f"synthetic:multi_turn_sessions(seed={seed})", meta)


def tool_agent_sessions(
    *,
    duration_s: float = 600.0,
    session_arrivals: ArrivalProcess = PoissonArrivals(3.1),
    num_agent_prompts: int = 8,
    agent_prompt_tokens: TruncatedLogNormal = TruncatedLogNormal(3500.0, 0.4, 1500.0, 12000.0),
    task_tokens: TruncatedLogNormal = TruncatedLogNormal(1000.0, 0.8, 64.0, 8192.0),
    mean_calls: float = 30.0,
    max_calls: int = 200,
    call_gap_s: TruncatedLogNormal = TruncatedLogNormal(5.5, 0.5, 1.0, 60.0),
    tool_output_tokens: TruncatedLogNormal = TruncatedLogNormal(2000.0, 1.0, 16.0, 32768.0),
    output_tokens: TruncatedLogNormal = TruncatedLogNormal(150.0, 0.6, 8.0, 1024.0),
    history_window_steps: int | None = 1,
    max_prompt_tokens: int = 65536,
    compacted_tokens: TruncatedLogNormal = TruncatedLogNormal(2000.0, 0.5, 256.0, 8192.0),
    warm_start_s: float = 600.0,
    kv_block_size_tokens: int = 512,
    seed: SeedLike = 0,
    name: str = "tool-agent",
) -> Workload:
    """Tool-using agent sessions that live for minutes on long shared prefixes (paper §9 Tool-Agent).

    Structure (paper §9: tool definitions and system prompts shared across sessions that live
    for minutes; Mooncake FAST'25 Table 2 for the per-call sizes):

    * **Shared prefixes**: ``num_agent_prompts`` (default 8) distinct agent prompts = system
      prompt + tool definitions, lengths from ``agent_prompt_tokens`` (default median 3,500
      tokens in [1,500, 12,000]), drawn once; a session picks one with Zipf popularity
      (``p_k ∝ 1/k``), so the most popular is used by ~37 % of the sessions.
    * **Sessions**: started by ``session_arrivals`` (default Poisson 3.1 sessions/s); each runs a
      geometric number of LLM calls (``mean_calls``, default 30, cap ``max_calls``) spaced by
      ``call_gap_s`` (default median 5.5 s: decoding the ~180-token action at ~30 ms per token
      plus running the tool), so a session lives ~2.7 min on average (minutes, not one 20 s cache
      scan) and the default gives ~93 req/s (~0.6 of the reference pool).
    * **Warm start**: sessions start over ``[-warm_start_s, duration_s)`` and only calls at
      ``t >= 0`` are kept (default 600 s, about three mean session lifetimes), so the window
      begins in steady state (rate ≈ session rate × mean calls from t = 0) instead of ramping
      up over the first lifetime; 0 gives a cold start.

    Every call's prompt = the session's agent prompt + its task (``task_tokens``, default median
    1,000) + the agent's recent steps, a step being the previous call's output (the action,
    ``output_tokens``, default mean ~180 like Mooncake's 182) + the tool's result
    (``tool_output_tokens``):

    * ``history_window_steps = W`` (default 1): only the last ``W`` steps are kept (observation
      masking, as in SWE-agent-style scaffolds), so consecutive calls reuse the shared context
      and the new steps are uncached;
    * ``history_window_steps = None``: the full history is kept (each call extends the previous
      call's prompt); when a prompt would exceed ``max_prompt_tokens`` the agent compacts its
      context to agent prompt + task + a fresh summary (``compacted_tokens``).

    With W = None the reuse is much higher (~85 %); the default W = 1 stays close to Mooncake
    FAST'25 Table 2 (tool&agent: average input 8,596 tokens, average output 182, cache ratio
    59 %). Tool outputs are clipped so that no prompt exceeds ``max_prompt_tokens``.
    ``session_id`` = session index (sessions that made no call inside the window leave gaps).
    ``metadata``: ``agent_prompt_tokens`` (per shared prefix), ``agent_prompt_of_session``,
    ``num_sessions_started`` (including warm-start sessions).

    Raises:
        ValueError: for a non-positive duration, ``mean_calls < 1``, a bad count or a negative
            ``warm_start_s``.
    """
    d = _check_positive("duration_s", duration_s)
    mean_calls = _check_positive("mean_calls", mean_calls)
    if mean_calls < 1:
        raise ValueError(f"mean_calls must be >= 1, got {mean_calls}")
    _check_count("max_calls", max_calls)
    _check_count("num_agent_prompts", num_agent_prompts)
    _check_count("max_prompt_tokens", max_prompt_tokens, 16)
    if history_window_steps is not None:
        _check_count("history_window_steps", history_window_steps, 0)
    warm = float(warm_start_s)
    if not math.isfinite(warm) or warm < 0:
        raise ValueError(f"warm_start_s must be a finite number >= 0, got {warm_start_s!r}")
    rng = seeded_rng(seed)
    hasher = BlockHasher(kv_block_size_tokens)
    bases = _shared_prefixes(hasher, agent_prompt_tokens, rng, num_agent_prompts, max_prompt_tokens // 4)
    num_sessions, counts, total, times, offsets = _sessions(session_arrivals, d + warm, rng, mean_calls, max_calls, call_gap_s)
    times = [t - warm for t in times]
    outs = output_tokens.sample_tokens(rng, total).tolist()
    tools = tool_output_tokens.sample_tokens(rng, total).tolist()
    summaries = compacted_tokens.sample_tokens(rng, total).tolist()
    tasks = task_tokens.sample_tokens(rng, num_sessions).tolist()
    agent_of = rng.choice(num_agent_prompts, size=num_sessions, p=_popularity(num_agent_prompts, 1.0)).tolist()
    items = []
    num_compactions = 0
    for sid in range(num_sessions):
        lo, hi = int(offsets[sid]), int(offsets[sid + 1])
        shared = bases[agent_of[sid]].fork()
        shared.append_new(min(tasks[sid], max_prompt_tokens // 4))
        shared.block_hashes()
        ctx = shared
        steps: list[tuple[int, int, int, int]] = []  # (action segment, tokens, tool segment, tokens)
        for k in range(lo, hi):
            if times[k] >= d:
                break
            if k > lo:
                action = min(outs[k - 1], max_prompt_tokens // 8)
                if history_window_steps is None:
                    if ctx.num_tokens + action + 1 > max_prompt_tokens:
                        num_compactions += 1
                        ctx = shared.fork()
                        ctx.append_new(min(summaries[k], max_prompt_tokens // 8))
                    elif ctx is shared:
                        ctx = shared.fork()
                    ctx.append_new(action)  # the agent's action (previous output)
                    ctx.append_new(min(tools[k], max_prompt_tokens - ctx.num_tokens))  # the tool's result
                elif history_window_steps > 0:
                    kept = steps[len(steps) - history_window_steps + 1 :] if history_window_steps > 1 else []
                    used = shared.num_tokens + sum(a + b for _, a, _, b in kept) + action
                    if used + 1 > max_prompt_tokens:
                        kept, used = [], shared.num_tokens + action
                    steps = [*kept, (hasher.new_segment_id(), action, hasher.new_segment_id(),
                                     min(tools[k], max_prompt_tokens - used))]
                    ctx = shared.fork()
                    for a_seg, a_len, b_seg, b_len in steps:
                        ctx.append(a_seg, a_len)
                        ctx.append(b_seg, b_len)
            if times[k] >= 0.0:  # calls before the window (warm start) shape the context only
                items.append((times[k], ctx.num_tokens, outs[k], ctx.block_hashes(), sid))
    meta = {"generator": "tool_agent_sessions", "num_sessions_started": int(num_sessions), "num_compactions": num_compactions,
            "agent_prompt_tokens": [b.num_tokens for b in bases], "agent_prompt_of_session": tuple(agent_of)}
    return _build(name, items, hasher.kv_block_size_tokens, f"synthetic:tool_agent_sessions(seed={seed})", meta)


def long_document_questions(
    *,
    duration_s: float = 600.0,
    doc_arrivals: ArrivalProcess = PoissonArrivals(28.0),
    doc_tokens: TruncatedLogNormal = LEVAL_DOC_TOKENS,
    mean_questions_per_doc: float = 7.0,
    max_questions_per_doc: int = 100,
    question_gap_s: TruncatedLogNormal = TruncatedLogNormal(15.0, 1.0, 1.0, 300.0),
    query_tokens: TruncatedLogNormal = TruncatedLogNormal(32.0, 0.9, 1.0, 1024.0),
    output_tokens: TruncatedLogNormal = TruncatedLogNormal(16.0, 1.6, 1.0, 1024.0),
    kv_block_size_tokens: int = 512,
    seed: SeedLike = 0,
    name: str = "leval-like",
) -> Workload:
    """L-Eval-like long documents, each asked several questions.

    Documents are opened by ``doc_arrivals`` (default Poisson 28 docs/s: ~150 req/s, ~0.6 of the
    reference pool, ideal reuse ~79 %); each gets a length from
    ``doc_tokens`` (default :data:`LEVAL_DOC_TOKENS`, 5k–60k tokens, mean ~10k, p50 ~7k, p90 ~20k
    like the derived L-Eval lengths) and a geometric number of questions (mean
    ``mean_questions_per_doc`` = 7, L-Eval: 2,074 queries / 299 documents = 6.9), asked
    ``question_gap_s`` apart (default median 15 s). Request = document + question
    (``query_tokens``, default median 32 like L-Eval's p50 32); output ``output_tokens``
    (default median 16, like L-Eval's reference answers, p50 12, p90 123). All questions on a
    document share its full blocks; ``session_id`` = document index.
    """
    d = _check_positive("duration_s", duration_s)
    mean_q = _check_positive("mean_questions_per_doc", mean_questions_per_doc)
    if mean_q < 1:
        raise ValueError(f"mean_questions_per_doc must be >= 1, got {mean_q}")
    _check_count("max_questions_per_doc", max_questions_per_doc)
    rng = seeded_rng(seed)
    hasher = BlockHasher(kv_block_size_tokens)
    starts = doc_arrivals.sample(d, rng)
    num_docs = starts.size
    doc_lengths = doc_tokens.sample_tokens(rng, num_docs).tolist()
    counts = np.minimum(rng.geometric(1.0 / mean_q, num_docs), max_questions_per_doc)
    total = int(counts.sum())
    times, offsets = _session_event_times(starts, counts, question_gap_s.sample(rng, total))
    times = times.tolist()
    queries = query_tokens.sample_tokens(rng, total).tolist()
    outs = output_tokens.sample_tokens(rng, total).tolist()
    items = []
    for sid in range(num_docs):
        doc = hasher.context()
        doc.append_new(doc_lengths[sid])
        doc.block_hashes()
        for k in range(int(offsets[sid]), int(offsets[sid + 1])):
            if times[k] >= d:
                break
            ctx = doc.fork()
            ctx.append_new(queries[k])
            items.append((times[k], ctx.num_tokens, outs[k], ctx.block_hashes(), sid))
    meta = {"generator": "long_document_questions", "num_documents": int(num_docs)}
    return _build(name, items, hasher.kv_block_size_tokens, f"synthetic:long_document_questions(seed={seed})", meta)


def phase_changes(
    *,
    num_phases: int = 4,
    phase_duration_s: float = 150.0,
    short_phase_rate_rps: float = 90.0,
    long_phase_rate_rps: float = 18.0,
    short_phase_long_fraction: float = 0.05,
    long_phase_long_fraction: float = 0.6,
    short_prompt_tokens: TruncatedLogNormal = TruncatedLogNormal(1500.0, 0.8, 256.0, 8192.0),
    long_prompt_tokens: TruncatedLogNormal = TruncatedLogNormal(24000.0, 0.5, 8192.0, 64000.0),
    num_system_prompts: int = 4,
    system_prompt_tokens: TruncatedLogNormal = TruncatedLogNormal(1000.0, 0.3, 500.0, 2000.0),
    output_tokens: TruncatedLogNormal = TruncatedLogNormal(200.0, 0.9, 1.0, 2048.0),
    rising_rate: bool = False,
    rate_start_fraction: float = 0.5,
    rate_end_fraction: float = 1.5,
    first_phase: str = "short",
    kv_block_size_tokens: int = 512,
    seed: SeedLike = 0,
    name: str = "phases",
) -> Workload:
    """Alternating short-request-heavy and long-request-heavy phases (Vertumnus §9 dynamic test).

    ``num_phases`` phases of ``phase_duration_s`` each, alternating (starting with
    ``first_phase``, "short" or "long"). Short phases: Poisson at ``short_phase_rate_rps`` with a
    fraction ``short_phase_long_fraction`` of long requests; long phases: ``long_phase_rate_rps``
    with ``long_phase_long_fraction`` long. A request = a shared system prompt (one of
    ``num_system_prompts``) + a fresh body of ``short_prompt_tokens`` (default median 1.5k) or
    ``long_prompt_tokens`` (default median 24k, 8k–64k). The default rates put both phases at
    roughly 60 % of the reference pool, with very different length mixes (the controller must
    reshape CP degrees). With ``rising_rate`` the rate ramps linearly inside each phase from
    ``rate_start_fraction`` to ``rate_end_fraction`` times the phase rate (defaults 0.5→1.5: same
    mean, peaks at 1.5×). ``metadata``: ``phase_boundaries_s``, ``phase_kinds``,
    ``phase_of_request``, ``is_long_request``.
    """
    num_phases = _check_count("num_phases", num_phases)
    dur = _check_positive("phase_duration_s", phase_duration_s)
    r_short = _check_positive("short_phase_rate_rps", short_phase_rate_rps)
    r_long = _check_positive("long_phase_rate_rps", long_phase_rate_rps)
    for k, v in (("short_phase_long_fraction", short_phase_long_fraction),
                 ("long_phase_long_fraction", long_phase_long_fraction)):
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"{k} must be in [0, 1], got {v!r}")
    if first_phase not in ("short", "long"):
        raise ValueError(f"first_phase must be 'short' or 'long', got {first_phase!r}")
    _check_count("num_system_prompts", num_system_prompts)
    if rising_rate:
        f0 = float(rate_start_fraction)
        f1 = float(rate_end_fraction)
        if not (math.isfinite(f0) and math.isfinite(f1) and f0 >= 0 and f1 >= 0 and max(f0, f1) > 0):
            raise ValueError(f"rate_start_fraction and rate_end_fraction must be finite, >= 0 and not both 0, got {f0}, {f1}")
    else:
        f0 = f1 = 1.0
    candidates = num_phases * dur * max(r_short, r_long) * max(f0, f1)  # what the thinning samples
    if candidates > MAX_EXPECTED_ARRIVALS:  # before the per-phase lists (num_phases 1e8 ran out of memory)
        raise ValueError(f"num_phases x phase_duration_s = {num_phases} x {dur:g} s at up to "
                         f"{max(r_short, r_long) * max(f0, f1):g} req/s is {candidates:.3g} arrivals to sample, more than "
                         f"{MAX_EXPECTED_ARRIVALS:,}; use fewer or shorter phases")
    kinds = [("short", "long")[(i + (first_phase == "long")) % 2] for i in range(num_phases)]
    phase_rates = np.array([r_short if k == "short" else r_long for k in kinds])
    long_frac = np.array([short_phase_long_fraction if k == "short" else long_phase_long_fraction for k in kinds])
    total_s = num_phases * dur

    def rate_fn(t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, float)
        idx = np.minimum((t // dur).astype(int), num_phases - 1)
        frac = (t - idx * dur) / dur
        return phase_rates[idx] * (f0 + (f1 - f0) * frac)

    rng = seeded_rng(seed)
    hasher = BlockHasher(kv_block_size_tokens)
    bases = _shared_prefixes(hasher, system_prompt_tokens, rng, num_system_prompts)
    times = InhomogeneousPoissonArrivals(rate_fn, float(phase_rates.max() * max(f0, f1))).sample(total_s, rng)
    phase = np.minimum((times // dur).astype(int), num_phases - 1)
    items, is_long = _phase_items(rng, times, long_frac[phase], long_prompt_tokens, short_prompt_tokens, output_tokens, bases)
    meta = {
        "generator": "phase_changes",
        "phase_boundaries_s": [i * dur for i in range(num_phases + 1)],
        "phase_kinds": kinds,
        "phase_of_request": tuple(phase.tolist()),
        "is_long_request": tuple(bool(x) for x in is_long),
        "rising_rate": bool(rising_rate),
    }
    return _build(name, items, hasher.kv_block_size_tokens, f"synthetic:phase_changes(seed={seed})", meta)


#: Sustainable rates of the reference pool (40 GPUs, composition ``cp4x6,cp2x8``, Vertumnus router,
#: default calibration) for the ``phase_changes`` request classes alone: the largest Poisson rate
#: whose 120 s run keeps token-weighted SLO attainment >= 0.9 (bisection, 7 steps, seed 1):
#: short requests (system prompt + median-1.5k body) ~150 req/s, long (median-24k body) ~5.8 req/s.
#: Measured with ``phase_changes(num_phases=1, phase_duration_s=120, *_long_fraction=0 or 1)``.
MATCHED_LOAD_CAPACITY_SHORT_RPS = 150.0
MATCHED_LOAD_CAPACITY_LONG_RPS = 5.8


def mixed_capacity_rps(long_fraction, capacity_short_rps: float = MATCHED_LOAD_CAPACITY_SHORT_RPS,
                       capacity_long_rps: float = MATCHED_LOAD_CAPACITY_LONG_RPS):
    """Capacity [requests/s] of a short/long mix by time sharing: a request of a class costs
    ``1 / capacity`` of the pool, so ``1 / ((1 - f) / c_short + f / c_long)`` for a long share
    ``f`` in [0, 1] (scalar or array). Time sharing ignores that one composition can serve both
    classes better than either alone, so it errs low (a phase at load ``x`` of it is at most ``x``
    of the real capacity); on the reference pool it matches simulation within ~10 % at f = 0.05
    and 0.6 (``phases``: 45 req/s at f = 0.05 and 9 req/s at f = 0.6 keep SLO >= 0.98)."""
    f = np.asarray(long_fraction, float)
    return 1.0 / ((1.0 - f) / float(capacity_short_rps) + f / float(capacity_long_rps))


def _check_range(name: str, lo_hi, lo_bound: float, hi_bound: float, hi_open: bool = False) -> tuple[float, float]:
    try:
        lo, hi = (float(x) for x in lo_hi)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a pair (low, high), got {lo_hi!r}") from None
    ok = lo_bound <= lo <= hi and (hi < hi_bound if hi_open else hi <= hi_bound)
    if not ok:
        raise ValueError(f"{name} must satisfy {lo_bound:g} <= low <= high {'<' if hi_open else '<='} {hi_bound:g}, "
                         f"got {lo_hi!r}")
    return lo, hi


def matched_load_phases(
    *,
    scenario: str = "random",
    num_phases_range: tuple[int, int] = (3, 6),
    phase_duration_s_range: tuple[float, float] = (60.0, 180.0),
    short_heavy_long_fraction_range: tuple[float, float] = (0.0, 0.1),
    long_heavy_long_fraction_range: tuple[float, float] = (0.4, 0.7),
    load_fraction_range: tuple[float, float] = (0.4, 0.8),
    duration_s: float | None = None,
    capacity_short_rps: float = MATCHED_LOAD_CAPACITY_SHORT_RPS,
    capacity_long_rps: float = MATCHED_LOAD_CAPACITY_LONG_RPS,
    short_prompt_tokens: TruncatedLogNormal = TruncatedLogNormal(1500.0, 0.8, 256.0, 8192.0),
    long_prompt_tokens: TruncatedLogNormal = TruncatedLogNormal(24000.0, 0.5, 8192.0, 64000.0),
    num_system_prompts: int = 4,
    system_prompt_tokens: TruncatedLogNormal = TruncatedLogNormal(1000.0, 0.3, 500.0, 2000.0),
    output_tokens: TruncatedLogNormal = TruncatedLogNormal(200.0, 0.9, 1.0, 2048.0),
    kv_block_size_tokens: int = 512,
    seed: SeedLike = 0,
    name: str = "matched-phases",
) -> Workload:
    """Randomised dynamic workload below saturation for reconfiguration episodes (Vertumnus §9
    dynamic scenarios at matched load): every seed draws its own schedule, so a policy cannot
    memorise one.

    The seed draws the scenario (``scenario="random"``: ``"alternating"`` or ``"rising"`` with
    equal probability), the number of phases (uniform integer in ``num_phases_range``), each
    phase's length (uniform in ``phase_duration_s_range`` [s]), which kind comes first, and per
    phase the long-request share (short-heavy phases: uniform in
    ``short_heavy_long_fraction_range``; long-heavy: in ``long_heavy_long_fraction_range``;
    kinds alternate); with ``duration_s`` the drawn lengths are rescaled to sum to it [s]. Rates are fractions of the
    phase mix's capacity
    (:func:`mixed_capacity_rps` with ``capacity_short_rps`` / ``capacity_long_rps``):

    * ``"alternating"``: each phase's load is uniform in ``load_fraction_range``, constant
      inside the phase;
    * ``"rising"``: the load rises linearly over the whole workload from the low to the high
      end of ``load_fraction_range`` (the mix still alternates per phase).

    The rate never exceeds ``load_fraction_range[1] < 1`` times the current mix's capacity.
    Requests: a shared system prompt (one of ``num_system_prompts``) + a fresh body, short or
    long as in :func:`phase_changes`. Evaluation seeds must be disjoint from training seeds
    (the shipped checkpoint trains on 0..N-1 and is evaluated on seeds >= 1000).

    ``metadata``: ``scenario``, ``phase_boundaries_s``, ``phase_kinds``,
    ``phase_long_fraction``, ``phase_load_fraction`` (``[start, end]`` per phase),
    ``phase_capacity_rps``, ``phase_of_request``, ``is_long_request``.

    Raises:
        ValueError: naming the parameter, on a bad scenario, range or capacity.
    """
    if scenario not in ("random", "alternating", "rising"):
        raise ValueError(f"scenario must be 'random', 'alternating' or 'rising', got {scenario!r}")
    n_lo, n_hi = _check_range("num_phases_range", num_phases_range, 1, 10_000)
    if n_lo != int(n_lo) or n_hi != int(n_hi):
        raise ValueError(f"num_phases_range must hold integers, got {num_phases_range!r}")
    d_lo, d_hi = _check_range("phase_duration_s_range", phase_duration_s_range, 1e-9, math.inf)
    s_lo, s_hi = _check_range("short_heavy_long_fraction_range", short_heavy_long_fraction_range, 0.0, 1.0)
    l_lo, l_hi = _check_range("long_heavy_long_fraction_range", long_heavy_long_fraction_range, 0.0, 1.0)
    f_lo, f_hi = _check_range("load_fraction_range", load_fraction_range, 1e-9, 1.0, hi_open=True)
    _check_positive("capacity_short_rps", capacity_short_rps)
    _check_positive("capacity_long_rps", capacity_long_rps)
    _check_count("num_system_prompts", num_system_prompts)
    rng = seeded_rng(seed)
    kind = scenario if scenario != "random" else ("alternating", "rising")[int(rng.integers(2))]
    num_phases = int(rng.integers(int(n_lo), int(n_hi) + 1))
    durations = rng.uniform(d_lo, d_hi, size=num_phases)
    if duration_s is not None:
        durations *= _check_positive("duration_s", duration_s) / durations.sum()
    bounds = np.concatenate([[0.0], np.cumsum(durations)])
    total_s = float(bounds[-1])
    first_long = bool(rng.integers(2))
    kinds = [("short", "long")[(i + first_long) % 2] for i in range(num_phases)]
    long_frac = np.array([rng.uniform(s_lo, s_hi) if k == "short" else rng.uniform(l_lo, l_hi) for k in kinds])
    cap = mixed_capacity_rps(long_frac, capacity_short_rps, capacity_long_rps)
    if kind == "alternating":
        loads = rng.uniform(f_lo, f_hi, size=num_phases)
        load_start, load_end = loads, loads.copy()
    else:
        load_start = f_lo + (f_hi - f_lo) * bounds[:-1] / total_s
        load_end = f_lo + (f_hi - f_lo) * bounds[1:] / total_s

    def phase_index(t: np.ndarray) -> np.ndarray:
        return np.minimum(np.searchsorted(bounds, t, side="right") - 1, num_phases - 1)

    def rate_fn(t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, float)
        i = phase_index(t)
        frac = (t - bounds[i]) / durations[i]
        return cap[i] * (load_start[i] + (load_end[i] - load_start[i]) * frac)

    hasher = BlockHasher(kv_block_size_tokens)
    bases = _shared_prefixes(hasher, system_prompt_tokens, rng, num_system_prompts)
    peak = float(np.max(cap * np.maximum(load_start, load_end)))
    times = InhomogeneousPoissonArrivals(rate_fn, peak).sample(total_s, rng)
    phase = phase_index(times)
    items, is_long = _phase_items(rng, times, long_frac[phase], long_prompt_tokens, short_prompt_tokens, output_tokens, bases)
    meta = {
        "generator": "matched_load_phases",
        "scenario": kind,
        "phase_boundaries_s": bounds.tolist(),
        "phase_kinds": kinds,
        "phase_long_fraction": long_frac.tolist(),
        "phase_load_fraction": [[float(a), float(b)] for a, b in zip(load_start, load_end)],
        "phase_capacity_rps": cap.tolist(),
        "phase_of_request": tuple(phase.tolist()),
        "is_long_request": tuple(bool(x) for x in is_long),
    }
    return _build(name, items, hasher.kv_block_size_tokens, f"synthetic:matched_load_phases(seed={seed})", meta)


def mixed_workload(
    *,
    duration_s: float = 600.0,
    system_prompt_rate_rps: float = 40.0,
    multi_turn_session_rate: float = 9.0,
    long_document_rate: float = 7.5,
    long_document_mean_questions: float = 3.0,
    tool_agent_session_rate: float = 1.2,
    component_overrides: dict[str, dict[str, Any]] | None = None,
    kv_block_size_tokens: int = 512,
    seed: SeedLike = 0,
    name: str = "mixed",
) -> Workload:
    """A production-like mix: system-prompt chat + multi-turn chat + long documents + tool agents.

    Merges (:func:`envs.workloads.transforms.merge`, disjoint prefixes and sessions), over
    ``duration_s`` [s], with each generator's default lengths:

    * :func:`system_prompt_requests`, Poisson ``system_prompt_rate_rps`` [requests/s];
    * :func:`multi_turn_sessions`, Poisson ``multi_turn_session_rate`` [sessions/s];
    * :func:`long_document_questions`, Poisson ``long_document_rate`` [documents/s] with
      ``long_document_mean_questions`` questions per document on average;
    * :func:`tool_agent_sessions`, Poisson ``tool_agent_session_rate`` [sessions/s].

    ``component_overrides`` maps ``"system_prompts"``, ``"multi_turn"``, ``"long_documents"``,
    ``"tool_agent"`` to extra keyword arguments of that generator. The defaults offer about 60 %
    of the reference pool's capacity (40 GPUs × 13k uncached tokens/s, ideal reuse): ~0.11 chat,
    ~0.10 multi-turn, ~0.15 long documents, ~0.23 tool agents. Component seeds are spawned from
    ``seed`` (``numpy.random.SeedSequence``). ``metadata["source_index"]`` / ``["sources"]`` give
    each request's component.
    """
    d = _check_positive("duration_s", duration_s)
    overrides = dict(component_overrides or {})
    known = ("system_prompts", "multi_turn", "long_documents", "tool_agent")
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise ValueError(f"component_overrides: unknown component(s) {unknown}; known: {list(known)}")
    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(check_seed(seed))
    children = ss.spawn(4)
    common = {"duration_s": d, "kv_block_size_tokens": kv_block_size_tokens}
    parts = [
        system_prompt_requests(**{**common, "arrivals": PoissonArrivals(system_prompt_rate_rps), "name": "system_prompts",
                                  **overrides.get("system_prompts", {})}, seed=children[0]),
        multi_turn_sessions(**{**common, "session_arrivals": PoissonArrivals(multi_turn_session_rate), "name": "multi_turn",
                               **overrides.get("multi_turn", {})}, seed=children[1]),
        long_document_questions(
            **{**common, "doc_arrivals": PoissonArrivals(long_document_rate),
               "mean_questions_per_doc": long_document_mean_questions, "name": "long_documents",
               **overrides.get("long_documents", {})},
            seed=children[2],
        ),
        tool_agent_sessions(**{**common, "session_arrivals": PoissonArrivals(tool_agent_session_rate), "name": "tool_agent",
                               **overrides.get("tool_agent", {})}, seed=children[3]),
    ]
    return merge(parts, name=name, source=f"synthetic:mixed_workload(seed={seed})", metadata={"generator": "mixed_workload"})
