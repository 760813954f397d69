"""The hot-path simple routers decide exactly like straightforward PoolView-based references."""

import pytest

from baselines.simple import PrefixAffinityRouter
from envs.sim import Router, SimConfig, Simulator
from envs.sim.router import LeastWorkRouter
from envs.workloads import get_workload


class _RefLeastWork(Router):
    def route(self, request, view):
        cands = view.eligible_worker_ids(request)
        return min(cands, key=lambda w: (view.outstanding_work_s(w), view.num_queued_requests(w)))


class _RefPrefixAffinity(Router):
    def route(self, request, view):
        cands = view.eligible_worker_ids(request)
        return min(cands, key=lambda w: (-view.cached_blocks(w, request), view.outstanding_work_s(w)))


class _Checked(Router):
    """Runs the fast router and asserts the reference picks the same worker at every decision."""

    def __init__(self, fast, ref):
        self.fast, self.ref, self.num_decisions = fast, ref, 0

    def reset(self, view, rng):
        self.fast.reset(view, rng)
        self.ref.reset(view, rng)

    def route(self, request, view):
        a, b = self.fast.route(request, view), self.ref.route(request, view)
        assert a == b, f"request {request.request_id}: fast {a} != reference {b}"
        self.num_decisions += 1
        return a


@pytest.mark.parametrize("fast, ref", [(LeastWorkRouter, _RefLeastWork), (PrefixAffinityRouter, _RefPrefixAffinity)])
def test_fast_simple_routers_match_reference(fast, ref):
    wl = get_workload("tool-agent", duration_s=60.0)
    checked = _Checked(fast(), ref())
    Simulator(wl, SimConfig()).run(checked)
    assert checked.num_decisions == wl.num_requests
