"""``cpgym benchmark leaderboard``: regenerates ``results/benchmark/LEADERBOARD.md`` from the
entries (``results/benchmark/entries/``, written by ``cpgym benchmark run --split test --entries``)
and the test-split ledger (``benchmark.leaderboard.leaderboard_markdown``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmark.leaderboard import leaderboard_markdown, read_entries
from benchmark.ledger import read_ledger
from envs.sim.options import check_out_file
from experiments.common import write_text_atomic
from experiments.flags.benchmark_leaderboard import add_arguments  # noqa: F401  (re-exported: the command's flags)


def run(args: argparse.Namespace) -> int:
    check_out_file(args.out)
    if not Path(args.entries).is_dir():
        raise ValueError(f"--entries {args.entries}: no such folder; write entries with "
                         "`cpgym benchmark run --split test --entries`")
    entries = read_entries(args.entries)
    write_text_atomic(Path(args.out), leaderboard_markdown(entries, read_ledger(args.ledger)))
    print(f"{args.out}: {len(entries)} entries on {len({e['task'] for e in entries})} task(s)")
    return 0
