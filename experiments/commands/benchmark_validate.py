"""``cpgym benchmark validate FILE``: re-runs the leaderboard entries of one task file (each SPEC on its task, split and
number of episodes) and checks every number against the stored one (exactly: runs are
deterministic), one line per mismatch; exit status 1 on any mismatch (or a checkpoint whose
SHA-256 changed), 0 when all match. A validation run is not a new test evaluation: it is not
appended to the ledger."""

from __future__ import annotations

import argparse
import sys

from benchmark.leaderboard import compare_entry, read_entry
from benchmark.protocol import run_benchmark
from benchmark.tasks import get_task
from experiments.benchmark_specs import resolve_spec
from experiments.flags.benchmark_validate import add_arguments  # noqa: F401  (re-exported: the command's flags)


def check_entry(entry: dict, quiet: bool, backend: str = "local", jobs: int = 1) -> tuple[list[str], int]:
    """Re-runs one entry (``backend``, ``jobs``: where its episodes run, ``benchmark.dispatch``);
    ``(mismatch lines, number of values compared)``."""
    task = get_task(entry["task"])
    contender = resolve_spec(entry["spec"], task)
    problems = []
    if contender.checkpoint_sha256 != entry["checkpoint_sha256"]:
        problems.append(f"checkpoint_sha256: stored {entry['checkpoint_sha256']!r}, now {contender.checkpoint_sha256!r}")
    log = None if quiet else (lambda s: print(s, file=sys.stderr))
    res = run_benchmark([contender], [task], entry["split"], max_episodes=entry["max_episodes"], log=log,
                        backend=backend, jobs=jobs)[0]
    if res["summary"]["policy"] != entry["summary"]["policy"]:  # a SPEC relabelled: compare under the stored label
        res["summary"]["policy"] = entry["summary"]["policy"]
        res["episodes"] = [{**e, "policy": entry["summary"]["policy"]} for e in res["episodes"]]
    problems += compare_entry(entry, res["summary"], res["episodes"])
    return problems, len(entry["summary"]) + sum(len(e) for e in entry["episodes"])


def run(args: argparse.Namespace) -> int:
    if args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
    entries = read_entry(args.file)
    if args.policy is not None:
        entries = [e for e in entries if e["summary"]["policy"] == args.policy]
        if not entries:
            raise ValueError(f"--policy {args.policy}: {args.file} has no entry of that policy")
    num_bad = 0
    for entry in entries:
        label = entry["summary"]["policy"]
        problems, n = check_entry(entry, args.quiet, args.backend, args.jobs)
        for line in problems:
            print(f"{args.file} [{label}]: mismatch: {line}")
        if problems:
            num_bad += 1
            print(f"{args.file} [{label}]: {len(problems)} mismatch(es)", file=sys.stderr)
        else:
            print(f"{args.file} [{label}]: ok ({n} values of {len(entry['episodes'])} episodes match)")
    return 1 if num_bad else 0
