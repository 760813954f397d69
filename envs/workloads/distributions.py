"""Token-count and duration distributions of the synthetic generators
(:mod:`envs.workloads.synthetic`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["LEVAL_DOC_TOKENS", "SeedLike", "TruncatedLogNormal", "check_seed", "seeded_rng"]

#: A generator seed: an int or a ``numpy.random.SeedSequence``.
SeedLike = int | np.random.SeedSequence


def check_seed(seed: SeedLike) -> SeedLike:
    """``seed`` itself if it is an integer >= 0 or a ``numpy.random.SeedSequence``.

    Raises:
        ValueError: naming ``seed`` otherwise (``None`` would draw fresh OS entropy, a different
            workload on every call; a bool, float or negative number is refused too).
    """
    if isinstance(seed, np.random.SeedSequence):
        return seed
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0 or a numpy.random.SeedSequence, got {seed!r}")
    return seed


def seeded_rng(seed: SeedLike) -> np.random.Generator:
    """``numpy.random.default_rng(seed)`` after :func:`check_seed` (raises its ValueError)."""
    return np.random.default_rng(check_seed(seed))


@dataclass(frozen=True)
class TruncatedLogNormal:
    """``shift + median · exp(sigma · Z)`` (Z standard normal), redrawn until inside ``[low, high]``.

    Used for token counts (rounded to integers by :meth:`sample_tokens`) and durations [s]. The
    mean of the untruncated law is ``shift + median · exp(sigma²/2)``.
    """

    median: float
    sigma: float
    low: float
    high: float
    shift: float = 0.0

    def __post_init__(self) -> None:
        for k in ("median", "sigma", "low", "high", "shift"):
            if not math.isfinite(getattr(self, k)):
                raise ValueError(f"TruncatedLogNormal.{k} must be finite, got {getattr(self, k)!r}")
        if self.median <= 0 or self.sigma < 0 or self.low > self.high:
            raise ValueError(f"invalid TruncatedLogNormal({self.median}, {self.sigma}, {self.low}, {self.high}, "
                             f"shift={self.shift}): need median > 0, sigma >= 0, low <= high")
        if self.high <= self.shift:
            raise ValueError(f"TruncatedLogNormal: high={self.high} must exceed shift={self.shift}")

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` draws (float)."""
        out = self.shift + self.median * np.exp(self.sigma * rng.standard_normal(size))
        for _ in range(64):
            bad = (out < self.low) | (out > self.high)
            nbad = int(bad.sum())
            if not nbad:
                break
            out[bad] = self.shift + self.median * np.exp(self.sigma * rng.standard_normal(nbad))
        return np.clip(out, self.low, self.high)

    def sample_tokens(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` draws rounded to integer token counts, at least 1."""
        return np.maximum(1, np.rint(self.sample(rng, size))).astype(np.int64)


#: L-Eval-like document length [tokens]: ``5000 + LogNormal(median 2000, sigma 1.7)`` in
#: [5000, 60000]. Gives mean ~10.2k, p50 ~6.9k, p90 ~19.4k, matching the derived L-Eval lengths
#: (SOURCES.md: request mean 10,174, p50 6,962, p90 20,206, max 58,832).
LEVAL_DOC_TOKENS = TruncatedLogNormal(2000.0, 1.7, 5000.0, 60000.0, shift=5000.0)
