"""``cpgym benchmark run``: policies on benchmark tasks under the one protocol
(``benchmark.protocol``): one summary row per (task, policy) against the task's reference, with
the per-episode rows in ``--out``.

``--split`` defaults to ``validation`` (model selection); a ``--split test`` run is appended to
the ledger (``benchmark.ledger``, ``--ledger FILE``) and may write leaderboard entries
(``--entries``). ``--quick``: at most ``benchmark.protocol.QUICK_EPISODES`` (4) episodes per task,
evenly spread over the split (first and last kept) — a smoke run, not a result (refused with
``--entries``). A ``--split test`` run refuses a ``--ledger`` file that is not a ledger. ``--backend ray``
/ ``--jobs N``: where the episodes run (``benchmark.dispatch``; same rows).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from rich.markup import escape

from benchmark.leaderboard import json_ready, make_entry, read_entries, write_entry
from benchmark.ledger import commit_id, read_ledger, record_test_runs
from benchmark.protocol import run_benchmark
from benchmark.splits import QUICK_EPISODES
from benchmark.tasks import parse_task_ids
from envs.provenance import write_provenance
from envs.sim.options import check_out_file
from experiments.benchmark_specs import resolve_specs
from experiments.common import dumps_json, print_unclipped, write_rows_csv, write_text_atomic
from experiments.flags.benchmark_run import add_arguments  # noqa: F401  (re-exported: the command's flags)


def run(args: argparse.Namespace) -> int:
    try:
        tasks = parse_task_ids(args.tasks)
    except ValueError as exc:
        raise ValueError(f"--tasks: {exc}".replace("--tasks: --tasks", "--tasks")) from None
    if args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
    if args.entries is not None and args.split != "test":
        raise ValueError("--entries: leaderboard entries are test-split results; add --split test")
    if args.entries is not None and args.quick:
        raise ValueError("--quick: a smoke run is not a leaderboard entry; drop --quick to write --entries")
    return execute(list(args.policy), tasks, args, QUICK_EPISODES if args.quick else None)


def execute(specs: list[str], tasks: list, args: argparse.Namespace, max_episodes: int | None) -> int:
    """Runs ``specs`` on ``tasks`` (``benchmark.protocol.run_benchmark``) and reports as ``args``
    say (``split``, ``format``, ``out``, ``ledger``, ``entries``, ``backend``, ``jobs`` (optional),
    ``quiet``, ``argv``);
    shared with ``cpgym evaluate`` (a view of the same protocol). ``--out`` ending in ``.csv``:
    the per-episode rows as CSV; else JSON ``{"rows": summary rows, "episodes": per-episode rows}``."""
    check_out_file(args.out)
    check_out_file(args.ledger, "--ledger")
    if args.split == "test":
        try:  # appending to a file that is not a ledger would hide this run's record from the leaderboard
            read_ledger(args.ledger)
        except ValueError as exc:
            raise ValueError(f"--ledger {exc}") from None
    contenders = {t.id: resolve_specs(specs, t) for t in tasks}  # every SPEC checked before any run
    log = None if args.quiet else (lambda s: print(s, file=sys.stderr))
    entries = getattr(args, "entries", None)
    command = shlex.join(getattr(args, "argv", None) or ["cpgym", "benchmark", "run"])
    commit = commit_id()
    results = []
    for t in tasks:
        res = run_benchmark(contenders[t.id], [t], args.split, max_episodes=max_episodes, log=log,
                            backend=getattr(args, "backend", "local"), jobs=getattr(args, "jobs", 1))
        if args.split == "test":
            record_test_runs(args.ledger, res)
        if entries is not None:
            for r in res:
                c = r["contender"]
                write_entry(entries, make_entry(r["summary"], r["episodes"], c.spec or c.label, c.checkpoint_sha256,
                                                max_episodes, commit, command))
            # the folder's provenance: this run's argv, and every entry's command (each entry keeps its own commit)
            write_provenance(entries, argv=getattr(args, "argv", None),
                             commands=sorted({e["command"] for e in read_entries(entries)}))
        results += res
    rows = [r["summary"] for r in results]
    episodes = [e for r in results for e in r["episodes"]]
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)  # checked creatable by check_out_file above
    if args.out and str(args.out).endswith(".csv"):
        write_rows_csv(Path(args.out), episodes)
    elif args.out:
        write_text_atomic(Path(args.out), json.dumps(json_ready({"rows": rows, "episodes": episodes}), indent=1) + "\n")
    if args.format == "json":
        print(dumps_json(rows))
        return 0
    print_table(rows, args.split)
    return 0


def print_table(rows: list[dict], split: str) -> None:
    """The summary rows as a table (an ``invalid actions`` column where a row has any:
    ``benchmark.protocol``'s ``num_invalid_actions``)."""
    from rich.table import Table

    invalid = any(r.get("num_invalid_actions") for r in rows)

    t = Table(title=escape(f"cpgym benchmark, {split} split: means over episodes; Δ: paired per episode vs the task's "
                           "reference, % of its mean, 95% CI"))
    for c in ("task", "policy", "episodes", "mean TTFT s", "P90 TTFT s", "P99 TTFT s", "SLO att. (tok)", "reference",
              "Δ mean TTFT %", "95% CI", "overloaded", *(("invalid actions",) if invalid else ())):
        t.add_column(escape(c), justify="left" if c in ("task", "policy", "reference") else "right", overflow="fold")
    for r in rows:
        lo, hi = r["ci_low"], r["ci_high"]
        ci = "-" if lo != lo or hi != hi else f"[{lo:+.1f}, {hi:+.1f}]"
        d = r["delta_mean_ttft_pct"]
        t.add_row(escape(r["task"]), escape(r["policy"]), str(r["num_episodes"]), f"{r['mean_ttft_s']:.4f}",
                  f"{r['p90_ttft_s']:.4f}", f"{r['p99_ttft_s']:.4f}", f"{r['slo_attainment_token_weighted']:.4f}",
                  escape(r["reference"]), "-" if d != d else f"{d:+.2f}", ci, "yes" if r["overloaded"] else "no",
                  *((str(r.get("num_invalid_actions", 0)),) if invalid else ()))
    print_unclipped(t)
