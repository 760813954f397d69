"""The cpgym Gymnasium environments with their default heuristic parts injected.

:mod:`envs` imports no baseline (the layering of ``../shared/DESIGN.md``), so the reconfiguration
environment takes its inner router as an argument; the registered id ``cpgym/PrefillReconfig-v0``
(:mod:`envs.registration`) points here, where the default inner router is the Vertumnus router
(paper §5, ``baselines.registry`` ``"vertumnus-router"``).
"""

from __future__ import annotations

from baselines.registry import get_policy
from envs.reconfig_env import PrefillReconfigEnv
from envs.sim.router import Router


def vertumnus_inner_router() -> Router:
    """A fresh router of the registered ``"vertumnus-router"`` policy: the default inner router of
    :class:`~envs.reconfig_env.PrefillReconfigEnv` (a module-level function, so that an environment
    keeps pickling; the registry's factory is a lambda)."""
    return get_policy("vertumnus-router").make_router()


def make_reconfig_env(*args, make_router=None, **kwargs) -> PrefillReconfigEnv:
    """:class:`~envs.reconfig_env.PrefillReconfigEnv` with the same arguments; ``make_router``
    defaults to :func:`vertumnus_inner_router`. The entry point of ``cpgym/PrefillReconfig-v0``."""
    return PrefillReconfigEnv(*args, make_router=vertumnus_inner_router if make_router is None else make_router, **kwargs)


__all__ = ["make_reconfig_env", "vertumnus_inner_router"]
