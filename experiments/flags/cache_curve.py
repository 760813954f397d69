"""``cpgym cache-curve`` flags: the declarations the parser reads (the run: :mod:`experiments.commands.cache_curve`)."""

from __future__ import annotations

import argparse

DEFAULT_CAPACITIES = "1000,2000,5000,10000,20000,50000"


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", metavar="PATH",
                     help="trace file (Mooncake JSONL with hash_ids, or the L-Eval lengths CSV; an Azure CSV has no prefixes)")
    src.add_argument("--workload", metavar="NAME", help="a named synthetic workload instead (e.g. tool-agent)")
    p.add_argument("--duration-s", type=float, default=None,
                   help="with --workload: seconds of arrivals (default: the workload's)")
    p.add_argument("--workload-seed", type=int, default=None, help="with --workload: generator seed (default 0)")
    p.add_argument("--capacities", default=DEFAULT_CAPACITIES,
                   help="comma-separated cache capacities [blocks]; the unbounded cache is always added "
                        f"(default {DEFAULT_CAPACITIES})")
    p.add_argument("--dram-capacities", metavar="BLOCKS",
                   help="comma-separated host-DRAM tier capacities [blocks]: hit rate per tier for every "
                        "(--capacities, DRAM) pair instead of the single-cache curve")
    p.add_argument("--format", choices=("table", "json"), default="table", help="stdout format (default table)")
    p.add_argument("--skip-invalid", action="store_true", help="skip invalid trace lines instead of failing")
