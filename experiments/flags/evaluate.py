"""``cpgym evaluate`` flags: the declarations the parser reads (the run: :mod:`experiments.commands.evaluate`)."""

from __future__ import annotations

import argparse

from envs.sim.options import add_config_arguments
from experiments.flags.common import add_sim_arguments
from policies.evaluate import EvaluationConfig


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, EvaluationConfig, title="policies and episodes (default: the checkpoint's training source)")
    add_sim_arguments(p, seed=False)  # every episode's simulator seed is its --seeds entry
    p.add_argument("--format", choices=("table", "json"), default="table", help="stdout format (default table)")
    p.add_argument("--out", metavar="CSV", help="also write the per-episode rows to this CSV (and CSV.provenance.json); "
                                                "the CSV is rewritten after each episode, so a run stopped midway keeps "
                                                "its finished episodes (readable by --from-csv)")
    p.add_argument("--quiet", action="store_true", help="no per-episode progress lines on stderr")
    p.add_argument("--from-csv", metavar="CSV", help="re-aggregate per-episode rows written earlier by --out (runs nothing; "
                                                     "only --kind, --reference and --format apply): routing, --kind "
                                                     "reconfig or --loads/--protocol rows (told from the columns), "
                                                     "printed as that run's table")
    for action in p._actions:  # the CSV names its policies: --policy is required only when something runs
        if action.dest == "policy":
            action.required = False
            action.help += " (required unless --from-csv)"
