"""Missing-shard fractions of PENDING blocks across chains of splits and merges
(envs/sim/reconfig.py): a worker born of a split and split again before its reconciliation holds
1/4 of a block's shards, not 1/2; the missing shards come from wherever the block's GPUs still
hold them, and a block none of whose valid sources is left is not retained.

Toy numbers (tests/sim/conftest.py ``toy_cal``): E_C(R,P) = 1 + 0.1 R / C [s]; a KV
block is 4 tokens x 1 byte = 4 bytes; the intra-node link carries 1 byte/s, so a reconciliation
of ``x`` bytes takes ``x`` seconds. Operations on idle workers: switch 0.5 s, 5 ms per rank.
"""

import pytest

from envs.sim import PoolConfig, SimConfig, Simulator
from envs.sim.cache import PENDING, READY
from envs.sim.events import EventPriority
from envs.sim.links import LinkConfig
from envs.sim.reconfig import Operation, ReconfigConfig, get_reconfigurator
from envs.sim.router import Router
from tests.factories import make_workload


class _To(Router):
    """Sends every request to one worker."""

    name = "to"

    def __init__(self, worker_id: int) -> None:
        self.worker_id = worker_id

    def route(self, request, view) -> int:
        return self.worker_id


def _sim(calibration, composition, degrees, specs, num_gpus=8):
    pool = PoolConfig(num_gpus=num_gpus, gpus_per_node=num_gpus, composition=composition, supported_degrees=degrees)
    cfg = SimConfig(pool=pool, record_events=True, links=LinkConfig(intra_node_bytes_per_s=1.0))
    sim = Simulator(make_workload(specs), cfg, calibration)
    rc = get_reconfigurator(sim, ReconfigConfig(switch_s=0.5, confirm_s_per_rank=0.005, drain_sync_s=0.0))
    return sim, rc


def _split_of_split(calibration, specs):
    # CP-8@0 (worker 0) holds blocks 1,2,3 READY. split(0) at 0 -> CP-4@0 (worker 0) + CP-4@4
    # (worker 2), commit 0.54; split(0) at 1.0 (blocks still PENDING) -> CP-2@0 (worker 0) +
    # CP-2@2 (worker 1), commit 1.52. Worker ids are first GPU // 2.
    sim, rc = _sim(calibration, "cp8@0", (2, 4, 8), specs)
    sim.workers[0].cache.insert((1, 2, 3))
    rc.apply(Operation.split(0))
    sim.schedule(1.0, EventPriority.CONTROL, lambda _: rc.apply(Operation.split(0)))
    return sim, rc


def test_split_of_a_split_born_worker_reconciles_three_quarters_of_each_block(toy_cal):
    # Each CP-2 half holds 2 of the 8 shards of a block: 3/4 of 3 blocks x 4 bytes = 9 bytes
    # (6 bytes, i.e. 1/2, before the fix), from CP-2@2 (1/4) and CP-4@4 (1/2) over the intra-node
    # link at 1 B/s: 5.0 .. 14.0; then P = 11, R = 1: 1 + 0.1 / 2 = 1.05 s -> 15.05 (12.05 before).
    sim, rc = _split_of_split(toy_cal, [(5.0, 12, (1, 2, 3))])
    res = sim.run(_To(0))
    split1, split2 = rc.records
    assert split2.commit_s == pytest.approx(1.52)
    assert split2.expected_reconciliation_bytes == 2 * 3 * 3  # both CP-2 halves, 3 blocks, 3 bytes each (12 before)
    assert split2.pending_blocks_created == 6
    assert split2.reconciliation_bytes == 9 and split2.num_reconciled_blocks == 3
    assert split2.num_source_lost_blocks == 0
    assert res.records["num_cached_tokens"].tolist() == [11]
    assert res.records["finish_s"].tolist() == pytest.approx([15.05])
    assert sim.links.bytes_by_kind == {"intra": 9, "inter": 0}
    # the sibling (CP-2@2) and the first split's other half (CP-4@4) still hold their shards
    assert [sim.workers[1].cache.state(h) for h in (1, 2, 3)] == [PENDING] * 3
    assert [sim.workers[2].cache.state(h) for h in (1, 2, 3)] == [PENDING] * 3


def test_split_of_split_without_the_first_sibling_is_an_ordinary_miss(toy_cal):
    # CP-4@4 (worker 2) drops the blocks at 3.0: half of every block's shards is gone, so the
    # CP-2@2 sibling (1/4) is not a valid source on its own. r0 recomputes from scratch: R = 12,
    # 1 + 0.1 * 12 / 2 = 1.6 s -> 6.6 (before the fix: 6 bytes "reconciled", P = 11, 12.05).
    sim, rc = _split_of_split(toy_cal, [(5.0, 12, (1, 2, 3))])

    def drop(_):
        for h in (1, 2, 3):
            sim.workers[2].cache.remove(h)
    sim.schedule(3.0, EventPriority.CONTROL, drop)
    res = sim.run(_To(0))
    split2 = rc.records[1]
    assert split2.num_source_lost_blocks == 1 and split2.reconciliation_bytes == 0
    assert res.records["num_cached_tokens"].tolist() == [0]
    assert res.records["finish_s"].tolist() == pytest.approx([6.6])
    assert sim.workers[0].cache.state(1) == READY  # recomputed


