"""``cpgym simulate`` flags: the declarations the parser reads (the run: :mod:`experiments.commands.simulate`)."""

from __future__ import annotations

import argparse

from experiments.flags.common import add_sim_arguments, add_workload_arguments

DEFAULT_POLICIES = "round-robin,least-work,prefix-affinity,sglang-cache-aware,llm-d,dynamo-kv,mooncake-ttft,vertumnus"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_workload_arguments(p)
    add_sim_arguments(p)
    p.add_argument("--policy", default=None,
                   help=f"comma-separated policy names (default: {DEFAULT_POLICIES}; see --list-policies)")
    p.add_argument("--list-policies", action="store_true", help="print the known policies and exit")
    p.add_argument("--out", metavar="DIR", help="write per-request tables, summaries and the resolved config under DIR")
    p.add_argument("--format", choices=("table", "json"), default="table", help="stdout format (default table)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress on stderr: a bar on a terminal, a line every 10 s otherwise (default on)")
    p.add_argument("--quiet", action="store_true", help="no progress output (same as --no-progress)")
