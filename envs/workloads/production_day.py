"""A synthetic production day for the reconfiguration benchmark (issue #39, ``reconfig/production-day-v1``).

:func:`production_day` compresses one day of a prefill service into ``duration_s`` simulated
seconds (default 1,440 s: the day is compressed 60x, one simulated second per real minute, one
simulated minute per real hour), so that an episode costs a few CPU-seconds. Its shape follows
the paper's §2 measurements of a production service (``shared/paper/vertumnus-summary.en.txt``,
"Workload Dynamics"):

* the arrival rate swings **more than 3x** over the day: a smooth diurnal profile (one cosine
  period per day, peak at ``peak_hour``, trough 12 h later) from ``peak_rate_rps /
  peak_to_trough_ratio`` to ``peak_rate_rps``, times slow multiplicative noise;
* **long requests** (prompts > 8,192 tokens, the controller's ``long_prompt_tokens``) are **4-8 %
  of arrivals but 32-54 % of input tokens**: their share of arrivals moves inside
  ``long_fraction_range`` against the rate (most long requests at night, when batch document
  work dominates; fewest at the interactive peak), and their length distribution is ~12x the
  short one's, which puts their token share at 35-54 % of a 4-hour bin's input tokens, low at
  the peak and high at night (~42 % of the day's input tokens, ~6 % of its arrivals);
* the **prefix hit rate** (token-weighted, infinite cache) moves within **35-55 %**: each request
  is, with a probability that follows its own diurnal cosine in ``reuse_probability_range``
  (peak at ``reuse_peak_hour``), a follow-up on a recent context of its class (a conversation
  for a short request, a document for a long one) whose whole prompt it reuses, else a new
  context (a short one opens with one of the shared system prompts).

The phases of the reconfiguration oracle are the ``num_phases`` equal slices of the day (default
24: the hours). ``stationary_hour`` holds rate, mix and reuse at one hour's values for the whole
``duration_s`` (a stationary slice, e.g. the peak hour for a capacity measurement).
"""

from __future__ import annotations

import math

import numpy as np

from envs.sim.request import Workload

from .arrivals import MAX_EXPECTED_ARRIVALS, InhomogeneousPoissonArrivals
from .distributions import SeedLike, TruncatedLogNormal, seeded_rng
from .prefix import BlockHasher
from .synthetic import _build, _check_count, _check_positive, _check_range, _popularity, _shared_prefixes

__all__ = ["production_day", "diurnal_profile", "LONG_PROMPT_TOKENS", "SECONDS_PER_DAY"]

#: A prompt longer than this is a long request [tokens]: the heuristic controller's
#: ``long_prompt_tokens`` and the reconfiguration environment's ``long_request_tokens`` (8,192).
LONG_PROMPT_TOKENS = 8192

#: Seconds in the real day that :func:`production_day` compresses [s].
SECONDS_PER_DAY = 86_400.0


def diurnal_profile(hour: np.ndarray, peak_hour: float) -> np.ndarray:
    """``(1 + cos(2π (hour - peak_hour) / 24)) / 2``: 1 at ``peak_hour``, 0 twelve hours away
    (same shape as ``hour``; hours of the day, any real numbers)."""
    return 0.5 * (1.0 + np.cos(2.0 * np.pi * (np.asarray(hour, float) - peak_hour) / 24.0))


