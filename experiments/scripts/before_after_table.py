"""Paired before/after table of two sets of ``cpgym compare --out`` folders run on the same rates
and seeds (e.g. a router before and after a fix, ``experiments/scripts/industry_routers.sh``).

For every workload folder ``W`` present under both ``BEFORE_DIR`` and ``AFTER_DIR``, the rows of
``W/results.csv`` (one per policy, rate and seed) are paired by (policy, rate point, seed); the
output has one row per workload, rate and policy: the seed means of mean / P90 TTFT [s], token-
weighted SLO attainment and prefix hit rate before and after, and the per-seed change of mean TTFT
``100 (after / before - 1)`` [%] with its mean and 95 % Student-t CI over the seeds
(:func:`policies.routing.evaluate.mean_ci95`)::

    python -m experiments.scripts.before_after_table BEFORE_DIR AFTER_DIR OUT.csv

Rate points are matched by ``results.csv``'s ``rate_point`` (the index of the requested rate: each
seed's measured rate may differ from it).

Raises (as a one-line error, exit status 2):
    ValueError: a folder without ``results.csv``, no workload in common, or a (policy, rate point)
        whose seeds differ between the two sides.
"""

from __future__ import annotations

import sys
from pathlib import Path

METRICS = ("mean_ttft_s", "p90_ttft_s", "slo_attainment_token_weighted", "prefix_hit_rate")


def _runs(folder: Path):
    import pandas as pd

    path = folder / "results.csv"
    if not path.is_file():
        raise ValueError(f"{path}: missing; expected the results.csv of `cpgym compare --out`")
    df = pd.read_csv(path)
    missing = [c for c in ("policy", "seed", "rate_point", "rate_rps", *METRICS) if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)}; expected the results.csv of `cpgym compare --out`")
    return df


def before_after(before_dir: Path, after_dir: Path):
    """The table (module docstring) as a DataFrame."""
    import pandas as pd

    from envs.metrics.stats import mean_ci95

    workloads = sorted(d.name for d in before_dir.iterdir() if d.is_dir() and (after_dir / d.name).is_dir())
    if not workloads:
        raise ValueError(f"no workload folder in both {before_dir} and {after_dir}")
    rows = []
    for w in workloads:
        b, a = _runs(before_dir / w), _runs(after_dir / w)
        m = b.merge(a, on=["policy", "rate_point", "seed"], suffixes=("_before", "_after"), how="outer", indicator=True)
        if (m["_merge"] != "both").any():
            bad = m[m["_merge"] != "both"].iloc[0]
            raise ValueError(f"{w}: policy {bad['policy']!r}, rate point {int(bad['rate_point'])}, seed {int(bad['seed'])} "
                             f"is in one side only; expected the same policies, rates and seeds before and after")
        for (policy, _), g in m.groupby(["policy", "rate_point"], sort=False):
            change, half = mean_ci95(list(100.0 * (g["mean_ttft_s_after"] / g["mean_ttft_s_before"] - 1.0)))
            row = {"workload": w, "rate_rps": float(g["rate_rps_after"].mean()), "policy": policy, "num_seeds": len(g)}
            for k in METRICS:
                row[f"{k}_before"] = float(g[f"{k}_before"].mean())
                row[f"{k}_after"] = float(g[f"{k}_after"].mean())
            row.update(mean_ttft_pct_change=change, ci_low=change - half, ci_high=change + half)
            rows.append(row)
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 3:
        print("usage: python -m experiments.scripts.before_after_table BEFORE_DIR AFTER_DIR OUT.csv", file=sys.stderr)
        return 2
    try:
        table = before_after(Path(argv[0]), Path(argv[1]))
    except ValueError as exc:
        print(f"before_after_table: error: {exc}", file=sys.stderr)
        return 2
    table.to_csv(argv[2], index=False)
    print(f"wrote {argv[2]} ({len(table)} rows)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
