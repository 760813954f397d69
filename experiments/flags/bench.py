"""``cpgym bench sim`` flags: the declarations the parser reads (the run: :mod:`experiments.commands.bench`)."""

from __future__ import annotations

import argparse

from envs.workloads import default_trace_path
from experiments.flags.common import add_sim_arguments, add_workload_arguments


def add_arguments(p: argparse.ArgumentParser) -> None:
    # the benchmark's default: the full conversation trace
    add_workload_arguments(p, default_trace=str(default_trace_path()))
    add_sim_arguments(p, horizon=False)  # every run simulates every request (--horizon-s refused below)
    default = "round-robin,least-work,prefix-affinity,vertumnus-router,vertumnus-adaptive,vertumnus"
    p.add_argument("--policy", default=default, help=f"comma-separated policies (default {default})")
    p.add_argument("--repeat", type=int, default=3,
                   help="timed runs per policy after its first run, whose median is reported (default 3); the "
                        "first run is reported in its own column: it simulates the capacity profiles (if the policy "
                        "has any) that the later runs reuse")
    p.add_argument("--format", choices=("table", "json"), default="table", help="stdout format (default table)")