def production_day(
    *,
    duration_s: float = 1440.0,
    peak_rate_rps: float = 78.0,
    peak_to_trough_ratio: float = 4.0,
    peak_hour: float = 14.0,
    rate_noise_cv: float = 0.05,
    long_fraction_range: tuple[float, float] = (0.05, 0.078),
    reuse_probability_range: tuple[float, float] = (0.3, 0.45),
    reuse_peak_hour: float = 20.0,
    num_recent_contexts: int = 32,
    num_phases: int = 24,
    stationary_hour: float | None = None,
    num_system_prompts: int = 8,
    system_prompt_tokens: TruncatedLogNormal = TruncatedLogNormal(1000.0, 0.3, 500.0, 2000.0),
    short_body_tokens: TruncatedLogNormal = TruncatedLogNormal(800.0, 0.8, 64.0, 6000.0),
    follow_up_tokens: TruncatedLogNormal = TruncatedLogNormal(150.0, 0.8, 8.0, 1024.0),
    document_tokens: TruncatedLogNormal = TruncatedLogNormal(24000.0, 0.5, 8192.0, 64000.0),
    question_tokens: TruncatedLogNormal = TruncatedLogNormal(64.0, 0.8, 8.0, 512.0),
    output_tokens: TruncatedLogNormal = TruncatedLogNormal(200.0, 0.9, 1.0, 2048.0),
    kv_block_size_tokens: int = 512,
    seed: SeedLike = 0,
    name: str = "production-day",
) -> Workload:
    """One compressed production day (module docstring; every default is the
    ``reconfig/production-day-v1`` task's value).

    Time: request ``t`` [s] in ``[0, duration_s)`` is at hour ``24 t / duration_s`` of the day
    (midnight at t = 0); the compression factor is ``86,400 / duration_s`` (60 by default).

    Rate [requests/s]: ``r(t) = (trough + (peak_rate_rps - trough) u(t)) n(t)`` with ``trough =
    peak_rate_rps / peak_to_trough_ratio`` and ``u = diurnal_profile(hour, peak_hour)``; ``n(t)``
    is slow noise, log-normal factors of coefficient of variation ``rate_noise_cv`` drawn at every
    hour and interpolated linearly (0 = none). Arrivals: inhomogeneous Poisson (thinning). The
    default peak, 78 req/s, is 0.92 of the pool's capacity for the peak hour's mix, 84.9 req/s
    (``results/benchmark/production-day/README.md``: ``sustainable-slo`` capacity of 120 s of the
    ``stationary_hour=14`` slice, Vertumnus router, default pool ``cp4x6,cp2x8`` on 40 GPUs, mean over
    training seeds 0-4); ``peak_to_trough_ratio`` 4 (> 3, paper §2); ``peak_hour`` 14:00 (afternoon).

    Mix: an arrival is long with probability ``f(t) = f_hi - (f_hi - f_lo) u(t)`` for
    ``long_fraction_range = (f_lo, f_hi)`` (default 5-7.8 %, inside the paper's 4-8 %; the night's
    share near the paper's top, which makes the night's best pool CP-8-heavy). A new short context
    is a shared system prompt (``num_system_prompts`` = 8, Zipf-1 popularity, lengths
    ``system_prompt_tokens``, median 1,000, as ``phase_changes``) + a fresh body
    (``short_body_tokens``, median 800); a new long context is a fresh document
    (``document_tokens``, median 24k in [8,192, 64k], as ``phase_changes``' long prompts). A
    request is, with probability ``p(t) = p_lo + (p_hi - p_lo) diurnal_profile(hour,
    reuse_peak_hour)`` (``reuse_probability_range = (p_lo, p_hi)``, default 0.3-0.45, sized so that
    the hit rate stays inside the paper's 35-55 %; peak 20:00, an assumption: the paper gives the
    range, not the hour), a follow-up on one of the ``num_recent_contexts`` (32) latest new
    contexts of its class (uniformly): that context + a fresh suffix (``follow_up_tokens``, median
    150, for a short one, capped so that a short prompt stays < 8,192 tokens; ``question_tokens``,
    median 64, for a long one); otherwise it opens a new context and is that context + the suffix.
    The defaults give a token-weighted infinite-cache hit rate moving between ~36-42 % and
    ~49-54 % (2-hour bins; ``results/benchmark/production-day/README.md``,
    tests/workloads/test_production_day.py). Outputs: ``output_tokens`` (median 200, as
    ``phase_changes``).

    ``metadata``: ``phase_boundaries_s`` (``num_phases`` equal slices), ``phase_of_request``,
    ``is_long_request``, ``is_follow_up``, ``compression_factor``, ``rate_rps_at_phase_start``.

    Raises:
        ValueError: naming the parameter, on a non-positive duration or rate, a ratio < 1, a range
            outside [0, 1] or reversed, a bad count, an hour that is not finite, or more arrivals
            than :data:`envs.workloads.arrivals.MAX_EXPECTED_ARRIVALS`.
    """
    day_s = _check_positive("duration_s", duration_s)
    peak = _check_positive("peak_rate_rps", peak_rate_rps)
    ratio = _check_positive("peak_to_trough_ratio", peak_to_trough_ratio)
    if ratio < 1:
        raise ValueError(f"peak_to_trough_ratio must be >= 1, got {peak_to_trough_ratio!r}")
    for k, v in (("peak_hour", peak_hour), ("reuse_peak_hour", reuse_peak_hour), ("rate_noise_cv", rate_noise_cv)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"{k} must be a finite number, got {v!r}")
    if rate_noise_cv < 0:
        raise ValueError(f"rate_noise_cv must be >= 0, got {rate_noise_cv!r}")
    if stationary_hour is not None and (isinstance(stationary_hour, bool) or not isinstance(stationary_hour, (int, float))
                                        or not math.isfinite(stationary_hour)):
        raise ValueError(f"stationary_hour must be a finite number or None, got {stationary_hour!r}")
    f_lo, f_hi = _check_range("long_fraction_range", long_fraction_range, 0.0, 1.0)
    p_lo, p_hi = _check_range("reuse_probability_range", reuse_probability_range, 0.0, 1.0)
    num_recent = _check_count("num_recent_contexts", num_recent_contexts)
    num_phases = _check_count("num_phases", num_phases)
    _check_count("num_system_prompts", num_system_prompts)
    trough = peak / ratio
    sigma = math.sqrt(math.log1p(rate_noise_cv**2))
    rng = seeded_rng(seed)
    knots = np.exp(sigma * rng.standard_normal(25) - sigma**2 / 2.0)  # noise factors at hours 0..24
    max_noise = float(knots.max())
    if peak * max_noise * day_s > MAX_EXPECTED_ARRIVALS:
        raise ValueError(f"peak_rate_rps {peak:g} over duration_s {day_s:g} s is more than {MAX_EXPECTED_ARRIVALS:,} "
                         "arrivals to sample; lower the rate or the duration")

    def hour_of(t: np.ndarray) -> np.ndarray:
        if stationary_hour is not None:
            return np.full(np.shape(t), float(stationary_hour))
        return 24.0 * np.asarray(t, float) / day_s

    def rate_fn(t: np.ndarray) -> np.ndarray:
        h = hour_of(t)
        noise = np.interp(np.mod(h, 24.0), np.arange(25.0), knots)
        return (trough + (peak - trough) * diurnal_profile(h, peak_hour)) * noise

    hasher = BlockHasher(kv_block_size_tokens)
    bases = _shared_prefixes(hasher, system_prompt_tokens, rng, num_system_prompts)
    times = InhomogeneousPoissonArrivals(rate_fn, peak * max_noise).sample(day_s, rng)
    n = times.size
    hours = hour_of(times)
    is_long = rng.uniform(size=n) < f_hi - (f_hi - f_lo) * diurnal_profile(hours, peak_hour)
    is_follow = rng.uniform(size=n) < p_lo + (p_hi - p_lo) * diurnal_profile(hours, reuse_peak_hour)
    pick = rng.uniform(size=n)
    which = rng.choice(num_system_prompts, size=n, p=_popularity(num_system_prompts, 1.0))
    bodies = np.where(is_long, document_tokens.sample_tokens(rng, n), short_body_tokens.sample_tokens(rng, n))
    suffixes = np.where(is_long, question_tokens.sample_tokens(rng, n), follow_up_tokens.sample_tokens(rng, n))
    outs = output_tokens.sample_tokens(rng, n)
    recent: dict[bool, list] = {False: [], True: []}  # (context, session id) of the latest new contexts per class
    items = []
    followed: list[bool] = []
    num_sessions = 0
    for t, long_, follow, u, k, body, suffix, o in zip(times.tolist(), is_long.tolist(), is_follow.tolist(),
                                                      pick.tolist(), which.tolist(), bodies.tolist(),
                                                      suffixes.tolist(), outs.tolist()):
        pool = recent[long_]
        follow = follow and bool(pool)
        followed.append(follow)
        if follow:
            base, sid = pool[int(u * len(pool))]
        else:
            base = bases[k].fork() if not long_ else hasher.context()
            base.append_new(min(body, LONG_PROMPT_TOKENS - 1024 - base.num_tokens) if not long_ else body)
            base.block_hashes()
            sid = num_sessions
            num_sessions += 1
            pool.append((base, sid))
            if len(pool) > num_recent:
                pool.pop(0)
        ctx = base.fork()
        ctx.append_new(suffix if long_ else min(suffix, LONG_PROMPT_TOKENS - 1 - ctx.num_tokens))
        items.append((t, ctx.num_tokens, o, ctx.block_hashes(), sid))
    bounds = [day_s * i / num_phases for i in range(num_phases + 1)]
    phase = np.minimum((times * num_phases / day_s).astype(int), num_phases - 1)
    meta = {
        "generator": "production_day",
        "compression_factor": SECONDS_PER_DAY / day_s,
        "phase_boundaries_s": bounds,
        "phase_of_request": tuple(phase.tolist()),
        "is_long_request": tuple(bool(x) for x in is_long),
        "is_follow_up": tuple(followed),
        "rate_rps_at_phase_start": [float(x) for x in rate_fn(np.asarray(bounds[:-1]))],
        "stationary_hour": stationary_hour,
    }
    return _build(name, items, hasher.kv_block_size_tokens, f"synthetic:production_day(seed={seed})", meta)
