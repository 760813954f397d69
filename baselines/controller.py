"""Vertumnus cluster-level controller (paper §6): the windowed split/merge decision.

Two decisions (``ControllerConfig.decision``): ``"target"`` (default; a target composition from a
look-ahead TTFT prediction, below) and ``"paper-rule"`` (the paper's load regions, described
first).

The *mechanics* of an operation (drain, redirect, switch, epoch commit, KV reconciliation) are
in :mod:`envs.sim.reconfig`; this module only decides. The Gymnasium reconfiguration
environment uses the same mechanics (:func:`eligible_operations` / :func:`apply_operation`,
re-exported here) with a learned decision instead of :class:`ReconfigController`.

Capacity profiling lives in :mod:`envs.planning.capacity` and composition enumeration / the
initial composition in :mod:`envs.planning.composition`; both are re-exported here (old import
paths keep working).

Paper rule (``decision="paper-rule"``; paper §6 "Runtime Reconfiguration"; DESIGN.md "Cluster-level controller"), every
``window_s`` (paper: 20 s): load ρ = arrival rate of the window / pool capacity for the
window's mix.

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

Between the regions nothing happens (hysteresis band); counters restart after an operation.
Among eligible operations of the chosen kind the controller prefers the shortest predicted drain,
then the least expected KV-reconciliation traffic, then pool order (paper §6). A worker is in at
most one operation (only ACTIVE workers are eligible).

Anti-flapping (not in the paper's copies; added after the first runs on the ``phases`` workload
swung the pool between all CP-2 and mostly CP-4 about three times per phase,
``results/dynamic-phases/README.md``):

* the number of operations in a window follows the capacity gap (splits stop at
  ``split_target_load``; merges stop before the projected load exceeds
  ``merge_max_projected_load``), and at most ``max_gpu_share_per_window`` of the pool's GPUs
  take part in operations started in one window;
* dwell-time lockout: a GPU in an operation started less than ``min_dwell_s`` ago takes part in
  no operation of the opposite kind;
* merges are judged on a *forecast* rate (measured rate plus the positive rate trend over
  ``trend_horizon_s``): no merge at the foot of a rising ramp.

Target decision (``decision="target"``, the default; not in the paper's copies). Why: with the
calibrated reconfiguration timing the paper rule lost to the best fixed composition chosen in
hindsight by +7.2 % mean TTFT [+1.6, +12.8] over three seeds of ``cpgym dynamic``
(``results/dynamic-phases/README.md``): a short-request-heavy mix wants a *mixed* pool (the router
sends short prompts to CP-2, long ones to CP-4) from ~40 req/s on, but a load rule keeps all-CP-4
until the forecast load reaches 0.85 and then splits late in the ramp, paying drains near
capacity; and after a short -> long boundary the CP-2-heavy pool lingered 30-60 s (k windows plus
the lockout). Load alone cannot say *which* composition serves a mix best. Every window:

1. **predict**: each candidate composition (:meth:`ReconfigController.candidate_compositions`) gets
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
   (:func:`~envs.planning.operations.operations_towards`: ranked as in the paper, shortest
   predicted drain first) within ``max_gpu_share_per_window`` of the pool's GPUs and
   ``max_ops_per_window``, none against the dwell-time lockout; the drain / switch / epoch
   protocol (:mod:`envs.sim.reconfig`) is unchanged.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import asdict, dataclass, field, fields

import numpy as np

from baselines.lookahead import LookaheadConfig, LookaheadPredictor, TransitionPlan
from baselines.vertumnus import VertumnusRouter
from envs.planning.capacity import (
    CapacityCache,
    CapacityProfile,
    CapacityTable,
    ProfileConfig,
    reuse_prefix_tokens,
    slo_for_lengths,
)
from envs.planning.composition import (
    composition_capacity_rps,
    degree_counts,
    enumerate_compositions,
    initial_composition,
    pool_over_degrees,
)
from envs.planning.operations import covers_pool, operations_towards, projected_degree_counts, rank_operations
from envs.sim.events import EventPriority
from envs.sim.reconfig import (
    MERGE,
    SPLIT,
    Operation,
    OperationRecord,
    ReconfigConfig,
    apply_operation,
    eligible_operations,
    get_reconfigurator,
)

__all__ = ["ControllerConfig", "WindowRecord", "ReconfigController", "rank_operations", "DECISIONS", "TARGET_SAMPLES",
           "TREND_NOISES",
           # re-exports (moved to envs.planning.capacity / envs.planning.composition)
           "CapacityCache", "CapacityProfile", "CapacityTable", "ProfileConfig", "reuse_prefix_tokens", "slo_for_lengths",
           "enumerate_compositions", "degree_counts", "composition_capacity_rps", "initial_composition",
           "Operation", "OperationRecord", "ReconfigConfig", "apply_operation", "eligible_operations"]


@dataclass(frozen=True)
class ControllerConfig:
    """Parameters of :class:`ReconfigController`.

    Args:
        window_s: observation window [s]; paper §6/§9: 20 s.
        split_load: lower edge of the split region, on the *forecast* load (rate plus its
            positive trend over ``trend_horizon_s``, divided by the profiled capacity); 0.85
            (phases short-heavy mix, 40 GPUs, constant rate, measured with the full simulator:
            ``cp4x6,cp2x8`` beats ``cp4x10`` in mean TTFT from ~50 req/s = 0.87 of the profiled
            all-CP-4 capacity of 57 req/s, 0.29 vs 0.26 s; at 55 req/s 0.37 vs 0.29 s).
        split_target_load: splits of one window continue (one worker each) until the projected
            forecast load is at most this; in (merge_load, split_load]; 0.75.
        merge_load: upper edge of the low-load merge region (forecast load); 0.5.
        merge_max_projected_load: a merge must keep the projected forecast load at most this
            (capacity precedence); must lie in [merge_load, split_load); 0.7.
        split_load_long: split threshold while the long-request signal holds (long fraction at
            least ``long_fraction_merge``): only a capacity shortage splits then; 1.0 (on the
            long-heavy mix an all-CP-4 pool keeps a ~40 % lower mean TTFT than an all-CP-2
            one up to ~0.9 of its profiled capacity, ``cpgym dynamic`` README; capacity
            precedence: at load >= 1 it splits regardless). Values below ``split_load`` mean
            ``split_load``.
        k_windows: consecutive windows a condition must hold; 2 (paper: "sustained").
        long_prompt_tokens: a prompt at least this long is a long request [tokens]; 8192 (the
            paper's long requests are the 4-8 % of arrivals carrying 32-54 % of tokens, §2).
        long_fraction_merge: long-request fraction (of arrivals) that signals a merge at stable
            load; 0.3.
        min_window_requests: windows with fewer arrivals keep all counters unchanged; 10.
        max_ops_per_window: hard cap on operations started per window (each on different
            workers; a worker is in at most one operation, paper §6); 8. The number actually
            started is set by the capacity gap (splits until the projected load is at most
            ``split_target_load``; merges while it stays at most ``merge_max_projected_load``
            for the forecast rate) and by ``max_gpu_share_per_window``.
        max_gpu_share_per_window: at most this share of the pool's GPUs take part in operations
            started in one window, in (0, 1]; 0.5 (a 40-GPU pool changes at most 20 GPUs per
            20 s window: all CP-2 -> all CP-4 takes two windows; a burst of Poisson noise can
            never reshape the whole pool at once).
        min_dwell_s: lockout [s]: a GPU that took part in an operation started less than this
            ago takes part in no operation of the *opposite* kind (no split of a just-merged
            worker, no merge of just-split siblings); 0 disables; 60 (three 20 s windows: the
            opposite move needs at least one fresh k-window run after the first one's commit,
            and 60 s is ~10x the paper's 1.1-5.1 s drain + switch, so one operation's cache
            disturbance is amortised).
        trend_horizon_s: merges (and the long-request merge signal) use the forecast rate
            ``rate + max(0, slope) x trend_horizon_s`` [req/s] (slope: least-squares over the
            window rates since the last regime change, at most ``k_windows + 1`` windows), so
            the pool does not merge at the foot of a rising ramp only to split again at its
            peak (hysteresis on *projected* load); splits use the measured rate (capacity
            precedence, paper §6: sustained overload). 0 disables; 40 s (= ``k_windows`` x
            ``window_s``, the reaction time of the opposite split).
        mix_smoothing: weight of the newest window in the exponentially smoothed length-class
            histogram the capacity is profiled for, in (0, 1]; 0.5 (a 20 s window of a
            long-heavy phase holds only ~100 requests, whose tail alone moves the profiled
            capacity by +-30 %; 0.5 follows a phase change within two windows, the same lag as
            ``k_windows``).
        mix_change_distance: a window whose class histogram is farther than this (total
            variation) from the smoothed one replaces it (a regime change is not smoothed over:
            the first short-heavy window after a long-heavy phase would otherwise look
            overloaded); 0.3 (same-phase windows differ by < 0.15, phases by ~0.6).
        profile: capacity profiling (:class:`ProfileConfig`).
        reconfig: protocol costs (switch, confirmation).

    Target decision (``decision="target"``; module docstring):

        decision: ``"target"`` (look-ahead target composition) or ``"paper-rule"`` (the load
            regions above); ``"target"``: on ``cpgym dynamic`` it is 3.6 % ahead of the best fixed
            composition in hindsight (seeds 0-2; 3.4 % on held-out seeds 3-4) where the paper rule
            is 10.6 % behind (first revision; ``results/README.md``, research log).
        target_margin: predicted relative mean-TTFT gain over the current target a candidate
            needs for ``k_windows`` consecutive windows, >= 0; 0.05 (the look-ahead's regret on
            constant-rate full runs is 0-7 % at most rates, ``predictor/``; a smaller margin
            follows noise between neighbouring compositions).
        target_urgent_gain: a gain above this switches at once, >= ``target_margin``; 0.25 (the
            target is then predicted overloaded: capacity precedence; a 20 s wait on a rising ramp
            near capacity costs seconds of TTFT).
        urgent_min_sample_requests: the urgent switch needs a look-ahead sample of at least this
            many observed requests; 1024 (= ``LookaheadConfig.max_sample_requests``). Why: near
            capacity the prediction is very sensitive to the sample's long-prompt share; at a
            steady 40 req/s (``cpgym dynamic --num-phases 1 --no-rising-rate``, seed 2) the first
            window's 512-request sample predicted all-CP-4 overloaded (gain 1.44), split five
            workers, and the next window's 1024-request sample wanted them back (gain 0.54):
            +17.9 % mean TTFT vs the best fixed pool. Within ``k_windows`` windows after a regime
            change the urgent switch needs no full sample (the previous regime's pool is likely
            wrong, and a long-heavy phase brings only ~80 requests per window); smaller samples
            still move the target through ``k_windows`` consecutive windows.
        target_horizons_s: the score is the mean prediction at ``rate + max(0, slope) x h`` for
            each ``h`` [s]; (20, 40) (the middle of the next window, the end of the one after; a
            single 20 s horizon split a window too late on the ramps, a single 40 s one overshot
            into CP-2-heavy pools).
        target_trend_min_t: the look-ahead forecasts from a rate trend only when the trend is
            significant: when the least-squares slope of the regime's recent window rates is within
            this many standard errors of zero (standard error from the Poisson counting noise of
            a window rate, ``sqrt(rate / window_s)``), the load is taken as stationary and the
            look-ahead rate is the mean of those windows' rates, without a trend; otherwise the
            window's rate plus the positive trend (as before); >= 0 (0: always the window's rate
            and its positive trend); 2.0. Why: at a steady 40 req/s (``cpgym dynamic
            --num-phases 1 --no-rising-rate``) the window rates scatter by +-1.4 req/s (Poisson),
            so a noise slope over three 20 s windows, made one-sided by ``max(0, .)`` and
            multiplied by the 40 s horizon, forecast up to 47 req/s, where the look-ahead predicts
            all-CP-4 overloaded: seed 1 split 4 workers at once on a +40 % urgent gain and was
            told 10 % the other way 80 s later. The phases' ramps (20 -> 60 req/s in 150 s,
            0.27 req/s per s) are 5 standard errors steep and keep their trend.
        max_candidates: at most this many candidate compositions (each costs one look-ahead
            simulation per memo miss), >= 2; 16 (all 11 of 40 GPUs with {2, 4}).
        target_degrees: CP degrees the candidate compositions may use (each must be one of the
            pool's ``supported_degrees``); ``()`` (default): the pool's supported degrees. The
            heuristic's counterpart of the learned controller's target menu
            (``envs.reconfig_env.target_menu``, ``--target-degrees``). Why it matters: 40 GPUs
            over {1, 2, 4, 8} make 286 compositions, of which ``max_candidates`` evenly spaced ones
            are simulated, so the default pool's look-ahead never sees ``cp4x10`` or
            ``cp4x9,cp2x2``; with ``(2, 4)`` it sees all 11 (the paper's Qwen3 degrees, §9).
        regime_change_unlocks: a target change in the first window of a new mix regime lifts the
            dwell-time lockout; True (the lockout guards against flapping *within* a regime; a
            phase change is not flapping, and keeping the last phase's CP-2 workers locked for
            60 s was the measured loss after short -> long boundaries).
        target_sample: which observed requests the look-ahead resamples (``"requests"`` source):
            ``"regime-start"`` (default) the regime's first ``n`` (so a regime's predictions are
            memoised and reused from window to window), or ``"latest"``: the ``n`` latest arrivals
            (follows drift inside a regime, e.g. a trace whose prompts shorten over minutes; every
            window simulates afresh). ``n`` is the same power of two either way.
        target_replay_sample: each look-ahead stream is preceded by the sample itself, replayed in
            arrival order at its observed arrival gaps and not scored (so the candidate pool's
            prefix caches hold the sample's shared prefixes, and its queues the sample's backlog,
            when the scored requests arrive); False (default: streams start from an idle pool with
            cold caches). Why: on the Mooncake conversation trace at a steady 12 req/s the cold
            streams see prefix hit rates of 0.11-0.17 where the run sees 0.28-0.32, so the
            look-ahead predicts 1.5-7x the full runs' TTFT in an overloaded regime and ranks
            CP-1/CP-2-heavy pools first; with ``"latest"`` and the replay the controller's mean
            TTFT there is 18.3 % lower (5 seeds), while on the ``phases`` scenarios it is unchanged
            (+1.2 % [-3.2, +5.5], 5 seeds) at 2.5-3x the CPU and on a held-out trace (Mooncake
            synthetic, one run) worse than without (+234 % vs +117 % behind the router alone), hence
            not the default
            (``results/dynamic-phases/lookahead-replay/README.md``). Costs one replay of up to
            ``max_sample_requests`` requests per look-ahead simulation.
        target_transition: each look-ahead stream starts on the pool's current (projected)
            composition and moves to the candidate when its scored part begins, through the
            simulator's own drain / switch / epoch protocol with this controller's per-window
            budget (:class:`~baselines.lookahead.TransitionPlan`), so a candidate's score
            includes what moving to it costs (drained workers, switch and confirmation time,
            the new workers' empty prefix caches) and staying put costs nothing; False (default:
            every candidate is scored as if the pool already were it). Why: on the conversation
            trace the controller's losses are the transients of its own moves (CP-8 merges
            drained at 0.75 load: window TTFTs of 6.9-11.7 s for 60 s,
            ``results/dynamic-phases/lookahead-replay/README.md``), which a look-ahead that
            starts on the candidate cannot see. Measured (``results/dynamic-phases/
            transition-lookahead/README.md``): behind the router alone on the conversation trace
            at 12 req/s (5 seeds) +47.0 -> +30.5 %, with the latest sample + replay +19.7 ->
            +7.9 %, with those and margin 0.2 / urgent gain 1.0 +3.7 -> +0.0 % (every seed within
            0.2 %); on the held-out Mooncake synthetic trace (one run) +117 -> +41 % and, with
            the latest sample + replay, +234 -> +4.1 %; on the ``phases`` scenarios about one
            point worse than without on every row (5 seeds: -0.8 vs -1.8 % against the best fixed
            composition), hence not the default. ``"requests"`` source only.
        target_trend_noise: the noise of a window rate in ``target_trend_min_t``'s test:
            ``"poisson"`` (default) the Poisson counting variance ``rate / window_s``;
            ``"measured"``: that variance times the over-dispersion measured from the run's own
            window rates (:meth:`ReconfigController.rate_dispersion`: squared second differences
            of consecutive window rates inside a mix regime, which a linear ramp leaves at the
            counting noise, each divided by its Poisson variance; pooled over the last
            ``DISPERSION_MAX_TERMS`` windows and shrunk towards 1 with a prior weight of
            ``DISPERSION_PRIOR_WINDOWS`` windows; at least 1). Why: a real trace's rate wanders
            on the 20 s scale more than Poisson counts do (the Mooncake conversation trace at
            12 req/s: variance / mean of 20 s arrival counts 2.1-2.3 over seeds 0-4, against
            1.0-1.3 for 1 s counts; ``results/README.md``, research log), so the Poisson
            test reads wander as a trend, and the forecast along it predicts overload
            (``results/README.md``, research log: the trust check). The
            synthetic ``phases`` workloads are Poisson inside a phase, so their ramps keep their
            trend. Measured (``results/dynamic-phases/trend-noise/README.md``):
            on the conversation trace at 12 req/s -5.0 % [-9.4, -0.5] mean TTFT vs ``"poisson"``
            (5 seeds; still +40 % behind the router alone), on the ``cpgym reproduce --quick``
            phases rows the same rising-rates row and +0.8 / +0.2 points on the long-heavy /
            whole-run rows; with ``target_transition`` and the replayed latest sample it does not
            help (+1.5 % [-2.6, +5.6] on the conversation trace); hence not the default.
        lookahead: the look-ahead's settings
            (:class:`~baselines.lookahead.LookaheadConfig`).

    These thresholds are not given in the paper's copies; they were tuned on the ``phases``
    workload with the roofline calibration (``results/dynamic-phases/README.md``): the split and merge
    regions are separated by a band of 0.35 load, and neither a merge nor a split can land in
    the other's region (projected loads), so the controller cannot flap on stationary load.

    Raises:
        ValueError: naming the field, on out-of-range values or overlapping regions.
    """

    window_s: float = 20.0
    split_load: float = 0.85
    split_target_load: float = 0.75
    merge_load: float = 0.5
    merge_max_projected_load: float = 0.7
    split_load_long: float = 1.0
    k_windows: int = 2
    long_prompt_tokens: int = 8192
    long_fraction_merge: float = 0.3
    min_window_requests: int = 10
    max_ops_per_window: int = 8
    max_gpu_share_per_window: float = 0.5
    min_dwell_s: float = 60.0
    trend_horizon_s: float = 40.0
    mix_smoothing: float = 0.5
    mix_change_distance: float = 0.3
    profile: ProfileConfig = field(default_factory=lambda: ProfileConfig())
    reconfig: ReconfigConfig = field(default_factory=ReconfigConfig)
    decision: str = "target"
    target_margin: float = 0.05
    target_urgent_gain: float = 0.25
    urgent_min_sample_requests: int = 1024
    target_horizons_s: tuple[float, ...] = (20.0, 40.0)
    target_trend_min_t: float = 2.0
    max_candidates: int = 16
    target_degrees: tuple[int, ...] = ()
    regime_change_unlocks: bool = True
    target_sample: str = "regime-start"
    target_replay_sample: bool = False
    target_transition: bool = False
    target_trend_noise: str = "poisson"
    lookahead: LookaheadConfig = field(default_factory=LookaheadConfig)

    def __post_init__(self) -> None:
        def check(cond: bool, msg: str) -> None:
            if not cond:
                raise ValueError(msg)

        check(self.window_s > 0 and math.isfinite(self.window_s), f"controller.window_s must be > 0, got {self.window_s}")
        check(0 < self.merge_load < self.split_load,
              f"controller.merge_load ({self.merge_load}) must be > 0 and < split_load ({self.split_load})")
        check(self.merge_load <= self.merge_max_projected_load < self.split_load,
              f"controller.merge_max_projected_load ({self.merge_max_projected_load}) must be in [merge_load, split_load)")
        check(self.merge_load < self.split_target_load <= self.split_load,
              f"controller.split_target_load ({self.split_target_load}) must be in (merge_load, split_load]")
        check(self.split_load_long > 0 and math.isfinite(self.split_load_long),
              f"controller.split_load_long must be a finite number > 0, got {self.split_load_long}")
        check(isinstance(self.k_windows, int) and self.k_windows >= 1,
              f"controller.k_windows must be an integer >= 1, got {self.k_windows}")
        check(self.long_prompt_tokens >= 1, f"controller.long_prompt_tokens must be >= 1, got {self.long_prompt_tokens}")
        check(0 <= self.long_fraction_merge <= 1,
              f"controller.long_fraction_merge must be in [0, 1], got {self.long_fraction_merge}")
        check(self.min_window_requests >= 0, f"controller.min_window_requests must be >= 0, got {self.min_window_requests}")
        check(0 < self.mix_change_distance <= 1,
              f"controller.mix_change_distance must be in (0, 1], got {self.mix_change_distance}")
        check(0 < self.mix_smoothing <= 1, f"controller.mix_smoothing must be in (0, 1], got {self.mix_smoothing}")
        check(isinstance(self.max_ops_per_window, int) and self.max_ops_per_window >= 1,
              f"controller.max_ops_per_window must be an integer >= 1, got {self.max_ops_per_window}")
        check(0 < self.max_gpu_share_per_window <= 1,
              f"controller.max_gpu_share_per_window must be in (0, 1], got {self.max_gpu_share_per_window}")
        check(self.min_dwell_s >= 0 and math.isfinite(self.min_dwell_s),
              f"controller.min_dwell_s must be a finite number >= 0, got {self.min_dwell_s}")
        check(self.trend_horizon_s >= 0 and math.isfinite(self.trend_horizon_s),
              f"controller.trend_horizon_s must be a finite number >= 0, got {self.trend_horizon_s}")
        check(self.decision in DECISIONS, f"controller.decision must be one of {list(DECISIONS)}, got {self.decision!r}")
        check(self.target_margin >= 0 and math.isfinite(self.target_margin),
              f"controller.target_margin must be a finite number >= 0, got {self.target_margin}")
        defaults = {f.name: f.default for f in fields(ControllerConfig) if f.name in ("target_margin", "target_urgent_gain")}
        margin_note = ", its default" if self.target_margin == defaults["target_margin"] else ""
        urgent_note = (" (its default: set both when raising the margin)"
                       if self.target_urgent_gain == defaults["target_urgent_gain"] else "")
        check(self.target_urgent_gain >= self.target_margin and math.isfinite(self.target_urgent_gain),
              f"controller.target_urgent_gain must be finite and >= target_margin ({self.target_margin}{margin_note}), "
              f"got {self.target_urgent_gain}{urgent_note}")
        check(len(self.target_horizons_s) >= 1 and all(h >= 0 and math.isfinite(h) for h in self.target_horizons_s),
              f"controller.target_horizons_s must be one or more finite numbers >= 0, got {self.target_horizons_s!r}")
        check(isinstance(self.urgent_min_sample_requests, int) and self.urgent_min_sample_requests >= 0,
              f"controller.urgent_min_sample_requests must be an integer >= 0, got {self.urgent_min_sample_requests!r}")
        check(self.target_trend_min_t >= 0 and math.isfinite(self.target_trend_min_t),
              f"controller.target_trend_min_t must be a finite number >= 0, got {self.target_trend_min_t}")
        check(isinstance(self.max_candidates, int) and self.max_candidates >= 2,
              f"controller.max_candidates must be an integer >= 2, got {self.max_candidates!r}")
        check(isinstance(self.target_degrees, tuple)
              and all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 and not d & (d - 1)
                      for d in self.target_degrees)
              and len(set(self.target_degrees)) == len(self.target_degrees),
              f"controller.target_degrees must be distinct integer powers of two >= 1 (empty: the pool's supported "
              f"degrees), got {self.target_degrees!r}")
        check(self.target_sample in TARGET_SAMPLES,
              f"controller.target_sample must be one of {list(TARGET_SAMPLES)}, got {self.target_sample!r}")
        check(isinstance(self.target_replay_sample, bool),
              f"controller.target_replay_sample must be true or false, got {self.target_replay_sample!r}")
        check(self.decision == "target" or (self.target_sample == "regime-start" and not self.target_replay_sample),
              f"controller.target_sample / target_replay_sample set the look-ahead sample of the 'target' decision; "
              f"the {self.decision!r} decision has none (leave them at 'regime-start' / false)")
        check(self.lookahead.source == "requests" or (self.target_sample == "regime-start" and not self.target_replay_sample),
              f"controller.target_sample / target_replay_sample choose the observed requests the look-ahead resamples; "
              f"lookahead.source {self.lookahead.source!r} draws from the class histogram instead (use source "
              f"'requests')")
        check(isinstance(self.target_transition, bool),
              f"controller.target_transition must be true or false, got {self.target_transition!r}")
        check(not self.target_transition or (self.decision == "target" and self.lookahead.source == "requests"),
              f"controller.target_transition scores the 'target' decision's look-ahead streams from the current "
              f"composition (lookahead.source 'requests'); decision {self.decision!r} with lookahead.source "
              f"{self.lookahead.source!r} has none (leave it false)")
        check(self.target_trend_noise in TREND_NOISES,
              f"controller.target_trend_noise must be one of {list(TREND_NOISES)}, got {self.target_trend_noise!r}")
        check(self.decision == "target" or self.target_trend_noise == "poisson",
              f"controller.target_trend_noise sets the 'target' decision's trend test; the {self.decision!r} decision "
              f"has none (leave it 'poisson')")
        check(not (self.target_degrees and self.decision != "target"),
              f"controller.target_degrees {list(self.target_degrees)} sets the look-ahead's candidate menu of the "
              f"'target' decision; the {self.decision!r} decision has none (leave target_degrees empty)")

    def menu_pool(self, pool):
        """The pool whose compositions (:func:`enumerate_compositions`) make the ``"target"``
        decision's candidate menu: ``pool`` itself without ``target_degrees``, else ``pool`` over
        ``target_degrees`` only (a :class:`~envs.sim.PoolConfig`).

        Raises:
            ValueError: naming ``controller.target_degrees``, when one of them is not in the pool's
                ``supported_degrees`` or no composition of the pool's GPUs uses only them.
        """
        if not self.target_degrees:
            return pool
        unsupported = sorted(set(self.target_degrees) - set(pool.supported_degrees))
        if unsupported:
            raise ValueError(f"controller.target_degrees {list(self.target_degrees)}: degree(s) {unsupported} "
                             f"not in the pool's supported_degrees {list(pool.supported_degrees)}")
        restricted = pool_over_degrees(pool, self.target_degrees)
        if restricted is None:
            raise ValueError(f"controller.target_degrees {list(self.target_degrees)}: no composition of the "
                             f"{pool.num_gpus}-GPU pool ({pool.gpus_per_node} per node) uses only these degrees")
        return restricted


#: The decisions :class:`ReconfigController` can take (``ControllerConfig.decision``).
DECISIONS = ("target", "paper-rule")
#: The look-ahead samples of the ``"target"`` decision (``ControllerConfig.target_sample``).
TARGET_SAMPLES = ("regime-start", "latest")
#: The noise models of the trend test (``ControllerConfig.target_trend_noise``).
TREND_NOISES = ("poisson", "measured")
#: ``target_trend_noise="measured"``: windows pooled into the over-dispersion estimate, and the prior weight
#: (in windows) that shrinks it towards the Poisson value 1 (so two or three windows cannot set it alone).
DISPERSION_MAX_TERMS = 30
DISPERSION_PRIOR_WINDOWS = 4.0


# ---------------------------------------------------------------------------------- controller
@dataclass
class WindowRecord:
    """What the controller measured and did in one window (``SimResult.extras
    ["controller_windows"]`` holds them as dicts, :meth:`as_dict`).

    Attributes:
        time_s: end of the window [s].
        num_arrivals: arrivals in the window.
        rate_rps: measured arrival rate [requests/s].
        mean_cached_tokens: mean prefix hit per finished request, last window [tokens].
        capacity_rps: profiled capacity of the current composition for the window's mix
            [requests/s] (NaN when the window had too few requests).
        load: ``rate_rps / capacity_rps``.
        forecast_rps: forecast rate: the rate plus its positive trend over ``trend_horizon_s``
            [requests/s].
        forecast_load: ``forecast_rps / capacity_rps``.
        long_fraction: share of arrivals with at least ``long_prompt_tokens`` tokens, in [0, 1].
        action: ``"none"``, ``"too-few-requests"``, the started operations joined by ``;``, or
            ``"<kind>-locked"`` / ``"<kind>-blocked"``.
        projected_load: load after the started operations (NaN if none started).
        regime_change: the window's mix was farther than ``mix_change_distance`` from the
            smoothed mix (a new regime: the smoothed mix restarted from it).
        target_composition: ``"target"`` decision: the target composition after this window
            (counts form; empty for the paper rule).
        best_composition: ``"target"`` decision: the candidate with the lowest predicted mean TTFT.
        predicted_gain: ``"target"`` decision: predicted mean TTFT of the previous target over
            that of the best candidate, minus 1 (0 when the target is the best).
        lookahead_rate_rps: ``"target"`` decision: the rate the look-ahead forecasts from
            [req/s] (:meth:`ReconfigController.lookahead_rate`).
        lookahead_slope_rps_per_s: ``"target"`` decision: the rate trend it adds per second of
            horizon [req/s per s].
        observed_ttft_s: mean TTFT of the requests whose prefill finished in the window [s] (NaN
            when none finished).
        predicted_target_ttft_s: ``"target"`` decision: the look-ahead's score of the target
            composition before this window's decision [s].
    """

    time_s: float
    num_arrivals: int
    rate_rps: float
    mean_cached_tokens: float
    capacity_rps: float = math.nan
    load: float = math.nan
    forecast_rps: float = math.nan
    forecast_load: float = math.nan
    long_fraction: float = math.nan
    action: str = "none"
    projected_load: float = math.nan
    regime_change: bool = False
    target_composition: str = ""
    best_composition: str = ""
    predicted_gain: float = math.nan
    lookahead_rate_rps: float = math.nan
    lookahead_slope_rps_per_s: float = math.nan
    observed_ttft_s: float = math.nan
    predicted_target_ttft_s: float = math.nan

    def as_dict(self) -> dict:
        return asdict(self)

    def __getitem__(self, key: str):  # dict-style access, as the earlier per-window dicts
        return getattr(self, key)


class ReconfigController:
    """The windowed split/merge controller; attach with :meth:`attach` (a policy attachment).

    Each window runs three steps: :meth:`measure` (rate, mix, capacity and load of the window:
    a :class:`WindowRecord`), :meth:`decide` (the sustained-condition counters: split, merge or
    nothing) and :meth:`act` (start operations of that kind until the capacity gap closes or a
    limit is reached).

    Args:
        config: :class:`ControllerConfig`.
        table: capacity profiles to share (e.g. with :func:`initial_composition`); default a
            table of the run's :class:`~envs.planning.capacity.CapacityCache`
            (``sim.attachments["capacity_cache"]``, set by ``baselines.runner.build_simulator``)
            or of a new cache, built at :meth:`attach`. A new table's reference mixes start from
            the run's workload mix (the history stand-in, :meth:`CapacityTable.seed_history`).

    After a run, ``windows`` holds one :class:`WindowRecord` per window — also, as dicts, in
    ``SimResult.extras["controller_windows"]``; ``SimResult.extras["controller_candidates"]`` lists
    the ``"target"`` decision's candidate compositions (:meth:`candidate_compositions`; empty for
    the paper rule).
    """

    def __init__(self, config: ControllerConfig | None = None, table: CapacityTable | None = None) -> None:
        self.config = config or ControllerConfig()
        self.table = table
        self.windows: list[WindowRecord] = []

    def attach(self, sim) -> None:
        cfg = self.config
        self.sim = sim
        self.reconfig = get_reconfigurator(sim, cfg.reconfig)
        reqs = sim.workload.requests
        self._arrivals = np.array([r.arrival_time_s for r in reqs], dtype=float)
        self._lengths = np.array([r.num_prompt_tokens for r in reqs], dtype=float)
        self._mean_cached_tokens = 0.0  # mean prefix hit per request [tokens], measured per window
        if self.table is None:
            cache = sim.attachments.get("capacity_cache")
            self.table = CapacityTable(sim.config, sim.calibration, cfg.profile, cache=cache)
            if len(reqs):
                # the history's reuse is also the prior hit until the first requests finish
                self._mean_cached_tokens = reuse_prefix_tokens(sim.workload)
                self.table.seed_history(self._lengths, self._mean_cached_tokens)
        self._last_arrival_s = float(self._arrivals[-1]) if len(reqs) else 0.0
        self._hit_tokens = 0
        self._num_finished = 0
        self._ttft_sum_s = 0.0  # sum of the TTFTs of the requests finished in the window [s]
        self._shares: np.ndarray | None = None
        self._above = self._below = self._long = 0
        self._rates: list[float] = []  # window rates [req/s] since the last regime change
        self._regime_tail: list[float] = []  # the regime's last three window rates (second differences)
        self._dispersion_terms: list[float] = []  # squared second differences / their Poisson variance
        self._gpu_last_op: dict[int, tuple[float, str]] = {}  # GPU -> (start time [s], kind) of its last operation
        self._regime_change = False
        self._regime_start = 0  # first request of the current mix regime (look-ahead sample)
        self._sample_size = 0  # requests in the last look-ahead sample
        self._windows_since_regime = math.inf  # windows since the last regime change (0: this window)
        self._target: dict[int, int] | None = None  # "target" decision: the composition moved towards
        # per candidate: consecutive windows in which it beat the target by the margin (the sustained
        # condition holds for one candidate, not for "some candidate" each window: decide_target)
        self._num_better: dict[str, int] = {}
        self.candidates: list[str] = []  # the "target" decision's menu (the paper rule has none)
        if cfg.decision == "target":
            self.candidates = self.candidate_compositions(sim.config.pool)
            self.predictor = LookaheadPredictor(self.table, lambda: VertumnusRouter(name="vertumnus-lookahead"),
                                                cfg.lookahead)
        sim.finish_listeners.append(self._on_finish)
        sim.extras_providers.append(lambda: {"controller_windows": [w.as_dict() for w in self.windows],
                                             "controller_candidates": list(self.candidates)})
        sim.attachments["controller"] = self
        if len(reqs):
            self._priority = EventPriority.CONTROL
            sim.schedule(cfg.window_s, self._priority, self._on_window, None)

    def _on_finish(self, sim, batch, w) -> None:
        # Mean prefix hit per request of the window (from the simulator's request records).
        self._num_finished += len(batch)
        self._hit_tokens += sum(sim.num_cached_tokens(req.request_id) for req in batch)
        self._ttft_sum_s += sum(sim.ttft_s(req.request_id) for req in batch)

    # --- one window --------------------------------------------------------------------------
    def profiles(self, idx: np.ndarray, degrees=None) -> dict[int, CapacityProfile]:
        """Per-degree capacity profiles (per worker) for the smoothed length mix after adding the
        requests ``idx`` of the workload (updates the smoothed class histogram).

        Args:
            idx: indices of the window's requests in the workload.
            degrees: degrees to profile; default every supported degree of the pool.
        """
        s = self.table.shares(self._lengths[idx], self._mean_cached_tokens)
        a = self.config.mix_smoothing
        if self._shares is None or 0.5 * float(np.abs(s - self._shares).sum()) > self.config.mix_change_distance:
            self._regime_change = self._shares is not None
            self._shares = s  # a regime change (e.g. a new phase): no smoothing across it
            self._regime_start = int(idx[0]) if len(idx) else 0  # the look-ahead's sample starts here
            self._rates = []  # nor a rate trend
            self._regime_tail = []
        else:
            self._shares = (1.0 - a) * self._shares + a * s
        self.table.observe(self._shares)
        degrees = self.sim.config.pool.supported_degrees if degrees is None else degrees
        return {d: self.table.shares_profile(d, self._shares) for d in degrees}

    def candidate_compositions(self, pool) -> list[str]:
        """Candidate compositions of the ``"target"`` decision: every composition of ``pool``
        with its supported degrees, or with ``target_degrees`` when set
        (:func:`enumerate_compositions`); if more than
        ``max_candidates``, those of the degrees present in the pool and their supported halves
        and doubles; if still more, ``max_candidates`` of them evenly spaced in enumeration order
        (most large-degree workers first), always with the pool's own composition (each
        candidate costs one look-ahead simulation per (mix, rate) bucket)."""
        from dataclasses import replace as dc_replace

        own = self.composition_text(projected_degree_counts(self.sim))
        # the pool's own composition may use other degrees than target_degrees (it stays a candidate, appended below)
        pool = self.config.menu_pool(pool)
        comps = enumerate_compositions(pool)
        if len(comps) > self.config.max_candidates:
            present = {w.degree for w in self.sim.workers.values()}
            near = {d for d in pool.supported_degrees
                    if d in present or 2 * d in present or (d % 2 == 0 and d // 2 in present)}
            comps = enumerate_compositions(dc_replace(pool, supported_degrees=tuple(sorted(near))))
        if len(comps) > self.config.max_candidates:
            pick = np.unique(np.linspace(0, len(comps) - 1, self.config.max_candidates - 1).round().astype(int))
            comps = [comps[i] for i in pick]
        if own not in comps:
            comps.append(own)
        return comps

    def _needed_degrees(self, counts: dict[int, int]) -> list[int]:
        """Degrees whose profile a decision can need: those present, and their halves and
        doubles that the pool supports (a split or merge target)."""
        supported = set(self.sim.config.pool.supported_degrees)
        need = set(counts)
        need |= {c // 2 for c in counts if c % 2 == 0} | {2 * c for c in counts}
        return sorted(need & supported | set(counts))

    def _on_window(self, _payload) -> None:
        sim = self.sim
        if sim.env.now < self._last_arrival_s:
            sim.schedule(self.config.window_s, self._priority, self._on_window, None)
        record, profiles = self.measure()
        self.windows.append(record)
        if profiles is None:
            return
        if self.config.decision == "target":
            self.move_towards(self.decide_target(record), record)
            return
        kind = self.decide(record)
        if kind is not None:
            self.act(kind, record, profiles)

    def measure(self) -> tuple[WindowRecord, dict[int, CapacityProfile] | None]:
        """Measures the window that ends now: arrival rate, smoothed mix, capacity of the current
        composition, load, forecast load, long-request fraction. Returns the record and the
        per-degree profiles (``None`` if the window had too few arrivals)."""
        sim, cfg = self.sim, self.config
        now = sim.env.now
        i0 = bisect_left(self._arrivals, now - cfg.window_s)
        i1 = bisect_left(self._arrivals, now)
        n = i1 - i0
        observed = self._ttft_sum_s / self._num_finished if self._num_finished else math.nan
        if self._num_finished:
            self._mean_cached_tokens = self._hit_tokens / self._num_finished
        self._hit_tokens = self._num_finished = 0
        self._ttft_sum_s = 0.0
        rate = n / cfg.window_s
        record = WindowRecord(time_s=now, num_arrivals=n, rate_rps=rate, mean_cached_tokens=self._mean_cached_tokens,
                              observed_ttft_s=observed)
        if n < max(1, cfg.min_window_requests):
            record.action = "too-few-requests"
            return record, None
        idx = np.arange(i0, i1)
        self._regime_change = False
        counts: dict[int, int] = {}
        for w in sim.workers.values():
            counts[w.degree] = counts.get(w.degree, 0) + 1
        profiles = self.profiles(idx, self._needed_degrees(counts))
        cap = composition_capacity_rps(counts, profiles)
        self._rates = (self._rates + [rate])[-(cfg.k_windows + 1):]
        self._observe_dispersion(rate)
        forecast = rate + max(0.0, self.rate_slope()) * cfg.trend_horizon_s
        record.capacity_rps = cap
        record.forecast_rps = forecast
        record.load = rate / cap if cap > 0 else math.inf
        record.forecast_load = forecast / cap if cap > 0 else math.inf
        record.long_fraction = float((self._lengths[idx] >= cfg.long_prompt_tokens).mean())
        record.regime_change = self._regime_change
        self._windows_since_regime = 0 if self._regime_change else self._windows_since_regime + 1
        return record, profiles

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
                transition = TransitionPlan(self.composition_text(projected), cfg.reconfig, cfg.window_s,
                                            cfg.max_gpu_share_per_window * self.sim.config.pool.num_gpus,
                                            cfg.max_ops_per_window)
        return self.predictor.score_from_requests(compositions, sample, self.sim.workload.kv_block_size_tokens,
                                                  list(rates_rps), (first, n), keep, stationary,
                                                  replay_sample=cfg.target_replay_sample, transition=transition)

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

    def act(self, kind: str, record: WindowRecord, profiles: dict[int, CapacityProfile]) -> list[str]:
        """Starts operations of ``kind`` one by one (best ranked first) while the capacity gap is
        open and the per-window limits allow; records them in ``record.action``. Returns the
        started operations."""
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
            ok, new_caps = [], {}
            for op in (op for op in self.reconfig.eligible_operations() if op.kind == kind):
                C = sim.workers[op.worker_ids[0]].degree
                if C * len(op.worker_ids) > gpu_budget + 1e-9:
                    continue  # pool-wide change limit of this window
                if self.locked(op, now):
                    num_locked += 1
                    continue
                new_caps[op] = new_cap = self._projected_capacity(kind, C, cap, profiles)
                # a split must add capacity; a merge must keep the projected load low
                if kind == SPLIT:
                    if new_cap > cap:
                        ok.append(op)
                elif new_cap > 0 and forecast / new_cap <= cfg.merge_max_projected_load:
                    ok.append(op)
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
            self._above = self._below = self._long = 0
        else:
            record.action = f"{kind}-locked" if num_locked else f"{kind}-blocked"
        return started

    def lookahead_rate(self, rate_rps: float) -> tuple[float, float, bool]:
        """``(rate [req/s], slope [req/s per s], stationary)`` the ``"target"`` decision
        forecasts from (``target_trend_min_t``): the mean rate of the regime's recent windows (at
        most ``k_windows + 1``, at least 2), no trend and ``stationary`` when the least-squares
        slope of their rates is within ``target_trend_min_t`` standard errors of zero (each window
        rate's variance ``rate / window_s``: Poisson counts, times :meth:`rate_dispersion` with
        ``target_trend_noise="measured"``); otherwise ``rate_rps`` (the last
        window's rate), the positive slope and not stationary. A stationary load gets the
        look-ahead's stationary stream span (``LookaheadConfig.stationary_duration_s``)."""
        slope = self.rate_slope()
        n = len(self._rates)
        if n < 2:
            return rate_rps, max(0.0, slope), False
        mean = float(np.mean(self._rates))
        x = np.arange(n, dtype=float) * self.config.window_s
        se = math.sqrt(self.rate_dispersion() * max(mean, 0.0) / self.config.window_s / float(((x - x.mean()) ** 2).sum()))
        if abs(slope) <= self.config.target_trend_min_t * se:
            return mean, 0.0, True
        return rate_rps, max(0.0, slope), False

    def _observe_dispersion(self, rate_rps: float) -> None:
        # one term per window with two earlier windows in its regime: (r2 - 2 r1 + r0)^2 has variance
        # 6 sigma^2 for independent window rates of variance sigma^2 and is blind to a linear ramp
        tail = self._regime_tail = (self._regime_tail + [rate_rps])[-3:]
        mean = sum(tail) / len(tail)
        if len(tail) == 3 and mean > 0:
            d2 = tail[2] - 2.0 * tail[1] + tail[0]
            term = d2 * d2 / (6.0 * mean / self.config.window_s)
            self._dispersion_terms = (self._dispersion_terms + [term])[-DISPERSION_MAX_TERMS:]

    def rate_dispersion(self) -> float:
        """Over-dispersion of the window rates against Poisson counts (``target_trend_noise``):
        ``max(1, (DISPERSION_PRIOR_WINDOWS + sum(terms)) / (DISPERSION_PRIOR_WINDOWS + len(terms)))``
        over the last ``DISPERSION_MAX_TERMS`` terms (``ControllerConfig.target_trend_noise``); 1
        with ``"poisson"``."""
        if self.config.target_trend_noise == "poisson":
            return 1.0
        terms = self._dispersion_terms
        return max(1.0, (DISPERSION_PRIOR_WINDOWS + sum(terms)) / (DISPERSION_PRIOR_WINDOWS + len(terms)))

    def rate_slope(self) -> float:
        """Least-squares slope [req/s per s] of the window rates since the last regime change
        (at most ``k_windows + 1`` windows); 0 with fewer than two."""
        n = len(self._rates)
        if n < 2:
            return 0.0
        x = np.arange(n, dtype=float) * self.config.window_s
        return float(np.polyfit(x, np.asarray(self._rates), 1)[0])

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