def test_merging_two_quarter_halves_back_leaves_the_block_half_missing(toy_cal):
    # merge(0, 1) at 2.0 puts CP-2@0 + CP-2@2 back together as CP-4@0 (commit 2.52): it holds 4 of
    # the 8 shards (the other 4 are on CP-4@4), so its blocks are PENDING with 1/2 missing:
    # 3 x 2 bytes = 6 bytes, 5.0 .. 11.0, then 1 + 0.1 / 4 = 1.025 s -> 12.025. Before the fix the
    # blocks, held by both halves, were READY: no transfer, finish 6.025.
    sim, rc = _split_of_split(toy_cal, [(5.0, 12, (1, 2, 3))])
    sim.schedule(2.0, EventPriority.CONTROL, lambda _: rc.apply(Operation.merge(0, 1)))
    res = sim.run(_To(0))
    merge = rc.records[2]
    assert merge.commit_s == pytest.approx(2.52)
    assert merge.expected_reconciliation_bytes == 6
    assert merge.pending_blocks_created == 3 and merge.ready_blocks_retained == 0
    assert merge.reconciliation_bytes == 6 and merge.num_source_lost_blocks == 0
    assert res.records["num_cached_tokens"].tolist() == [11]
    assert res.records["finish_s"].tolist() == pytest.approx([12.025])


def test_merging_quarter_halves_back_without_the_other_half_drops_the_blocks(toy_cal):
    # as above, but CP-4@4 dropped the blocks at 1.8: 4 of the 8 shards are gone, no valid source
    # is left, the merge does not retain the blocks (before the fix: READY, a hit on lost KV).
    sim, rc = _split_of_split(toy_cal, [(5.0, 12, (1, 2, 3))])

    def drop_and_merge(_):
        for h in (1, 2, 3):
            sim.workers[2].cache.remove(h)
        rc.apply(Operation.merge(0, 1))
    sim.schedule(2.0, EventPriority.CONTROL, drop_and_merge)
    res = sim.run(_To(0))
    merge = rc.records[2]
    assert merge.expected_reconciliation_bytes == 0
    assert merge.pending_blocks_created == 0 and merge.ready_blocks_retained == 0
    assert merge.num_source_lost_blocks == 3
    assert res.records["num_cached_tokens"].tolist() == [0]


def test_split_before_reconciling_a_merge_keeps_whole_blocks_where_they_are(toy_cal):
    # CP-2@0 (worker 0) holds blocks 1,2,3 READY; merge(0, 1) at 0 -> CP-4@0 with the blocks PENDING
    # (GPUs 2-3 lack their half), commit 0.52; split(0) at 1.0 -> CP-2@0 + CP-2@2, commit 1.51.
    # GPUs 0-1 still hold every shard: on CP-2@0 the blocks are READY, a hit with no transfer
    # (r0: P = 11, 1 + 0.1 / 2 = 1.05 s -> 6.05); GPUs 2-3 hold none of them: CP-2@2 does not
    # retain them. Before the fix both halves kept them PENDING, 1/2 missing: 6 bytes, 12.05.
    sim, rc = _sim(toy_cal, "cp2@0,cp2@2", (2, 4), [(5.0, 12, (1, 2, 3))], num_gpus=4)
    sim.workers[0].cache.insert((1, 2, 3))
    rc.apply(Operation.merge(0, 1))
    seen = {}

    def split(_):
        seen["expected"] = rc.expected_reconciliation_bytes(Operation.split(0))
        rc.apply(Operation.split(0))
    sim.schedule(1.0, EventPriority.CONTROL, split)
    res = sim.run(_To(0))
    merge, split_rec = rc.records
    assert merge.pending_blocks_created == 3
    assert seen["expected"] == 0
    assert split_rec.pending_blocks_created == 0 and split_rec.ready_blocks_retained == 3
    assert split_rec.reconciliation_bytes == 0 and merge.reconciliation_bytes == 0
    assert res.records["num_cached_tokens"].tolist() == [11]
    assert res.records["finish_s"].tolist() == pytest.approx([6.05])
    assert len(sim.workers[1].cache) == 0


@pytest.mark.parametrize("seed", [1, 7, 23])
def test_every_pending_block_has_masks_of_its_worker_and_something_missing(toy_cal, seed):
    # random splits and merges over a CP-4/2/1 pool (tests/reconfig/test_protocol.py): after the run,
    # each PENDING block has one shard mask per rank of its worker and a non-zero missing fraction;
    # a READY block is never described by masks with something missing
    from tests.reconfig.test_protocol import _random_run

    sim, rc, res, violations, _ = _random_run(seed, toy_cal, 12)
    assert violations == []
    for w in sim.workers.values():
        for h in w.cache.blocks():
            if w.cache.state(h) == PENDING:
                masks, origin_first_gpu, origin_degree = rc._shards[w.worker_id][h]
                assert len(masks) == w.degree and rc._missing_slices(masks)[0] > 0
                assert origin_first_gpu <= w.first_gpu and w.first_gpu + w.degree <= origin_first_gpu + origin_degree
    assert sum(r.reconciliation_bytes for r in rc.records) >= 0
