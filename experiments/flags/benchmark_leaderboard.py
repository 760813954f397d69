"""``cpgym benchmark leaderboard`` flags (the run: :mod:`experiments.commands.benchmark_leaderboard`)."""

from __future__ import annotations

import argparse

from benchmark.leaderboard import ENTRIES_DIR, LEADERBOARD_FILE
from benchmark.ledger import DEFAULT_LEDGER


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--entries", metavar="DIR", default=str(ENTRIES_DIR), help=f"the entries folder (default {ENTRIES_DIR})")
    p.add_argument("--ledger", metavar="FILE", default=str(DEFAULT_LEDGER),
                   help=f"the test-split ledger (default {DEFAULT_LEDGER})")
    p.add_argument("--out", metavar="FILE", default=str(LEADERBOARD_FILE),
                   help=f"the Markdown written (default {LEADERBOARD_FILE})")
