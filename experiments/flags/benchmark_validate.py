"""``cpgym benchmark validate`` flags (the run: :mod:`experiments.commands.benchmark_validate`)."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="an entry (results/benchmark/entries/<task>/<policy>.json)")
    p.add_argument("--quiet", action="store_true", help="no per-episode progress lines on stderr")
