"""The paper §9 dynamic-phases experiment (worker reconfiguration) as a library function:
:func:`run_dynamic_phases` (``cpgym dynamic`` is a thin wrapper; ``experiments/paper/
dynamic-phases.yaml`` is the same experiment as a spec, tested to agree).

Workload: the named ``phases`` generator (``envs.workloads``): ``num_phases`` phases of
``phase_duration_s`` alternating short-request-heavy and long-request-heavy traffic, with a
rising rate inside every phase (``rising_rate``: linear ramp from 0.5x to 1.5x the phase rate).
Mean phase rates ``short_rate_rps`` (default 40 req/s, 5 % long prompts) and ``long_rate_rps``
(default 4 req/s, 60 % long prompts), both times ``rate_scale``: the short-heavy phases peak where
aggregate capacity binds (between the all-CP-4 and all-CP-2 capacities), the long-heavy ones stay
at moderate load where CP-4 latency wins (numbers at ``DEFAULT_SHORT_RATE_RPS``; the command
prints the capacity profile it used).

Rates relative to capacity (``short_load`` / ``long_load``, ``cpgym dynamic --short-load X
--long-load Y``): the mean rate of a phase kind is that fraction of the mix's *sustainable rate*
(:func:`phase_capacities`: the ``cpgym capacity`` definition and bisection,
:func:`baselines.capacity.find_capacity`, on one constant-rate phase of the mix from the
history day, on the strongest homogeneous pool of the supported degrees, router
``vertumnus-router``; cached on disk under ``capacity_cache_dir``); with the rising rate the peak
is 1.5x that. Measured (40 GPUs, {2, 4}, history day of workload seed 0): short-heavy mix
``cp2x20`` 64.4 req/s (``cp4x10`` 56.6), long-heavy ``cp2x20`` 9.42 req/s (``cp4x10`` 8.50), so
the absolute defaults (40 / 4 req/s) are loads 0.62 / 0.42 (peaks 0.93 / 0.64: below saturation);
(first target-controller revision, research log of ``results/README.md``). Absolute rates stay the default: the
capacity search costs four bisections per workload seed before the runs.

Policies, all on the same GPUs and with the same Vertumnus router (paper §5):

* ``vertumnus-adaptive``: the §6 controller (``baselines/controller/``) starting from the
  initial composition chosen from *historical* demand — the same generator with the next
  workload seed (another "day"): its length mix and mean rate;
* every fixed composition of the pool with the supported degrees (paper: 40 GPUs, nodes of 8,
  {2, 4}: ``cp4x10`` ... ``cp2x20``), router ``vertumnus-router``, no controller.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass, fields, replace

import numpy as np

from baselines.capacity import RatedWorkload, find_capacity
from baselines.controller import DECISIONS, ControllerConfig, ReconfigController
from baselines.lookahead import LookaheadConfig
from baselines.registry import PolicySpec, get_policy
from baselines.runner import run_policy
from envs.metrics import summarize
from envs.planning.capacity import CapacityTable, ProfileConfig
from envs.planning.capacity import reuse_prefix_tokens as reuse
from envs.planning.composition import enumerate_compositions, initial_composition
from envs.planning.defaults import DECISION_WINDOW_S
from envs.sim import Calibration, PoolConfig
from envs.sim.options import option as _opt
from envs.sim.reconfig import ReconfigConfig
from envs.workloads import WorkloadSource, get_workload
from experiments.common import check_has_requests

#: Mean phase rates [requests/s] (the ``phases`` generator's rising rate runs 0.5x -> 1.5x of
#: them), chosen from the capacity profile (``CapacityTable`` mean over the history day's 20 s
#: windows; roofline calibration, 40 GPUs, nodes of 8, {2, 4}; printed by ``cpgym dynamic``) and
#: the constant-rate behaviour of the full simulator, NOT from the adaptive policy's result:
#:
#: * short-heavy (5 % long prompts): profiled all-CP-4 pool 57 req/s, all-CP-2 pool 67 req/s
#:   (constant-rate runs: ``cp4x10`` degrades from ~55 req/s, 1.05 s mean TTFT at 60; ``cp2x20``
#:   holds to ~62). 40 req/s ramps 20 -> 60 req/s: it starts at 0.35 of the all-CP-4 capacity
#:   and peaks between the all-CP-4 and all-CP-2 capacities (1.05x / 0.9x), so aggregate
#:   capacity binds at the peak and more CP-2 lanes are needed (paper §9 "rising request rates");
#: * long-heavy (60 % long prompts): profiled all-CP-4 8.3 req/s (constant-rate ``cp4x10`` keeps
#:   1.3-1.55 s mean TTFT up to 7.5 req/s, ``cp2x20`` 2.2-2.3 s). 4 req/s ramps 2 -> 6 req/s,
#:   at most 0.72 of the all-CP-4 capacity: moderate load, where CP-4's lower latency wins.
#:
#: The previous default (6 req/s, peak 9 > every composition's long-mix capacity) made the long
#: phases capacity-bound too, so a CP-4-heavy mix with a few CP-2 lanes was never far from
#: optimal in any phase and adaptation had nothing to gain.
DEFAULT_SHORT_RATE_RPS = 40.0
DEFAULT_LONG_RATE_RPS = 4.0
DEFAULT_RATE_SCALE = 1.0
#: CP degrees of the paper's runs (Qwen3 uses {2, 4}, paper §9): the default ``--supported-degrees`` of
#: ``cpgym dynamic`` and ``cpgym reproduce`` and the degree pair of the paper-table rows.
PAPER_SUPPORTED_DEGREES: tuple[int, ...] = (2, 4)
#: Operation fields reported per reconfiguration operation.
OPERATION_FIELDS = ("index", "kind", "old_worker_ids", "new_worker_ids", "old_degree", "new_degree", "first_gpu", "start_s",
                    "drain_end_s", "switch_end_s", "commit_s", "drain_s", "switch_s", "confirm_s", "total_s", "epoch",
                    "num_redirected_requests", "pending_blocks_created", "ready_blocks_retained", "reconciliation_bytes",
                    "num_reconciled_blocks", "num_source_lost_blocks")


#: Fields of :class:`DynamicPhasesConfig` that only the ``"target"`` decision reads.
TARGET_DECISION_FIELDS = ("lookahead_replications", "lookahead_screen_margin", "lookahead_duration_s",
                          "lookahead_stationary_duration_s", "lookahead_stationary_warmup_s", "lookahead_warmup_s",
                          "target_trend_min_t", "target_margin", "target_urgent_gain", "target_sample",
                          "target_replay_sample", "target_transition", "target_trend_noise")
#: The names the controller's checks use -> the :class:`DynamicPhasesConfig` field (and flag) that sets them.
CONTROLLER_FIELD_NAMES = {"lookahead.num_replications": "lookahead_replications",
                          "lookahead.screen_margin": "lookahead_screen_margin",
                          "lookahead.stationary_duration_s": "lookahead_stationary_duration_s",
                          "lookahead.stationary_warmup_s": "lookahead_stationary_warmup_s",
                          "lookahead.duration_s": "lookahead_duration_s", "lookahead.warmup_s": "lookahead_warmup_s",
                          "controller.target_trend_min_t": "target_trend_min_t",
                          "controller.target_margin": "target_margin",
                          "controller.target_urgent_gain": "target_urgent_gain", "reconfig.switch_s": "switch_s"}


@dataclass(frozen=True)
class DynamicPhasesConfig:
    """Workload, controller and comparison settings of the dynamic-phases experiment (one
    ``cpgym dynamic`` flag per field; the pool, seed and calibration come from the ``SimConfig``).

    Raises:
        ValueError: naming the field, on a non-positive or infinite rate, duration or window, a
            non-positive phase count, a phase rate given both absolute and as a load fraction, or
            a switch (``rising_rate``, ``target_replay_sample``, ``target_transition``) that is not
            a bool, an ``arrival_window_s`` that is not ``[start, end)`` or starts after the last phase, a
            look-ahead / target setting with decision ``"paper-rule"`` (which reads none), and what
            the controller's own config refuses (``lookahead_*``, ``target_*``, ``switch_s``), all
            before any capacity search.
    """

    num_phases: int = _opt(4, "phases, alternating short-heavy / long-heavy")
    phase_duration_s: float = _opt(150.0, "duration of one phase [s]")
    short_rate_rps: float = _opt(DEFAULT_SHORT_RATE_RPS, "mean arrival rate of short-heavy phases [req/s]")
    long_rate_rps: float = _opt(DEFAULT_LONG_RATE_RPS, "mean arrival rate of long-heavy phases [req/s]")
    rate_scale: float = _opt(DEFAULT_RATE_SCALE, "multiply both phase rates by this (phase durations stay)")
    short_load: float | None = _opt(None, "mean rate of short-heavy phases as a fraction of the short-heavy mix's "
                                          "capacity (strongest homogeneous pool, `cpgym capacity` bisection on the "
                                          "history day; replaces --short-rate-rps)")
    long_load: float | None = _opt(None, "mean rate of long-heavy phases as a fraction of the long-heavy mix's capacity "
                                         "(as --short-load; replaces --long-rate-rps)")
    capacity_cache_dir: str | None = _opt(".cpgym-cache/capacity", "disk cache of the phase capacities "
                                                                  "(baselines.capacity); '' for none")
    rising_rate: bool = _opt(True, "rate rising 0.5x -> 1.5x inside each phase (--no-rising-rate: constant)")
    workload_seed: int = _opt(0, "seed of the workload; the history day uses seed + 1")
    arrival_window_s: tuple[float, float] | None = _opt(None, "keep arrivals in [START, END) s (the workload window)")
    initial: str = _opt("auto", "initial composition of the adaptive policy: 'auto' (from historical demand) or a composition")
    compositions: str = _opt("all", "fixed compositions to compare, ';'-separated, or 'all' (every composition of "
                                    "the supported degrees: 11 on 40 GPUs with 2,4; 286 with 1,2,4,8)")
    decision_window_s: float = _opt(DECISION_WINDOW_S, "controller observation / decision window [s] (paper §6)")
    k_windows: int = _opt(2, "consecutive windows before a change")
    decision: str = _opt("target", "controller decision: 'target' (look-ahead target composition), 'analytic' (the "
                                   "paper's load regions gated by a predicted net gain: vertumnus's) or 'paper-rule' "
                                   "(the paper's split/merge load regions); baselines.controller.ControllerConfig.decision",
                         choices=DECISIONS)
    lookahead_replications: int | None = _opt(None, "target decision: resampled look-ahead streams per prediction "
                                                    "(default: baselines.lookahead.LookaheadConfig's)")
    lookahead_screen_margin: float | None = _opt(None, "target decision: drop a candidate from further look-ahead streams "
                                                       "when its score so far exceeds the best by more than this share "
                                                       "('inf': none; default: LookaheadConfig's)")
    lookahead_duration_s: float | None = _opt(None, "target decision: simulated span of one look-ahead stream [s] "
                                                    "(default: LookaheadConfig's)")
    lookahead_stationary_duration_s: float | None = _opt(None, "target decision: look-ahead stream span [s] at a "
                                                               "stationary load (default: LookaheadConfig's)")
    lookahead_stationary_warmup_s: float | None = _opt(None, "target decision: score only look-ahead requests arriving "
                                                             "after this [s] at a stationary load "
                                                             "(default: LookaheadConfig's)")
    lookahead_warmup_s: float | None = _opt(None, "target decision: score only look-ahead requests arriving after this [s] "
                                                  "(default: LookaheadConfig's)")
    target_trend_min_t: float | None = _opt(None, "target decision: forecast from a rate trend only when it exceeds this many "
                                                  "Poisson standard errors (default: ControllerConfig's)")
    target_margin: float | None = _opt(None, "target decision: predicted gain a candidate needs for k windows, a share "
                                             "of its predicted mean TTFT (the current target's / the candidate's - 1; "
                                             "0.05 = 5 %), >= 0 (default: ControllerConfig's, 0.05)")
    target_urgent_gain: float | None = _opt(None, "target decision: predicted gain that moves the target at once, a share "
                                                  "as --target-margin (0.25 = 25 %), >= --target-margin "
                                                  "(default: ControllerConfig's, 0.25)")
    target_sample: str = _opt("regime-start", "target decision: look-ahead sample, the mix regime's first requests "
                                              "('regime-start') or the latest arrivals ('latest'); "
                                              "baselines.controller.ControllerConfig.target_sample",
                              choices=("regime-start", "latest"))
    target_replay_sample: bool = _opt(False, "target decision: replay the look-ahead sample (unscored) before each "
                                             "stream, so the candidate pool starts with warm prefix caches; "
                                             "ControllerConfig.target_replay_sample")
    target_transition: bool = _opt(False, "target decision: score each candidate with the move to it from the current "
                                          "composition (drain, switch, lost caches); "
                                          "ControllerConfig.target_transition")
    target_trend_noise: str = _opt("poisson", "target decision: noise of a window rate in the trend test, Poisson counts "
                                              "('poisson') or Poisson times the over-dispersion measured from the run's "
                                              "window rates ('measured'); ControllerConfig.target_trend_noise",
                                   choices=("poisson", "measured"))
    switch_s: float = _opt(0.9, "switch time at the common step boundary [s] (envs.sim.reconfig.ReconfigConfig's; "
                                "paper §9: < 1 s)")

    def __post_init__(self) -> None:
        for name in ("rate_scale", "short_rate_rps", "long_rate_rps", "phase_duration_s", "decision_window_s"):
            if not (getattr(self, name) > 0 and math.isfinite(getattr(self, name))):  # inf: an endless phase or window
                raise ValueError(f"dynamic: {name} must be a finite number > 0, got {getattr(self, name)}")
        items = [c.strip() for c in self.compositions.split(";")]
        if self.compositions.strip() != "all" and "" in items:  # "", ";" or "a;;b": never silently dropped
            raise ValueError(f"dynamic: compositions must be 'all' or ';'-separated compositions (e.g. 'cp4x10;cp2x20'), "
                             f"got {self.compositions!r} (an empty item: doubled, leading or trailing ';')")
        if self.num_phases < 1 or self.k_windows < 1 or self.switch_s < 0:
            raise ValueError(f"dynamic: num_phases and k_windows must be >= 1 and switch_s >= 0, "
                             f"got {self.num_phases}, {self.k_windows}, {self.switch_s}")
        for name in ("short_load", "long_load"):
            v = getattr(self, name)
            if v is not None and not 0.0 < v <= 2.0:
                raise ValueError(f"dynamic: {name} must be a fraction of capacity in (0, 2], got {v}")
        for kind, default in (("short", DEFAULT_SHORT_RATE_RPS), ("long", DEFAULT_LONG_RATE_RPS)):
            if getattr(self, f"{kind}_load") is not None and getattr(self, f"{kind}_rate_rps") != default:
                raise ValueError(f"dynamic: {kind}_load replaces {kind}_rate_rps; give one of them, got "
                                 f"{getattr(self, f'{kind}_load')} and {getattr(self, f'{kind}_rate_rps')}")
        if (self.short_load is not None or self.long_load is not None) and self.rate_scale != 1.0:
            raise ValueError(f"dynamic: rate_scale ({self.rate_scale}) applies to absolute rates only; "
                             f"with short_load / long_load leave it at 1")
        for name in ("rising_rate", "target_replay_sample", "target_transition"):
            if not isinstance(getattr(self, name), bool):  # "false" is truthy: never read a text as a switch
                raise ValueError(f"dynamic: {name} must be true or false, got {getattr(self, name)!r}")
        self._check_target_fields()
        self._check_window()
        self._check_controller()

    def _check_target_fields(self) -> None:
        if self.decision != "target":  # the paper rule has no look-ahead: these were ignored silently
            defaults = {f.name: f.default for f in fields(self)}  # set away from the default (0.0 included)
            given = [name for name in TARGET_DECISION_FIELDS if getattr(self, name) != defaults[name]]
            if given:
                raise ValueError(f"dynamic: {' / '.join(given)} set the 'target' decision; decision "
                                 f"{self.decision!r} has none")

    def _check_window(self) -> None:
        if self.arrival_window_s is not None:
            try:  # the workload's own check, here before any capacity search (was after them)
                window = WorkloadSource(name="phases", arrival_window_s=self.arrival_window_s).arrival_window_s
            except ValueError as exc:
                raise ValueError(f"dynamic: {str(exc).removeprefix('workload: ')}") from None
            end_s = self.num_phases * self.phase_duration_s
            if window[0] >= end_s:
                raise ValueError(f"dynamic: arrival_window_s [{window[0]:g}, {window[1]:g}) starts after the last phase "
                                 f"(num_phases x phase_duration_s = {end_s:g} s)")
            object.__setattr__(self, "arrival_window_s", window)

    def _check_controller(self) -> None:
        try:  # the controller's own checks, named by field, before the capacity searches of the loads
            controller_config(self)
        except ValueError as exc:
            text = str(exc)
            for inner, name in CONTROLLER_FIELD_NAMES.items():
                text = re.sub(rf"(?<![\w.-]){re.escape(inner)}(?![\w-])", name, text)
            raise ValueError(f"dynamic: {text}") from None

    def workload_params(self) -> dict:
        """Keyword parameters of the ``phases`` generator (``envs.workloads.synthetic.phase_changes``)."""
        return dict(num_phases=self.num_phases, phase_duration_s=self.phase_duration_s, rising_rate=self.rising_rate,
                    short_phase_rate_rps=self.short_rate_rps * self.rate_scale,
                    long_phase_rate_rps=self.long_rate_rps * self.rate_scale)

    def workload_source(self, history: bool = False):
        """The run's :class:`~envs.workloads.WorkloadSource` (``history``: the next seed's day)."""
        return WorkloadSource(name="phases", seed=self.workload_seed + int(history), arrival_window_s=self.arrival_window_s,
                              params=tuple(self.workload_params().items()))


@dataclass(frozen=True)
class DynamicPhasesResult:
    """Outcome of :func:`run_dynamic_phases`.

    Args:
        summary: JSON-ready dict (workload, pool, ``calibration`` (``model``, ``gpu_type`` and
            ``path``, ``None`` = the shipped default), controller, ``policies`` rows with per-phase
            mean TTFT [s], ``phases`` comparisons, reconfiguration ``operations``, drain / switch
            distributions, ``controller_windows``, ``capacity_profiles``, ...).
        phase_kinds: ``"short"`` / ``"long"`` per phase in the (windowed) run.
        phase_bounds_s: phase boundaries [s] on the run's time axis (``len(phase_kinds) + 1``).
        runs: policy label -> ``SimResult`` (``"vertumnus-adaptive"``, ``"fixed <composition>"``).
    """

    summary: dict
    phase_kinds: list
    phase_bounds_s: list
    runs: dict

    @property
    def best_fixed_composition(self) -> str:
        return self.summary["best_fixed_composition"]


def reuse_prefix_tokens(workload) -> float:
    """Mean per-request prefix already seen earlier in ``workload`` [tokens]
    (:func:`envs.planning.capacity.reuse_prefix_tokens`)."""
    return reuse(workload)


def _observe_history(table, history, prompt_tokens, mean_cached_tokens: float, decision_window_s: float) -> None:
    """Feed the history day's window mixes to the capacity table, so that its reference mixes are
    means over many windows before the run (paper §6: capacity profiled from historical
    demand) instead of one noisy window each."""
    t = np.array([r.arrival_time_s for r in history.requests], float)
    edges = np.arange(0.0, (t.max() if t.size else 0.0) + decision_window_s, decision_window_s)
    for a, b in zip(edges[:-1], edges[1:]):
        m = (t >= a) & (t < b)
        if m.sum() >= 10:
            table.observe(table.shares(prompt_tokens[m], mean_cached_tokens))


def _long_share(table, ref: int, long_prompt_tokens: int) -> float:
    """Request share of a reference mix's classes that start at or above ``long_prompt_tokens``."""
    edges = table.profile.length_bin_edges_tokens
    sh = table.references[ref].shares
    return float(sum(x for e, x in zip(edges[:-1], sh) if e >= long_prompt_tokens))


