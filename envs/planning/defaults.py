"""Defaults shared by every reconfiguration decision-maker (the heuristic controller,
``baselines.controller``; the learned one, ``envs.reconfig_env`` / ``policies.reconfig``; the
``cpgym dynamic`` experiment): defined here once, imported everywhere.
"""

from __future__ import annotations

__all__ = ["DECISION_WINDOW_S", "DEFAULT_TARGET_DEGREES"]

#: Observation / decision window of a reconfiguration controller [s]: the load is measured and a
#: split/merge decision taken once per window. Paper §6 ("Runtime Reconfiguration"; §9: 20 s).
DECISION_WINDOW_S: float = 20.0

#: Default CP degrees of the learned controller's target-composition menu
#: (``envs.reconfig_env.target_menu``; ``cpgym train-reconfig --target-degrees``): every
#: composition of the pool over them (40 GPUs in nodes of 8: 36 compositions).
DEFAULT_TARGET_DEGREES: tuple[int, ...] = (2, 4, 8)
