"""Heterogeneous pools (SimConfig.node_calibration_paths): every policy runs on H20 + H20-3e
nodes, and routers see each worker's own cost model."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

import envs.sim
from baselines.registry import POLICIES
from baselines.runner import build_simulator, run_policy
from envs.sim import Calibration, CostCoefficients, PoolConfig, SimConfig
from envs.workloads import get_workload, window

POOL = PoolConfig(num_gpus=16, gpus_per_node=8, composition="cp4@0,cp2@4,cp2@6,cp4@8,cp2@12,cp2@14",
                  supported_degrees=(1, 2, 4, 8))
POOL3 = PoolConfig(num_gpus=24, gpus_per_node=8, composition="cp4@0,cp2@4,cp2@6,cp4@8,cp2@12,cp2@14,cp4@16,cp2@20,cp2@22",
                   supported_degrees=(1, 2, 4, 8))


def _write(tmp_path, cal: Calibration, name: str) -> str:
    p = tmp_path / name
    p.write_text(json.dumps(cal.to_dict()))
    return str(p)


CALIBRATIONS = Path(envs.sim.__file__).parent / "calibrations"


@pytest.fixture(scope="module")
def h20() -> Calibration:
    return Calibration.load(CALIBRATIONS / "qwen3-30b-a3b__h20.json")


def _h20_3e(h20: Calibration) -> Calibration:
    """The shipped H20-3e calibration (paper §9's GPU: 141 GB HBM)."""
    return Calibration.load(CALIBRATIONS / "qwen3-30b-a3b__h20-3e.json")


def _fast(h20: Calibration) -> Calibration:
    co = h20.coefficients
    return dataclasses.replace(h20, gpu_type="fast", coefficients=CostCoefficients(
        co.d_s / 2, co.a_s_per_token / 2, co.b_s_per_token / 2, co.c_s_per_token / 2, co.alpha_s_per_pair / 2))


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_runs_on_h20_plus_h20_3e_and_predictions_use_the_workers_own_model(tmp_path, h20, policy):
    # three nodes: H20, H20-3e (more HBM) and a faster GPU type (all coefficients halved)
    paths = (_write(tmp_path, h20, "h20.json"), _write(tmp_path, _h20_3e(h20), "h20-3e.json"),
             _write(tmp_path, _fast(h20), "fast.json"))
    cfg = SimConfig(pool=POOL3, node_calibration_paths=paths)
    wl = window(get_workload("mixed-default", seed=0), 0.0, 8.0)
    sim, spec = build_simulator(policy, wl, cfg)
    res = sim.run(spec.make_router())
    r = res.records
    assert not np.isnan(r["finish_s"]).any()
    cms = [c.cost_model() for c in sim.node_calibrations]
    nodes = {w.worker_id: w.node for w in list(sim.workers.values()) + sim.retired_workers}
    # every routing-time prediction (what q_w and the routers' s are made of) is the node's own model
    for i in range(len(r["finish_s"])):
        L, P = int(r["num_prompt_tokens"][i]), int(r["routed_cached_tokens"][i])
        expected = cms[nodes[int(r["worker_id"][i])]].service_time_s(int(r["degree"][i]), L - P, P)
        assert r["predicted_service_s"][i] == pytest.approx(expected, rel=1e-12), (policy, i)
    assert {w.gpu_type for w in sim.workers.values()} == {"H20", "H20-3e", "fast"}


def test_h20_3e_nodes_have_their_own_kv_capacity(tmp_path, h20):
    paths = (_write(tmp_path, h20, "h20.json"), _write(tmp_path, _h20_3e(h20), "h20-3e.json"))
    wl = window(get_workload("mixed-default", seed=0), 0.0, 5.0)
    res = run_policy("vertumnus-router", wl, SimConfig(pool=POOL, node_calibration_paths=paths))
    assert not np.isnan(res.records["finish_s"]).any()
    sim, _ = build_simulator("vertumnus-router", wl, SimConfig(pool=POOL, node_calibration_paths=paths))
    by_node = {w.node: w for w in sim.workers.values() if w.degree == 4}
    assert by_node[1].kv_capacity_tokens == _h20_3e(h20).kv_capacity_tokens(4) > by_node[0].kv_capacity_tokens
    assert by_node[1].cache.capacity_blocks > by_node[0].cache.capacity_blocks


@pytest.mark.parametrize("tiers", [False, True])
@pytest.mark.parametrize("policy", ["vertumnus-router", "mooncake-ttft"])
def test_cost_based_routers_prefer_the_faster_gpu_type(tmp_path, h20, policy, tiers):
    # one request, all workers idle: equal degree, equal hit -> the faster node's worker wins,
    # although the slower node's worker comes first in the tie-break order. With KV tiers the
    # routers take their pull-path rules (baselines/tiered.py), which used the run's cost model.
    from envs.sim.tier_config import TierConfig

    pool = PoolConfig(num_gpus=4, gpus_per_node=2, composition="cp2@0,cp2@2", supported_degrees=(2,))
    paths = (_write(tmp_path, h20, "h20.json"), _write(tmp_path, _fast(h20), "fast.json"))
    wl = window(get_workload("mixed-default", seed=0), 0.0, 1.0)
    kv_tiers = TierConfig(levels=("hbm", "dram")) if tiers else TierConfig()
    sim, spec = build_simulator(policy, wl, SimConfig(pool=pool, node_calibration_paths=paths, kv_tiers=kv_tiers))
    router = spec.make_router()
    router.reset(sim.view, sim.policy_rng)
    req = sim.run_until_decision()
    fast = sim.config.pool.worker_id_for(2)  # the CP-2 worker on node 1
    assert sim.view.predicted_service_s(fast, req) < sim.view.predicted_service_s(0, req)
    assert sim.view.worker_cost_model(fast) is not sim.view.worker_cost_model(0)
    assert router.route(req, sim.view) == fast


def test_node_calibration_paths_must_cover_every_node():
    with pytest.raises(ValueError, match=r"one entry per node \(2\), got 1"):
        SimConfig(pool=POOL, node_calibration_paths=("a.json",))
