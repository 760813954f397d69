"""``cpgym tune`` flags: the declarations the parser reads (the run: :mod:`experiments.commands.tune`)."""

from __future__ import annotations

import argparse

from experiments.flags.common import add_sim_arguments
from policies.routing.protocol import TUNE_BETAS, TUNE_LAMBDAS


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("heuristic", choices=("vertumnus",), help="the heuristic to tune (the Vertumnus router)")
    add_scenario_arguments(p)
    add_sim_arguments(p)
    p.add_argument("--betas", default=",".join(f"{b:g}" for b in TUNE_BETAS), help="beta grid (comma-separated, >= 1)")
    p.add_argument("--lambdas", default=",".join(f"{x:g}" for x in TUNE_LAMBDAS), help="lambda grid (comma-separated, >= 0)")
    p.add_argument("--max-windows", type=int, metavar="N",
                   help="tune on at most N training windows per cell, evenly spread (policies.routing.protocol.spread_subset; "
                        "default all)")
    p.add_argument("--out", metavar="JSON", required=True,
                   help="where to write the tuned parameters per cell (rewritten after each cell: a run stopped midway "
                        "keeps its finished cells)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def add_scenario_arguments(p: argparse.ArgumentParser) -> None:
    """Workload, load and window flags shared by ``tune`` and ``evaluate`` (protocol mode)."""
    g = p.add_argument_group("scenario (policies.routing.protocol: train/validation/test windows)")
    src = g.add_mutually_exclusive_group()
    src.add_argument("--trace", metavar="PATH", help="trace file (default: the Mooncake conversation trace)")
    src.add_argument("--workload", metavar="NAME", help="named synthetic workload")
    g.add_argument("--loads", metavar="F,F",
                   help="loads as fractions of capacity (policies.routing.protocol.capacity_rps), e.g. 0.7,0.9")
    g.add_argument("--target-rps", type=float, help="absolute arrival rate [requests/s] instead of --loads")
    g.add_argument("--episode-window-s", type=float, help="window length [s] (protocol default 10)")
    g.add_argument("--warmup-s", type=float, default=30.0, help="warm-up trace before each window [s] (default 30)")
