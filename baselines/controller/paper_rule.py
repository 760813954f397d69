"""The paper's threshold rule (``ControllerConfig.decision="paper-rule"``; paper §6 "Runtime
Reconfiguration"; DESIGN.md "Cluster-level controller"): every ``decision_window_s`` the load
ρ = arrival rate of the window / pool capacity for the window's mix
(:mod:`baselines.controller.measurement`) moves sustained-condition counters.

* **split region** ρ >= ``split_load`` for ``k_windows`` consecutive windows: split workers
  (more independent lanes, less GPU time per request) one by one until the projected load is at
  most ``split_target_load``;
* **merge region** ρ <= ``merge_load`` for ``k_windows`` windows: merge sibling pairs (more
  per-request parallelism at low load) while the projected load stays at most
  ``merge_max_projected_load``;
* **long-request signal** when load is stable (``merge_load < ρ < split_load``) and the fraction
  of long prompts (``>= long_prompt_tokens``) is at least ``long_fraction_merge`` for
  ``k_windows`` windows: merge;
* **capacity precedence**: a merge happens only if the projected load after it stays at most
  ``merge_max_projected_load`` (< ``split_load``), and the split region is checked first — so
  the long-request signal never overrides a capacity shortage and a merge never lands inside
  the split region (no flapping).

Between the regions nothing happens (hysteresis band); counters restart after an operation. The
operations themselves (ranking, per-window limits, dwell-time lockout) are started by
:meth:`~baselines.controller.actuation.Actuation.act`.

Anti-flapping (not in the paper's copies; added after the first runs on the ``phases`` workload
swung the pool between all CP-2 and mostly CP-4 several times per phase,
``results/dynamic-phases/README.md``, section "Controller defaults: the measurements behind them"):

* the number of operations in a window follows the capacity gap (splits stop at
  ``split_target_load``; merges stop before the projected load exceeds
  ``merge_max_projected_load``), and at most ``max_gpu_share_per_window`` of the pool's GPUs
  take part in operations started in one window;
* dwell-time lockout: a GPU in an operation started less than ``min_dwell_s`` ago takes part in
  no operation of the opposite kind;
* merges are judged on a *forecast* rate (measured rate plus the positive rate trend over
  ``trend_horizon_s``): no merge at the foot of a rising ramp.

:class:`PaperRule` is the deciding part of :class:`~baselines.controller.ReconfigController` (a
mixin: it reads ``self.config`` and owns the three counters).
"""

from __future__ import annotations

from baselines.controller.measurement import WindowRecord
from envs.sim.reconfig import MERGE, SPLIT

__all__ = ["PaperRule"]


class PaperRule:
    """The ``"paper-rule"`` decision (module docstring)."""

    def _reset_counters(self) -> None:
        """Restarts the sustained-condition counters (at attach and after an operation)."""
        self._above = self._below = self._long = 0

    def decide(self, record: WindowRecord) -> str | None:
        """Updates the sustained-condition counters with the window's forecast load and
        long-request fraction; returns ``SPLIT``, ``MERGE`` or ``None`` (module docstring)."""
        cfg = self.config
        load_fc = record.forecast_load
        long_mix = record.long_fraction >= cfg.long_fraction_merge
        split_at = max(cfg.split_load, cfg.split_load_long) if long_mix else cfg.split_load
        self._above = self._above + 1 if load_fc >= split_at else 0
        self._below = self._below + 1 if load_fc <= cfg.merge_load else 0
        self._long = self._long + 1 if (load_fc < split_at and long_mix) else 0
        if self._above >= cfg.k_windows:
            return SPLIT
        if self._below >= cfg.k_windows or self._long >= cfg.k_windows:
            return MERGE
        return None

