"""Joint routing + reconfiguration as a two-timescale combination (``cpgym evaluate --kind
reconfig --against joint:<routing checkpoint>``): a learned router decides every request (the
fast timescale, one decision per request) and the learned reconfiguration controller decides a
split / merge / no-op once per observation window (the slow timescale, paper §6: 20 s).

The two policies are trained separately — the router on ``PrefillRoutingEnv`` with a fixed
composition, the controller on ``PrefillReconfigEnv`` with the Vertumnus router inside — and
combined at evaluation: :class:`LearnedRouter` is a :class:`envs.sim.Router` that builds the
routing environment's observation for the pending request on the controller's simulator, so the
controller env runs it as its inner router. Neither policy sees the other's decisions except
through the pool state (compositions change under the router: workers DRAINING / SWITCHING are
masked out exactly as in the routing env).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from envs.accounting import EpisodeAccounting
from envs.sim import Router
from policies.common.checkpoint import LearnedPolicy, checkpoint_path
from policies.routing.arm_selection import arm_policy_spec, is_arm_checkpoint


class LearnedRouter(Router):
    """A routing checkpoint (``cpgym train routing``) as an :class:`envs.sim.Router`.

    The observation is :class:`envs.routing_env.PrefillRoutingEnv`'s, computed on the run's
    simulator (given by :meth:`attach`, which ``PrefillReconfigEnv`` calls after building the
    simulator); the action is the masked deterministic choice of the model; a masked-out choice
    falls back to the least-work eligible worker (as the routing env does).

    Args:
        path: routing checkpoint folder or zip, or ``"shipped"``.

    Raises:
        FileNotFoundError / ValueError: see :class:`policies.common.checkpoint.LearnedPolicy`.
        RuntimeError: from :meth:`route` before :meth:`attach`.
    """

    def __init__(self, path: str | Path) -> None:
        self.policy = LearnedPolicy(path)
        self.name = self.policy.name
        self._env = None

    def attach(self, sim) -> None:
        """Binds the router to a run's simulator (one observer env and request accounting per run)."""
        from envs.routing_env import PrefillRoutingEnv  # lazy: gymnasium (start-up of the CLI)

        num_slots = self.policy.model.observation_space["workers"].shape[0]
        if sim.config.pool.max_num_workers > num_slots:
            raise ValueError(f"routing checkpoint {self.policy.path} has {num_slots} worker slots; "
                             f"this pool has up to {sim.config.pool.max_num_workers} workers")
        env = PrefillRoutingEnv([sim.workload], sim.config, sim.calibration, num_slots=num_slots)
        env.sim = sim  # the observer reads the run's simulator; it never steps it
        env._acct = EpisodeAccounting(sim)  # requests in the system, as the routing env counts them
        sim.finish_listeners.append(env._acct.on_finish)
        self._env = env
        self._seen = bytearray(sim.workload.num_requests)

    def route(self, request, view) -> int:
        from envs.routing_env import least_work_worker  # lazy: gymnasium (start-up of the CLI)

        env = self._env
        if env is None:
            raise RuntimeError("LearnedRouter.route before attach(sim)")
        rid = request.request_id
        if not self._seen[rid]:
            self._seen[rid] = 1
            env._acct.admit(request, env.sim.env.now)
        obs = env._observe(request)
        mask = env.action_masks()
        action, _ = self.policy.predict(obs, action_masks=mask, deterministic=True)
        wid = int(np.asarray(action).reshape(-1)[0])
        return wid if 0 <= wid < mask.size and mask[wid] else least_work_worker(env.sim, request)


def joint_router_factory(path: str | Path):
    """``() -> Router`` for the controller's inner router from a routing checkpoint: an
    arm-selection checkpoint (:mod:`policies.routing.arm_selection`, e.g. ``"shipped"``) gives a fresh
    :class:`~policies.routing.arm_selection.ArmSelectingRouter` per run (it reads the live pool itself);
    an SB3 routing checkpoint one :class:`LearnedRouter`, loaded once (``attach`` rebinds it per
    run).

    Raises:
        FileNotFoundError / ValueError: see :class:`policies.common.checkpoint.LearnedPolicy` and
            :func:`policies.routing.arm_selection.load_arm_checkpoint`.
    """
    if is_arm_checkpoint(checkpoint_path(path)):
        return arm_policy_spec(checkpoint_path(path)).make_router
    router = LearnedRouter(path)
    return lambda: router
