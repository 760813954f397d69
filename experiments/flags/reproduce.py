"""``cpgym reproduce`` flags: the declarations the parser reads (the run: :mod:`experiments.commands.reproduce`)."""

from __future__ import annotations

import argparse

from envs.workloads import DEFAULT_TRACE_FILE
from experiments.flags.capacity import add_capacity_arguments
from experiments.flags.common import add_sim_arguments
from experiments.paper_experiments.dynamic_phases import PAPER_SUPPORTED_DEGREES
from experiments.reproduce import CACHE_HELD_OUT_SEEDS

QUICK = {"seeds": "0,1,2", "arrival_window_length_s": 300.0, "loads": "0.5,0.85,0.95", "rel_tol": 0.03,
         "cache_duration_s": 300.0}


FULL = {"seeds": "0,1,2", "arrival_window_length_s": 600.0, "loads": "0.5,0.7,0.85,0.95", "cache_duration_s": 600.0}


ALL_EXPERIMENTS = "end-to-end,dynamic,cache,reconfiguration"


def add_arguments(p: argparse.ArgumentParser) -> None:
    # run seeds come from --seeds (no --seed); the paper's CP degrees for Qwen3 (§9)
    add_sim_arguments(p, seed=False, supported_degrees=PAPER_SUPPORTED_DEGREES,
                      supported_degrees_note="the paper's Qwen3 degrees, §9")
    p.add_argument("--experiments", default=ALL_EXPERIMENTS,
                   help=f"comma-separated experiment kinds (default all: {ALL_EXPERIMENTS})")
    p.add_argument("--quick", action="store_true",
                   help=f"reduced run: seeds {QUICK['seeds']}, {QUICK['arrival_window_length_s']:g} s windows, "
                        f"loads {QUICK['loads']}, "
                        f"capacity --rel-tol {QUICK['rel_tol']:g}, {QUICK['cache_duration_s']:g} s cache runs")
    p.add_argument("--seeds", help=f"comma-separated seeds (default {FULL['seeds']}; quick {QUICK['seeds']})")
    p.add_argument("--loads", help=f"load fractions of the strongest static baseline's capacity (default {FULL['loads']}; "
                                   f"quick {QUICK['loads']})")
    p.add_argument("--arrival-window-length-s", type=float, metavar="LENGTH",
                   help=f"arrival window [0, LENGTH) of each run [s] (default {FULL['arrival_window_length_s']:g}; "
                        f"quick {QUICK['arrival_window_length_s']:g})")

    held_out = ",".join(map(str, CACHE_HELD_OUT_SEEDS))
    p.add_argument("--cache-seeds", default=held_out,
                   help=f"seeds of the cache experiment (default {held_out}: held out from the sweep that chose the "
                        "cache-manager defaults on seeds 0-2)")
    p.add_argument("--cache-duration-s", type=float,
                   help=f"seconds of tool-agent sessions per cache run and capacity probe (default "
                        f"{FULL['cache_duration_s']:g}; quick {QUICK['cache_duration_s']:g})")
    p.add_argument("--dynamic-param", action="append", default=[], metavar="NAME=VALUE",
                   help="override a DynamicPhasesConfig field of the dynamic runs (repeatable, e.g. num_phases=2; "
                        "default: its defaults, as `cpgym dynamic`)")
    p.add_argument("--workloads", default="leval-like,tool-agent,production",
                   help="comma-separated subset of leval-like,tool-agent,production (default all three)")
    p.add_argument("--traces-dir", help=f"folder holding {DEFAULT_TRACE_FILE} (default ../shared/data/traces)")
    p.add_argument("--models",
                   help="semicolon-separated LABEL=CALIBRATION_FILE[@COMPOSITION], e.g. "
                        "'Qwen3-30B-A3B=envs/sim/calibrations/qwen3-30b-a3b__h20-3e.json;DeepSeek-V4-Flash="
                        "envs/sim/calibrations/deepseek-v4-flash-fp8__h20-3e.json@cp8x3,cp4x4' (the composition's degrees "
                        "become the model's CP degrees; default: the --calibration / default calibration on the pool flags)")
    add_capacity_arguments(p)
    p.add_argument("--jobs", type=int, default=2, help="parallel processes (default 2; results do not depend on it)")
    p.add_argument("--out", default="runs/reproduce",
                   help="output folder (default runs/reproduce); KIND-runs.csv and KIND-capacities.csv are rewritten after "
                        "each finished capacity search or seed, so a run stopped midway keeps them (provenance.json lists "
                        "its files and finished experiments)")
    p.add_argument("--format", choices=("table", "json"), default="table",
                   help="stdout format: a table, or one JSON array of rows (default table)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
