"""``cpgym benchmark validate FILE``: re-runs a leaderboard entry (its SPEC on its task, split and
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


def run(args: argparse.Namespace) -> int:
    entry = read_entry(args.file)
    task = get_task(entry["task"])
    contender = resolve_spec(entry["spec"], task)
    problems = []
    if contender.checkpoint_sha256 != entry["checkpoint_sha256"]:
        problems.append(f"checkpoint_sha256: stored {entry['checkpoint_sha256']!r}, now {contender.checkpoint_sha256!r}")
    log = None if args.quiet else (lambda s: print(s, file=sys.stderr))
    res = run_benchmark([contender], [task], entry["split"], max_episodes=entry["max_episodes"], log=log)[0]
    if res["summary"]["policy"] != entry["summary"]["policy"]:  # a SPEC relabelled: compare under the stored label
        res["summary"]["policy"] = entry["summary"]["policy"]
        res["episodes"] = [{**e, "policy": entry["summary"]["policy"]} for e in res["episodes"]]
    problems += compare_entry(entry, res["summary"], res["episodes"])
    for line in problems:
        print(f"{args.file}: mismatch: {line}")
    if problems:
        print(f"{args.file}: {len(problems)} mismatch(es)", file=sys.stderr)
        return 1
    n = len(entry["summary"]) + sum(len(e) for e in entry["episodes"])
    print(f"{args.file}: ok ({n} values of {len(entry['episodes'])} episodes match)")
    return 0
