"""``cpgym benchmark capacity`` flags (the run: :mod:`experiments.commands.benchmark_capacity`)."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tasks", required=True, metavar="ID[,ID...]", help="task ids (`cpgym benchmark list`) or 'all'")
    p.add_argument("--quiet", action="store_true", help="no per-probe progress lines on stderr")
