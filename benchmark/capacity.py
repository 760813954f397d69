"""Capacity of every benchmark task, measured on its training split only, and stored.

A task's load is ``load_fraction x capacity``; the capacity is measured once with the task's
named capacity definition (``envs.planning.capacity_definitions.CAPACITY_DEFINITIONS``; suite v1:
``protocol-queueing-delay``: the highest rate at which the last quarter of the workload waits on
average at most 5 s before its prefill starts, by geometric bisection) on the task's training
workload (``benchmark.tasks.training_workload``: the trace's training block, or the first
training seed's workload) time-scaled to each probed rate, under the reference router
``vertumnus-router`` on the task's healthy pool. Nothing of the validation or test split is
simulated (``tests/benchmark/test_splits.py`` checks it).

The results are stored in ``benchmark/capacity.json`` (package data, committed) so that every
run of a task uses the same rates; ``cpgym benchmark capacity --tasks ID`` re-measures and
rewrites an entry. Each entry records the training workload's digest, so a changed trace or
generator is detected (:func:`task_capacity` refuses a stale entry).
"""

from __future__ import annotations

import hashlib
import json
import math
from importlib import resources
from pathlib import Path

from baselines.runner import run_policy
from benchmark.tasks import Task, episodes, rate_scale, training_workload
from envs.planning.capacity_definitions import CAPACITY_DEFINITIONS, CapacityBracketError, search_capacity
from envs.sim.request import Workload
from envs.workloads import transforms

#: The router every capacity is probed with (the routing protocol's reference router).
CAPACITY_POLICY = "vertumnus-router"
#: Bracket of the search [requests/s]: wide enough for every suite-v1 task (the search doubles
#: past the top if it passes).
LOW_RPS, HIGH_RPS = 0.5, 512.0


def capacity_file() -> Path:
    """The stored capacities (``benchmark/capacity.json``)."""
    return Path(str(resources.files("benchmark").joinpath("capacity.json")))


def training_digest(workload: Workload) -> str:
    """SHA-256 (first 16 hex digits) of the training workload's arrivals, lengths and hashes."""
    h = hashlib.sha256()
    for r in workload.requests:
        h.update(f"{r.arrival_time_s:.6f},{r.num_prompt_tokens},{r.num_output_tokens},{r.block_hashes[:4]};".encode())
    return h.hexdigest()[:16]


def measure_capacity(task: Task, log=None) -> dict:
    """Measures the task's capacity on its training workload (module docstring).

    Returns:
        ``{"capacity_rps", "native_rps" (the training workload's own mean rate), "definition",
        "policy", "training_digest", "probes": [[rate_rps, value, passes], ...]}``.

    Raises:
        ValueError: if the lowest probed rate already fails the definition.
    """
    if task.capacity_definition != "protocol-queueing-delay":
        raise ValueError(f"task {task.id}: capacity definition {task.capacity_definition!r} is not supported by the "
                         "benchmark (supported: protocol-queueing-delay)")
    definition = CAPACITY_DEFINITIONS[task.capacity_definition]
    config = task.capacity_sim_config()
    train = training_workload(task)
    probes = []

    def ok(rate: float) -> bool:
        result = run_policy(CAPACITY_POLICY, transforms.scale_to_rate(train, rate), config)
        passes, value = definition.verdict(result)
        probes.append([rate, value, bool(passes)])
        if log:
            log(f"{task.id}: {rate:.3f} req/s -> {value:.3f} ({'passes' if passes else 'fails'})")
        return passes

    try:
        lo, _ = search_capacity(ok, definition.search, LOW_RPS, HIGH_RPS)
    except CapacityBracketError:
        raise ValueError(f"task {task.id}: {LOW_RPS} requests/s is already past capacity") from None
    return {"capacity_rps": lo, "native_rps": train.mean_rate_rps, "definition": definition.name,
            "policy": CAPACITY_POLICY, "training_digest": training_digest(train), "probes": probes}


def load_capacities(path: Path | None = None) -> dict[str, dict]:
    """The stored entries (``{}`` if the file does not exist)."""
    p = path or capacity_file()
    return json.loads(p.read_text(encoding="utf-8")) if p.exists() else {}


def store_capacity(task: Task, entry: dict, path: Path | None = None) -> None:
    """Writes ``entry`` for ``task`` into the store (others kept; keys sorted, stable bytes)."""
    p = path or capacity_file()
    data = load_capacities(p)
    data[task.id] = entry
    p.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def task_capacity(task: Task, path: Path | None = None) -> dict:
    """The stored capacity entry of ``task``.

    Raises:
        ValueError: if there is none, or its training digest differs from the current training
            workload (the trace or generator changed): re-measure with ``cpgym benchmark capacity``.
    """
    entry = load_capacities(path).get(task.id)
    hint = f"run `cpgym benchmark capacity --tasks {task.id}`"
    if entry is None:
        raise ValueError(f"task {task.id}: no stored capacity; {hint}")
    if entry["training_digest"] != training_digest(training_workload(task)):
        raise ValueError(f"task {task.id}: the stored capacity was measured on a different training workload; {hint}")
    return entry


def task_rate_scale(task: Task, path: Path | None = None) -> float:
    """The factor each episode's arrival rate is multiplied by (``benchmark.tasks.rate_scale``)."""
    entry = task_capacity(task, path)
    return rate_scale(task, entry["capacity_rps"], entry["native_rps"])


def task_episodes(task: Task, split: str, *, max_episodes: int | None = None, path: Path | None = None) -> list[Workload]:
    """``benchmark.tasks.episodes`` at the task's stored rate scale."""
    return episodes(task, split, task_rate_scale(task, path), max_episodes=max_episodes)


def target_rps(task: Task, path: Path | None = None, *, entry: dict | None = None) -> float:
    """The task's arrival rate [requests/s] (``load_fraction x capacity``; a generator task without
    a load fraction: its training workload's own rate); ``entry``: its :func:`task_capacity` entry
    when the caller has it (checking an entry builds the training workload)."""
    entry = entry if entry is not None else task_capacity(task, path)
    if task.load_fraction is None:
        return entry["native_rps"]
    return task.load_fraction * entry["capacity_rps"]


def is_overloaded_task(task: Task, path: Path | None = None, *, entry: dict | None = None) -> bool:
    """Whether the task's rate is past its measured capacity (``entry``: as :func:`target_rps`)."""
    entry = entry if entry is not None else task_capacity(task, path)
    return target_rps(task, entry=entry) > entry["capacity_rps"] * (1 + 1e-9) and math.isfinite(entry["capacity_rps"])