def _phase_means(ttft, phase, num_phases: int) -> list[float]:
    out = []
    for k in range(num_phases):
        v = ttft[phase == k]
        v = v[~np.isnan(v)]
        out.append(float(v.mean()) if len(v) else float("nan"))
    return out


def _dist(values: list[float]) -> dict:
    if not values:
        return {"count": 0}
    v = np.asarray(values, float)
    return {"count": int(v.size), "min": float(v.min()), "p50": float(np.percentile(v, 50)), "mean": float(v.mean()),
            "p90": float(np.percentile(v, 90)), "max": float(v.max())}


def phase_layout(workload, arrival_window_s: tuple[float, float] | None):
    """``(phase of each request, phase kinds, phase bounds [s])`` of a ``phases`` workload on the
    run's time axis: with an arrival window, only the phases it overlaps, re-based and clipped."""
    phase = np.asarray(workload.metadata["phase_of_request"])
    kinds = list(workload.metadata["phase_kinds"])
    bounds = [float(b) for b in workload.metadata["phase_boundaries_s"]]
    if arrival_window_s is None:
        return phase, kinds, bounds
    start, end = arrival_window_s
    keep = [k for k in range(len(kinds)) if bounds[k] < end and bounds[k + 1] > start]
    if not keep:
        raise ValueError(f"dynamic: arrival_window_s [{start:g}, {end:g}) overlaps no phase (phases end at {bounds[-1]:g} s)")
    new_bounds = [max(bounds[k], start) - start for k in keep] + [min(bounds[keep[-1] + 1], end) - start]
    return phase - keep[0], [kinds[k] for k in keep], new_bounds


