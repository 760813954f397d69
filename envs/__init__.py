"""cpgym environments: the simulator (:mod:`envs.sim`), workloads (:mod:`envs.workloads`),
metrics (:mod:`envs.metrics`) and the Gymnasium environments
(:mod:`envs.routing_env`, :mod:`envs.reconfig_env`).

Importing this package (and so ``envs.sim``) imports neither gymnasium nor torch. The
Gymnasium ids ``cpgym/PrefillRouting-v0`` and ``cpgym/PrefillReconfig-v0`` are registered by
:func:`register_envs` (idempotent), or on demand with gymnasium's module-prefix form::

    gymnasium.make("envs.registration:cpgym/PrefillRouting-v0")
"""


def register_envs() -> list[str]:
    """Registers the cpgym Gymnasium ids (imports gymnasium); returns them."""
    from envs.registration import register_envs as _register  # lazy: gymnasium (start-up of the CLI)

    return _register()


__all__ = ["register_envs"]
