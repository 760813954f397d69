"""Benchmark task definitions and how episodes are cut (benchmark/tasks.py, benchmark/splits.py).
The leak test over every task's splits is tests/benchmark/test_splits.py."""

import pytest

from benchmark.capacity import task_capacity, task_episodes, task_rate_scale
from benchmark.splits import SeedSplit, TraceSplit
from benchmark.tasks import TASKS, Task, episodes, get_task, parse_task_ids


@pytest.mark.parametrize(("kwargs", "phrase"), [
    ({"train_s": (0, 10), "validation_s": (10, 20), "test_s": (30, 40), "gap_s": 5}, "gap"),
    ({"train_s": (0, 10), "validation_s": (15, 12), "test_s": (30, 40), "gap_s": 5}, "validation"),
    ({"train_s": (0, 10), "validation_s": (15, 20), "test_s": (25, 40), "gap_s": -1}, "gap_s"),
])
def test_trace_split_refuses_unsealed_blocks(kwargs, phrase):
    with pytest.raises(ValueError, match=phrase):
        TraceSplit(**kwargs)


def test_seed_split_refuses_overlapping_ranges():
    with pytest.raises(ValueError, match="overlap"):
        SeedSplit(train=(0, 10), validation=(5, 12), test=(20, 30))
    with pytest.raises(ValueError, match="split: expected one of"):
        SeedSplit(train=(0, 10), validation=(10, 12), test=(20, 30)).seeds("eval")


@pytest.mark.parametrize(("kwargs", "phrase"), [
    ({"id": "routing/x"}, "version"),
    ({"id": "reconfig/x-v1"}, "kind"),
    ({"trace": None}, "exactly one of trace and generator"),
    ({"load_fraction": 0.0}, "load_fraction"),
    ({"episode_window_s": 0.0}, "episode_window_s"),
])
def test_task_refuses_inconsistent_definitions(kwargs, phrase):
    base = {"id": "routing/x-v1", "kind": "routing", "description": "", "split": TASKS["routing/conversation-0.9-v1"].split,
            "trace": "conversation_trace.jsonl", "load_fraction": 0.9}
    with pytest.raises(ValueError, match=phrase):
        Task(**{**base, **kwargs})


def test_ids_name_kind_and_version():
    for tid, task in TASKS.items():
        assert tid == task.id and tid.startswith(task.kind + "/") and tid.rsplit("-", 1)[1].startswith("v")
    with pytest.raises(ValueError, match="unknown task 'routing/nope-v1'"):
        get_task("routing/nope-v1")
    with pytest.raises(ValueError, match="twice"):
        parse_task_ids("routing/conversation-0.9-v1,routing/conversation-0.9-v1")
    assert [t.id for t in parse_task_ids("all")] == list(TASKS)


@pytest.mark.slow  # ~7 s: regenerates every task's training workload for its digest
def test_every_task_has_a_current_stored_capacity():
    for task in TASKS.values():
        entry = task_capacity(task)
        assert entry["capacity_rps"] > 0 and entry["definition"] == task.capacity_definition


def test_trace_episodes_are_consecutive_windows_inside_their_block():
    task = get_task("routing/conversation-0.9-v1")
    scale = task_rate_scale(task)
    for split in ("train", "validation", "test"):
        eps = episodes(task, split, scale)
        a, b = (x / scale for x in task.split.block_s(split))
        assert len(eps) >= 8
        for k, ep in enumerate(eps):
            m = ep.metadata
            assert m["split"] == split and m["episode_index"] == k and m["measure_from_s"] == task.warmup_s
            assert m["block_offset_s"] == pytest.approx(a + k * task.episode_window_s)
            assert a - 1e-9 <= m["block_offset_s"] and m["block_offset_s"] + task.warmup_s + task.episode_window_s <= b + 1e-6
            assert all(0 <= r.arrival_time_s < task.warmup_s + task.episode_window_s for r in ep.requests)


def test_generator_episodes_are_one_per_seed_and_reproducible():
    task = get_task("routing/leval-like-0.9-v1")
    eps = task_episodes(task, "test", max_episodes=3)
    assert [e.metadata["seed"] for e in eps] == [2000, 2010, 2019]
    again = task_episodes(task, "test", max_episodes=3)
    assert [e.requests for e in eps] == [e.requests for e in again]
    assert all(e.requests[-1].arrival_time_s < task.warmup_s + task.episode_window_s for e in eps)


def test_rate_scale_sets_the_task_load():
    task = get_task("routing/conversation-0.9-v1")
    entry = task_capacity(task)
    assert task_rate_scale(task) * entry["native_rps"] == pytest.approx(0.9 * entry["capacity_rps"])