def _built(controller, on_controller):
    if on_controller is not None:
        on_controller(controller)
    return controller


def controller_config(cfg: DynamicPhasesConfig):
    """The adaptive policy's :class:`~baselines.controller.ControllerConfig` for ``cfg``: the
    profile settings this experiment was tuned with (every window mix refines its regime's
    reference), the window, ``k_windows``, decision, switch time and look-ahead overrides."""
    from dataclasses import replace as dc_replace

    la = {k: v for k, v in (("num_replications", cfg.lookahead_replications), ("screen_margin", cfg.lookahead_screen_margin),
                            ("warmup_s", cfg.lookahead_warmup_s), ("duration_s", cfg.lookahead_duration_s),
                            ("stationary_duration_s", cfg.lookahead_stationary_duration_s),
                            ("stationary_warmup_s", cfg.lookahead_stationary_warmup_s)) if v is not None}
    extra = {k: v for k, v in (("target_trend_min_t", cfg.target_trend_min_t), ("target_margin", cfg.target_margin),
                               ("target_urgent_gain", cfg.target_urgent_gain)) if v is not None}
    extra.update(target_sample=cfg.target_sample, target_replay_sample=cfg.target_replay_sample,
                 target_transition=cfg.target_transition, target_trend_noise=cfg.target_trend_noise)
    return ControllerConfig(decision_window_s=cfg.decision_window_s, k_windows=cfg.k_windows, decision=cfg.decision,
                            reconfig=ReconfigConfig(switch_s=cfg.switch_s), **extra,
                            profile=ProfileConfig(mix_tolerance=0.1, refine_max_mixes=16, num_bisection_steps=10),
                            lookahead=dc_replace(LookaheadConfig(), **la))


