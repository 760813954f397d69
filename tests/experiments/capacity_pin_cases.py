"""Tiny capacity searches of every caller of the capacity module (envs/planning/capacity_search.py),
each returning its probes and result as plain numbers: ``test_capacity_pins.py`` pins them to the
values the callers computed before their searches were merged into one module."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from envs.sim import Calibration, PoolConfig, Request, SimConfig, SLOConfig, Workload
from envs.sim.cost_model import CostCoefficients
from tests.factories import RECONFIG_POOL, SMALL_POOL, tiny_trace

D_S = 0.5  # constant service time [s] of the single-worker pool
L_TOKENS = 1000


def single_worker() -> tuple[Calibration, SimConfig, Workload]:
    """One CP-1 worker serving every request in exactly ``D_S`` (a D/D/1 server of capacity 1/D)."""
    cal = replace(Calibration.default(), coefficients=CostCoefficients(0.0, D_S / L_TOKENS, 0.0, 0.0, 0.0))
    cfg = SimConfig(pool=PoolConfig(num_gpus=1, gpus_per_node=1, composition="cp1x1", supported_degrees=(1,)),
                    slo=SLOConfig(kind="fixed", ttft_slo_s=1e6))
    nb = -(-L_TOKENS // 512)
    reqs = tuple(Request(i, float(i), L_TOKENS, 1, tuple(range(10 * i, 10 * i + nb))) for i in range(120))
    return cal, cfg, Workload("uniform", reqs, kv_block_size_tokens=512)


def sustainable_slo() -> tuple:
    """``baselines.capacity.find_capacity`` (definition ``sustainable-slo``) on the D/D/1 worker."""
    from baselines.capacity import CapacityDefinition, RatedWorkload, find_capacity

    cal, cfg, wl = single_worker()
    res = find_capacity("least-work", RatedWorkload(arrival_window_length_s=120.0, base=wl), cfg, cal,
                        CapacityDefinition(rel_tol=0.05))
    return res.capacity_rps, res.rate_scale, tuple((p.rate_scale, p.rate_rps, p.growth, p.sustainable) for p in res.probes)


def sustainable_slo_tight() -> tuple:
    """As :func:`sustainable_slo` with an SLO just above the service time (the SLO test binds)."""
    from baselines.capacity import CapacityDefinition, RatedWorkload, find_capacity

    cal, cfg, wl = single_worker()
    cfg = replace(cfg, slo=SLOConfig(kind="fixed", ttft_slo_s=D_S + 0.05))
    res = find_capacity("least-work", RatedWorkload(arrival_window_length_s=120.0, base=wl), cfg, cal,
                        CapacityDefinition(rel_tol=0.05))
    return res.capacity_rps, tuple((p.rate_scale, p.slo_attainment_token_weighted, p.sustainable) for p in res.probes)


def _profiles(cfg: SimConfig) -> tuple:
    from envs.planning.capacity import CapacityTable, ProfileConfig

    table = CapacityTable(cfg, Calibration.default(), ProfileConfig(num_requests=40, duration_s=4.0, num_bisection_steps=4))
    out = table.profiles((2, 4), np.full(50, 3000.0))
    return tuple((d, p.capacity_rps, p.zero_load_attainment) for d, p in out.items()), table.num_simulations


def profiled_slo_per_degree() -> tuple:
    """``envs.planning.capacity.CapacityTable`` profiles (definition ``profiled-slo-per-degree``)."""
    return _profiles(SimConfig(pool=RECONFIG_POOL))


def profiled_slo_per_degree_ttft() -> tuple:
    """As :func:`profiled_slo_per_degree` under a fixed SLO below the isolated prefill (zero-load
    attainment 0: the mean-TTFT fallback criterion)."""
    return _profiles(SimConfig(pool=RECONFIG_POOL, slo=SLOConfig(kind="fixed", ttft_slo_s=1e-3)))


def protocol_queueing_delay(tmp_path) -> tuple:
    """``policies.routing.protocol.capacity_rps`` (definition ``protocol-queueing-delay``)."""
    from envs import workloads
    from policies.routing.protocol import capacity_rps

    base = workloads.load_trace(tiny_trace(tmp_path / "p.jsonl", num_requests=400))
    cap = capacity_rps(lambda r: workloads.scale_to_rate(base, r), SimConfig(pool=SMALL_POOL), "least-work",
                       low_rps=0.25, high_rps=2048.0, max_queueing_delay_s=0.02, num_iterations=3)
    return cap.capacity_rps, cap.probes


def fault_drain_time(tmp_path) -> tuple:
    """``experiments.faults.estimate_capacity_rps`` (definition ``fault-drain-time``)."""
    from experiments.faults import FaultExperimentSpec, estimate_capacity_rps

    trace_f = tiny_trace(tmp_path / "f.jsonl", num_requests=200)
    spec = FaultExperimentSpec(name="pin", trace=str(trace_f), arrival_window_s=(0.0, 20.0),
                               scenarios=(("gpu", "unused.yaml"),),
                               policies=("least-work",), capacity_policy="least-work", capacity_search_rps=(4.0, 64.0),
                               capacity_iterations=3, capacity_drain_s=0.026)
    cap, probes = estimate_capacity_rps(spec, SimConfig(pool=RECONFIG_POOL), log=lambda s: None)
    return cap, tuple((p["target_rps"], p["drain_s"], p["sustainable"]) for p in probes)


def kv_tiers_queueing_delay(tmp_path, start_rps: float = 4.0) -> tuple:
    """``experiments.kv_tiers.estimate_capacity_rps`` (definition ``kv-tiers-queueing-delay``)."""
    from experiments.kv_tiers import estimate_capacity_rps

    trace_k = tiny_trace(tmp_path / "k.jsonl", num_requests=200)
    got = estimate_capacity_rps(str(trace_k), SimConfig(pool=RECONFIG_POOL), "least-work", (0.0, 10.0),
                                start_rps=start_rps, queue_delay_bound_s=0.05, iterations=2)
    return got["capacity_rps"], tuple(got["probes"])


def kv_tiers_queueing_delay_from_above(tmp_path) -> tuple:
    """As :func:`kv_tiers_queueing_delay` from an overloaded start (the ``start / 64`` fallback)."""
    return kv_tiers_queueing_delay(tmp_path, start_rps=1000.0)
