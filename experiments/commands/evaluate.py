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

from benchmark.ledger import DEFAULT_LEDGER
from benchmark.protocol import QUICK_EPISODES
from benchmark.specs import reference_contender
from benchmark.tasks import get_task
from envs.sim.options import split_name_list
from experiments.commands.benchmark_run import execute
from experiments.common import add_sim_arguments
from policies.common.checkpoint import resolve_checkpoint
from policies.common.policy_args import is_checkpoint

#: Policies compared by default (routing; the task's reference is always added).
DEFAULT_ROUTING_AGAINST = "least-work,prefix-affinity,round-robin"
#: Policies compared by default on a reconfiguration task (the heuristic split/merge controller).
DEFAULT_RECONFIG_AGAINST = "vertumnus-adaptive"
#: The task of a policy of each kind when ``--task`` is not given.
DEFAULT_TASKS = {"routing": "routing/conversation-0.9-v1", "reconfig": "reconfig/matched-phases-v1"}
#: Flags of the removed modes, parsed for one release and ignored with a warning: flag -> takes a value.
REMOVED_FLAGS = {"--kind": True, "--trace": True, "--workload": True, "--target-rps": True,
                 "--episode-window-s": True, "--eval-every": True, "--windows": True, "--seeds": True,
                 "--reference": True, "--loads": True, "--protocol": False, "--warmup-s": True, "--tuned": True,
                 "--from-csv": True}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", required=True, metavar="SPEC",
                   help="a registered policy, NAME:param=value[,...], tuned:NAME, shipped (the shipped learned policy "
                        "for the task's kind), shipped-residual, shipped-reconfig or a checkpoint path")
    p.add_argument("--against", metavar="P1,P2,...",
                   help=f"comma-separated SPECs to compare with (default: routing {DEFAULT_ROUTING_AGAINST}; reconfig "
                        f"{DEFAULT_RECONFIG_AGAINST}); the task's reference is always added")
    p.add_argument("--task", metavar="ID", help=f"the benchmark task (`cpgym benchmark list`; default by the policy's "
                                                f"kind: {DEFAULT_TASKS['routing']} or {DEFAULT_TASKS['reconfig']})")
    p.add_argument("--split", choices=("validation", "test"), default="validation",
                   help="validation (default: model selection) or test (final numbers; appended to the ledger)")
    p.add_argument("--quick", action="store_true",
                   help=f"at most {QUICK_EPISODES} episodes, evenly spread (a smoke run, not a result)")
    p.add_argument("--max-episodes", type=int, metavar="N", help="at most N episodes, evenly spread (default all)")
    p.add_argument("--format", choices=("table", "json"), default="table", help="stdout format (default table)")
    p.add_argument("--out", metavar="FILE", help="also write the rows: FILE.csv the per-episode rows, else JSON "
                                                 "{\"rows\", \"episodes\"}")
    p.add_argument("--ledger", metavar="FILE", default=str(DEFAULT_LEDGER),
                   help=f"the test-split ledger a --split test run is appended to (default {DEFAULT_LEDGER})")
    p.add_argument("--quiet", action="store_true", help="no per-episode progress lines on stderr")
    removed = p.add_argument_group("removed evaluation modes (ignored with a warning; removed in the next release)")
    for flag, takes_value in REMOVED_FLAGS.items():
        if takes_value:
            removed.add_argument(flag, dest="removed_" + flag[2:].replace("-", "_"), metavar="X", help=argparse.SUPPRESS)
        else:
            removed.add_argument(flag, dest="removed_" + flag[2:].replace("-", "_"), action="store_true",
                                 help=argparse.SUPPRESS)
    before = {a.dest for a in p._actions}
    add_sim_arguments(p, seed=False)  # the task fixes the pool and simulator
    sim = [a for a in p._actions if a.dest not in before]
    for a in sim:
        a.help = argparse.SUPPRESS
    p.set_defaults(_ignored_sim_flags=tuple((a.dest, a.option_strings[0], a.default) for a in sim))


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
    specs = [args.policy] + [s for s in split_name_list(against, "--against") if s != args.policy]
    reference = reference_contender(task).spec
    if reference not in specs:
        specs.append(reference)
    return execute(specs, [task], args, QUICK_EPISODES if args.quick else args.max_episodes)