def _controller_summary(ccfg) -> dict:
    return {"decision": ccfg.decision, "target_margin": ccfg.target_margin, "target_urgent_gain": ccfg.target_urgent_gain,
            "target_horizons_s": list(ccfg.target_horizons_s), "target_trend_min_t": ccfg.target_trend_min_t,
            "target_sample": ccfg.target_sample, "target_replay_sample": ccfg.target_replay_sample,
            "target_transition": ccfg.target_transition, "target_trend_noise": ccfg.target_trend_noise,
            "regime_change_unlocks": ccfg.regime_change_unlocks,
            "lookahead": {"source": ccfg.lookahead.source, "duration_s": ccfg.lookahead.duration_s,
                          "num_replications": ccfg.lookahead.num_replications,
                          "screen_margin": ccfg.lookahead.screen_margin, "warmup_s": ccfg.lookahead.warmup_s,
                          "stationary_duration_s": ccfg.lookahead.stationary_duration_s,
                          "stationary_warmup_s": ccfg.lookahead.stationary_warmup_s},
            "decision_window_s": ccfg.decision_window_s, "k_windows": ccfg.k_windows, "split_load": ccfg.split_load,
            "split_target_load": ccfg.split_target_load, "merge_load": ccfg.merge_load,
            "merge_max_projected_load": ccfg.merge_max_projected_load, "max_ops_per_window": ccfg.max_ops_per_window,
            "max_gpu_share_per_window": ccfg.max_gpu_share_per_window, "min_dwell_s": ccfg.min_dwell_s,
            "trend_horizon_s": ccfg.trend_horizon_s, "split_load_long": ccfg.split_load_long,
            "long_prompt_tokens": ccfg.long_prompt_tokens, "long_fraction_merge": ccfg.long_fraction_merge,
            "switch_s": ccfg.reconfig.switch_s, "confirm_s_per_rank": ccfg.reconfig.confirm_s_per_rank}


