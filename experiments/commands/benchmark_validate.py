"""``cpgym benchmark validate FILE``: re-runs the leaderboard entries of one task file (each SPEC on its task, split and
number of episodes) and checks every number against the stored one (exactly: runs are
deterministic), one line per mismatch; exit status 1 on any mismatch (or a checkpoint whose
SHA-256 changed), 0 when all match. A validation run is not a new test evaluation: it is not
appended to the ledger.

An entry stored before the protocol reported ``num_invalid_actions`` lacks the field: it is read
as 0 where the re-run policy is a ``PolicySpec`` or an ``EpisodeRunner`` (they report 0 by
construction, ``benchmark.protocol``), and compared as missing (a mismatch) otherwise. Likewise
a ``checkpoint_sha256`` from before the policy hash (``policies.common.checkpoint_hash``: the
SHA-256 of the model file) matches when the model file still has it.

Input errors name the file and the field: ``FILE: does not exist``, ``FILE:
entries[POLICY].task: unknown task ...``, ``FILE: entries[POLICY].spec: ...``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from baselines.registry import PolicySpec
from benchmark.leaderboard import compare_entry, read_entry
from benchmark.protocol import run_benchmark
from benchmark.specs import Contender, EpisodeRunner
from benchmark.tasks import get_task
from experiments.benchmark_specs import resolve_spec
from experiments.flags.benchmark_validate import add_arguments  # noqa: F401  (re-exported: the command's flags)


def resolve_entry(entry: dict, file: str) -> tuple:
    """``(task, Contender)`` of a stored entry.

    Raises:
        ValueError: ``FILE: entries[POLICY].task: ...`` or ``FILE: entries[POLICY].spec: ...``.
        FileNotFoundError: likewise, for a checkpoint path that does not exist.
    """
    where = f"{file}: entries[{entry['summary']['policy']}]"
    try:
        task = get_task(entry["task"])
    except ValueError as exc:
        raise ValueError(f"{where}.task: {exc}") from None
    try:
        return task, resolve_spec(entry["spec"], task)
    except (ValueError, FileNotFoundError) as exc:  # the SPEC's error names --policy: no flag was given here
        msg = str(exc)
        for prefix in (f"--policy {entry['spec']}: ", "--policy: ", "--policy "):
            msg = msg.removeprefix(prefix)
        raise type(exc)(f"{where}.spec: {entry['spec']}: {msg}") from None


def fill_missing_counts(entry: dict, contender: Contender) -> dict:
    """``entry`` with ``num_invalid_actions`` 0 where it predates the field and the policy reports
    0 by construction (module docstring)."""
    if not isinstance(contender.policy, (PolicySpec, EpisodeRunner)):
        return entry
    return {**entry, "summary": {"num_invalid_actions": 0, **entry["summary"]},
            "episodes": [{"num_invalid_actions": 0, **e} for e in entry["episodes"]]}


def check_entry(entry: dict, quiet: bool, file: str = "", backend: str = "local", jobs: int = 1) -> tuple[list[str], int]:
    """Re-runs one entry (``backend``, ``jobs``: where its episodes run, ``benchmark.dispatch``);
    ``(mismatch lines, number of values compared)``."""
    task, contender = resolve_entry(entry, file)
    entry = fill_missing_counts(entry, contender)
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
    if not Path(args.file).exists():
        raise ValueError(f"{args.file}: does not exist; entries are under results/benchmark/entries/")
    entries = read_entry(args.file)
    if args.policy is not None:
        entries = [e for e in entries if e["summary"]["policy"] == args.policy]
        if not entries:
            raise ValueError(f"--policy {args.policy}: {args.file} has no entry of that policy")
    num_bad = 0
    for entry in entries:
        label = entry["summary"]["policy"]
        problems, n = check_entry(entry, args.quiet, args.file, args.backend, args.jobs)
        for line in problems:
            print(f"{args.file} [{label}]: mismatch: {line}")
        if problems:
            num_bad += 1
            print(f"{args.file} [{label}]: {len(problems)} mismatch(es)", file=sys.stderr)
        else:
            print(f"{args.file} [{label}]: ok ({n} values of {len(entry['episodes'])} episodes match)")
    return 1 if num_bad else 0
