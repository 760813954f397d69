"""``cpgym evaluate`` flags (the run: :mod:`experiments.commands.evaluate`)."""

from __future__ import annotations

import argparse

from benchmark.ledger import DEFAULT_LEDGER
from benchmark.splits import QUICK_EPISODES
from experiments.flags.common import add_sim_arguments

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
