"""``cpgym benchmark list``: the benchmark's tasks (``benchmark.tasks.TASKS``) with their stored
capacity, rate and splits (time blocks of the trace's clock or seed ranges, the gap, and the
number of episodes of each split), and its reference (:func:`reference_in_use`)."""

from __future__ import annotations

import argparse

from rich.markup import escape

from benchmark.capacity import load_capacities, rate_scale
from benchmark.specs import reference_contender
from benchmark.splits import SPLIT_NAMES
from benchmark.tasks import TASKS, Task, num_episodes
from experiments.common import dumps_json, print_unclipped
from experiments.flags.benchmark_list import add_arguments  # noqa: F401  (re-exported: the command's flags)


def task_row(task: Task, capacities: dict) -> dict:
    """One task of ``list``: its definition (``Task.to_dict``) with ``capacity_rps`` and ``rate_rps``
    (``null`` while no capacity is stored) and ``splits`` holding ``num_episodes`` per split."""
    d = task.to_dict()
    entry = capacities.get(task.id)
    scale = rate_scale(task, entry["capacity_rps"], entry["native_rps"]) if entry else None
    d["capacity_rps"] = entry["capacity_rps"] if entry else None
    if entry is None:
        d["rate_rps"] = None
    else:
        d["rate_rps"] = entry["native_rps"] if task.load_fraction is None else task.load_fraction * entry["capacity_rps"]
    d["splits"]["num_episodes"] = {s: num_episodes(task, s, scale) for s in SPLIT_NAMES}
    head = ("id", "kind", "workload", "load_fraction", "capacity_rps", "rate_rps", "splits")
    return {**{k: d[k] for k in head}, **{k: v for k, v in d.items() if k not in head}}


def reference_in_use(task: Task) -> str:
    """The task's reference as the table shows it: ``task.reference`` (``tuned:vertumnus-router``
    or ``tuned:vertumnus``), followed by the untuned stand-in's label while no tuned entry is stored
    (``tuned:vertumnus (now vertumnus (untuned))``)."""
    label = reference_contender(task).label
    return task.reference if label == task.reference else f"{task.reference} (now {label})"


def _ranges(splits: dict) -> str:
    if splits["kind"] == "time":
        return "; ".join(f"{s} {splits[s + '_s'][0]:g}-{splits[s + '_s'][1]:g} s" for s in SPLIT_NAMES) + \
            f"; gap {splits['gap_s']:g} s"
    return "; ".join(f"{s} seeds {splits[s][0]}-{splits[s][1] - 1}" for s in SPLIT_NAMES)


def run(args: argparse.Namespace) -> int:
    caps = load_capacities()
    rows = [task_row(t, caps) for t in TASKS.values()]
    if args.format == "json":
        print(dumps_json(rows))
        return 0
    from rich.table import Table

    t = Table(title="cpgym benchmark tasks (splits: the trace's own clock, or seed ranges)")
    for c in ("id", "kind", "workload", "load", "capacity rps", "rate rps", "splits", "episodes train/val/test",
              "reference"):
        t.add_column(c, justify="right" if c in ("load", "capacity rps", "rate rps") else "left", overflow="fold")
    for r in rows:
        wl = r["workload"].get("trace") or r["workload"].get("generator")
        n = r["splits"]["num_episodes"]
        lf = "-" if r["load_fraction"] is None else f"{r['load_fraction']:g}"
        t.add_row(escape(r["id"]), r["kind"], escape(str(wl)), lf,
                  "-" if r["capacity_rps"] is None else f"{r['capacity_rps']:.2f}",
                  "-" if r["rate_rps"] is None else f"{r['rate_rps']:.2f}", escape(_ranges(r["splits"])),
                  "/".join("-" if n[s] is None else str(n[s]) for s in SPLIT_NAMES),
                  escape(reference_in_use(TASKS[r["id"]])))
    print_unclipped(t)
    return 0
