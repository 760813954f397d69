"""``cpgym benchmark validate`` flags (the run: :mod:`experiments.commands.benchmark_validate`)."""

from __future__ import annotations

import argparse

from benchmark.dispatch import BACKENDS


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="a task's entries file (results/benchmark/entries/<task>.json.gz)")
    p.add_argument("--policy", metavar="LABEL", help="only the entry of this policy (default: every entry of the file)")
    p.add_argument("--backend", choices=BACKENDS, default="local",
                   help="where the re-run's episodes run (as `cpgym benchmark run`; default local)")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="workers running episodes in parallel (default 1; does not change the numbers)")
    p.add_argument("--quiet", action="store_true", help="no per-episode progress lines on stderr")
