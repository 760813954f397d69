"""Confidence intervals of every cpgym comparison: one Student-t table, the mean with its 95 %
half-width, and the paired-difference interval.

Values that are ``None`` or NaN are dropped first (a run that recorded no such metric).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

#: Two-sided 95 % Student-t quantiles t(0.975, df) for df = 1..30 (standard table, e.g. NIST/SEMATECH
#: e-Handbook of Statistical Methods, 1.3.6.7.2); df > 30 uses the normal quantile 1.96.
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
NORMAL_Q975 = 1.96


def t975(df: int) -> float:
    """The two-sided 95 % Student-t quantile for ``df >= 1`` degrees of freedom (:data:`T975`)."""
    return T975[df - 1] if df <= len(T975) else NORMAL_Q975


def finite_values(values) -> np.ndarray:
    """``values`` without ``None`` and NaN, as a float array (shape ``(n,)``)."""
    return np.asarray([v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))], dtype=float)


def mean_ci95(values) -> tuple[float, float]:
    """``(mean, half-width of the 95 % CI)`` of the mean (Student t over the ``n`` finite values;
    NaN half-width for ``n < 2``; NaN mean for ``n == 0``).

    Values that are all equal give exactly that value and a half-width of exactly 0 (the float
    mean and standard deviation gave e.g. 6.8e-16, printed as ``1.528 [1.528, 1.528]``); so do
    values apart by float rounding only (16 ulps of the largest: e.g. one ratio computed two ways)."""
    x = finite_values(values)
    n = len(x)
    if n == 0:
        return math.nan, math.nan
    if n < 2:
        return float(x.mean()), math.nan
    spread = float(x.max() - x.min())
    if spread <= 16 * np.finfo(float).eps * float(np.abs(x).max()):  # equal, or apart by float rounding only
        return (float(x[0]) if spread == 0 else float(x.mean())), 0.0
    return float(x.mean()), float(t975(n - 1) * x.std(ddof=1) / math.sqrt(n))


def ci_text(value: float, half_width: float, fmt: str = "{:.3f}") -> str:
    """``value ± half_width`` in ``fmt``; the value alone when there is no interval (one value,
    NaN) or it has zero width (every value the same); ``-`` for a NaN value."""
    if value != value:
        return "-"
    s = fmt.format(value)
    return s if half_width != half_width or half_width == 0 else s + " ± " + fmt.replace("+", "").format(half_width)


def ci95_halfwidth(values) -> float:
    """Half-width of the 95 % Student-t confidence interval of the mean; NaN for fewer than 2 values."""
    return mean_ci95(values)[1]


def paired_ci(values: Sequence[float]) -> tuple[float, float, float]:
    """``(mean, ci_low, ci_high)`` of the 95 % Student-t interval of the mean of paired differences."""
    m, h = mean_ci95(list(values))
    return m, m - h, m + h


__all__ = ["NORMAL_Q975", "T975", "ci95_halfwidth", "ci_text", "finite_values", "mean_ci95", "paired_ci", "t975"]
