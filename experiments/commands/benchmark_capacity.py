"""``cpgym benchmark capacity --tasks ID``: re-measures each task's capacity on its training split
(``benchmark.capacity.measure_capacity``) and stores it in ``benchmark/capacity.json``, which
every run of the task reads (the entries of other tasks are kept)."""

from __future__ import annotations

import argparse
import sys

from benchmark.capacity import measure_capacity, store_capacity
from benchmark.tasks import parse_task_ids
from experiments.common import dumps_json
from experiments.flags.benchmark_capacity import add_arguments  # noqa: F401  (re-exported: the command's flags)


def run(args: argparse.Namespace) -> int:
    try:
        tasks = parse_task_ids(args.tasks)
    except ValueError as exc:
        raise ValueError(f"--tasks: {exc}".replace("--tasks: --tasks", "--tasks")) from None
    log = None if args.quiet else (lambda s: print(s, file=sys.stderr))
    out = {}
    for t in tasks:
        entry = measure_capacity(t, log=log)
        store_capacity(t, entry)
        out[t.id] = {"capacity_rps": entry["capacity_rps"], "native_rps": entry["native_rps"],
                     "definition": entry["definition"], "num_probes": len(entry["probes"])}
    print(dumps_json(out))
    return 0
