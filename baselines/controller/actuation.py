"""Actuation of the controller's decisions: starting split/merge operations on the pool.

The *mechanics* of an operation (drain, redirect, switch, epoch commit, KV reconciliation) are
in :mod:`envs.sim.reconfig`; here only which eligible operations start, within the per-window
limits (``max_ops_per_window``, ``max_gpu_share_per_window``) and the dwell-time lockout
(``min_dwell_s``). Among eligible operations of one kind the paper's ranking applies (paper §6:
shortest predicted drain, then least expected KV-reconciliation traffic, then pool order,
:func:`~envs.planning.operations.rank_operations`). A worker is in at most one operation (only
ACTIVE workers are eligible).

* :meth:`Actuation.act` — the paper rule's operations of one kind, one by one, while the
  capacity gap is open;
* :meth:`Actuation.move_towards` — the target rule's operations towards a composition
  (:func:`~envs.planning.operations.operations_towards`).

:class:`Actuation` is the acting part of :class:`~baselines.controller.ReconfigController` (a
mixin: it reads ``self.sim`` and ``self.config``, and owns ``self.reconfig`` and the per-GPU
record of the last operation that the lockout reads).
"""

from __future__ import annotations

import math

from baselines.controller.measurement import WindowRecord
from envs.planning.capacity import CapacityProfile
from envs.planning.operations import operations_towards, projected_degree_counts, rank_operations
from envs.sim.reconfig import SPLIT, Operation, get_reconfigurator

__all__ = ["Actuation"]


class Actuation:
    """Starts the operations the decision rules ask for (module docstring)."""

    def _attach_actuation(self, sim) -> None:
        """The run's reconfigurator (``self.reconfig``, :func:`~envs.sim.reconfig.get_reconfigurator`)
        and an empty lockout record."""
        self.reconfig = get_reconfigurator(sim, self.config.reconfig)
        self._gpu_last_op: dict[int, tuple[float, str]] = {}  # GPU -> (start time [s], kind) of its last operation

    def move_towards(self, target: dict[int, int], record: WindowRecord) -> list[str]:
        """Starts the operations :func:`~envs.planning.operations.operations_towards` plans
        towards ``target`` (ranked as in the paper, at most ``max_gpu_share_per_window`` of the
        pool's GPUs and ``max_ops_per_window`` operations, none against the dwell-time lockout);
        records them in ``record.action`` (``"target-locked"`` when only the lockout stopped a
        needed operation, ``"target-blocked"`` when nothing eligible helps). Returns the started
        operations."""
        sim, cfg = self.sim, self.config
        now = sim.env.now
        budget = cfg.max_gpu_share_per_window * sim.config.pool.num_gpus
        ops = operations_towards(sim, target, budget, allowed=lambda op: not self.locked(op, now))[:cfg.max_ops_per_window]
        started = []
        for op in ops:
            gpus = self.operation_gpus(op)
            self.reconfig.apply(op)
            for g in gpus:
                self._gpu_last_op[g] = (now, op.kind)
            started.append(str(op))
        if started:
            record.action = ";".join(started)
        elif projected_degree_counts(sim) != {d: n for d, n in target.items() if n}:
            record.action = "target-locked" if operations_towards(sim, target, budget) else "target-blocked"
        return started

    def _projected_capacity(self, kind: str, degree: int, cap: float, profiles: dict[int, CapacityProfile]) -> float:
        if kind == SPLIT:
            return cap - profiles[degree].capacity_rps + 2 * profiles[degree // 2].capacity_rps
        return cap - 2 * profiles[degree].capacity_rps + profiles[2 * degree].capacity_rps

    def admissible_operations(self, candidates, kind: str, cap: float, forecast: float, gpu_budget: float,
                              profiles: dict[int, CapacityProfile], now_s: float) -> tuple[list, dict, int]:
        """The operations of ``kind`` among ``candidates`` that may start now, in candidate order:
        within ``gpu_budget`` (GPUs still allowed to change this window), not refused by the
        dwell-time lockout (:meth:`locked`), and, projected on the pool capacity ``cap``
        [req/s] with the per-degree ``profiles``, a split that adds capacity or a merge that keeps
        the projected load ``forecast / capacity`` at most ``merge_max_projected_load``. The one
        admissibility check of :meth:`act` and of the analytic rule's plan.

        Returns:
            ``(admissible operations, {operation: projected capacity [req/s]}, number of
            candidates the lockout refused)``.
        """
        ok, new_caps, num_locked = [], {}, 0
        for op in candidates:
            C = self.sim.workers[op.worker_ids[0]].degree
            if C * len(op.worker_ids) > gpu_budget + 1e-9:
                continue  # pool-wide change limit of this window
            if self.locked(op, now_s):
                num_locked += 1
                continue
            new_caps[op] = new_cap = self._projected_capacity(kind, C, cap, profiles)
            # a split must add capacity; a merge must keep the projected load low
            if kind == SPLIT:
                if new_cap > cap:
                    ok.append(op)
            elif new_cap > 0 and forecast / new_cap <= self.config.merge_max_projected_load:
                ok.append(op)
        return ok, new_caps, num_locked

    def act(self, kind: str, record: WindowRecord, profiles: dict[int, CapacityProfile]) -> list[str]:
        """Starts operations of ``kind`` one by one (best ranked first) while the capacity gap is
        open and the per-window limits allow; records them in ``record.action`` and, when any
        started, restarts the paper rule's counters
        (:meth:`~baselines.controller.paper_rule.PaperRule._reset_counters`). Returns the started
        operations."""
        sim, cfg = self.sim, self.config
        now = sim.env.now
        cap = record.capacity_rps
        forecast = record.forecast_rps
        started: list[str] = []
        gpu_budget = cfg.max_gpu_share_per_window * sim.config.pool.num_gpus
        num_locked = 0
        for _ in range(cfg.max_ops_per_window):
            if kind == SPLIT and started and cap > 0 and forecast / cap <= cfg.split_target_load:
                break  # capacity gap closed
            ok, new_caps, locked = self.admissible_operations(
                (op for op in self.reconfig.eligible_operations() if op.kind == kind), kind, cap, forecast,
                gpu_budget, profiles, now)
            num_locked += locked
            if not ok:
                break
            op = rank_operations(sim, ok)[0]
            gpus = self.operation_gpus(op)
            self.reconfig.apply(op)
            for g in gpus:
                self._gpu_last_op[g] = (now, kind)
            gpu_budget -= len(gpus)
            started.append(str(op))
            cap = new_caps[op]
        if started:
            record.action = ";".join(started)
            record.projected_load = record.rate_rps / cap if cap > 0 else math.inf
            self._reset_counters()
        else:
            record.action = f"{kind}-locked" if num_locked else f"{kind}-blocked"
        return started


    def operation_gpus(self, op: Operation) -> list[int]:
        """GPUs of the workers taking part in ``op``."""
        return [g for w in op.worker_ids for g in self.sim.workers[w].gpus]

    def locked(self, op: Operation, now_s: float) -> bool:
        """True if a GPU of ``op`` took part in an operation of the opposite kind started less
        than ``min_dwell_s`` before ``now_s`` (the dwell-time lockout)."""
        dwell = self.config.min_dwell_s
        if dwell <= 0:
            return False
        for g in self.operation_gpus(op):
            last = self._gpu_last_op.get(g)
            if last is not None and last[1] != op.kind and now_s - last[0] < dwell:
                return True
        return False
