"""``cpgym dynamic`` flags: the declarations the parser reads (the run: :mod:`experiments.commands.dynamic`)."""

from __future__ import annotations

import argparse

from envs.sim.options import add_config_arguments
from experiments.flags.common import add_sim_arguments
from experiments.paper_experiments.dynamic_phases import PAPER_SUPPORTED_DEGREES, DynamicPhasesConfig

#: The most fixed compositions ``--compositions all`` runs unless ``--max-compositions`` is raised.
MAX_COMPOSITIONS = 32


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, DynamicPhasesConfig, title="workload (phases generator), controller and compared compositions")
    add_sim_arguments(p, composition=False,  # each run sets its own composition
                      supported_degrees=PAPER_SUPPORTED_DEGREES, supported_degrees_note="the paper's §9 run, Qwen3")
    p.add_argument("--max-compositions", type=int, default=MAX_COMPOSITIONS,
                   help=f"refuse --compositions all when the supported degrees give more fixed compositions than this "
                        f"(default {MAX_COMPOSITIONS}; each is one full simulation)")
    p.add_argument("--quiet", action="store_true",
                   help="nothing on stderr but errors and cpgym warnings: no progress lines (capacity searches, one line "
                        "per simulated policy); the results still go to stdout (tables, or JSON with --format json)")
    p.add_argument("--format", choices=("table", "json"), default="table", help="stdout format (default table)")
    p.add_argument("--plot", metavar="PNG", help="write worker composition over time above TTFT over time")
    p.add_argument("--out-dir", metavar="DIR", help="also write dynamic.json, CSV tables (policies, phases, operations, "
                                                    "controller windows, capacity profiles) and provenance.json to DIR "
                                                    "(provenance.json first and policies.csv after each run: a run "
                                                    "stopped midway keeps its finished runs)")
