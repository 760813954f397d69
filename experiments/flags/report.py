"""``cpgym report`` flags: the declarations the parser reads (the run: :mod:`experiments.commands.report`)."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR",
                   help="a sweep's output folder, a folder of several sweeps, or a folder of `cpgym simulate --out` runs "
                        "(grouped by workload and by the settings that differ); a run folder with a broken summary.json "
                        "or requests.parquet is an error naming the file, not left out")
    p.add_argument("--out", metavar="DIR", help="where to write the PNGs and report.md (default RUN_DIR/report)")
    p.add_argument("--baseline", metavar="VALUE",
                   help="the value of the ablated axis (the first setting that takes several values, else the policy) "
                        "that the paired differences refer to (default: its first value in the spec)")
