"""``cpgym kv-tiers`` flags: the declarations the parser reads (the run: :mod:`experiments.commands.kv_tiers`)."""

from __future__ import annotations

import argparse

from experiments.flags.common import add_sim_arguments


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace", metavar="PATH", help="trace (default: the shared conversation trace)")
    p.add_argument("--arrival-window-s", type=float, nargs=2, default=(0.0, 300.0), metavar=("START", "END"),
                   help="arrival window after rate scaling [s] (default 0 300)")
    p.add_argument("--policies", default="vertumnus-router,least-work,mooncake-ttft,dynamo-kv",
                   help="policies of the tier table (default vertumnus-router,least-work,mooncake-ttft,dynamo-kv)")
    p.add_argument("--load", type=float, default=0.9, help="fraction of the estimated capacity (default 0.9)")
    p.add_argument("--capacity-rps", type=float, help="skip the rate search and use this capacity [requests/s]")
    p.add_argument("--capacity-policy", default="vertumnus-router",
                   help="reference policy of the rate search (default vertumnus-router)")
    p.add_argument("--eviction-dram-gb", default="16,64",
                   help="two DRAM capacities per node of the eviction table [GB] (default 16,64)")
    p.add_argument("--eviction-policies", default="mooncake-ttft,dynamo-kv",
                   help="policies of the eviction table (default mooncake-ttft,dynamo-kv)")
    p.add_argument("--out", metavar="DIR", help="write kv_tiers.json, tables.md and provenance.json under DIR (rows.csv "
                                                "after each run: a run stopped midway keeps its finished runs)")
    p.add_argument("--plot-sweep", metavar="RUN_DIR", help="only plot the sweep in RUN_DIR (to --out or RUN_DIR)")
    add_sim_arguments(p)
