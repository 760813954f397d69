"""The windowed split/merge controller (paper §6), composed of its parts: window measurement
(:mod:`baselines.controller.measurement`), the decision rules
(:mod:`baselines.controller.paper_rule`, :mod:`baselines.controller.analytic_rule`,
:mod:`baselines.controller.target_rule`) and actuation
(:mod:`baselines.controller.actuation`); settings in :mod:`baselines.controller.config`.
"""

from __future__ import annotations

from baselines.controller.actuation import Actuation
from baselines.controller.analytic_rule import AnalyticRule
from baselines.controller.config import ControllerConfig
from baselines.controller.measurement import WindowMeasurement, WindowRecord
from baselines.controller.paper_rule import PaperRule
from baselines.controller.target_rule import TargetRule
from envs.planning.capacity import CapacityTable
from envs.sim.events import EventPriority

__all__ = ["ReconfigController"]


class ReconfigController(WindowMeasurement, PaperRule, AnalyticRule, TargetRule, Actuation):
    """The windowed split/merge controller; attach with :meth:`attach` (a policy attachment).

    Each window runs :meth:`measure` (rate, mix, capacity and load of the window: a
    :class:`~baselines.controller.measurement.WindowRecord`), then with ``decision="target"``
    :meth:`decide_target` (the target composition) and :meth:`move_towards` (operations towards
    it), with ``decision="analytic"`` :meth:`decide_analytic` (the paper rule's proposal, gated), with
    ``decision="paper-rule"`` :meth:`decide` (the sustained-condition counters: split,
    merge or nothing) and :meth:`act` (operations of that kind until the capacity gap closes or a
    limit is reached).

    Args:
        config: :class:`ControllerConfig`.
        table: capacity profiles to share (e.g. with :func:`~envs.planning.composition.initial_composition`); default a
            table of the run's :class:`~envs.planning.capacity.CapacityCache`
            (``sim.attachments["capacity_cache"]``, set by ``baselines.runner.build_simulator``)
            or of a new cache, built at :meth:`attach`. A new table's reference mixes start from
            the run's demand history (:func:`~envs.planning.capacity.run_history`: a benchmark
            task's training episodes, else the run's workload;
            :meth:`~envs.planning.capacity.CapacityTable.seed_history`).

    After a run, ``windows`` holds one :class:`~baselines.controller.measurement.WindowRecord` per window — also, as dicts, in
    ``SimResult.extras["controller_windows"]``; ``SimResult.extras["controller_candidates"]`` lists
    the ``"target"`` decision's candidate compositions (:meth:`candidate_compositions`; empty for
    the paper rule).
    """

    def __init__(self, config: ControllerConfig | None = None, table: CapacityTable | None = None) -> None:
        self.config = config or ControllerConfig()
        self.table = table
        self.windows: list[WindowRecord] = []

    def attach(self, sim) -> None:
        """Attaches to ``sim`` (before its run): the window state of each part, the finish
        listener, the extras provider (``controller_windows``, ``controller_candidates``),
        ``sim.attachments["controller"]`` and, for a non-empty workload, the first window's event."""
        cfg = self.config
        self.sim = sim
        self._attach_actuation(sim)
        self._attach_measurement(sim)
        self._reset_counters()
        self._attach_target_rule(sim)
        sim.finish_listeners.append(self._on_finish)
        sim.extras_providers.append(lambda: {"controller_windows": [w.as_dict() for w in self.windows],
                                             "controller_candidates": list(self.candidates)})
        sim.attachments["controller"] = self
        if len(sim.workload.requests):
            self._priority = EventPriority.CONTROL
            sim.schedule(cfg.decision_window_s, self._priority, self._on_window, None)

    def _on_window(self, _payload) -> None:
        sim = self.sim
        if sim.env.now < self._last_arrival_s:
            sim.schedule(self.config.decision_window_s, self._priority, self._on_window, None)
        record, profiles = self.measure()
        self.windows.append(record)
        if profiles is None:
            return
        if self.config.decision == "target":
            self.move_towards(self.decide_target(record), record)
            return
        if self.config.decision == "analytic":
            self.decide_analytic(record, profiles)
            return
        kind = self.decide(record)
        if kind is not None:
            self.act(kind, record, profiles)