def _phase_comparisons(rows: list[dict], kinds: list[str], bounds: list[float]) -> tuple[dict, list[dict]]:
    ad, fixed_rows = rows[0], rows[1:]
    best = min(fixed_rows, key=lambda r: r["mean_ttft_s"])
    per_phase = []
    for k, kind in enumerate(kinds):
        bp = min(fixed_rows, key=lambda r: r["phase_mean_ttft_s"][k])
        a = ad["phase_mean_ttft_s"][k]
        per_phase.append({"phase": k, "kind": kind, "start_s": bounds[k], "end_s": bounds[k + 1],
                          "adaptive_mean_ttft_s": a,
                          "best_fixed_overall": best["composition"],
                          "best_fixed_overall_mean_ttft_s": best["phase_mean_ttft_s"][k],
                          "change_vs_best_fixed_overall_pct": 100.0 * (a / best["phase_mean_ttft_s"][k] - 1.0),
                          "best_fixed_in_phase": bp["composition"],
                          "best_fixed_in_phase_mean_ttft_s": bp["phase_mean_ttft_s"][k],
                          "change_vs_best_fixed_in_phase_pct": 100.0 * (a / bp["phase_mean_ttft_s"][k] - 1.0)})
    return best, per_phase


def fixed_compositions(cfg: DynamicPhasesConfig, pool) -> list[str]:
    """The fixed compositions compared: every composition of ``pool`` (``"all"``) or the listed ones."""
    if cfg.compositions.strip() == "all":
        return enumerate_compositions(pool)
    return [c.strip() for c in cfg.compositions.split(";")]


