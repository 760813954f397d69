"""Over-dispersion of a sweep spec's arrivals against Poisson counts: for each cell's workload
(one per seed and rate; policies share it), the variance / mean of the arrival counts in bins of
``--bins-s`` seconds (1 for a Poisson process at any bin size; a trace whose rate wanders gives
more at larger bins). It is what ``ControllerConfig.target_trend_noise="measured"`` estimates
online from the window rates (``baselines/controller.py``, ``results/dynamic-phases/trend-noise/``).

Usage (repo root)::

    python -m experiments.scripts.arrival_dispersion experiments/specs/conversation-steady-trend-noise.yaml --bins-s 1,5,20
"""

from __future__ import annotations

import argparse
import sys

import numpy as np


def dispersion(arrivals_s: np.ndarray, bin_s: float, start_s: float, end_s: float) -> float:
    """Variance / mean of the counts of ``arrivals_s`` [s] in consecutive ``bin_s`` bins over
    ``[start_s, end_s)`` (a last partial bin is dropped); NaN with fewer than two bins or no arrival.

    Raises:
        ValueError: ``bin_s`` not > 0.
    """
    if not bin_s > 0:
        raise ValueError(f"bin_s must be > 0, got {bin_s}")
    num_bins = int((end_s - start_s) // bin_s)
    if num_bins < 2:
        return float("nan")
    counts = np.histogram(arrivals_s, bins=start_s + bin_s * np.arange(num_bins + 1))[0]
    mean = counts.mean()
    return float(counts.var() / mean) if mean > 0 else float("nan")


def main(argv: list[str] | None = None) -> int:
    from experiments.spec.loader import load_spec

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("spec", help="sweep spec (YAML); one row per distinct workload of its cells")
    p.add_argument("--bins-s", default="1,5,20", help="bin sizes [s], comma-separated (default 1,5,20)")
    args = p.parse_args(argv)
    try:
        bins_s = [float(b) for b in args.bins_s.split(",")]
    except ValueError:
        p.error(f"--bins-s: expected comma-separated numbers of seconds, got {args.bins_s!r}")
    if not all(b > 0 and np.isfinite(b) for b in bins_s):
        p.error(f"--bins-s: every bin size must be a finite number > 0, got {args.bins_s!r}")
    try:
        cells = load_spec(args.spec).resolve()
    except (OSError, ValueError) as exc:
        print(f"arrival_dispersion: {exc}", file=sys.stderr)
        return 2
    seen = set()
    print("workload,seed," + ",".join(f"dispersion_{b:g}s" for b in bins_s))
    for cell in cells:
        key = (cell.workload.label, cell.config.seed)
        if key in seen:
            continue
        seen.add(key)
        wl = cell.workload.build()
        arrivals = np.array([r.arrival_time_s for r in wl.requests], dtype=float)
        start, end = (float(arrivals.min()), float(arrivals.max())) if len(arrivals) else (0.0, 0.0)
        values = [dispersion(arrivals, b, start, end) for b in bins_s]
        print(f"{cell.workload.label},{cell.config.seed}," + ",".join(f"{v:.3f}" for v in values))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
