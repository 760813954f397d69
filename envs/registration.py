"""Gymnasium registration of the cpgym environments.

Ids (string entry points, so registering does not import the environment modules):

* ``cpgym/PrefillRouting-v0`` -> :class:`envs.routing_env.PrefillRoutingEnv`
* ``cpgym/PrefillReconfig-v0`` -> :func:`baselines.envs.make_reconfig_env` (the environment
  :class:`envs.reconfig_env.PrefillReconfigEnv` with the Vertumnus router as its default inner router)
* ``cpgym/Benchmark-v1`` -> :func:`benchmark.env.make_benchmark_env` (a benchmark task's environment
  over its split's episodes: ``gymnasium.make("cpgym/Benchmark-v1", task="routing/conversation-0.9-v1",
  split="train")``)

Importing this module registers them (so ``gymnasium.make("envs.registration:cpgym/...")``
works); :func:`register_envs` does the same explicitly and is idempotent. Gymnasium >= 1.0 no
longer loads ``gymnasium.envs`` entry-point plugins, hence the explicit call.
"""

from __future__ import annotations

import gymnasium as gym

ENV_IDS: dict[str, str] = {
    "cpgym/PrefillRouting-v0": "envs.routing_env:PrefillRoutingEnv",
    "cpgym/PrefillReconfig-v0": "baselines.envs:make_reconfig_env",
    "cpgym/Benchmark-v1": "benchmark.env:make_benchmark_env",
}


def register_envs() -> list[str]:
    """Registers every id of ``ENV_IDS`` not yet in gymnasium's registry; returns the ids."""
    for env_id, entry_point in ENV_IDS.items():
        if env_id not in gym.registry:
            # No max_episode_steps: episodes end with their trace window.
            gym.register(id=env_id, entry_point=entry_point, disable_env_checker=False)
    return list(ENV_IDS)


register_envs()
