"""Vertumnus cluster-level controller (paper §6): the windowed split/merge decision.

Three decisions (``ControllerConfig.decision``): ``"analytic"`` (default, ``vertumnus``: the paper's
load regions whose proposals start only when an analytic estimate predicts a net gain,
:mod:`~baselines.controller.analytic_rule`), ``"paper-rule"`` (the paper's load regions, ungated,
:mod:`~baselines.controller.paper_rule`) and ``"target"`` (cpgym's target composition from a
look-ahead TTFT prediction, ``vertumnus-lookahead``, :mod:`~baselines.controller.target_rule`).
Modules, one concern each:

* :mod:`~baselines.controller.config` — :class:`ControllerConfig` and the names of its choices;
* :mod:`~baselines.controller.measurement` — the window: rate, mix, capacity, load, trend
  (:class:`WindowRecord`);
* :mod:`~baselines.controller.paper_rule`, :mod:`~baselines.controller.analytic_rule`,
  :mod:`~baselines.controller.target_rule` — the decisions;
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
