"""The look-ahead ``"target"`` decision (``ControllerConfig.decision="target"``, the controller of
``vertumnus-lookahead``; not in the paper's copies; the default until issue #40,
``results/vertumnus/README.md``). Why: with the calibrated reconfiguration timing the paper rule
(:mod:`baselines.controller.paper_rule`) lost to the best fixed composition chosen in hindsight on
``cpgym dynamic`` (``results/dynamic-phases/README.md``, section "Controller defaults: the
measurements behind them"): a short-request-heavy mix wants a *mixed* pool (the router sends short
prompts to CP-2, long ones to CP-4) well below the load at which a load rule splits, which then
splits late in the ramp, paying drains near capacity; and after a short -> long boundary the
CP-2-heavy pool lingered for the k windows plus the lockout. Load alone cannot say *which*
composition serves a mix best. Every window:

1. **predict**: each candidate composition (:meth:`TargetRule.candidate_compositions`) gets
   a predicted mean TTFT from a short simulation of the real simulator
   (:class:`~baselines.lookahead.LookaheadPredictor`: the candidate pool with the Vertumnus router,
   a constant-rate stream resampled from the current regime's observed requests, common random
   numbers across candidates, memoised per (sample, rate bucket)); the score is the mean of the
   predictions at the forecast rates ``rate + max(0, slope) x h`` for ``h`` in
   ``target_horizons_s`` (20 s and 40 s: the middle of the next window and the end of the one
   after). Being late on a rising ramp costs far more than being early (a pool near capacity
   queues), so the score looks at where the rate is going, not where it was — no splitting *into*
   a ramp's peak;
2. **hysteresis**: the target changes to the best candidate only if its predicted gain over the
   current target (``pred[target] / pred[best] - 1``) exceeds ``target_margin`` and that same
   candidate has beaten the target by the margin for ``k_windows`` consecutive windows (the
   paper's sustained condition, per candidate), or exceeds ``target_urgent_gain`` once
   with a full look-ahead sample or shortly after a regime change (the target is predicted
   overloaded: capacity precedence), or in the first window of a new
   mix regime (``mix_change_distance``: the pool should not keep the previous phase's shape for a
   whole phase), which also lifts the dwell lockout (``regime_change_unlocks``). On stationary
   load the predictions of one (sample, rate bucket) are identical, so the target cannot flap;
3. **bounded steps**: operations towards the target
   (:meth:`~baselines.controller.actuation.Actuation.move_towards`).

:class:`TargetRule` is the deciding part of :class:`~baselines.controller.ReconfigController` (a
mixin: it reads ``self.sim``, ``self.config``, ``self.table`` and the window state of
:class:`~baselines.controller.measurement.WindowMeasurement`, and owns the target, the
per-candidate counters, the candidate menu and the predictor).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import replace

import numpy as np

from baselines.controller.measurement import WindowRecord
from baselines.lookahead import LookaheadPredictor, TransitionPlan
from baselines.vertumnus import VertumnusRouter
from envs.planning.composition import degree_counts, enumerate_compositions
from envs.planning.operations import covers_pool, projected_degree_counts

__all__ = ["TargetRule"]


class TargetRule:
    """The ``"target"`` decision (module docstring)."""

    def _attach_target_rule(self, sim) -> None:
        """Decision state of ``sim``'s run; with ``decision="target"`` also the candidate menu
        (``self.candidates``) and the look-ahead predictor (``self.predictor``)."""
        cfg = self.config
        self._sample_size = 0  # requests in the last look-ahead sample
        self._target: dict[int, int] | None = None  # "target" decision: the composition moved towards
        # per candidate: consecutive windows in which it beat the target by the margin (the sustained
        # condition holds for one candidate, not for "some candidate" each window: decide_target)
        self._num_better: dict[str, int] = {}
        self.candidates: list[str] = []  # the "target" decision's menu (the paper rule has none)
        if cfg.decision == "target":
            self.candidates = self.candidate_compositions(sim.config.pool)
            self.predictor = LookaheadPredictor(self.table, lambda: VertumnusRouter(name="vertumnus-lookahead"),
                                                cfg.lookahead)

    def candidate_compositions(self, pool) -> list[str]:
        """Candidate compositions of the ``"target"`` decision: every composition of ``pool``
        with its supported degrees, or with ``target_degrees`` when set
        (:func:`enumerate_compositions`); if more than
        ``max_candidates``, those of the degrees present in the pool and their supported halves
        and doubles; if still more, ``max_candidates`` of them evenly spaced in enumeration order
        (most large-degree workers first), always with the pool's own composition (each
        candidate costs one look-ahead simulation per (mix, rate) bucket)."""
        own = self.composition_text(projected_degree_counts(self.sim))
        # the pool's own composition may use other degrees than target_degrees (it stays a candidate, appended below)
        pool = self.config.menu_pool(pool)
        comps = enumerate_compositions(pool)
        if len(comps) > self.config.max_candidates:
            present = {w.degree for w in self.sim.workers.values()}
            near = {d for d in pool.supported_degrees
                    if d in present or 2 * d in present or (d % 2 == 0 and d // 2 in present)}
            comps = enumerate_compositions(replace(pool, supported_degrees=tuple(sorted(near))))
        if len(comps) > self.config.max_candidates:
            pick = np.unique(np.linspace(0, len(comps) - 1, self.config.max_candidates - 1).round().astype(int))
            comps = [comps[i] for i in pick]
        if own not in comps:
            comps.append(own)
        return comps

    @staticmethod
    def composition_text(counts: dict[int, int]) -> str:
        """Counts form of a composition, largest degree first (``{4: 6, 2: 8}`` -> ``cp4x6,cp2x8``)."""
        return ",".join(f"cp{d}x{n}" for d, n in sorted(counts.items(), reverse=True) if n)

    def decide_target(self, record: WindowRecord) -> dict[int, int]:
        """``"target"`` decision (module docstring): predicts the mean TTFT of every candidate
        composition at the window's forecast rate for the smoothed mix
        (:class:`~baselines.lookahead.LookaheadPredictor`) and returns the target composition
        ``{degree: number of workers}``: the previous target, or the best candidate once it has
        been predicted faster than the target by more than ``target_margin`` for ``k_windows``
        consecutive windows (the sustained condition is per candidate: windows in which different
        candidates, possibly in opposite directions, each beat the target do not add up) — or in
        the first window of a new mix regime
        (``record.regime_change``), which also lifts the dwell-time lockout when
        ``regime_change_unlocks``."""
        cfg = self.config
        if self._target is None:
            projected = projected_degree_counts(self.sim)
            # A fault can leave GPUs out of every worker (a failed GPU, a healthy spare: envs/sim/faults.py);
            # the look-ahead simulates whole-pool compositions, so a degraded pool starts from the
            # configured one (no operation has run before the first decision)
            pool = self.sim.config.pool
            self._target = projected if covers_pool(projected, pool) else degree_counts(pool.composition, pool)
        target = self.composition_text(self._target)
        comps = self.candidates if target in self.candidates else self.candidates + [target]
        rate, slope, stationary = self.lookahead_rate(record.rate_rps)
        pred = self.predict(comps, [rate + slope * h for h in cfg.target_horizons_s], keep=(target,), stationary=stationary)
        record.lookahead_rate_rps, record.lookahead_slope_rps_per_s = rate, slope
        best = min(comps, key=lambda c: pred[c])  # ties: the first (most large-degree workers)
        if not math.isfinite(pred[best]):
            gain = 0.0  # every candidate overloaded: nothing to rank
        else:
            gain = pred[target] / pred[best] - 1.0 if pred[best] > 0 else 0.0
        better = ({c for c in comps if c != target and pred[c] > 0 and pred[target] / pred[c] - 1.0 > cfg.target_margin}
                  if math.isfinite(pred[best]) else set())
        self._num_better = {c: self._num_better.get(c, 0) + 1 for c in better}
        if best in better:
            settled = self._sample_size >= cfg.urgent_min_sample_requests or self._windows_since_regime <= cfg.k_windows
            urgent = gain > cfg.target_urgent_gain and settled
            if record.regime_change or self._num_better[best] >= cfg.k_windows or urgent:
                self._target = degree_counts(best, self.sim.config.pool)
                self._num_better = {}
                if record.regime_change and cfg.regime_change_unlocks:
                    self._gpu_last_op.clear()
        record.best_composition = best
        record.predicted_gain = gain
        record.predicted_target_ttft_s = pred[target]
        record.target_composition = self.composition_text(self._target)
        return self._target

    def predict(self, compositions: list[str], rates_rps: list[float], keep: tuple[str, ...] = (),
                stationary: bool = False) -> dict[str, float]:
        """Score [s] of ``compositions`` for the current regime: the mean over ``rates_rps`` of the
        predicted mean TTFT at each rate (``lookahead.source``): ``"requests"`` resamples the
        first ``n`` requests of the regime (``n`` the largest power of two up to
        ``max_sample_requests`` that has arrived: the sample grows 64, 128, ... so the memo is
        reused within a regime; ``target_sample="latest"``: the ``n`` latest arrivals;
        ``target_replay_sample``: each stream replays the sample first; ``target_transition``:
        each stream starts on the current composition and moves to the candidate) and screens the candidates
        (:meth:`~baselines.lookahead.LookaheadPredictor.score_from_requests`; ``keep``, the
        current target, runs on every stream; ``stationary``: the longer streams of a stationary
        load); ``"histogram"`` samples the smoothed class histogram (the capacity profiler's
        prompts)."""
        la = self.config.lookahead
        self._sample_size = 0
        reqs = self.sim.workload.requests
        arrived = bisect_left(self._arrivals, self.sim.env.now)
        avail = arrived - self._regime_start
        n = min(la.max_sample_requests, 1 << max(0, int(avail).bit_length() - 1)) if avail > 0 else 0
        if la.source == "histogram" or n < 1:
            preds = [self.predictor.predict(compositions, self._shares, r) for r in rates_rps]
            return {c: float(np.mean([p[c] for p in preds])) for c in compositions}
        first = arrived - n if self.config.target_sample == "latest" else self._regime_start
        sample = list(reqs[first:first + n])
        self._sample_size = n
        cfg = self.config
        transition = None
        if cfg.target_transition:
            projected = projected_degree_counts(self.sim)
            if covers_pool(projected, self.sim.config.pool):  # a pool degraded by a fault: no move is simulated
                transition = TransitionPlan(self.composition_text(projected), cfg.reconfig, cfg.decision_window_s,
                                            cfg.max_gpu_share_per_window * self.sim.config.pool.num_gpus,
                                            cfg.max_ops_per_window)
        return self.predictor.score_from_requests(compositions, sample, self.sim.workload.kv_block_size_tokens,
                                                  list(rates_rps), (first, n), keep, stationary,
                                                  replay_sample=cfg.target_replay_sample, transition=transition)
