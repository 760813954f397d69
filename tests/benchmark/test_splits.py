"""Sealed splits, for every task (issue #39, "Splits that cannot leak"): no request of a task's
test split enters a training or validation episode (warm-ups included), and the capacity
measurement simulates training requests only.

Trace tasks compare request fingerprints (arrival on the trace's own clock, prompt length, first
block hashes) of every episode with the trace's test block. Generator tasks record the seeds the
generator is called with (a generator's workload is a function of its seed): the stand-in
generator returns a tiny workload, so that every task's splits are built in milliseconds.
"""

from __future__ import annotations

import numpy as np
import pytest

import benchmark.capacity as capacity
from benchmark.tasks import TASKS, _load_trace, episodes, trace_path, training_workload
from envs import workloads
from envs.sim.request import Request, Workload
from tests.interrupt import patch_everywhere

TRACE_TASKS = [t for t in TASKS.values() if t.trace is not None]
GENERATOR_TASKS = [t for t in TASKS.values() if t.generator is not None]


def _content(r) -> tuple:
    return r.num_prompt_tokens, tuple(r.block_hashes[:4])


def _trace_fingerprints(task, a_s: float, b_s: float) -> set:
    trace = _load_trace(str(trace_path(task)))
    return {(round(r.arrival_time_s, 3), *_content(r)) for r in trace.requests if a_s <= r.arrival_time_s < b_s}


def _episode_fingerprints(ep, scale: float) -> set:
    """Every request of the episode (warm-up included) on the trace's own clock."""
    off = ep.metadata["block_offset_s"]
    return {(round((off + r.arrival_time_s) * scale, 3), *_content(r)) for r in ep.requests}


@pytest.mark.parametrize("task", TRACE_TASKS, ids=lambda t: t.id)
def test_no_test_request_enters_a_training_or_validation_episode_of_a_trace_task(task):
    scale = capacity.task_rate_scale(task)
    test_block = _trace_fingerprints(task, *task.split.test_s)
    test_eps = set().union(*(_episode_fingerprints(ep, scale) for ep in episodes(task, "test", scale)))
    # the fingerprints map back onto the trace's clock: the test episodes' requests are the test block's
    assert test_eps and test_eps <= test_block
    for split in ("train", "validation"):
        eps = episodes(task, split, scale)
        own = _trace_fingerprints(task, *task.split.block_s(split))
        seen = set().union(*(_episode_fingerprints(ep, scale) for ep in eps))
        assert len(eps) >= 2 and seen <= own
        assert not seen & test_block


def _tiny(name: str, seed: int = 0, duration_s: float | None = None, **_params) -> Workload:
    """A stand-in generator: 30 requests over the asked duration whose hashes carry the seed."""
    span = duration_s or 60.0
    reqs = tuple(Request(i, span * i / 30, 64, 1, (seed, i)) for i in range(30))
    return Workload(f"{name}-{seed}", reqs, kv_block_size_tokens=32)


@pytest.mark.parametrize("task", GENERATOR_TASKS, ids=lambda t: t.id)
def test_no_test_seed_enters_a_training_or_validation_episode_of_a_generator_task(task, monkeypatch):
    calls = []

    def record(name, seed=0, **params):
        calls.append(seed)
        return _tiny(name, seed, **params)

    monkeypatch.setattr(workloads, "get_workload", record)
    used = {}
    for split in ("train", "validation", "test"):
        calls.clear()
        eps = episodes(task, split, 1.0)
        used[split] = set(calls)
        assert used[split] == set(task.split.seeds(split)) == {ep.metadata["seed"] for ep in eps}
        # every request of an episode comes from its own seed's workload
        assert all(r.block_hashes[0] == ep.metadata["seed"] for ep in eps for r in ep.requests)
    assert not used["test"] & (used["train"] | used["validation"])


class _Stop(Exception):
    pass


@pytest.mark.parametrize("task", list(TASKS.values()), ids=lambda t: t.id)
def test_capacity_simulates_only_training_requests(task, monkeypatch):
    seeds, simulated = [], []

    def record(name, seed=0, **params):
        seeds.append(seed)
        return _tiny(name, seed, **params)

    def stop(policy, workload, config, *a, **k):
        simulated.append(workload)
        raise _Stop

    if task.generator is not None:
        monkeypatch.setattr(workloads, "get_workload", record)
    patch_everywhere(monkeypatch, capacity, "run_policy", stop)
    with pytest.raises(_Stop):
        capacity.measure_capacity(task)
    (wl,) = simulated
    if task.trace is not None:  # the probe's requests are exactly the training block's
        trace = _load_trace(str(trace_path(task)))
        a, b = task.split.train_s
        train = sorted(_content(r) for r in trace.requests if a <= r.arrival_time_s < b)
        assert sorted(_content(r) for r in wl.requests) == train
    else:
        assert seeds and set(seeds) <= set(task.split.seeds("train"))
        assert {r.block_hashes[0] for r in wl.requests} <= set(task.split.seeds("train"))


def test_every_capacity_probe_of_a_trace_task_simulates_only_training_requests(monkeypatch):
    # the whole bisection (every probed rate) of the cheapest task, with the real simulator
    task = TASKS["routing/conversation-0.9-v1"]
    real = capacity.run_policy
    probes = []

    def record(policy, workload, config, *a, **k):
        probes.append(sorted(_content(r) for r in workload.requests))
        return real(policy, workload, config, *a, **k)

    patch_everywhere(monkeypatch, capacity, "run_policy", record)
    entry = capacity.measure_capacity(task)
    train = sorted(_content(r) for r in training_workload(task).requests)
    assert len(probes) == len(entry["probes"]) >= 5
    assert all(p == train for p in probes)
    # ... and the training workload holds no request of the test block
    test_block = _trace_fingerprints(task, *task.split.test_s)
    a = task.split.train_s[0]
    assert not {(round(a + r.arrival_time_s, 3), *_content(r)) for r in training_workload(task).requests} & test_block
    assert np.isclose(entry["capacity_rps"], capacity.task_capacity(task)["capacity_rps"])
