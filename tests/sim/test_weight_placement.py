"""Weight shard groups in the pool: every worker holds whole G-GPU groups, so split and merge never move weights."""

from __future__ import annotations

from dataclasses import replace

import pytest

from envs.sim import PoolConfig, SimConfig, Simulator
from envs.sim.cost_model import Calibration
from envs.sim.events import EventPriority
from envs.sim.reconfig import Operation, apply_operation, eligible_operations, get_reconfigurator
from envs.sim.router import LeastWorkRouter
from tests.factories import make_workload


@pytest.fixture()
def sharded_calibration(toy_cal) -> Calibration:
    """The toy calibration with its weights spread over G = 2 GPUs."""
    return replace(toy_cal, weight_shard_gpus=2)


def _shard_groups_of(sim, g: int) -> dict[int, int]:
    """GPU shard group index -> id of the worker holding it; fails if a group straddles workers."""
    owner = {}
    for w in sim.workers.values():
        assert w.first_gpu % g == 0 and w.degree % g == 0, f"cp{w.degree}@{w.first_gpu} splits a G={g} group"
        for k in range(w.first_gpu // g, (w.first_gpu + w.degree) // g):
            owner[k] = w.worker_id
    return owner


def test_pool_check_weight_shard():
    PoolConfig(num_gpus=8, composition="cp4x2", supported_degrees=(4, 8)).check_weight_shard(4)
    PoolConfig(num_gpus=8, composition="cp4x2", supported_degrees=(4, 8)).check_weight_shard(1)
    with pytest.raises(ValueError, match=r"G = 8 .* supports CP degree 4.*--supported-degrees 8"):
        PoolConfig(num_gpus=8, composition="cp4x2", supported_degrees=(4, 8)).check_weight_shard(8)
    with pytest.raises(ValueError, match="G = 2"):
        PoolConfig(num_gpus=8, composition="cp2x4", supported_degrees=(1, 2)).check_weight_shard(2)


def test_simulator_refuses_a_pool_below_the_shard_group(sharded_calibration):
    wl = make_workload([(0.0, 10, None)])
    pool = PoolConfig(num_gpus=4, gpus_per_node=4, composition="cp2x2", supported_degrees=(1, 2))
    with pytest.raises(ValueError, match="weight_shard_gpus"):
        Simulator(wl, SimConfig(pool=pool), sharded_calibration)
    # the same pool without CP-1 is accepted
    Simulator(wl, SimConfig(pool=replace(pool, supported_degrees=(2,))), sharded_calibration)


def test_split_and_merge_never_move_weights(sharded_calibration):
    """Random split/merge sequence on an 8-GPU node with G = 2: every committed composition keeps
    every shard group inside one worker (a CP-4 worker is two G-groups), and no operation that
    would cut a group (a split of a CP-2 worker) is ever eligible."""
    g = sharded_calibration.weight_shard_gpus
    pool = PoolConfig(num_gpus=8, gpus_per_node=8, composition="cp8@0", supported_degrees=(2, 4, 8))
    wl = make_workload([(0.5 * i, 40, None) for i in range(120)])
    sim = Simulator(wl, SimConfig(pool=pool), sharded_calibration)
    rc = get_reconfigurator(sim)
    seen = []

    def step(n: int) -> None:
        owner = _shard_groups_of(sim, g)
        assert sorted(owner) == list(range(8 // g))  # every group is held, by exactly one worker
        seen.append(tuple(sorted(w.degree for w in sim.workers.values())))
        ops = eligible_operations(sim)
        assert not any(o.kind == "split" and sim.workers[o.worker_ids[0]].degree == g for o in ops)
        if ops and not rc.in_flight():
            apply_operation(sim, ops[(7 * n) % len(ops)])
        if n < 60:
            sim.schedule(2.0, EventPriority.CONTROL, lambda _: step(n + 1))

    sim.schedule(0.0, EventPriority.CONTROL, lambda _: step(0))
    sim.run(LeastWorkRouter())
    assert sum(r.committed for r in rc.records) >= 5
    assert {k for r in rc.records if r.committed for k in [r.kind]} == {"split", "merge"}
    assert (2, 2, 2, 2) in seen  # reached the finest composition, and never went below G
    _shard_groups_of(sim, g)


def test_split_of_a_worker_of_degree_g_is_refused(sharded_calibration):
    pool = PoolConfig(num_gpus=4, gpus_per_node=4, composition="cp2x2", supported_degrees=(2, 4))
    sim = Simulator(make_workload([(0.0, 10, None)]), SimConfig(pool=pool), sharded_calibration)
    assert [o.kind for o in eligible_operations(sim)] == ["merge"]
    with pytest.raises(ValueError, match="not eligible"):
        apply_operation(sim, Operation.split(0))