def check_compositions(cfg: DynamicPhasesConfig, pool) -> list[str]:
    """Validates the listed fixed compositions and a given (not ``"auto"``) initial composition
    against ``pool`` (GPU count, supported degrees, placement) before anything runs.

    Returns:
        :func:`fixed_compositions`.

    Raises:
        ValueError: one line naming the field (``compositions`` / ``initial``), the item and
            the pool's reason; also on a composition listed twice (the same workers in another order
            included), which would run and report the same pool twice.
    """
    def placements(comp: str, field: str):
        try:
            return PoolConfig(num_gpus=pool.num_gpus, gpus_per_node=pool.gpus_per_node,
                              supported_degrees=pool.supported_degrees, composition=comp).placements()
        except ValueError as exc:
            raise ValueError(f"dynamic: {field} {comp!r} is not a composition of the {pool.num_gpus}-GPU pool "
                             f"(CP degrees {','.join(map(str, pool.supported_degrees))}): {exc}") from None

    fixed = fixed_compositions(cfg, pool)
    if cfg.initial != "auto":
        placements(cfg.initial, "initial")
    seen: dict = {}
    for comp in fixed:
        key = tuple(placements(comp, "compositions item"))
        if key in seen:
            raise ValueError(f"dynamic: compositions lists the same pool twice ({seen[key]!r} and {comp!r}); "
                             f"list each composition once")
        seen[key] = comp
    return fixed


def _initial_and_fixed(cfg: DynamicPhasesConfig, base, calibration, table, history, ccfg):
    pool = base.pool
    fixed = fixed_compositions(cfg, pool)  # checked by run_dynamic_phases before the capacity searches
    hist_L = np.array([r.num_prompt_tokens for r in history.requests], float)
    hist_hit = reuse_prefix_tokens(history)
    _observe_history(table, history, hist_L, hist_hit, ccfg.decision_window_s)
    if cfg.initial == "auto":
        initial, info = initial_composition(pool, base, calibration, hist_L, history.mean_rate_rps,
                                            mean_cached_tokens=hist_hit, table=table)
    else:
        initial, info = cfg.initial, {"given": True}
    for comp in [initial] + fixed:  # validates every composition before any run
        PoolConfig(num_gpus=pool.num_gpus, gpus_per_node=pool.gpus_per_node, supported_degrees=pool.supported_degrees,
                   composition=comp)
    return initial, info, fixed, hist_hit


def dynamic_plan(cfg: DynamicPhasesConfig, base) -> list[tuple]:
    """The runs of :func:`run_dynamic_phases` without running them: ``(WorkloadSource, SimConfig,
    registry policy)`` for the adaptive policy (composition ``cfg.initial``; ``"auto"`` is only
    known after profiling the history day) and each fixed composition (router ``vertumnus-router``)."""
    fixed = fixed_compositions(cfg, base.pool)
    src = cfg.workload_source()
    with_comp = [(cfg.initial, "vertumnus-adaptive")] + [(c, "vertumnus-router") for c in fixed]
    return [(src, replace(base, pool=replace(base.pool, composition=c)) if c != "auto" else base, p) for c, p in with_comp]


def phase_mix_source(cfg: DynamicPhasesConfig, kind: str, history: bool = True):
    """A :class:`~baselines.capacity.RatedWorkload` of one constant-rate phase of ``kind``
    (``"short"`` / ``"long"``) of the ``phases`` generator, window ``phase_duration_s``, at the
    configured absolute rate (the capacity search rescales it), from the history day
    (``workload_seed + 1``) by default; generated 8 phase durations long so that the search's
    rate factors (up to about twice the capacity) still fill the window."""
    key = "short_phase_rate_rps" if kind == "short" else "long_phase_rate_rps"
    rate = cfg.short_rate_rps if kind == "short" else cfg.long_rate_rps
    wl = get_workload("phases", seed=cfg.workload_seed + int(history), num_phases=1,
                      phase_duration_s=8 * cfg.phase_duration_s, first_phase=kind, rising_rate=False, **{key: rate})
    return RatedWorkload(arrival_window_length_s=cfg.phase_duration_s, base=wl)


