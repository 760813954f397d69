"""Settings of the Vertumnus split/merge controller (:class:`ControllerConfig`) and the names its
choice fields accept (:data:`DECISIONS`, :data:`TARGET_SAMPLES`, :data:`TREND_NOISES`).

The measurements that chose the defaults are in ``results/dynamic-phases/README.md``, section
"Controller defaults: the measurements behind them" (and the sub-folders named per field).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from baselines.lookahead import LookaheadConfig
from envs.planning.capacity import ProfileConfig
from envs.planning.composition import pool_over_degrees
from envs.planning.defaults import DECISION_WINDOW_S
from envs.sim.reconfig import ReconfigConfig

__all__ = ["ControllerConfig", "DECISIONS", "TARGET_SAMPLES", "TREND_NOISES"]


@dataclass(frozen=True)
class ControllerConfig:
    """Parameters of :class:`~baselines.controller.ReconfigController`.

    "Defaults README" below is ``results/dynamic-phases/README.md``, section "Controller defaults:
    the measurements behind them", which holds the measured numbers (and commands) behind each
    default; none of these thresholds is given in the paper's copies.

    Paper rule (``decision="paper-rule"``; loads are *forecast* loads: the window rate plus its
    positive trend over ``trend_horizon_s``, divided by the profiled capacity of the composition):

    Args:
        decision_window_s: observation / decision window [s]; :data:`envs.planning.defaults.DECISION_WINDOW_S`
            (paper §6/§9: 20 s).
        split_load: lower edge of the split region (forecast load); 0.85: where a mixed pool
            starts to beat all-CP-4 on the ``phases`` short-heavy mix (defaults README).
        split_target_load: splits of one window continue (one worker each) until the projected
            forecast load is at most this; in (merge_load, split_load]; 0.75.
        merge_load: upper edge of the low-load merge region (forecast load); 0.5.
        merge_max_projected_load: a merge must keep the projected forecast load at most this
            (capacity precedence); must lie in [merge_load, split_load); 0.7.
        split_load_long: split threshold while the long-request signal holds (long fraction at
            least ``long_fraction_merge``): only a capacity shortage splits then; 1.0 (on the
            long-heavy mix all-CP-4 beats all-CP-2 up to near its capacity, defaults README;
            capacity precedence: at load >= 1 it splits regardless). Values below ``split_load``
            mean ``split_load``.
        k_windows: consecutive windows a condition must hold; 2 (paper §6: "sustained").
        long_prompt_tokens: a prompt at least this long is a long request [tokens]; 8192 (the
            paper's long requests are the 4-8 % of arrivals carrying 32-54 % of tokens, §2).
        long_fraction_merge: long-request fraction (of arrivals) that signals a merge at stable
            load, in [0, 1]; 0.3.
        min_window_requests: windows with fewer arrivals keep all counters unchanged; 10.
        max_ops_per_window: hard cap on operations started per window (each on different
            workers; a worker is in at most one operation, paper §6), >= 1; 8. The number actually
            started is set by the capacity gap (splits until the projected load is at most
            ``split_target_load``; merges while it stays at most ``merge_max_projected_load``
            for the forecast rate) and by ``max_gpu_share_per_window``.
        max_gpu_share_per_window: at most this share of the pool's GPUs take part in operations
            started in one window, in (0, 1]; 0.5 (a 40-GPU pool changes at most 20 GPUs per
            window: all CP-2 -> all CP-4 takes two windows; a burst of Poisson noise can never
            reshape the whole pool at once).
        min_dwell_s: lockout [s]: a GPU that took part in an operation started less than this
            ago takes part in no operation of the *opposite* kind (no split of a just-merged
            worker, no merge of just-split siblings); 0 disables; 60 (three 20 s windows: the
            opposite move needs at least one fresh k-window run after the first one's commit,
            and 60 s is ~10x the paper's 1.1-5.1 s drain + switch, §9).
        trend_horizon_s: merges (and the long-request merge signal) use the forecast rate
            ``rate + max(0, slope) x trend_horizon_s`` [req/s] (slope: least-squares over the
            window rates since the last regime change, at most ``k_windows + 1`` windows), so
            the pool does not merge at the foot of a rising ramp only to split again at its
            peak; splits use the measured rate (capacity precedence, paper §6: sustained
            overload). 0 disables; 40 s (= ``k_windows`` x ``decision_window_s``, the reaction time of
            the opposite split).
        mix_smoothing: weight of the newest window in the exponentially smoothed length-class
            histogram the capacity is profiled for, in (0, 1]; 0.5 (follows a phase change within
            two windows, the lag of ``k_windows``; one long-heavy window's tail alone moves the
            profiled capacity too much to use unsmoothed: defaults README).
        mix_change_distance: a window whose class histogram is farther than this (total
            variation) from the smoothed one replaces it (a regime change is not smoothed over:
            the first short-heavy window after a long-heavy phase would otherwise look
            overloaded), in (0, 1]; 0.3 (between the distances of same-phase windows and of
            phases: defaults README).
        profile: capacity profiling (:class:`~envs.planning.capacity.ProfileConfig`).
        reconfig: protocol costs (switch, confirmation; :class:`~envs.sim.reconfig.ReconfigConfig`).

    Decision and the do-no-harm gate (``decision="analytic"``, the default;
    :mod:`baselines.controller.analytic_rule`):

        decision: one of :data:`DECISIONS`: ``"analytic"`` (default: the paper rule's proposals,
            started only when the analytic estimate predicts a net gain at both ends of the
            measured rate's noise band — the controller of ``vertumnus`` and
            ``vertumnus-adaptive``; measurements: ``results/vertumnus/README.md``),
            ``"paper-rule"`` (the load regions above, ungated: ``vertumnus-paper-rule``) or
            ``"target"`` (cpgym's look-ahead target composition, below: ``vertumnus-lookahead``).
        gate_horizon_s: span [s] over which a move's predicted TTFT gain is counted against its
            drain and switch cost, > 0; 60 (= ``min_dwell_s``: the dwell-time lockout keeps a
            move's GPUs out of the opposite move that long, so it is the shortest time a move
            is sure to stand; the paper gives no number).
        gate_z: half-width of the rate noise band in standard errors of the measured rate, >= 0;
            1.96 (a two-sided 95 % band; the paper gives no number). The standard error uses the
            over-dispersion of window counts measured in the run
            (:meth:`~baselines.controller.measurement.WindowMeasurement.measured_dispersion`).
            ``"analytic"`` reuses ``target_trend_min_t`` for its trend test (with the measured
            dispersion).

    Target decision (``decision="target"``; :mod:`baselines.controller.target_rule`):

        target_margin: predicted relative mean-TTFT gain over the current target a candidate
            needs for ``k_windows`` consecutive windows, >= 0; 0.05 (above the look-ahead's
            regret against full constant-rate runs at most rates: defaults README; a smaller
            margin follows noise between neighbouring compositions).
        target_urgent_gain: a gain above this switches at once, >= ``target_margin``; 0.25 (the
            target is then predicted overloaded: capacity precedence; a window's wait on a rising
            ramp near capacity costs seconds of TTFT).
        urgent_min_sample_requests: the urgent switch needs a look-ahead sample of at least this
            many observed requests, >= 0; 1024 (= ``LookaheadConfig.max_sample_requests``: near
            capacity the prediction is very sensitive to the sample's long-prompt share, and a
            half-size first sample made a switch the next window undid: defaults README). Within
            ``k_windows`` windows after a regime change the urgent switch needs no full sample (the
            previous regime's pool is likely wrong, and a long-heavy phase brings few requests per
            window); smaller samples still move the target through ``k_windows`` consecutive windows.
        target_horizons_s: the score is the mean prediction at ``rate + max(0, slope) x h`` for
            each ``h`` [s], each finite and >= 0; (20, 40) (the middle of the next window, the end
            of the one after; a single 20 s horizon split a window too late on the ramps, a single
            40 s one overshot into CP-2-heavy pools).
        target_trend_min_t: the look-ahead forecasts from a rate trend only when the trend is
            significant: when the least-squares slope of the regime's recent window rates is within
            this many standard errors of zero (standard error from the Poisson counting noise of
            a window rate, ``sqrt(rate / decision_window_s)``), the load is taken as stationary and the
            look-ahead rate is the mean of those windows' rates, without a trend; otherwise the
            window's rate plus the positive trend; >= 0 (0: always the window's rate and its
            positive trend); 2.0 (Poisson noise slopes on a steady load forecast overload and made
            the controller split and merge back, while the ``phases`` ramps are several standard
            errors steep and keep their trend: defaults README).
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
            ``min_dwell_s`` was the measured loss after short -> long boundaries, defaults README).
        target_sample: which observed requests the look-ahead resamples (``"requests"`` source),
            one of :data:`TARGET_SAMPLES`: ``"regime-start"`` (default) the regime's first ``n``
            (so a regime's predictions are memoised and reused from window to window), or
            ``"latest"``: the ``n`` latest arrivals (follows drift inside a regime, e.g. a trace
            whose prompts shorten over minutes; every window simulates afresh). ``n`` is the same
            power of two either way.
        target_replay_sample: each look-ahead stream is preceded by the sample itself, replayed in
            arrival order at its observed arrival gaps and not scored (so the candidate pool's
            prefix caches hold the sample's shared prefixes, and its queues the sample's backlog,
            when the scored requests arrive); False (default: streams start from an idle pool with
            cold caches; the replay helps on the conversation trace, not on the ``phases``
            scenarios or a held-out trace, at 2.5-3x the CPU:
            ``results/dynamic-phases/lookahead-replay/README.md``). Costs one replay of up to
            ``max_sample_requests`` requests per look-ahead simulation.
        target_transition: each look-ahead stream starts on the pool's current (projected)
            composition and moves to the candidate when its scored part begins, through the
            simulator's own drain / switch / epoch protocol with this controller's per-window
            budget (:class:`~baselines.lookahead.TransitionPlan`), so a candidate's score
            includes what moving to it costs (drained workers, switch and confirmation time,
            the new workers' empty prefix caches) and staying put costs nothing; False (default:
            every candidate is scored as if the pool already were it; the transition helps on the
            conversation traces and costs about a point on the ``phases`` scenarios:
            ``results/dynamic-phases/transition-lookahead/README.md``). ``"requests"`` source only.
        target_trend_noise: the noise of a window rate in ``target_trend_min_t``'s test, one of
            :data:`TREND_NOISES`: ``"poisson"`` (default) the Poisson counting variance
            ``rate / decision_window_s``; ``"measured"``: that variance times the over-dispersion measured
            from the run's own window rates
            (:meth:`~baselines.controller.measurement.WindowMeasurement.rate_dispersion`: squared
            second differences of consecutive window rates inside a mix regime, which a linear ramp
            leaves at the counting noise, each divided by its Poisson variance; pooled over the
            last ``DISPERSION_MAX_TERMS`` windows and shrunk towards 1 with a prior weight of
            ``DISPERSION_PRIOR_WINDOWS`` windows; at least 1). Why: a real trace's rate wanders on
            the window scale more than Poisson counts do, so the Poisson test reads wander as a
            trend; the synthetic ``phases`` workloads are Poisson inside a phase. Not the default:
            it helps on the conversation trace only without the transition look-ahead
            (``results/dynamic-phases/trend-noise/README.md``).
        lookahead: the look-ahead's settings
            (:class:`~baselines.lookahead.LookaheadConfig`).

    The split and merge regions are separated by a band of 0.35 load, and neither a merge nor a
    split can land in the other's region (projected loads), so the controller cannot flap on
    stationary load.

    Raises:
        ValueError: naming the field, on out-of-range values or overlapping regions.
    """

    decision_window_s: float = DECISION_WINDOW_S
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
    decision: str = "analytic"
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
    gate_horizon_s: float = 60.0
    gate_z: float = 1.96
    lookahead: LookaheadConfig = field(default_factory=LookaheadConfig)

    def __post_init__(self) -> None:
        def check(cond: bool, msg: str) -> None:
            if not cond:
                raise ValueError(msg)

        check(self.decision_window_s > 0 and math.isfinite(self.decision_window_s),
              f"controller.decision_window_s must be > 0, got {self.decision_window_s}")
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
        check(self.gate_horizon_s > 0 and math.isfinite(self.gate_horizon_s),
              f"controller.gate_horizon_s must be a finite number > 0, got {self.gate_horizon_s}")
        check(self.gate_z >= 0 and math.isfinite(self.gate_z),
              f"controller.gate_z must be a finite number >= 0, got {self.gate_z}")
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



#: The decisions :class:`~baselines.controller.ReconfigController` can take (``ControllerConfig.decision``).
DECISIONS = ("analytic", "target", "paper-rule")
#: The look-ahead samples of the ``"target"`` decision (``ControllerConfig.target_sample``).
TARGET_SAMPLES = ("regime-start", "latest")
#: The noise models of the trend test (``ControllerConfig.target_trend_noise``).
TREND_NOISES = ("poisson", "measured")
