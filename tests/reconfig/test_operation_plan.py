"""Planning operations towards a target composition (envs/planning/operations.py)."""

import pytest

from envs.planning.operations import (
    composition_distance,
    operations_towards,
    projected_degree_counts,
    rank_operations,
)
from envs.sim import PoolConfig, SimConfig, Simulator
from envs.sim.events import EventPriority
from envs.sim.reconfig import MERGE, SPLIT, apply_operation, eligible_operations, get_reconfigurator
from envs.sim.router import LeastWorkRouter
from tests.factories import make_workload


def _sim(toy_cal, composition: str, degrees=(1, 2, 4, 8), num_gpus: int = 16):
    pool = PoolConfig(num_gpus=num_gpus, gpus_per_node=8, composition=composition, supported_degrees=degrees)
    return Simulator(make_workload([(0.0, 10, None), (30.0, 10, None)]), SimConfig(pool=pool), toy_cal)


def _run_to_target(sim, target, max_gpus=float("inf")):
    """Applies a plan every 5 s until the projected composition is the target; returns the plans."""
    plans = []

    def tick(_):
        plan = operations_towards(sim, target, max_gpus=max_gpus)
        plans.append([str(op) for op in plan])
        for op in plan:
            apply_operation(sim, op)
        if sim.env.now < 25:
            sim.schedule(5.0, EventPriority.CONTROL, tick, None)

    sim.schedule(1.0, EventPriority.CONTROL, tick, None)
    sim.run(LeastWorkRouter())
    return plans


def test_distance_counts_gpus_per_degree_level():
    assert composition_distance({4: 2}, {4: 2}) == 0
    # one split of a CP-4 (G_4: 8 -> 4) is one step of 4 GPUs
    assert composition_distance({4: 2}, {4: 1, 2: 2}) == 4
    # CP-8 -> 4 x CP-2 needs G_8 and G_4 to fall by 8 each
    assert composition_distance({8: 1}, {2: 4}) == 16
    assert composition_distance({8: 1}, {4: 2}) == 8


def test_plan_reaches_a_two_level_target_and_respects_the_gpu_budget(toy_cal):
    sim = _sim(toy_cal, "cp8x2")
    plans = _run_to_target(sim, {8: 1, 2: 4}, max_gpus=8)
    # first tick: only one CP-8 may move (budget 8 GPUs); the idle one on GPUs 8-15 ranks first
    # (shorter predicted drain than worker 0, which runs the first request)
    assert plans[0] == ["split(8)"]
    assert {w.degree for w in sim.workers.values()} == {8, 2}
    assert sorted(w.degree for w in sim.workers.values()) == [2, 2, 2, 2, 8]
    assert projected_degree_counts(sim) == {8: 1, 2: 4}
    assert plans[-1] == []  # at the target: nothing more to do


def test_plan_merges_towards_larger_degrees_and_counts_in_flight_operations(toy_cal):
    sim = _sim(toy_cal, "cp2x8", degrees=(2, 4))
    plan = operations_towards(sim, {4: 2, 2: 4})
    assert [op.kind for op in plan] == [MERGE, MERGE]
    for op in plan:
        apply_operation(sim, op)
    # in flight: the projection already shows the target, so a second plan is empty
    assert projected_degree_counts(sim) == {4: 2, 2: 4}
    assert operations_towards(sim, {4: 2, 2: 4}) == []
    # moving back: splits of the new CP-4 workers are not eligible before their commit, so only
    # operations on the still-ACTIVE CP-2 workers are candidates, and none of them helps
    assert operations_towards(sim, {2: 8}) == []
    assert all(op.kind != SPLIT for op in operations_towards(sim, {4: 4}))


def test_plan_rejects_a_target_that_does_not_fit_the_pool(toy_cal):
    sim = _sim(toy_cal, "cp4x4", degrees=(2, 4))
    with pytest.raises(ValueError, match="cover the pool's 16 GPUs"):
        operations_towards(sim, {4: 3})
    with pytest.raises(ValueError, match=r"CP degree\(s\) \[8\] not supported"):
        operations_towards(sim, {8: 2})


@pytest.mark.parametrize("shared", [0, 3, 6])
def test_ranking_breaks_drain_ties_by_traffic(toy_cal, shared):
    # four idle CP-2 workers: the two merges tie on predicted drain (0 s), so the KV traffic decides;
    # the first pair's caches share `shared` of their 6 blocks, the second pair's share 3
    sim = _sim(toy_cal, "cp2x4", degrees=(2, 4), num_gpus=8)
    caches = [sim.workers[wid].cache for wid in sim.worker_ids]
    caches[0].insert(list(range(6)))
    caches[1].insert(list(range(6 - shared, 12 - shared)))
    caches[2].insert(list(range(100, 106)))
    caches[3].insert(list(range(103, 109)))
    merges = [op for op in eligible_operations(sim) if op.kind == MERGE]
    r = get_reconfigurator(sim)
    assert len(merges) == 2 and {r.predicted_drain_s(op) for op in merges} == {0.0}
    traffic = [r.expected_reconciliation_bytes(op) for op in merges]
    assert traffic[0] != traffic[1] or shared == 3
    ranked = rank_operations(sim, merges)
    assert rank_operations(sim, merges[::-1]) == ranked  # the order does not depend on the input order
    expected = min(range(2), key=lambda i: (traffic[i], sim.workers[merges[i].worker_ids[0]].first_gpu))
    assert ranked[0] is merges[expected]


def test_merge_plan_of_ready_only_siblings_is_the_per_block_plan(toy_cal):
    # _plan_merge classifies the blocks of two READY-only siblings by which of them holds each
    # (three cases) instead of visiting every block; the plan (blocks, recency, shard infos, lost
    # blocks) is the per-block loop's, which a worker holding PENDING blocks still takes
    sim = _sim(toy_cal, "cp2x4", degrees=(2, 4), num_gpus=8)
    a, b = (sim.workers[wid] for wid in sim.worker_ids[:2])
    a.cache.insert(list(range(8)))
    b.cache.insert(list(range(5, 14)))
    a.cache.touch([2, 1, 0], 3)
    r = get_reconfigurator(sim)
    fast = r._plan_merge([a, b])
    r._shards[a.worker_id] = {-1: None}  # a non-empty shard record (no block of it is resident) forces the loop
    try:
        slow = r._plan_merge([a, b])
    finally:
        del r._shards[a.worker_id]
    assert fast == slow
    blocks, num_lost = fast
    assert num_lost == 0 and sorted(h for h, _ in blocks) == list(range(14))
    assert {info is None for h, info in blocks if 5 <= h < 8} == {True}  # held by both: READY after the merge
    assert None not in {info for h, info in blocks if h < 5 or h >= 8}  # held by one: PENDING
