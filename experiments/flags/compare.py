"""``cpgym compare`` flags: the declarations the parser reads (the run: :mod:`experiments.commands.compare`)."""

from __future__ import annotations

import argparse

from baselines.registry import SUITES
from experiments.flags.capacity import add_capacity_arguments
from experiments.flags.common import add_sim_arguments, add_workload_arguments


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_workload_arguments(p)
    add_sim_arguments(p, seed=False)  # the run seeds are --seeds
    suites = "; ".join(f"{k}: {', '.join(v)}" for k, v in SUITES.items())
    p.add_argument("--suite", default="paper",
                   help=f"a suite, or comma-separated suite/policy names (default paper); suites: all (every policy of "
                        f"cpgym simulate --list-policies); {suites}")
    rates = p.add_mutually_exclusive_group()
    rates.add_argument("--rates", metavar="R1,R2,...", help="target mean request rates [requests/s], e.g. 10,20,40")
    rates.add_argument("--rate-scales", metavar="X1,X2,...", help="multiply the workload's native rate by each factor")
    rates.add_argument("--loads", metavar="F1,F2,...",
                       help="fractions of the strongest static baseline's capacity, e.g. 0.5,0.7,0.85,0.95")
    p.add_argument("--label-overload", action="store_true",
                   help="measure each policy's capacity and label rates above it 'overloaded'")

    add_capacity_arguments(p)
    p.add_argument("--seeds", default="0", help="comma-separated run seeds (default 0)")
    p.add_argument("--jobs", type=int, default=1, help="parallel simulation processes (default 1)")
    p.add_argument("--out", metavar="DIR", help="write under DIR: results.csv and results.parquet (one row per policy, rate "
                   "and seed), summary.csv (seed means), vertumnus_vs_strongest.csv, compare.png, provenance.json, and "
                   "with --beta/--lambda sweep.csv; provenance.json first and results.csv after each run, so a run "
                   "stopped midway keeps its finished runs (the other files need every run)")
    p.add_argument("--format", choices=("table", "json"), default="table", help="stdout format (default table)")
    p.add_argument("--quiet", action="store_true",
                   help="no per-probe capacity progress lines on stderr (printed with --loads / --label-overload, in "
                        "either --format); the capacity the loads refer to is still stated")
    p.add_argument("--beta", metavar="B1,B2,...",
                   help="sweep: add vertumnus-router[beta=B,lambda=L] variants (the router alone) for these beta "
                        "values (>= 1)")
    p.add_argument("--lambda", dest="lambda_", metavar="L1,L2,...",
                   help="sweep: add vertumnus-router[beta=B,lambda=L] variants (the router alone) for these lambda "
                        "values (>= 0)")
