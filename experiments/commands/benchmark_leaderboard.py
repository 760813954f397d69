"""``cpgym benchmark leaderboard``: regenerates ``results/benchmark/LEADERBOARD.md`` from the
entries (``results/benchmark/entries/``, written by ``cpgym benchmark run --split test --entries``)
and the test-split ledger (``benchmark.leaderboard.leaderboard_markdown``).

An entry that is not a full test-split result is skipped with one warning line naming its file
and policy (:func:`incomplete_reason`): its ``split`` is not ``test``, it was cut to
``max_episodes`` episodes (a ``--quick`` run), or it has fewer episodes than the task's test
split. A missing ledger is an error (every entry's run was appended to one)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmark.capacity import load_capacities
from benchmark.leaderboard import leaderboard_markdown, read_entry
from benchmark.ledger import read_ledger
from benchmark.tasks import get_task, num_episodes, rate_scale
from envs.provenance import write_provenance
from envs.sim.options import check_out_file
from experiments.common import write_text_atomic
from experiments.flags.benchmark_leaderboard import add_arguments  # noqa: F401  (re-exported: the command's flags)


def num_test_episodes(task_id: str) -> int | None:
    """The number of episodes of ``task_id``'s test split (at its stored rate scale, without
    re-checking the training digest), ``None`` when the task has no stored capacity.

    Raises:
        ValueError: on an unknown task id.
    """
    task = get_task(task_id)
    entry = load_capacities().get(task.id)
    scale = None if entry is None else rate_scale(task, entry["capacity_rps"], entry["native_rps"])
    return num_episodes(task, "test", scale)


def incomplete_reason(entry: dict, expected: int | None) -> str | None:
    """Why ``entry`` is not a full test-split result (``expected``: the task's number of test
    episodes, ``None``: unknown), or ``None`` when it is."""
    if entry["split"] != "test":
        return f"split {entry['split']!r}, not test"
    if entry["max_episodes"] is not None:
        return f"a smoke run cut to max_episodes={entry['max_episodes']}"
    n = entry["summary"]["num_episodes"]
    if expected is not None and n < expected:
        return f"{n} episodes, fewer than the task's {expected} test episodes"
    return None


def run(args: argparse.Namespace) -> int:
    check_out_file(args.out)
    if not Path(args.entries).is_dir():
        raise ValueError(f"--entries {args.entries}: no such folder; write entries with "
                         "`cpgym benchmark run --split test --entries`")
    if not Path(args.ledger).is_file():
        raise ValueError(f"--ledger {args.ledger}: no such file; the ledger is written by "
                         "`cpgym benchmark run --split test`")
    ledger = read_ledger(args.ledger)
    entries, expected = [], {}
    for path in sorted(Path(args.entries).glob("*.json.gz")):
        for e in read_entry(path):
            try:
                if e["task"] not in expected:
                    expected[e["task"]] = num_test_episodes(e["task"])
            except ValueError as exc:
                raise ValueError(f"{path}: entries[{e['summary']['policy']}].task: {exc}") from None
            reason = incomplete_reason(e, expected[e["task"]])
            if reason is None:
                entries.append(e)
            else:
                print(f"cpgym benchmark leaderboard: warning: {path}: entries[{e['summary']['policy']}]: {reason}; "
                      "skipped", file=sys.stderr)
    write_text_atomic(Path(args.out), leaderboard_markdown(entries, ledger, entries_dir=args.entries,
                                                           ledger_path=args.ledger))
    write_provenance(Path(args.out).parent, argv=getattr(args, "argv", None),
                     commands=["cpgym benchmark leaderboard"] + sorted({e["command"] for e in entries}))
    print(f"{args.out}: {len(entries)} entries on {len({e['task'] for e in entries})} task(s)")
    return 0
