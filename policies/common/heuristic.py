"""Heuristic routers behind the Stable-Baselines3 ``predict`` interface.

:class:`HeuristicPolicy` lets every registered heuristic (``baselines.registry.POLICIES``) act
through :class:`envs.routing_env.PrefillRoutingEnv` exactly as a learned SB3 model does: it
reads the live pool through ``env.unwrapped.sim.view`` (richer than the observation, e.g. the
router's own prefix tree state) and returns the worker id as the action. The environment's
decision listeners serve the router's ``on_dispatch``; the router is reset with the
episode's seeded ``policy_rng`` when a new episode's simulator appears — the same calls and
order as ``Simulator.run``, so the metrics equal ``cpgym simulate``'s (tested).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import numpy as np

from baselines.registry import get_policy
from baselines.runner import build_simulator
from envs.sim import Router, SimConfig, Workload


class HeuristicPolicy:
    """SB3-style policy wrapping a :class:`~envs.sim.Router` for a routing environment.

    Args:
        router: the heuristic: a router instance (fresh; it is reset per episode) or a
            zero-argument factory of routers (e.g. ``PolicySpec.make_router``, or a router
            class). A vector env needs one router per env (a router keeps private state): the
            factory builds them, or the instance is deep-copied (``copy.deepcopy``) for the other
            envs — either way every env's router has the same parameters and name.
        env: the environment it acts in: a ``PrefillRoutingEnv`` (possibly wrapped) or an SB3
            ``DummyVecEnv`` of them (``SubprocVecEnv`` hides the simulator and is not supported).
        name: label for tables (default ``router.name``).

    Raises:
        TypeError: if ``env`` exposes no simulator.
    """

    def __init__(self, router: Router | Callable[[], Router], env, name: str | None = None) -> None:
        make_router = None if isinstance(router, Router) else router
        if make_router is not None:
            router = make_router()
        self.router = router
        self.name = name or router.name
        if hasattr(env, "envs"):  # DummyVecEnv
            self._envs = [e.unwrapped for e in env.envs]
        else:
            self._envs = [env.unwrapped]
        if not all(hasattr(e, "add_decision_listener") for e in self._envs):
            raise TypeError("HeuristicPolicy needs PrefillRoutingEnv environments (or a DummyVecEnv of them)")
        if len(self._envs) != 1:
            # one router instance has one private state: a vector of envs needs one router each,
            # with the wrapped policy's parameters (never a default-constructed type(router)())
            routers = [router] + [make_router() if make_router is not None else copy.deepcopy(router)
                                  for _ in self._envs[1:]]
            self._subs = [HeuristicPolicy(r, e, self.name) for r, e in zip(routers, self._envs)]
        else:
            self._subs = None
            self._sim = None
            self._envs[0].add_decision_listener(self._on_dispatch)

    @property
    def routers(self) -> list[Router]:
        """The router of each env (one for a single env)."""
        return [s.router for s in self._subs] if self._subs is not None else [self.router]

    def _on_dispatch(self, request, worker_id, view) -> None:
        self.router.on_dispatch(request, worker_id, view)

    def _act(self) -> int:
        env = self._envs[0]
        sim = env.sim
        if sim is not self._sim:
            self._sim = sim
            self.router.reset(sim.view, sim.policy_rng)
        req = env.pending_request
        if req is None:
            return 0
        return int(self.router.route(req, sim.view))

    def predict(self, observation, state=None, episode_start=None, deterministic: bool = True,
                action_masks: np.ndarray | None = None):
        """SB3 signature; returns ``(actions, state)``. ``observation`` is ignored (the router
        reads the live simulator); for a vector env the actions have shape ``(n_envs,)``."""
        if self._subs is not None:
            return np.array([s._act() for s in self._subs], dtype=np.int64), state
        a = self._act()
        if isinstance(observation, dict) and np.ndim(observation["request"]) == 2:
            return np.array([a], dtype=np.int64), state
        return np.int64(a), state


def make_routing_env(policy: str | None, workloads: Workload | Sequence[Workload], config: SimConfig, **env_kwargs):
    """A routing environment whose simulators are built for a named policy of
    ``baselines.registry`` exactly as ``cpgym simulate`` builds them
    (``baselines.runner.build_simulator``: the policy's pool composition, calibration
    transform and attachments). ``policy=None`` keeps the config's pool."""
    from envs.routing_env import PrefillRoutingEnv  # lazy: gymnasium (start-up of the CLI)

    if policy is None:
        return PrefillRoutingEnv(workloads, config, **env_kwargs)
    # Lazy import (experiments sits above policies): one construction path for both runs.

    calibration = env_kwargs.pop("calibration", None)

    def make_simulator(wl, cfg):
        return build_simulator(policy, wl, cfg, calibration)[0]

    return PrefillRoutingEnv(workloads, config, calibration=calibration, make_simulator=make_simulator, **env_kwargs)


def heuristic_policy(name: str, env) -> HeuristicPolicy:
    """The registered heuristic ``name`` as a :class:`HeuristicPolicy` acting in ``env``."""
    spec = get_policy(name)
    return HeuristicPolicy(spec.make_router, env, name=spec.name)


def run_episode(env, policy, options: dict | None = None, seed: int | None = None, deterministic: bool = True):
    """Runs one episode of ``env`` (a single, unvectorised routing env) under ``policy`` (SB3
    model or :class:`HeuristicPolicy`), passing the action mask. Returns
    ``(SimResult, episode_return, num_steps)``."""
    obs, _ = env.reset(seed=seed, options=options)
    base = env.unwrapped
    total = 0.0
    n = 0
    while True:
        action, _ = policy.predict(obs, deterministic=deterministic, action_masks=base.action_masks())
        obs, r, term, trunc, _ = env.step(int(action))
        total += r
        n += 1
        if term or trunc:
            break
    res = base.sim.result()
    res.policy = getattr(policy, "name", "learned")
    return res, total, n
