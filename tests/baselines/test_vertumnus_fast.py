"""The optimised Vertumnus router makes exactly the decisions of the direct formula (issue #3
follow-up: speed without changing decisions), also under split/merge redirections."""

from __future__ import annotations

import pytest

from baselines.vertumnus import VertumnusParams, VertumnusRouter
from envs.sim import PoolConfig, SimConfig, Simulator
from tests.baselines.reference_routers import ReferenceVertumnus


def _drive(wl, config, params, reconfigure_at=()):
    """Runs the fast router, asserting at every decision that the reference picks the same
    worker; at the decision indices in ``reconfigure_at`` starts the first eligible split/merge
    (paper §6: its queue is redirected through the router)."""
    from envs.sim.reconfig import apply_operation, eligible_operations

    sim = Simulator(wl, config)
    fast = VertumnusRouter(params)
    fast.reset(sim.view, sim.policy_rng)
    ref = ReferenceVertumnus(params, fast._stale)  # same stale record (fed by the fast router's on_dispatch)
    n = 0
    while (req := sim.run_until_decision()) is not None:
        wid = fast.route(req, sim.view)
        assert wid == ref.route(req, sim.view), f"decision {n} (request {req.request_id}) differs"
        sim.decide(wid)
        fast.on_dispatch(req, wid, sim.view)
        n += 1
        if n in reconfigure_at:
            ops = eligible_operations(sim)
            if ops:
                apply_operation(sim, ops[n % len(ops)])
    return sim, n


@pytest.mark.parametrize("params", [VertumnusParams(), VertumnusParams(lambda_=0.0), VertumnusParams(beta=3.0, lambda_=0.5),
                                    VertumnusParams(reservation=False)])
def test_fast_router_matches_reference(small_prefix_workload, params):
    # 40-GPU default heterogeneous pool (cp4x6,cp2x8), rate doubled so that queues build up
    from envs.workloads import scale_rate

    _, n = _drive(scale_rate(small_prefix_workload, 4.0), SimConfig(), params)
    assert n == small_prefix_workload.num_requests


@pytest.mark.parametrize("reservation", [True, False])
def test_fast_router_matches_reference_with_reconfiguration(reservation):
    from envs.workloads import get_workload, scale_rate

    wl = scale_rate(get_workload("mixed-default", seed=3, duration_s=40.0), 1.3)
    cfg = SimConfig(pool=PoolConfig(num_gpus=16, composition="cp4x2,cp2x4"))
    sim, n = _drive(wl, cfg, VertumnusParams(reservation=reservation), reconfigure_at=(300, 700, 1100))
    assert sim.epoch >= 2 and n > wl.num_requests  # split/merges committed and redirected requests
    assert int(sum(sim._num_routings)) == n  # every routing (incl. redirections) was checked
