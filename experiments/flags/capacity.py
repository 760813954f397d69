"""``cpgym capacity`` flags: the declarations the parser reads (the run: :mod:`experiments.commands.capacity`)."""

from __future__ import annotations

import argparse

from baselines.capacity import CapacityDefinition
from experiments.flags.common import add_sim_arguments, add_workload_arguments

DEFAULT_CACHE_DIR = ".cpgym-cache/capacity"


def add_capacity_arguments(p: argparse.ArgumentParser) -> None:
    """The definition and cache options shared by ``capacity``, ``compare --loads`` and ``reproduce``."""
    d = CapacityDefinition()
    g = p.add_argument_group("capacity (sustainable rate)")
    g.add_argument("--drain-ratio", type=float, default=d.drain_ratio,
                   help="the backlog drains when the last third's mean TTFT slowdown (TTFT / isolated uncached "
                        f"single-GPU TTFT) is at most this x the first third's; > 1 (default {d.drain_ratio})")
    g.add_argument("--min-slo-attainment", type=float, default=d.min_slo_attainment,
                   help=f"token-weighted SLO attainment at least this (default {d.min_slo_attainment})")
    g.add_argument("--rel-tol", type=float, default=d.rel_tol,
                   help=f"bisection stops at this relative bracket width (default {d.rel_tol})")
    g.add_argument("--cache-dir", default=DEFAULT_CACHE_DIR, help=f"capacity results cache (default {DEFAULT_CACHE_DIR})")
    g.add_argument("--no-cache", action="store_true", help="neither read nor write the capacity cache")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_workload_arguments(p)
    add_sim_arguments(p, horizon=False)  # every probe runs until its requests finish (--horizon-s refused below)
    p.add_argument("--policy", default="paper", help="comma-separated policies or suites (default paper)")
    add_capacity_arguments(p)
    p.add_argument("--format", choices=("table", "json"), default="table",
                   help="stdout format: a table, or one JSON array with one object per policy (default table)")
    p.add_argument("--quiet", action="store_true", help="no per-probe progress lines on stderr")
