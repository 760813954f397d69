"""``cpgym report RUN_DIR``: figures and a Markdown summary of a sweep, several sweeps or a folder
of ``cpgym simulate --out`` runs (see :mod:`experiments.report`). A run folder with a broken
``summary.json`` or ``requests.parquet`` is an error naming the file (exit status 2, nothing
written), not a run left out of its table cell; so is a ``--baseline`` that is not a value of the
ablated axis."""

from __future__ import annotations

import argparse

from envs.sim.options import check_out_dir
from experiments.report import make_report


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR",
                   help="a sweep's output folder, a folder of several sweeps, or a folder of `cpgym simulate --out` runs "
                        "(grouped by workload and by the settings that differ); a run folder with a broken summary.json "
                        "or requests.parquet is an error naming the file, not left out")
    p.add_argument("--out", metavar="DIR", help="where to write the PNGs and report.md (default RUN_DIR/report)")
    p.add_argument("--baseline", metavar="VALUE",
                   help="the value of the ablated axis (the first setting that takes several values, else the policy) "
                        "that the paired differences refer to (default: its first value in the spec)")


def run(args: argparse.Namespace) -> int:
    check_out_dir(args.out)  # a file there: one line naming --out, not "PATH: File exists"
    rep = make_report(args.run_dir, args.out, baseline=args.baseline)
    print(f"report of {rep.num_runs} runs ({rep.num_cells_missing} cells missing) -> {rep.markdown_path}")
    for f in rep.figures:
        print(f"  {f}")
    for note in rep.notes:
        print(f"  note: {note}")
    return 0
