"""``cpgym benchmark list`` flags (the run: :mod:`experiments.commands.benchmark_list`)."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", choices=("table", "json"), default="table", help="stdout format (default table)")