def phase_capacities(cfg: DynamicPhasesConfig, base, calibration, log=None) -> dict:
    """Capacity [req/s] of each phase mix for which a load fraction is set: the sustainable rate
    (``baselines.capacity.find_capacity``, the ``cpgym capacity`` definition and bisection,
    cached under ``capacity_cache_dir``) of one constant-rate phase of the mix
    (:func:`phase_mix_source`) on the *strongest* fixed pool, router ``vertumnus-router``. The
    strongest pool is searched among the homogeneous pools of the supported degrees: the
    profiled capacity of a composition is linear in its worker counts
    (:func:`envs.planning.composition.composition_capacity_rps`), so an extreme pool is the
    strongest.

    Returns:
        ``{kind: {"capacity_rps", "strongest_pool", "per_pool_capacity_rps", "load"}}`` for the
        kinds with a load fraction.
    """
    out = {}
    pool = base.pool
    for kind, load in (("short", cfg.short_load), ("long", cfg.long_load)):
        if load is None:
            continue
        rated = phase_mix_source(cfg, kind)
        caps = {}
        for d in sorted(pool.supported_degrees):
            if pool.num_gpus % d:
                continue
            comp = f"cp{d}x{pool.num_gpus // d}"
            res = find_capacity("vertumnus-router", rated, replace(base, pool=replace(pool, composition=comp)), calibration,
                                cache_dir=cfg.capacity_cache_dir or None)
            caps[comp] = res.capacity_rps
            if log:
                log(f"capacity of the {kind}-heavy mix on {comp}: {res.capacity_rps:.3f} req/s"
                    f"{' (cached)' if res.cached else ''}")
        best = max(caps, key=caps.get)
        out[kind] = {"capacity_rps": caps[best], "strongest_pool": best, "per_pool_capacity_rps": caps, "load": load}
    return out


def resolve_rates(cfg: DynamicPhasesConfig, base, calibration, log=None) -> tuple[DynamicPhasesConfig, dict]:
    """``cfg`` with the phase rates of its load fractions made absolute (:func:`phase_capacities`),
    and the capacities used (empty when no load fraction is set)."""
    caps = phase_capacities(cfg, base, calibration, log)
    rates = {}
    for kind, c in caps.items():
        if c["capacity_rps"] <= 0:
            raise ValueError(f"dynamic: the {kind}-heavy mix has no sustainable rate on any fixed pool")
        rates[f"{kind}_rate_rps"] = c["load"] * c["capacity_rps"]
        rates[f"{kind}_load"] = None  # made absolute (the load stays in the capacities)
    return (replace(cfg, **rates) if rates else cfg), caps


class DynamicPhasesWarning(UserWarning):
    """A ``cpgym dynamic`` setting that runs but cannot measure what the experiment is for
    (``cpgym dynamic: warning: ...`` on stderr)."""


def reaction_windows(k_windows: int) -> int:
    """Controller windows [count] from a phase change until the pool can have adapted to it:
    ``k_windows + 1`` (the window in which the change falls, then ``k_windows`` sustained windows
    of the new phase; the regime-change shortcut can move after one whole window, a change of rate
    alone needs all of them; a move then drains and switches in seconds, paper §9: 1.1-5.1 s).

    Raises:
        ValueError: if ``k_windows`` is not an integer >= 1 (``ControllerConfig.k_windows``).
    """
    if isinstance(k_windows, bool) or not isinstance(k_windows, numbers.Integral) or k_windows < 1:
        raise ValueError(f"k_windows must be an integer >= 1, got {k_windows!r}")
    return int(k_windows) + 1


def warn_short_phases(cfg: DynamicPhasesConfig) -> None:
    """Warns (:class:`DynamicPhasesWarning`, one line naming the flags) when a phase
    (``phase_duration_s`` [s]) of a run with more than one phase is shorter than the adaptive
    controller's reaction time (:func:`reaction_windows` x ``decision_window_s`` [s]): the run
    then compares pools that never had the time to adapt, so its "vs best fixed" rows measure
    little adaptation. A phase equal to the reaction time up to float rounding (e.g. 3.3 s against
    3 windows of 1.1 s = 3.3000000000000003 s) is not shorter."""
    import warnings

    reaction_s = reaction_windows(cfg.k_windows) * cfg.decision_window_s
    if (cfg.num_phases > 1 and cfg.phase_duration_s < reaction_s
            and not math.isclose(cfg.phase_duration_s, reaction_s, rel_tol=1e-9)):
        remedies = [f"--phase-duration-s >= {reaction_s:g}", "a shorter --decision-window-s"]
        remedies += ["a smaller --k-windows"] if cfg.k_windows > 1 else []  # 1 is the least
        warnings.warn(f"phases of {cfg.phase_duration_s:g} s are shorter than the adaptive controller's reaction time "
                      f"({reaction_windows(cfg.k_windows)} windows of {cfg.decision_window_s:g} s = {reaction_s:g} s: "
                      f"the window of the change, then --k-windows {cfg.k_windows} sustained windows), so the "
                      f"pool cannot adapt within a phase; use {', '.join(remedies[:-1])} or {remedies[-1]}",
                      DynamicPhasesWarning, stacklevel=2)


