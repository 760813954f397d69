"""``cpgym report RUN_DIR``: figures and a Markdown summary of a sweep, several sweeps or a folder
of ``cpgym simulate --out`` runs (see :mod:`experiments.report`). A run folder with a broken
``summary.json`` or ``requests.parquet`` is an error naming the file (exit status 2, nothing
written), not a run left out of its table cell; so is a ``--baseline`` that is not a value of the
ablated axis."""

from __future__ import annotations

import argparse

from envs.sim.options import check_out_dir
from experiments.flags.report import add_arguments  # noqa: F401  (re-exported)
from experiments.report import make_report


def run(args: argparse.Namespace) -> int:
    check_out_dir(args.out)  # a file there: one line naming --out, not "PATH: File exists"
    rep = make_report(args.run_dir, args.out, baseline=args.baseline)
    print(f"report of {rep.num_runs} runs ({rep.num_cells_missing} cells missing) -> {rep.markdown_path}")
    for f in rep.figures:
        print(f"  {f}")
    for note in rep.notes:
        print(f"  note: {note}")
    return 0
