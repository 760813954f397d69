"""Faults with KV tiers: a node failure loses the node's host memory (its DRAM tier) and the
transfers pending on its links; a GPU failure keeps the host memory (issue #43 item 4)."""

import pytest

from baselines.simple import RoundRobinRouter
from envs.sim import Request, SimConfig, Simulator, Workload
from envs.sim.fault_config import FaultConfig, FaultEvent
from envs.sim.simulator import EventPriority
from envs.sim.tier_config import TierConfig
from envs.sim.tiers import FETCH_NONE, FETCH_PULL
from tests.factories import ONE_GPU_POOL

BLOCK = 512
PREFIX = tuple(range(1, 33))  # 32 blocks, fetched in 32 s
PREFIX2 = (101, 102)  # 2 blocks, fetched in 2 s


def _req(i, t, prefix, num_new_tokens, first_new):
    n = -(-num_new_tokens // BLOCK)
    return Request(i, t, len(prefix) * BLOCK + num_new_tokens, 1, tuple(prefix) + tuple(range(first_new, first_new + n)))


@pytest.mark.parametrize("kind", ["node_failure", "gpu_failure"])
def test_a_node_failure_loses_the_nodes_host_memory_and_its_pending_transfers(a100, kind):
    # One node, one GPU. r0 (t=0) pulls PREFIX from the node's DRAM at one block per second. The
    # node (or only its GPU) fails at 1 s; detected at 1.1 s, repaired at 1.6 s, the rebuilt
    # worker serves from 2.1 s, when r0 is routed again. At 2.5 s PREFIX2 enters the DRAM tier
    # (as a demotion would) and r1 (t=3) pulls it.
    # node_failure: the host memory is gone, so r0 recomputes PREFIX (it fetched the 16,384
    # tokens filled before the failure), and the PCIe link is free, so r1's fetch takes 2 s
    # (it queued behind the lost fetch's reservation until 32 s).
    # gpu_failure: the host memory survives, r0 fetches PREFIX again.
    ev = FaultEvent(kind, 1.0, node=0) if kind == "node_failure" else FaultEvent(kind, 1.0, gpu=0)
    cfg = SimConfig(pool=ONE_GPU_POOL,
                    kv_tiers=TierConfig(levels=("hbm", "dram"), dram_bytes_per_s_per_gpu=BLOCK * a100.kv_bytes_per_token,
                                        fetch_policy="always"),
                    faults=FaultConfig(events=(ev,), detection_delay_s=0.1, repair_s=0.5, rebuild_s=0.5))
    wl = Workload("t", (_req(0, 0.0, PREFIX, 1024, 10**9), _req(1, 3.0, PREFIX2, 1024, 2 * 10**9)), kv_block_size_tokens=BLOCK)
    sim = Simulator(wl, cfg, a100)
    dram = sim.kv_tiers.dram[0]
    dram.put(PREFIX, 0.0)
    seen = {}
    sim.schedule(1.05, EventPriority.CONTROL, lambda _: seen.update(after_fault=len(dram)))
    sim.schedule(2.5, EventPriority.CONTROL, lambda _: dram.put(PREFIX2, sim.env.now))
    res = sim.run(RoundRobinRouter())
    r = res.records
    assert r["num_routings"].tolist() == [2, 1] and r["start_s"][0] >= 2.1
    cm = a100.cost_model()
    if kind == "node_failure":
        assert seen["after_fault"] == 0
        assert r["kv_fetch_decision"][0] == FETCH_NONE and r["dram_hit_tokens"][0] == 0 and r["num_cached_tokens"][0] == 0
        assert r["kv_fetch_decision"][1] == FETCH_PULL and r["dram_hit_tokens"][1] == 2 * BLOCK
        assert r["fetch_ready_s"][1] == pytest.approx(3.0 + 2.0)
        assert r["finish_s"][1] == pytest.approx(max(5.0, r["finish_s"][0]) + cm.service_time_s(1, 1024, 2 * BLOCK))
    else:
        assert seen["after_fault"] == len(PREFIX)
        assert r["kv_fetch_decision"][0] == FETCH_PULL and r["dram_hit_tokens"][0] == len(PREFIX) * BLOCK
    assert res.extras["faults"][0]["rejoined_s"] == pytest.approx(2.1)
