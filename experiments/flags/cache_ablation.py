"""``cpgym cache-ablation`` flags: the declarations the parser reads (the run: :mod:`experiments.commands.cache_ablation`)."""

from __future__ import annotations

import argparse

from envs.sim.options import add_config_arguments
from experiments.flags.common import add_sim_arguments
from experiments.paper_experiments.cache_ablation import CacheAblationConfig


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_sim_arguments(p)
    add_config_arguments(p, CacheAblationConfig, title="cache ablation")
    p.add_argument("--format", choices=("table", "json"), default="table", help="stdout format (default table)")
    p.add_argument("--out", metavar="DIR", help="also write results.csv and provenance.json under DIR (results.csv "
                                                "after each run: a run stopped midway keeps its finished runs)")