def run_dynamic_phases(cfg: DynamicPhasesConfig, base, log=None, on_controller=None,
                       on_policy_row=None) -> DynamicPhasesResult:
    """Runs the adaptive policy and every fixed composition on the phases workload.

    Args:
        cfg: workload, controller and comparison settings.
        base: :class:`~envs.sim.SimConfig` of the pool (GPUs, nodes, supported degrees; its
            composition is replaced per run), SLO, seed and calibration.
        log: optional ``callable(str)`` for progress lines.
        on_controller: optional ``callable(ReconfigController)``, called with the adaptive run's
            controller when it is built (instrumentation, e.g. its look-ahead predictor after the
            run).
        on_policy_row: optional ``callable(rows, phase_kinds)``, called after each policy's run with
            the ``summary["policies"]`` rows finished so far (``cpgym dynamic --out-dir`` writes
            them, so a run that stops midway keeps its finished runs).

    Returns:
        :class:`DynamicPhasesResult`.

    Raises:
        ValueError: on a composition the pool rejects, or a window that keeps no request or overlaps no phase.
    """
    calibration = Calibration.resolve(base.calibration_path)

    check_compositions(cfg, base.pool)  # before the capacity searches of --short-load / --long-load
    warn_short_phases(cfg)
    cfg, capacities = resolve_rates(cfg, base, calibration, log)

    workload = check_has_requests(cfg.workload_source().build())  # before profiling the history day
    history = cfg.workload_source(history=True).build()
    # the profile settings this experiment was tuned with (every window mix refines its regime's reference)
    ccfg = controller_config(cfg)
    table = CapacityTable(base, calibration, ccfg.profile)  # shared by the initial composition and the controller
    initial, init_info, fixed, hist_hit = _initial_and_fixed(cfg, base, calibration, table, history, ccfg)
    phase, kinds, bounds = phase_layout(workload, cfg.arrival_window_s)
    adaptive = PolicySpec("vertumnus-adaptive", get_policy("vertumnus-adaptive").make_router,
                          "Vertumnus router + split/merge controller", "paper §5-§6",
                          make_attachments=lambda: [_built(ReconfigController(ccfg, table), on_controller)])
    runs = [("vertumnus-adaptive", initial, adaptive)] + [(f"fixed {c}", c, get_policy("vertumnus-router")) for c in fixed]
    rows, results = [], {}
    for label, comp, spec in runs:
        if log:
            log(f"running {label} ...")
        res = run_policy(spec, workload, replace(base, pool=replace(base.pool, composition=comp)), calibration)
        s = summarize(res)
        rows.append({"policy": label, "composition": comp, "mean_ttft_s": s["mean_ttft_s"], "p90_ttft_s": s["p90_ttft_s"],
                     "slo_attainment_token_weighted": s["slo_attainment_token_weighted"],
                     "phase_mean_ttft_s": _phase_means(res.records["ttft_s"], phase, len(kinds)),
                     "num_unfinished": s["num_unfinished"], "wall_time_s": s["wall_time_s"]})
        results[label] = res
        if on_policy_row is not None:
            on_policy_row(list(rows), kinds)
    best, per_phase = _phase_comparisons(rows, kinds, bounds)
    ex = results["vertumnus-adaptive"].extras
    ops = [{k: o[k] for k in OPERATION_FIELDS} for o in ex.get("reconfig_operations", [])]
    done = [o for o in ops if o["commit_s"] == o["commit_s"]]
    peak = 1.5 if cfg.rising_rate else 1.0
    pool = base.pool
    summary = {
        "workload": {"name": workload.name, "num_requests": workload.num_requests, "seed": cfg.workload_seed,
                     "params": cfg.workload_params(),
                     "arrival_window_s": list(cfg.arrival_window_s) if cfg.arrival_window_s else None,
                     "source": workload.source},
        "pool": {"num_gpus": pool.num_gpus, "gpus_per_node": pool.gpus_per_node,
                 "supported_degrees": list(pool.supported_degrees)},
        "seed": base.seed,
        "calibration": {"model": calibration.model, "gpu_type": calibration.gpu_type, "path": base.calibration_path},
        "controller": _controller_summary(ccfg),
        "initial_composition": initial, "initial_composition_info": init_info,
        "policies": rows,
        "best_fixed_composition": best["composition"],
        "adaptive_vs_best_fixed_overall_mean_ttft_pct": 100.0 * (rows[0]["mean_ttft_s"] / best["mean_ttft_s"] - 1.0),
        "phases": per_phase,
        "operations": ops,
        "num_operations": {"split": sum(o["kind"] == "split" for o in ops), "merge": sum(o["kind"] == "merge" for o in ops)},
        "drain_s": _dist([o["drain_s"] for o in done]),
        "switch_s": _dist([o["switch_s"] for o in done]),
        "drain_plus_switch_s": _dist([o["total_s"] for o in done]),
        "final_composition": ex.get("composition"),
        "controller_windows": ex.get("controller_windows", []),
        "capacity_profiles": [{"reference_mix": p.reference, "degree": p.degree, "mean_prompt_tokens": p.mean_prompt_tokens,
                               "num_window_mixes": table.references[p.reference].num_mixes,
                               "long_share": _long_share(table, p.reference, ccfg.long_prompt_tokens),
                               "capacity_rps_per_worker": p.capacity_rps,
                               "capacity_tokens_per_s_per_worker": p.capacity_tokens_per_s,
                               "capacity_tokens_per_s_per_gpu": p.capacity_tokens_per_s / p.degree,
                               "homogeneous_pool_capacity_rps": p.capacity_rps * (pool.num_gpus // p.degree)}
                              for p in table.profiled()],
        "phase_peak_rates_rps": {"short": cfg.short_rate_rps * cfg.rate_scale * peak,
                                 "long": cfg.long_rate_rps * cfg.rate_scale * peak},
        "history_mean_cached_tokens": hist_hit,
        "phase_capacities": capacities,
        "phase_mean_rates_rps": {"short": cfg.short_rate_rps * cfg.rate_scale, "long": cfg.long_rate_rps * cfg.rate_scale},
    }
    return DynamicPhasesResult(summary=summary, phase_kinds=kinds, phase_bounds_s=bounds, runs=results)
