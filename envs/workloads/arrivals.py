"""Reusable, seeded arrival processes.

Each process is a small frozen dataclass with ``sample(duration_s, rng) -> np.ndarray`` that
returns sorted arrival times in ``[0, duration_s)`` [s]. The random generator is always passed
in (``numpy.random.default_rng(seed)`` made by the caller); nothing here holds RNG state.

* :class:`PoissonArrivals` — homogeneous Poisson (exponential inter-arrivals, CV = 1), the
  arrival model of the Mooncake FAST'25 synthetic trace (SOURCES.md: inter-arrival CV 1.01).
* :class:`GammaArrivals` — renewal process with Gamma inter-arrivals of a chosen CV; CV > 1 is
  bursty (the Azure 2023 code trace has CV 13.15, the conversation trace 1.09, SOURCES.md).
* :class:`MMPPArrivals` — Markov-modulated Poisson: the rate switches between levels, each held
  for an exponential sojourn; the classic model of bursty request traffic.
* :class:`InhomogeneousPoissonArrivals` — Poisson with a time-varying rate ``rate_fn(t)``
  (Lewis-Shedler thinning), e.g. rising rate within phases.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import numpy as np

__all__ = [
    "ArrivalProcess",
    "PoissonArrivals",
    "GammaArrivals",
    "MMPPArrivals",
    "InhomogeneousPoissonArrivals",
    "inter_arrival_cv",
]


class ArrivalProcess(Protocol):
    """Anything with ``sample(duration_s, rng)`` returning sorted arrival times in [0, duration_s) [s]."""

    def sample(self, duration_s: float, rng: np.random.Generator) -> np.ndarray: ...


def _check_duration(duration_s: float) -> float:
    d = float(duration_s)
    if not math.isfinite(d) or d <= 0:
        raise ValueError(f"duration_s must be a finite number > 0, got {duration_s!r}")
    return d


def _check_rate(name: str, rate: float) -> float:
    r = float(rate)
    if not math.isfinite(r) or r <= 0:
        raise ValueError(f"{name} must be a finite number > 0 [requests/s], got {rate!r}")
    return r


#: The most arrivals a process samples at once (mean rate x duration): beyond it a generator is
#: refused before allocating (a rate of 1e9 req/s over 10 s tried to allocate 182 GiB of gaps and
#: died with a numpy traceback); a simulation of 10 million requests already takes hours.
MAX_EXPECTED_ARRIVALS = 10_000_000


def _renewal(duration_s: float, mean_gap_s: float, draw: Callable[[int], np.ndarray]) -> np.ndarray:
    """Cumulative sums of inter-arrival gaps drawn in chunks until ``duration_s`` is passed.

    Raises:
        ValueError: if ``duration_s / mean_gap_s`` exceeds :data:`MAX_EXPECTED_ARRIVALS`.
    """
    expected = duration_s / mean_gap_s
    if expected > MAX_EXPECTED_ARRIVALS:
        raise ValueError(f"arrivals: rate {1.0 / mean_gap_s:g} req/s over duration_s {duration_s:g} s is {expected:.3g} "
                         f"expected requests, more than {MAX_EXPECTED_ARRIVALS:,}; lower the rate or the duration")
    chunks: list[np.ndarray] = []
    t = 0.0
    chunk = max(16, int(1.2 * duration_s / mean_gap_s) + 16)
    while True:
        times = t + np.cumsum(draw(chunk))
        chunks.append(times)
        t = float(times[-1])
        if t >= duration_s:
            break
    out = np.concatenate(chunks)
    return out[out < duration_s]


@dataclass(frozen=True)
class PoissonArrivals:
    """Homogeneous Poisson arrivals at ``rate_rps`` [requests/s] (exponential gaps, CV = 1)."""

    rate_rps: float

    def __post_init__(self) -> None:
        _check_rate("rate_rps", self.rate_rps)

    def sample(self, duration_s: float, rng: np.random.Generator) -> np.ndarray:
        d = _check_duration(duration_s)
        mean_gap_s = 1.0 / self.rate_rps
        return _renewal(d, mean_gap_s, lambda n: rng.exponential(mean_gap_s, n))


@dataclass(frozen=True)
class GammaArrivals:
    """Renewal arrivals with Gamma inter-arrival times: mean ``1/rate_rps`` [s], coefficient of variation ``cv``.

    Shape ``k = 1/cv**2``, scale ``1/(rate_rps*k)``; ``cv = 1`` is Poisson, ``cv > 1`` is bursty
    (many short gaps, a few long silences), ``cv < 1`` is more regular than Poisson.
    """

    rate_rps: float
    cv: float = 3.0

    def __post_init__(self) -> None:
        _check_rate("rate_rps", self.rate_rps)
        if not math.isfinite(self.cv) or self.cv <= 0:
            raise ValueError(f"cv must be a finite number > 0, got {self.cv!r}")

    def sample(self, duration_s: float, rng: np.random.Generator) -> np.ndarray:
        d = _check_duration(duration_s)
        shape = 1.0 / self.cv**2
        mean_gap_s = 1.0 / self.rate_rps
        scale = mean_gap_s / shape
        return _renewal(d, mean_gap_s, lambda n: rng.gamma(shape, scale, n))


@dataclass(frozen=True)
class MMPPArrivals:
    """Markov-modulated Poisson arrivals.

    The process stays in state ``i`` (Poisson at ``rates_rps[i]`` [requests/s]) for an
    exponential sojourn of mean ``mean_sojourn_s[i]`` [s], then jumps to a uniformly chosen other
    state. Starts in a state drawn from the stationary distribution (proportional to the mean
    sojourns). The long-run mean rate is ``sum(r_i * s_i) / sum(s_i)``; e.g. rates (2, 20) with
    sojourns (60, 10) s give 4.57 req/s with 10 s bursts at 20 req/s.
    """

    rates_rps: Sequence[float]
    mean_sojourn_s: Sequence[float]

    def __post_init__(self) -> None:
        if len(self.rates_rps) < 1 or len(self.rates_rps) != len(self.mean_sojourn_s):
            raise ValueError("rates_rps and mean_sojourn_s must be non-empty and of equal length")
        for r in self.rates_rps:
            if not math.isfinite(r) or r < 0:
                raise ValueError(f"rates_rps must be finite and >= 0, got {list(self.rates_rps)}")
        for s in self.mean_sojourn_s:
            _check_rate("mean_sojourn_s entries", s)
        if max(self.rates_rps) <= 0:
            raise ValueError("at least one of rates_rps must be > 0")

    @property
    def mean_rate_rps(self) -> float:
        """Long-run mean arrival rate [requests/s]."""
        s = np.asarray(self.mean_sojourn_s, float)
        return float(np.dot(np.asarray(self.rates_rps, float), s) / s.sum())

    def sample(self, duration_s: float, rng: np.random.Generator) -> np.ndarray:
        d = _check_duration(duration_s)
        rates = np.asarray(self.rates_rps, float)
        sojourns = np.asarray(self.mean_sojourn_s, float)
        num_states = len(rates)
        state = int(rng.choice(num_states, p=sojourns / sojourns.sum()))
        t = 0.0
        out: list[np.ndarray] = []
        while t < d:
            hold = float(rng.exponential(sojourns[state]))
            end = min(d, t + hold)
            if rates[state] > 0:
                n = int(rng.poisson(rates[state] * (end - t)))
                out.append(np.sort(rng.uniform(t, end, n)))
            t = end
            if num_states > 1:
                nxt = int(rng.integers(num_states - 1))
                state = nxt if nxt < state else nxt + 1
        return np.concatenate(out) if out else np.empty(0)


@dataclass(frozen=True)
class InhomogeneousPoissonArrivals:
    """Poisson arrivals with time-varying rate ``rate_fn(t_s)`` [requests/s] (vectorised over t).

    Sampled by thinning a Poisson process at ``max_rate_rps``, which must bound ``rate_fn`` on
    ``[0, duration_s)`` (checked; a violation raises ``ValueError``).
    """

    rate_fn: Callable[[np.ndarray], np.ndarray]
    max_rate_rps: float

    def __post_init__(self) -> None:
        _check_rate("max_rate_rps", self.max_rate_rps)

    def sample(self, duration_s: float, rng: np.random.Generator) -> np.ndarray:
        d = _check_duration(duration_s)
        cand = PoissonArrivals(self.max_rate_rps).sample(d, rng)
        rate = np.asarray(self.rate_fn(cand), float)
        if rate.size and (np.any(rate < 0) or np.any(rate > self.max_rate_rps * (1 + 1e-9))):
            raise ValueError(f"rate_fn must stay within [0, max_rate_rps={self.max_rate_rps}] on [0, {d})")
        keep = rng.uniform(0.0, self.max_rate_rps, cand.size) < rate
        return cand[keep]


def inter_arrival_cv(arrival_times_s: np.ndarray) -> float:
    """Coefficient of variation (std/mean) of inter-arrival gaps; nan for fewer than 3 arrivals."""
    gaps = np.diff(np.asarray(arrival_times_s, float))
    if gaps.size < 2 or gaps.mean() <= 0:
        return float("nan")
    return float(gaps.std() / gaps.mean())
