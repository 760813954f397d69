"""Vertumnus cluster-level controller (paper §6): the windowed split/merge decision.

Two decisions (``ControllerConfig.decision``): ``"target"`` (default; a target composition from a
look-ahead TTFT prediction, :mod:`~baselines.controller.target_rule`) and ``"paper-rule"`` (the
paper's load regions, :mod:`~baselines.controller.paper_rule`). Modules, one concern each:

* :mod:`~baselines.controller.config` — :class:`ControllerConfig` and the names of its choices;
* :mod:`~baselines.controller.measurement` — the window: rate, mix, capacity, load, trend
  (:class:`WindowRecord`);
* :mod:`~baselines.controller.paper_rule`, :mod:`~baselines.controller.target_rule` — the decisions;
* :mod:`~baselines.controller.actuation` — starting operations (limits, ranking, lockout);
* :mod:`~baselines.controller.reconfig_controller` — :class:`ReconfigController`, composing them.

The *mechanics* of an operation (drain, redirect, switch, epoch commit, KV reconciliation) are
in :mod:`envs.sim.reconfig`; this package only decides. The Gymnasium reconfiguration
environment uses the same mechanics (:func:`envs.sim.reconfig.eligible_operations` /
:func:`envs.sim.reconfig.apply_operation`) with a learned decision instead of
:class:`ReconfigController`. Capacity profiling lives in :mod:`envs.planning.capacity` and
composition enumeration / the initial composition in :mod:`envs.planning.composition`.
"""

from baselines.controller.config import DECISIONS, TARGET_SAMPLES, TREND_NOISES, ControllerConfig
from baselines.controller.measurement import WindowRecord
from baselines.controller.reconfig_controller import ReconfigController

__all__ = ["ControllerConfig", "ReconfigController", "WindowRecord", "DECISIONS", "TARGET_SAMPLES", "TREND_NOISES"]
