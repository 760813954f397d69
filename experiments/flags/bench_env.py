"""``cpgym bench env`` flags: the declarations the parser reads (the run: :mod:`experiments.commands.bench_env`)."""

from __future__ import annotations

import argparse

from envs.sim.options import add_config_arguments
from experiments.benchmarks import EnvBenchConfig
from experiments.flags.common import add_sim_arguments


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("episodes")
    g.add_argument("--trace", metavar="PATH", help="trace (default: the Mooncake conversation trace)")
    g.add_argument("--target-rps", type=float, default=12.0,
                   help="time-scale the trace to this rate [requests/s] (default 12)")
    g.add_argument("--episode-window-s", type=float, default=60.0, help="episode window [s] (default 60)")
    add_sim_arguments(p)
    add_config_arguments(p, EnvBenchConfig, title="measurement")
    p.add_argument("--format", choices=("table", "json"), default="table",
                   help="stdout format: a table, or one JSON array with one row per measurement (default table)")
