"""``cpgym evaluate``: a view of the benchmark protocol (``benchmark.protocol``; issue #39, "One
protocol") for one policy against others on one task: ``cpgym evaluate --policy P --against A,B
--task ID`` prints exactly the rows of ``cpgym benchmark run --policy P --policy A --policy B
--policy REF --tasks ID`` (REF: the task's reference, always shown), so its numbers are the
leaderboard's (``--split test``).

Without ``--task`` the task follows the policy's kind: ``routing/conversation-0.9-v1`` for a
routing policy, ``reconfig/matched-phases-v1`` for a reconfiguration checkpoint. ``--split``
defaults to ``validation``; a ``--split test`` run is appended to the ledger as any benchmark
test run.

The former modes (per-seed held-out windows ``j % 4``, 4 windows x 3 seeds, and ``--loads`` /
``--protocol`` windows) are gone: their flags (``--kind``, ``--trace``, ``--workload``,
``--target-rps``, ``--seeds``, ``--windows``, ``--loads``, the pool flags, ...) are still parsed
for one release and ignored with a one-line warning each (the task fixes the workload, pool and
load); ``--max-windows`` is the deprecated spelling of ``--max-episodes``.
"""

from __future__ import annotations

import argparse
import sys

from benchmark.specs import reference_contender
from benchmark.splits import QUICK_EPISODES
from benchmark.tasks import get_task
from envs.sim.options import split_name_list
from experiments.commands.benchmark_run import execute
from experiments.flags.evaluate import (  # noqa: F401  (re-exported)
    DEFAULT_RECONFIG_AGAINST,
    DEFAULT_ROUTING_AGAINST,
    DEFAULT_TASKS,
    REMOVED_FLAGS,
    add_arguments,
)
from policies.common.checkpoint import resolve_checkpoint
from policies.common.policy_args import is_checkpoint


def ignored_flag_warnings(args: argparse.Namespace) -> list[str]:
    """One warning line per flag of a removed mode given on the command line."""
    given = [flag for flag, v in REMOVED_FLAGS.items()
             if getattr(args, "removed_" + flag[2:].replace("-", "_")) not in (None, False)]
    given += [flag for dest, flag, default in getattr(args, "_ignored_sim_flags", ()) if getattr(args, dest) != default]
    return [f"cpgym evaluate: warning: {flag} is deprecated and ignored: evaluate runs the benchmark protocol on --task's "
            "episodes, pool and load (`cpgym benchmark list`)" for flag in given]


def default_task(policy: str) -> str:
    """The task of ``policy`` without ``--task``: by its kind (:data:`DEFAULT_TASKS`; a checkpoint's
    ``train_config.json`` ``kind``, a heuristic: routing).

    Raises:
        ValueError / FileNotFoundError: one line naming the checkpoint's file, when it cannot be read.
    """
    if not is_checkpoint(policy):
        return DEFAULT_TASKS["routing"]
    _, meta = resolve_checkpoint(policy)
    return DEFAULT_TASKS["reconfig" if meta.get("kind") == "reconfig" else "routing"]


def split_spec_list(text: str, flag: str) -> list[str]:
    """Comma-separated SPECs: a comma starts a new SPEC except before a ``key=value`` piece (no
    ``:``) that follows a ``NAME:param=value`` SPEC, which belongs to it
    (``vertumnus-router:beta=4,lambda=2,least-work`` -> ``["vertumnus-router:beta=4,lambda=2",
    "least-work"]``).

    Raises:
        ValueError: naming ``flag``, as ``envs.sim.options.split_name_list`` (an empty list or
            item, a SPEC given twice).
    """
    out: list[str] = []
    for piece in split_name_list(text, flag, allow_duplicates=True):
        if out and ":" in out[-1] and "=" in piece and ":" not in piece:
            out[-1] += "," + piece
        else:
            out.append(piece)
    twice = next((x for i, x in enumerate(out) if x in out[:i]), None)
    if twice is not None:
        raise ValueError(f"{flag} lists {twice!r} twice: {text!r}")
    return out


def run(args: argparse.Namespace) -> int:
    for line in ignored_flag_warnings(args):
        print(line, file=sys.stderr)
    if args.max_episodes is not None and args.max_episodes < 1:
        raise ValueError(f"--max-episodes must be >= 1, got {args.max_episodes}")
    if args.quick and args.max_episodes is not None:
        raise ValueError("--quick and --max-episodes: give one")
    try:
        task = get_task(args.task or default_task(args.policy))
    except ValueError as exc:
        raise ValueError(f"--task: {exc}") from None
    against = args.against if args.against is not None else (
        DEFAULT_ROUTING_AGAINST if task.kind == "routing" else DEFAULT_RECONFIG_AGAINST)
    specs = [args.policy] + [s for s in split_spec_list(against, "--against") if s != args.policy]
    reference = reference_contender(task).spec
    if reference not in specs:
        specs.append(reference)
    return execute(specs, [task], args, QUICK_EPISODES if args.quick else args.max_episodes)
