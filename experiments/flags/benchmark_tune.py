"""``cpgym benchmark tune`` flags (the run: :mod:`experiments.commands.benchmark_tune`)."""

from __future__ import annotations

import argparse

from benchmark.tuning import DEFAULT_MAX_ROUNDS, DEFAULT_MAX_TRAIN_EPISODES, DEFAULT_NUM_TRIALS, DEFAULT_TOP_K, TUNABLE

#: Where the search records go (results/benchmark/tuning/<task>.json.gz).
DEFAULT_RECORDS_DIR = "results/benchmark/tuning"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", metavar="NAME",
                   help=f"policy to tune, NAME[,NAME] or 'all' (those with a search space: {', '.join(TUNABLE)}); 'fixed': a "
                        "reconfiguration task's best fixed composition, chosen on its training episodes")
    p.add_argument("--tasks", required=True, metavar="ID[,ID]", help="benchmark task ids, or 'all'")
    p.add_argument("--trials", type=int, default=DEFAULT_NUM_TRIALS, metavar="N",
                   help=f"TPE trials per round (default {DEFAULT_NUM_TRIALS}, issue #39's minimum)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="TPE sampler seed of round 0 (round r: S + r; default 0)")
    p.add_argument("--backend", choices=("local", "ray"), default="local",
                   help="where trials are scored: this machine (process pool with --jobs > 1) or Ray (default local)")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="workers scoring trials in parallel (default 1; does not change the result)")
    p.add_argument("--max-train-episodes", type=int, default=DEFAULT_MAX_TRAIN_EPISODES, metavar="N",
                   help=f"training episodes per trial, evenly spread (default {DEFAULT_MAX_TRAIN_EPISODES})")
    p.add_argument("--top-k", type=int, default=DEFAULT_TOP_K, metavar="K",
                   help=f"best training trials re-scored on validation per round (default {DEFAULT_TOP_K})")
    p.add_argument("--max-rounds", type=int, default=DEFAULT_MAX_ROUNDS, metavar="N",
                   help=f"rounds at most (range widenings + 1; default {DEFAULT_MAX_ROUNDS})")
    p.add_argument("--tuned-dir", metavar="DIR", default=None,
                   help="where the tuned parameters go (default: the package's benchmark/tuned/)")
    p.add_argument("--records-dir", metavar="DIR", default=DEFAULT_RECORDS_DIR,
                   help=f"where the search records go (default {DEFAULT_RECORDS_DIR})")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
