"""Routers with the KV pull path (baselines/tiered.py): with a prefix in one node's host DRAM,
Mooncake, Dynamo and Vertumnus (tiered ready time) send the request to that node; without tiers
they keep their tier-less choice on an idle pool (pool order; Dynamo: seeded random among equal
logits and equal cached-block counts)."""

import pytest

from baselines.registry import get_policy
from envs.sim import PoolConfig, Request, SimConfig, Simulator, Workload
from envs.sim.tier_config import TierConfig
from tests.factories import toy_calibration

TWO_NODES = PoolConfig(num_gpus=2, gpus_per_node=1, composition="cp1@0,cp1@1", supported_degrees=(1,))
PREFIX = tuple(range(1, 9))


@pytest.fixture(scope="module")
def cal():
    # E = 0.01 + 1e-3 * R [s]; 1 byte per token, so fetches take microseconds: fetching always wins
    return toy_calibration(d_s=0.01, c_s_per_token=1e-3, gpu_memory_bytes=10**6, max_prompt_tokens=10**5)


def _route(policy, cal, tiers):
    wl = Workload("one", (Request(0, 0.0, 9 * 16, 1, PREFIX + (99,)),), kv_block_size_tokens=16)
    sim = Simulator(wl, SimConfig(pool=TWO_NODES, kv_tiers=tiers), cal)
    if sim.kv_tiers is not None:
        sim.kv_tiers.dram[1].put(PREFIX, 0.0)  # the prefix sits in node 1's host memory
    res = sim.run(get_policy(policy).make_router())
    return int(res.records["worker_id"][0]), int(res.records["num_cached_tokens"][0])


@pytest.mark.parametrize("policy", ["mooncake-ttft", "dynamo-kv", "vertumnus"])
def test_pull_path_routes_to_the_node_holding_the_prefix(policy, cal):
    w, cached = _route(policy, cal, TierConfig())
    assert cached == 0 and (w == 0 or policy == "dynamo-kv")
    assert _route(policy, cal, TierConfig(levels=("hbm", "dram"), store_lookup_latency_s=0.0)) == (1, 8 * 16)
