"""``cpgym benchmark validate`` flags (the run: :mod:`experiments.commands.benchmark_validate`)."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="a task's entries file (results/benchmark/entries/<task>.json.gz)")
    p.add_argument("--policy", metavar="LABEL", help="only the entry of this policy (default: every entry of the file)")
    p.add_argument("--quiet", action="store_true", help="no per-episode progress lines on stderr")
