"""``cpgym benchmark tune NAME --tasks ID[,ID]``: tunes a heuristic's parameters per benchmark task
(``benchmark.tuning``: Optuna TPE over the documented ranges, scored on the task's training split,
chosen on its validation split, ranges widened when the choice lands on a bound).

Writes, per (task, policy): ``policies[NAME]`` of ``benchmark/tuned/<task __>.json`` (read by the
``tuned:NAME`` policy specs) and the search record, ``policies[NAME]`` of
``results/benchmark/tuning/<task __>.json.gz`` (with the folder's ``provenance.json``); prints one
line per (task, policy) with the chosen parameters, the scores and the CPU time.
``--backend ray`` scores each batch of trials on Ray (same seed, same result as ``local``).
"""

from __future__ import annotations

import argparse
import resource
import shlex
import sys
import time
from pathlib import Path

from benchmark.references import choose_fixed, store_tuned_entry
from benchmark.tasks import parse_task_ids
from benchmark.tuning import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_MAX_ROUNDS,
    DEFAULT_MAX_TRAIN_EPISODES,
    DEFAULT_TOP_K,
    fixed_params,
    parse_tunable,
    store_record,
    store_tuned,
    tune_policy,
)
from envs.provenance import write_provenance
from envs.sim.options import check_out_dir
from experiments.flags.benchmark_tune import DEFAULT_RECORDS_DIR, add_arguments  # noqa: F401  (re-exported)


def _check(args: argparse.Namespace) -> None:
    for flag, value in (("--trials", args.trials), ("--jobs", args.jobs), ("--max-train-episodes", args.max_train_episodes),
                        ("--top-k", args.top_k), ("--max-rounds", args.max_rounds)):
        if value < 1:
            raise ValueError(f"{flag} must be >= 1, got {value}")
    for flag, value in (("--tuned-dir", args.tuned_dir), ("--records-dir", args.records_dir)):
        if value is not None:
            check_out_dir(value, flag)


def _command(name: str, task_id: str, args: argparse.Namespace) -> str:
    """The command that regenerates one (task, policy) entry (flags that change the result only)."""
    parts = ["cpgym", "benchmark", "tune", name, "--tasks", task_id, "--trials", str(args.trials), "--seed", str(args.seed)]
    for flag, value, default in (("--max-train-episodes", args.max_train_episodes, DEFAULT_MAX_TRAIN_EPISODES),
                                 ("--top-k", args.top_k, DEFAULT_TOP_K), ("--max-rounds", args.max_rounds,
                                                                          DEFAULT_MAX_ROUNDS)):
        if value != default:
            parts += [flag, str(value)]
    return shlex.join(parts)


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (Ray workers are not counted)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def run(args: argparse.Namespace) -> int:
    tasks = parse_task_ids(args.tasks)
    if args.name == "fixed":  # not a search: every candidate composition on the training episodes
        for task in tasks:
            entry = choose_fixed(task, log=None if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True)))
            entry["command"] = f"cpgym benchmark tune fixed --tasks {task.id}"
            store_tuned_entry(task, "fixed", entry, Path(args.tuned_dir) if args.tuned_dir else None)
            print(f"{task.id}\tfixed\t{entry['params']}\ttrain {entry['train_mean_ttft_s']:.4f} s", flush=True)
        return 0
    names = parse_tunable(args.name)
    _check(args)
    tuned_dir = Path(args.tuned_dir) if args.tuned_dir else None
    for task in tasks:  # a held parameter's stored choice is missing: say so before any search
        for name in names:
            fixed_params(task, name, tuned_dir)
    log = None if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True))
    for task in tasks:
        for name in names:
            cpu0, wall0 = _cpu_s(), time.monotonic()
            if log:
                log(f"{task.id} x {name}: tuning ({args.trials} trials per round, seed {args.seed}, {args.backend})")
            entry, record = tune_policy(task, name, num_trials=args.trials, seed=args.seed, backend=args.backend,
                                        jobs=args.jobs, batch_size=DEFAULT_BATCH_SIZE,
                                        max_train_episodes=args.max_train_episodes, top_k=args.top_k,
                                        max_rounds=args.max_rounds, command=_command(name, task.id, args), log=log,
                                        tuned_dir=tuned_dir)
            cpu_s, wall_s = _cpu_s() - cpu0, time.monotonic() - wall0
            store_tuned(task.id, name, entry, tuned_dir)
            store_record(task.id, name, {**record, "cpu_s": round(cpu_s, 1), "wall_s": round(wall_s, 1),
                                         "backend": args.backend, "jobs": args.jobs}, args.records_dir)
            write_provenance(args.records_dir, argv=["cpgym", "benchmark", "tune", *sys.argv[1:]],
                             command=entry["command"])
            last = entry["rounds"][-1]
            print(f"{task.id}\t{name}\t{entry['params']}\ttrain {entry['train_mean_ttft_s']:.4f} s\tvalidation "
                  f"{entry['validation_mean_ttft_s']:.4f} s\t{entry['num_trials']} trials, {len(entry['rounds'])} "
                  f"round(s){', still on bound: ' + ','.join(last['on_bound']) if last['on_bound'] else ''}\t"
                  f"CPU {cpu_s:.0f} s", flush=True)
    return 0
