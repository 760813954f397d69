"""Joint routing + reconfiguration (two timescales): a routing checkpoint as the inner router of
the reconfiguration env (``policies.joint.LearnedRouter``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import policies
from baselines.envs import make_reconfig_env

ROUTING = str(Path(policies.__file__).parent / "checkpoints" / "routing_conversation_residual")  # an SB3 routing checkpoint


@pytest.fixture(scope="module")
def short_workloads():
    from envs.workloads import get_workload

    return [get_workload("matched-phases", seed=s, duration_s=30.0, load_fraction_range=(0.1, 0.2)) for s in (0, 1)]


@pytest.mark.slow  # ~1 min: per-request inference of the routing model
def test_joint_env_passes_the_env_checker_and_routes_with_the_learned_router(short_workloads):
    from gymnasium.utils.env_checker import check_env

    from envs.sim import SimConfig
    from policies.joint import LearnedRouter

    router = LearnedRouter(ROUTING)
    calls = []
    route = router.route

    def counting_route(request, view):
        wid = route(request, view)
        assert view.state(wid).name == "ACTIVE"  # only eligible workers
        calls.append(wid)
        return wid

    router.route = counting_route
    env = make_reconfig_env(short_workloads, SimConfig(), make_router=lambda: router, decision_window_s=10.0)
    check_env(env, skip_render_check=True)
    calls.clear()
    env.reset(seed=0, options={"window_index": 0})
    done = False
    while not done:
        mask = env.action_masks()
        _, _, term, trunc, _ = env.step(int(np.flatnonzero(mask)[-1]))  # an operation whenever one is eligible
        done = term or trunc
    assert len(calls) >= short_workloads[0].num_requests  # every request routed by the learned router
    assert env.sim.result().extras.get("reconfig_operations")  # under changing compositions


def test_learned_router_needs_attach_and_a_matching_pool():
    from envs.sim import PoolConfig, SimConfig, Simulator
    from envs.workloads import get_workload
    from policies.joint import LearnedRouter

    router = LearnedRouter(ROUTING)
    wl = get_workload("matched-phases", seed=0, duration_s=5.0)
    with pytest.raises(RuntimeError, match="before attach"):
        router.route(wl.requests[0], None)
    big = SimConfig(pool=PoolConfig(num_gpus=64, gpus_per_node=8, composition="cp1x64", supported_degrees=(1, 2, 4, 8)))
    with pytest.raises(ValueError, match="worker slots"):
        router.attach(Simulator(wl, big))


def test_joint_router_factory_arm_checkpoint_gives_a_fresh_router_per_run():
    """``joint:shipped`` (the arm-selection checkpoint): a new arm-selecting router per run that
    routes a short run by itself; an SB3 checkpoint: one LearnedRouter reused (attach rebinds it)."""
    from envs.sim import SimConfig, Simulator
    from envs.workloads import get_workload
    from policies.joint import LearnedRouter, joint_router_factory
    from policies.routing.arm_selection import ArmSelectingRouter

    make = joint_router_factory("shipped")
    a, b = make(), make()
    assert isinstance(a, ArmSelectingRouter) and a is not b
    wl = get_workload("matched-phases", seed=0, duration_s=5.0, load_fraction_range=(0.1, 0.2))
    res = Simulator(wl, SimConfig()).run(a)
    assert np.isfinite(res.records["ttft_s"]).all()
    make_sb3 = joint_router_factory(ROUTING)
    assert isinstance(make_sb3(), LearnedRouter) and make_sb3() is make_sb3()
