"""Relative-error least-squares fit of the cost model to measured prefill times (numpy only).

Model (paper §2.2 / §3.2): ``E_C(R, P) = d + a*R + b*P + (c*R + alpha*W(R, P)) / C`` with
``W = R*P + R*(R+1)/2``; it is linear in ``x = (d, a, b, c, alpha)`` with features
``f = (1, R, P, R/C, W/C)``. The fit minimises the squared *relative* error
``sum_i ((f_i . x - y_i) / y_i)^2`` subject to ``x >= 0`` (non-negative least squares on the
rows scaled by ``1/y_i``, Lawson & Hanson, "Solving Least Squares Problems", 1974, ch. 23),
so that short and long prefills weigh alike, as the router's decisions depend on ratios of
predicted times. Columns are scaled to unit norm before solving (the features span ~10 orders
of magnitude) and the solution is scaled back.

The five coefficients are determined only by samples with at least two distinct values of each of
R, P and C (and features of full column rank, :func:`check_identifiable`): with one CP degree
``a*R`` and ``c*R/C`` are the same column, with one P ``b*P`` is a constant (merged into ``d``),
with one R ``a*R`` is. The fit then still reports an exact fit on the samples while the split
between the collinear coefficients -- which decides how the time scales with C, i.e. what the
simulator's router compares -- is arbitrary, so such samples are refused.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

import numpy as np

COEFFICIENT_NAMES = ("d_s", "a_s_per_token", "b_s_per_token", "c_s_per_token", "alpha_s_per_pair")
DEFAULT_CACHE_RATIO_EDGES = (0.0, 0.5)
DEFAULT_LENGTH_EDGES_TOKENS = (1024, 4096, 16384, 65536)
#: Smallest accepted ratio of the smallest to the largest singular value of the column-scaled
#: relative-error design matrix: legitimate grids are above 1e-2 (a 2 x 2 x 2 grid of R, P, C is
#: about 0.035), collinear features are at rounding level (~1e-16).
IDENTIFIABLE_RTOL = 1e-8


def features(num_new_tokens: int, num_cached_tokens: int, degree: int) -> list[float]:
    """``(1, R, P, R/C, W(R,P)/C)``."""
    r, p, c = num_new_tokens, num_cached_tokens, degree
    return [1.0, float(r), float(p), r / c, (r * p + r * (r + 1) / 2) / c]


def nnls(a: np.ndarray, b: np.ndarray, max_iter: int | None = None) -> np.ndarray:
    """Lawson-Hanson active-set solution of ``min ||a x - b||_2`` s.t. ``x >= 0``.

    Args:
        a: ``[m, n]``; b: ``[m]``.
        max_iter: bound on outer iterations (default ``3 n``).

    Returns:
        ``x [n]`` >= 0.

    Raises:
        ValueError: on mismatched shapes or non-finite input.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.ndim != 2 or b.shape != (a.shape[0],):
        raise ValueError(f"nnls needs a [m, n] and b [m], got {a.shape} and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("nnls input must be finite")
    m, n = a.shape
    max_iter = 3 * n if max_iter is None else max_iter
    tol = 10 * np.finfo(np.float64).eps * np.abs(a).sum(axis=0).max(initial=0.0) * max(m, n)
    passive = np.zeros(n, dtype=bool)
    x = np.zeros(n)
    w = a.T @ (b - a @ x)
    for _ in range(max_iter):
        if passive.all() or not (w[~passive] > tol).any():
            break
        j = int(np.argmax(np.where(passive, -np.inf, w)))
        passive[j] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            neg = passive & (z <= 0)
            alpha = np.min(x[neg] / (x[neg] - z[neg]))
            x = x + alpha * (z - x)
            passive &= x > tol
            x[~passive] = 0.0
            if not passive.any():
                break
        w = a.T @ (b - a @ x)
    return x


@dataclass
class FitResult:
    """Fitted coefficients and their errors on the fitted samples.

    Attributes:
        coefficients: ``{d_s, a_s_per_token, b_s_per_token, c_s_per_token, alpha_s_per_pair}`` >= 0.
        mape: mean ``|relative error|`` (a fraction, 0.05 = 5 %).
        max_abs_rel_err: max ``|relative error|``.
        by_degree / by_cache_ratio / by_length: bucket label -> ``{"n", "mape", "max", "bias"}``
            (bias = mean signed relative error; > 0 means over-prediction).
        rel_errors: per-sample signed relative errors ``(pred - y) / y``.
    """

    coefficients: dict
    mape: float
    max_abs_rel_err: float
    by_degree: dict = field(default_factory=dict)
    by_cache_ratio: dict = field(default_factory=dict)
    by_length: dict = field(default_factory=dict)
    rel_errors: list = field(default_factory=list)

    def summary(self) -> dict:
        return {"mape": self.mape, "max_abs_rel_err": self.max_abs_rel_err, "by_degree": self.by_degree,
                "by_cache_ratio": self.by_cache_ratio, "by_length": self.by_length}


def _bucket_stats(errors: np.ndarray) -> dict:
    return {"n": int(errors.size), "mape": float(np.abs(errors).mean()), "max": float(np.abs(errors).max()),
            "bias": float(errors.mean())}


def cache_ratio_label(num_new_tokens: int, num_cached_tokens: int, edges=DEFAULT_CACHE_RATIO_EDGES) -> str:
    """Bucket of ``P / (P + R)``: ``"0"`` for no cache, then ``(e_i, e_{i+1}]`` for ``edges[1:]``, then ``(e_last, 1)``."""
    ratio = num_cached_tokens / (num_cached_tokens + num_new_tokens)
    if ratio == 0:
        return "0"
    lo = edges[0]
    for hi in edges[1:]:
        if ratio <= hi:
            return f"({lo:g},{hi:g}]"
        lo = hi
    return f"({lo:g},1)"


def length_label(num_tokens: int, edges=DEFAULT_LENGTH_EDGES_TOKENS) -> str:
    """Bucket of the prompt length ``L = P + R``: ``"<e0"``, ``"[e_i,e_{i+1})"``, ``">=e_last"``."""
    if num_tokens < edges[0]:
        return f"<{edges[0]}"
    for lo, hi in zip(edges, edges[1:]):
        if num_tokens < hi:
            return f"[{lo},{hi})"
    return f">={edges[-1]}"


def check_samples(samples: list[tuple[int, int, int, float]]) -> None:
    """Raises ValueError naming the first sample that is not ``(R, P, C, time_s)`` with integers
    ``R >= 1``, ``P >= 0``, ``C >= 1`` and a finite ``time_s > 0`` [s] (an infinite time gave a NaN
    error table, C = 0 a ZeroDivisionError, a NaN time an error that did not say which sample)."""
    def is_int(v) -> bool:
        return isinstance(v, numbers.Integral) and not isinstance(v, bool)

    for i, sample in enumerate(samples):
        if len(sample) != 4:
            raise ValueError(f"sample {i} must be (R, P, C, time_s), got {sample!r}")
        r, p, c, t = sample
        if not (is_int(r) and r >= 1 and is_int(p) and p >= 0 and is_int(c) and c >= 1):
            raise ValueError(f"sample {i} {tuple(sample)!r}: R must be an integer >= 1, P an integer >= 0 "
                             "and C an integer >= 1")
        if isinstance(t, bool) or not isinstance(t, numbers.Real) or not (math.isfinite(t) and t > 0):
            raise ValueError(f"sample {i} (R={r}, P={p}, C={c}): time_s must be a finite number > 0, got {t!r}")


def evaluate(coefficients: dict, samples: list[tuple[int, int, int, float]]) -> FitResult:
    """Errors of ``coefficients`` on ``samples`` = ``[(R, P, C, time_s), ...]``.

    Raises:
        ValueError: on an empty sample list or a bad sample (:func:`check_samples`).
    """
    if not samples:
        raise ValueError("no samples")
    check_samples(samples)
    x = np.array([coefficients[k] for k in COEFFICIENT_NAMES])
    f = np.array([features(r, p, c) for r, p, c, _ in samples])
    y = np.array([t for *_, t in samples], dtype=np.float64)
    err = (f @ x - y) / y
    res = FitResult(coefficients=dict(coefficients), mape=float(np.abs(err).mean()), max_abs_rel_err=float(np.abs(err).max()),
                    rel_errors=[float(e) for e in err])
    for attr, key in (("by_degree", lambda s: f"C={s[2]}"), ("by_cache_ratio", lambda s: cache_ratio_label(s[0], s[1])),
                      ("by_length", lambda s: length_label(s[0] + s[1]))):
        labels = [key(s) for s in samples]
        getattr(res, attr).update({lab: _bucket_stats(err[[i for i, x in enumerate(labels) if x == lab]])
                                   for lab in dict.fromkeys(labels)})
    return res


def check_identifiable(samples: list[tuple[int, int, int, float]]) -> None:
    """Raises ValueError unless ``samples`` have at least two distinct CP degrees C, cached-token
    counts P and new-token counts R, the ones missing named (module docstring: otherwise some
    coefficients are collinear and their fitted split is arbitrary)."""
    needs = ((2, "CP degrees C (to separate a, the per-token cost CP does not divide, from c, the one it divides)"),
             (1, "cached-token counts P (to determine b)"), (0, "new-token counts R (to separate a from d)"))
    missing = []
    for j, what in needs:
        values = sorted({s[j] for s in samples})
        if len(values) < 2:
            missing.append(f"at least 2 distinct {what}, got only {values[0] if values else 'none'}")
    if missing:
        raise ValueError("the samples do not determine the cost model's 5 coefficients: need " + "; ".join(missing))


def fit_cost_model(samples: list[tuple[int, int, int, float]]) -> FitResult:
    """Non-negative relative-error least-squares fit of ``(d, a, b, c, alpha)``.

    Args:
        samples: ``[(R, P, C, time_s), ...]`` with ``R >= 1``, ``time_s > 0``.

    Returns:
        :class:`FitResult` with the coefficients and the fit errors on the same samples.

    Raises:
        ValueError: on fewer than 5 samples, a bad sample (:func:`check_samples`), or samples that
            do not determine the coefficients (:func:`check_identifiable`, or collinear features).
    """
    if len(samples) < len(COEFFICIENT_NAMES):
        raise ValueError(f"need at least {len(COEFFICIENT_NAMES)} samples to fit 5 coefficients, got {len(samples)}")
    check_samples(samples)
    check_identifiable(samples)
    f = np.array([features(r, p, c) for r, p, c, _ in samples])
    y = np.array([t for *_, t in samples], dtype=np.float64)
    a = f / y[:, None]
    norms = np.linalg.norm(a, axis=0)
    sv = np.linalg.svd(a / norms, compute_uv=False)
    if sv[-1] <= IDENTIFIABLE_RTOL * sv[0]:
        raise ValueError(f"the samples do not determine the cost model's 5 coefficients: their features (1, R, P, R/C, W/C) "
                         f"are collinear (singular value ratio {sv[-1] / sv[0]:.1e}); profile a full grid of R x P x C")
    x = nnls(a / norms, np.ones_like(y)) / norms
    return evaluate(dict(zip(COEFFICIENT_NAMES, (float(v) for v in x))), samples)


def format_fit_table(fit: FitResult) -> str:
    """Plain-text table of the fit errors (percent)."""
    lines = ["coefficients: " + ", ".join(f"{k}={v:.4g}" for k, v in fit.coefficients.items()),
             f"{'bucket':<22} {'n':>4} {'MAPE %':>8} {'max %':>8} {'bias %':>8}",
             f"{'all':<22} {len(fit.rel_errors):>4} {100 * fit.mape:8.2f} {100 * fit.max_abs_rel_err:8.2f} "
             f"{100 * float(np.mean(fit.rel_errors)):8.2f}"]
    for title, table in (("degree", fit.by_degree), ("cache ratio", fit.by_cache_ratio), ("length", fit.by_length)):
        for label, st in table.items():
            lines.append(f"{title + ' ' + label:<22} {st['n']:>4} {100 * st['mape']:8.2f} {100 * st['max']:8.2f} "
                         f"{100 * st['bias']:8.2f}")
    return "\n".join(lines)
