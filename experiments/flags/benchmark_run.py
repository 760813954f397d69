"""``cpgym benchmark run`` flags (the run: :mod:`experiments.commands.benchmark_run`)."""

from __future__ import annotations

import argparse

from benchmark.dispatch import BACKENDS
from benchmark.leaderboard import ENTRIES_DIR
from benchmark.ledger import DEFAULT_LEDGER
from benchmark.splits import QUICK_EPISODES


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", action="append", required=True, metavar="SPEC",
                   help="a registered policy, NAME:param=value[,param=value...], tuned:NAME (the task's stored tuned "
                        "parameters), fixed:COMPOSITION (no reconfiguration on that composition), oracle:NAME (a "
                        "reconfiguration task's hindsight oracle: best-fixed, per-phase, phase-schedule), shipped (the "
                        "shipped learned policy for the task's kind) or a checkpoint path; repeat for several")
    p.add_argument("--tasks", required=True, metavar="ID[,ID...]", help="task ids (`cpgym benchmark list`) or 'all'")
    p.add_argument("--split", choices=("validation", "test"), default="validation",
                   help="validation (default: model selection) or test (final numbers; appended to the ledger)")
    p.add_argument("--quick", action="store_true",
                   help=f"at most {QUICK_EPISODES} episodes per task, evenly spread (a smoke run, not a result)")
    p.add_argument("--format", choices=("table", "json"), default="table", help="stdout format (default table)")
    p.add_argument("--out", metavar="FILE", help="also write {\"rows\": summary rows, \"episodes\": per-episode rows} "
                                                 "as JSON to FILE (FILE.csv: the per-episode rows as CSV)")
    p.add_argument("--ledger", metavar="FILE", default=str(DEFAULT_LEDGER),
                   help=f"the test-split ledger a --split test run is appended to (default {DEFAULT_LEDGER})")
    p.add_argument("--entries", metavar="DIR", nargs="?", const=str(ENTRIES_DIR), default=None,
                   help=f"--split test: also write one leaderboard entry per (task, policy) under DIR "
                        f"(default when given without DIR: {ENTRIES_DIR})")
    p.add_argument("--backend", choices=BACKENDS, default="local",
                   help="where the episodes run: this machine (a process pool with --jobs > 1) or Ray (default local; "
                        "the rows do not depend on it)")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="workers running episodes in parallel (default 1; does not change the rows)")
    p.add_argument("--quiet", action="store_true", help="no per-episode progress lines on stderr")
