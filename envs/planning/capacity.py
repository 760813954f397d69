"""Capacity profiling of the Vertumnus controller (paper §6 "Capacity Profiling and
Initialization": capacity is *profiled under the TTFT SLO*, not counted in GPUs).

:class:`CapacityTable` simulates a homogeneous pool of degree-C workers of the real simulator
(batching, pooling, head-of-line blocking included) on a reference length mix and bisects the
largest arrival rate keeping token-weighted SLO attainment at least ``target_attainment`` (0.9)
of its zero-load value (the ``profiled-slo-per-degree`` definition of
``envs.planning.capacity_definitions``, which holds the criterion and the bisection). A
composition's capacity is ``Σ_w λ_{C_w}`` (per-worker capacities).

Speed (one profile is ``1 + num_bisection_steps`` simulations, ~0.3-1 s): a run profiles each
*regime* once, not each window. Window mixes within ``mix_tolerance`` of a reference mix reuse
its simulated profile, rescaled analytically by the mixes' mean batching work (see
:meth:`CapacityTable.shares_profile`); a run's reference mixes start from its history
(:class:`DemandHistory`: a benchmark task's training episodes, or the run's own workload when none
is given; :meth:`CapacityTable.seed_history`);
profiles are memoised in a :class:`CapacityCache` keyed by everything they depend on (engine,
latency, SLO and prediction-error settings, pool size and topology, calibration, profile
settings, degree, reference mix), which an experiment may share across its runs (no global
state: the cache is an object the run or experiment owns).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, replace

import numpy as np

from envs.planning.capacity_definitions import ProfiledSLODefinition, search_capacity
from envs.sim.config import SimConfig
from envs.sim.cost_model import Calibration
from envs.sim.pool import PoolConfig
from envs.sim.request import Request, Workload
from envs.sim.router import LeastWorkRouter
from envs.sim.simulator import Simulator

__all__ = ["ProfileConfig", "CapacityProfile", "CapacityTable", "CapacityCache", "DemandHistory", "slo_for_lengths",
           "reuse_prefix_tokens", "resolve_history", "run_history"]

def slo_for_lengths(config: SimConfig, calibration: Calibration, prompt_tokens: np.ndarray) -> np.ndarray:
    """TTFT SLO of prompts of the given lengths [s], the rule of ``Simulator`` (``SLOConfig``)."""
    L = np.asarray(prompt_tokens, dtype=float)
    slo = config.slo
    if slo.kind == "fixed":
        return np.full(L.shape, slo.ttft_slo_s)
    cm = calibration.cost_model()
    lat = config.latency
    iso = (cm.d + cm.a * L + cm.c * L + cm.alpha * L * (L + 1) * 0.5
           + L * calibration.kv_bytes_per_token / lat.kv_handoff_bandwidth_bytes_per_s + lat.first_decode_step_s)
    return np.maximum(slo.min_ttft_slo_s, slo.slo_scale * iso)


@dataclass(frozen=True)
class ProfileConfig:
    """How :class:`CapacityTable` profiles capacity by simulation (see its docstring).

    Args:
        length_bin_edges_tokens: increasing prompt-length class edges [tokens] of the mix
            histogram (class j holds ``[edge_j, edge_{j+1})``; shorter prompts fall in the first
            class, longer ones in the last). Default: powers of two from 512 to 128k plus a first
            class from 128 (9 classes up to the model's 131,072-token context).
        mix_tolerance: a mix reuses the (analytically rescaled) profile of a reference mix whose
            class histogram is within this total-variation distance, in [0, 1); 0.3, the
            controller's regime-change distance (``ControllerConfig.mix_change_distance``):
            windows of one phase of the ``phases`` workload differ by ~0.02-0.06 and a
            short-heavy and a long-heavy phase by ~0.6; on the Mooncake conversation trace the
            smoothed 20 s window mixes lie within 0.07 (median) / 0.11 (p90) of the whole
            trace's mix at a fixed hit, and the measured per-window prefix hit (0.5k-4.8k
            tokens) moves them further: 0.3 profiles 2 references there (0.2: 4). 0 profiles
            every distinct histogram.
        num_requests: minimum requests per profiling simulation; 300.
        duration_s: simulated span of a profiling run near capacity [s]: a run gets
            ``max(num_requests, ceil(0.75 x bound x duration_s))`` requests, ``bound`` the
            batching throughput bound; 60 s (three 20 s windows: the capacity is the rate the
            pool sustains over a few windows — shorter runs never build the backlog of a rate
            near capacity and over-state it).
        num_bisection_steps: halvings of the rate interval ``[0, k / mean(E_C - d)]``; 7
            (resolution 0.8 % of the batching throughput bound: well inside the +-17 % spread of
            one window's profiled capacity, and 8 instead of 11 simulations per profile).
        target_attainment: the capacity is the largest rate keeping token-weighted SLO
            attainment at least this share of its zero-load value, in (0, 1]; 0.9.
        refine_max_mixes: a reference mix is the running mean of the window mixes
            :meth:`CapacityTable.observe` assigned to it; when their number reaches 2, 4, 8, ...
            up to this, the reference takes the mean and is re-profiled (lazily). 0 keeps the
            first window's mix. 16. Why: a 20 s window of a short-heavy phase holds ~20 long
            prompts, and the profiled capacity of one window's histogram varies by +-17 % (sd)
            around the profile of the whole phase's mix (40 GPUs, roofline calibration:
            all-CP-4 43-73 req/s per window vs 57 for the phase); the mean of 16 windows should
            cut that about four-fold (1/sqrt(16)), at 4 re-profiles (~2 s each) per regime.
            Default 0: references are seeded from the history's mix
            (:meth:`CapacityTable.seed_history`) and window mixes are rescaled analytically, so
            refinement is rarely needed; ``cpgym dynamic`` keeps 16.
        seed: seeds the profile prompts and arrivals, and the profile simulations (whose
            prediction noise, if any, does not follow the run's seed: a profile is shared by
            every run seed).

    Raises:
        ValueError: naming the field, on non-increasing edges or out-of-range values.
    """

    length_bin_edges_tokens: tuple[int, ...] = (128, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
    mix_tolerance: float = 0.3
    num_requests: int = 300
    duration_s: float = 60.0
    num_bisection_steps: int = 7
    target_attainment: float = 0.9
    refine_max_mixes: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        e = self.length_bin_edges_tokens
        if len(e) < 2 or any(not (isinstance(x, int) and x >= 1) for x in e) or any(b <= a for a, b in zip(e, e[1:])):
            raise ValueError(f"profile.length_bin_edges_tokens must be >= 2 increasing integers >= 1, got {e!r}")
        if not 0.0 <= self.mix_tolerance < 1.0:
            raise ValueError(f"profile.mix_tolerance must be in [0, 1), got {self.mix_tolerance}")
        if not (isinstance(self.num_requests, int) and self.num_requests >= 10):
            raise ValueError(f"profile.num_requests must be an integer >= 10, got {self.num_requests!r}")
        if not (self.duration_s > 0 and math.isfinite(self.duration_s)):
            raise ValueError(f"profile.duration_s must be a finite number > 0, got {self.duration_s!r}")
        if not (isinstance(self.num_bisection_steps, int) and self.num_bisection_steps >= 1):
            raise ValueError(f"profile.num_bisection_steps must be an integer >= 1, got {self.num_bisection_steps!r}")
        if not 0.0 < self.target_attainment <= 1.0:
            raise ValueError(f"profile.target_attainment must be in (0, 1], got {self.target_attainment}")
        if not (isinstance(self.refine_max_mixes, int) and self.refine_max_mixes >= 0):
            raise ValueError(f"profile.refine_max_mixes must be an integer >= 0, got {self.refine_max_mixes!r}")
        if not (isinstance(self.seed, int) and self.seed >= 0):
            raise ValueError(f"profile.seed must be an integer >= 0, got {self.seed!r}")

    @property
    def num_classes(self) -> int:
        return len(self.length_bin_edges_tokens) - 1

    @property
    def definition(self) -> ProfiledSLODefinition:
        """The ``profiled-slo-per-degree`` capacity definition of these settings
        (``envs.planning.capacity_definitions``: the criterion and the bisection)."""
        return ProfiledSLODefinition(target_attainment=self.target_attainment, num_bisection_steps=self.num_bisection_steps)


@dataclass(frozen=True)
class CapacityProfile:
    """Profiled capacity of one degree-C worker for one length mix.

    Attributes:
        degree: CP degree C.
        capacity_rps: sustainable arrival rate under the SLO rule [requests/s per worker].
        capacity_tokens_per_s: ``capacity_rps x mean prompt length`` [prompt tokens/s per worker].
        mean_prompt_tokens: mean (effective, after prefix hits) prompt length of the mix [tokens].
        zero_load_attainment: token-weighted SLO attainment at (near) zero load, in [0, 1].
        reference: index of the reference mix in :attr:`CapacityTable.references`.
    """

    degree: int
    capacity_rps: float
    capacity_tokens_per_s: float
    mean_prompt_tokens: float
    zero_load_attainment: float
    reference: int = -1


@dataclass
class _ReferenceMix:
    shares: np.ndarray  # class histogram, shape (num_classes,), sums to 1
    sum_shares: np.ndarray | None = None  # sum of the observed window mixes assigned to it
    num_mixes: int = 0  # observed window mixes assigned to it


def reuse_prefix_tokens(workload: Workload) -> float:
    """Mean per-request prefix (whole KV blocks) already seen in an earlier request of
    ``workload`` [tokens]: the prefix hit of an unbounded, perfectly placed cache (an upper
    bound of a run's hit; on ``phases`` the shared system prompts, ~0.9k tokens). Hits are capped
    at ``L - 1`` (the simulator's rule)."""
    seen: set = set()
    total = 0
    for r in workload.requests:
        n = 0
        for h in r.block_hashes:
            if h not in seen:
                break
            n += 1
        total += min(n * workload.kv_block_size_tokens, max(0, r.num_prompt_tokens - 1))
        seen.update(r.block_hashes)
    return total / max(1, workload.num_requests)


@dataclass(frozen=True, eq=False)
class DemandHistory:
    """The historical demand a deployment plans from offline (paper §6 "Capacity Profiling and
    Initialization": capacity is profiled, and the initial composition chosen, from historical
    demand): the full Vertumnus system's initial composition
    (:func:`envs.planning.composition.workload_initial_pool`) and its controller's first
    reference mix and prior prefix hit (``baselines.controller.measurement``) read it.

    A benchmark run passes its task's training episodes (``benchmark.protocol.task_history``), so
    nothing of a validation or test episode is read before it arrives; elsewhere the run's own
    workload stands in (:func:`run_history`), as the paper's production history of the same
    service would.

    Attributes:
        prompt_tokens: shape (n,), n >= 1, the history's prompt lengths [tokens].
        rate_rps: mean arrival rate [requests/s], ``sum(n_i - 1) / sum(duration_i)`` over the
            history's workloads (``Workload.mean_rate_rps`` for one); finite, >= 0.
        mean_cached_tokens: mean per-request prefix hit of an unbounded cache
            (:func:`reuse_prefix_tokens`, request-weighted over the workloads) [tokens]; >= 0.
        source: what the history is, for reports (e.g. ``"run workload"``).

    Raises:
        ValueError: on an empty or non-1-D ``prompt_tokens``, or a negative or non-finite rate or hit.
    """

    prompt_tokens: np.ndarray
    rate_rps: float
    mean_cached_tokens: float
    source: str

    def __post_init__(self) -> None:
        where = f"demand history {self.source!r}"
        try:
            L = np.array(self.prompt_tokens, dtype=float)  # a read-only copy (below)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: prompt_tokens must be an array of prompt lengths [tokens]") from None
        if L.ndim != 1 or L.size == 0:
            raise ValueError(f"{where}: prompt_tokens must be a non-empty 1-D array, got shape {L.shape}")
        if not (np.isfinite(L).all() and (L >= 1).all()):
            raise ValueError(f"{where}: prompt_tokens must be finite lengths >= 1 token")
        L.setflags(write=False)
        for name in ("rate_rps", "mean_cached_tokens"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
                    or not (math.isfinite(v) and v >= 0):
                raise ValueError(f"{where}: {name} must be a finite number >= 0, got {v!r}")
            object.__setattr__(self, name, float(v))
        object.__setattr__(self, "prompt_tokens", L)

    @classmethod
    def of(cls, workloads, source: str) -> DemandHistory:
        """The history of one or more non-empty workloads (a :class:`Workload` or a sequence of
        them; lengths concatenated in order).

        Raises:
            ValueError: when no workload has a request, or an item is not a workload.
        """
        if isinstance(workloads, Workload):
            workloads = [workloads]
        try:
            wls = list(workloads)
        except TypeError:
            raise ValueError(f"demand history {source!r}: expected a Workload or a sequence of them, "
                             f"got {type(workloads).__name__}") from None
        if not all(isinstance(w, Workload) for w in wls):
            raise ValueError(f"demand history {source!r}: expected a Workload or a sequence of them")
        wls = [w for w in wls if w.num_requests]
        if not wls:
            raise ValueError(f"demand history {source!r}: no workload with a request")
        n = sum(w.num_requests for w in wls)
        span_s = sum(w.duration_s for w in wls)
        return cls(np.array([r.num_prompt_tokens for w in wls for r in w.requests], dtype=float),
                   sum(w.num_requests - 1 for w in wls) / span_s if span_s > 0 else 0.0,
                   sum(reuse_prefix_tokens(w) * w.num_requests for w in wls) / n, source)


def resolve_history(history, workload: Workload) -> DemandHistory | None:
    """The one place a history argument becomes a :class:`DemandHistory`: a ``DemandHistory`` as
    is; a zero-argument function's result (e.g. ``benchmark.protocol.task_history`` bound to a
    task, so only a policy that reads a history builds it); a :class:`Workload` standing in for
    one; ``None``: ``workload`` (the run's own) standing in, or ``None`` when it is empty.

    Raises:
        TypeError: for anything else (also as the function's result).
    """
    if callable(history):
        history = history()
    if history is None:
        return DemandHistory.of([workload], "run workload") if workload.num_requests else None
    if isinstance(history, Workload):
        return DemandHistory.of([history], f"workload {history.name}")
    if not isinstance(history, DemandHistory):
        raise TypeError(f"a demand history must be a DemandHistory, a Workload or a function returning one, "
                        f"got {type(history).__name__}")
    return history


def run_history(sim) -> DemandHistory | None:
    """The run's :class:`DemandHistory`: :func:`resolve_history` of
    ``sim.attachments["demand_history"]`` (set by ``baselines.runner.build_simulator``) and the
    run's workload, memoised there."""
    history = sim.attachments.get("demand_history")
    if not isinstance(history, DemandHistory):
        history = resolve_history(history, sim.workload)
        sim.attachments["demand_history"] = history
    return history


def _config_key(config: SimConfig, calibration: Calibration, profile: ProfileConfig) -> str:
    """Digest of everything a profile depends on: the run's settings except the pool's
    composition, the horizon, event recording, the run seed and the calibration path (the
    profile pool is homogeneous, runs to the end, and is seeded by ``profile.seed``), plus the
    calibration's contents and the profile settings."""
    d = asdict(config)
    d["pool"].pop("composition", None)
    for k in ("horizon_s", "record_events", "seed", "calibration_path"):
        d.pop(k, None)
    text = json.dumps({"config": d, "calibration": calibration.to_dict(), "profile": asdict(profile)},
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class CapacityCache:
    """Memo of simulated capacity profiles, shareable by the runs of one experiment (e.g. every
    seed and load of ``cpgym reproduce``): a profile is a pure function of its key — the
    :func:`_config_key` digest (settings, calibration, profile settings), the CP degree and the
    reference mix's class histogram — so sharing never changes a result, only skips work.
    A plain object owned by whoever creates it (a run, by default; no global state).

    Attributes:
        num_profiles_computed: profiles simulated (not found in the memo).
        num_simulations: profiling simulations run.
    """

    def __init__(self) -> None:
        self._profiles: dict[tuple, tuple[float, float, float]] = {}
        self._samples: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        self.num_profiles_computed = 0
        self.num_simulations = 0

    def table(self, config: SimConfig, calibration: Calibration, profile: ProfileConfig | None = None) -> CapacityTable:
        """A new :class:`CapacityTable` (its own reference mixes) that memoises profiles here."""
        return CapacityTable(config, calibration, profile, cache=self)


def _log_uniform_moments(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """E[L] and E[L^2] of L log-uniform on [lo, hi) (elementwise)."""
    r = np.log(hi / lo)
    return (hi - lo) / r, (hi * hi - lo * lo) / (2.0 * r)


class CapacityTable:
    """Per-CP-degree capacity under the TTFT SLO for length mixes, profiled by simulation and
    cached (paper §6: capacity is profiled under the TTFT SLO, not counted in GPUs).

    Profile of degree C for a reference mix: a *homogeneous* pool of ``k = num_gpus // C``
    degree-C workers of the real :class:`Simulator` (the run's engine, latency, SLO and
    prediction-error settings — token-budget batching with step time ``d + Σ(E_C - d)``, FCFS
    head-of-line blocking, short requests stuck behind long ones — are all included) under the
    least-outstanding-work router receives ``max(num_requests, 0.75 x bound x duration_s)``
    uncached prompts drawn (seeded by the mix) from the mix's class histogram (class by its
    share, length log-uniform inside the class), as a Poisson stream (unit-rate gaps scaled by
    1/λ: common random numbers over λ). The pool capacity is the largest λ (bisection on
    ``[0, k / mean(E_C - d)]``, the batching throughput bound) whose token-weighted SLO
    attainment is at least ``target_attainment`` times the zero-load attainment (a simulation
    at 1e-3 of the bound); if that is 0 (a fixed SLO below the isolated prefill) the criterion
    is a mean TTFT at most twice the zero-load mean. The per-worker capacity ``λ_C`` is the pool
    capacity / k, and a composition's capacity is ``Σ_w λ_{C_w}``.

    A window mix within ``mix_tolerance`` (total variation) of a reference mix gets the
    reference's profile rescaled by mean batching work: ``λ_C(mix) = λ_C(ref) x W_C(ref) /
    W_C(mix)`` with ``W_C = Σ_j s_j E[E_C(L, 0) - d | class j]`` (class j log-uniform, closed
    form) — the sustainable utilisation of the profile is kept and the work per request
    follows the window (first-order; identical histograms give the reference's profile
    unchanged). A farther mix becomes a new reference (a new regime, one profile per degree).

    Prefix hits enter as shorter prompts: with a mean prefix hit of P̄ tokens per request a
    prompt of L tokens counts as ``max(1, L - P̄)`` (a shared-system-prompt model: the hit is
    about the same number of tokens for short and long prompts; scaling L by a token-weighted
    hit ratio instead shrank the long prompts' quadratic cost and over-stated a 5 %-long mix's
    capacity by ~45 %; the SLO of the shorter prompt is used: slightly pessimistic).

    Why simulation rather than a closed form: the earlier M/G/k (Allen-Cunneen) model treated a
    worker as serving one request at a time and found no composition of the 40-GPU pool with
    enough capacity for the phases workload; a per-length-class table combined by time sharing
    missed the head-of-line blocking of short requests behind the few long ones (it over-stated
    the capacity of a 5 %-long mix by ~25 %).

    Args:
        config: the run's :class:`SimConfig` (its pool supplies ``num_gpus``; the profile pool
            is homogeneous).
        calibration: cost model and memory figures.
        profile: :class:`ProfileConfig`.
        cache: :class:`CapacityCache` memoising profiles (shared by an experiment's runs);
            default a new one owned by this table.
    """

    def __init__(self, config: SimConfig, calibration: Calibration, profile: ProfileConfig | None = None,
                 cache: CapacityCache | None = None) -> None:
        self.config = config
        self.calibration = calibration
        self.profile = profile or ProfileConfig()
        self.cache = cache if cache is not None else CapacityCache()
        self._key = _config_key(config, calibration, self.profile)
        self._edges = np.asarray(self.profile.length_bin_edges_tokens, float)
        self.references: list[_ReferenceMix] = []
        self.num_simulations = 0
        self._class_moments = _log_uniform_moments(self._edges[:-1], self._edges[1:])
        self.definition = self.profile.definition

    def length_class(self, prompt_tokens: np.ndarray) -> np.ndarray:
        """Class index of each prompt length, shape like ``prompt_tokens``."""
        j = np.searchsorted(self._edges, np.asarray(prompt_tokens, float), side="right") - 1
        return np.clip(j, 0, self.profile.num_classes - 1)

    def shares(self, prompt_tokens: np.ndarray, mean_cached_tokens: float = 0.0) -> np.ndarray:
        """Class histogram (request shares, shape ``(num_classes,)``) of a mix whose requests
        hit ``mean_cached_tokens`` prefix tokens on average (prompt ``L`` counts as
        ``max(1, L - mean_cached_tokens)``).

        Raises:
            ValueError: on an empty mix or a negative ``mean_cached_tokens``.
        """
        L = np.asarray(prompt_tokens, float)
        if L.size == 0:
            raise ValueError("a capacity profile needs a non-empty length mix")
        if not (mean_cached_tokens >= 0.0 and math.isfinite(mean_cached_tokens)):
            raise ValueError(f"mean_cached_tokens must be a finite number >= 0, got {mean_cached_tokens}")
        Le = np.maximum(1.0, np.floor(L - mean_cached_tokens))
        return np.bincount(self.length_class(Le), minlength=self.profile.num_classes) / L.size

    def _reference(self, shares: np.ndarray) -> int:
        best, best_d = -1, math.inf
        for i, ref in enumerate(self.references):
            d = 0.5 * float(np.abs(ref.shares - shares).sum())
            if d < best_d:
                best, best_d = i, d
        if best >= 0 and best_d <= self.profile.mix_tolerance:
            return best
        self.references.append(_ReferenceMix(np.asarray(shares, float).copy()))
        return len(self.references) - 1

    def observe(self, shares: np.ndarray) -> int:
        """Assign one observed window mix (class histogram, shape ``(num_classes,)``) to its
        reference mix (a new one if none is within ``mix_tolerance``) and refine the reference
        (see ``ProfileConfig.refine_max_mixes``); returns the reference index. Call once per
        window; :meth:`shares_profile` only looks references up."""
        shares = np.asarray(shares, float)
        i = self._reference(shares)
        ref = self.references[i]
        ref.sum_shares = shares.copy() if ref.sum_shares is None else ref.sum_shares + shares
        ref.num_mixes += 1
        n = ref.num_mixes
        if 2 <= n <= self.profile.refine_max_mixes and n & (n - 1) == 0:
            mean = ref.sum_shares / n
            if 0.5 * float(np.abs(mean - ref.shares).sum()) > 1e-9:
                ref.shares = mean  # re-profiled on demand (a new memo key)
        return i

    def seed_history(self, prompt_tokens: np.ndarray, mean_cached_tokens: float = 0.0) -> int:
        """Make the mix of a history (paper §6: capacity is profiled from historical demand) a
        reference mix, if no reference is within ``mix_tolerance`` of it; returns its index.

        Args:
            prompt_tokens: shape (n,), the history's prompt lengths [tokens].
            mean_cached_tokens: the history's mean prefix hit per request [tokens].
        """
        return self._reference(self.shares(prompt_tokens, mean_cached_tokens))

    def mix_profile(self, degree: int, prompt_tokens: np.ndarray, mean_cached_tokens: float = 0.0) -> CapacityProfile:
        """Capacity of one degree-C worker (in a homogeneous pool of the run's GPUs) for a mix.

        Args:
            degree: CP degree C, >= 1 and at most the pool's GPUs.
            prompt_tokens: shape (n,), prompt lengths of the mix [tokens], n >= 1.
            mean_cached_tokens: mean prefix hit per request [tokens], >= 0.

        Raises:
            ValueError: on an empty mix, a bad degree or a negative ``mean_cached_tokens``.
        """
        return self.shares_profile(degree, self.shares(prompt_tokens, mean_cached_tokens))

    def mean_work_s(self, degree: int, shares: np.ndarray) -> float:
        """Mean batching work ``E[E_C(L, 0) - d]`` [s] of a mix (class histogram; lengths
        log-uniform inside each class), the analytic scale between a mix and its reference."""
        cm = self.calibration.cost_model()
        m1, m2 = self._class_moments
        work = cm.a * m1 + (cm.c * m1 + cm.alpha * 0.5 * (m2 + m1)) / degree
        return float(np.dot(np.asarray(shares, float), work))

    def _mean_tokens(self, shares: np.ndarray) -> float:
        return float(np.dot(np.asarray(shares, float), self._class_moments[0]))

    def shares_profile(self, degree: int, shares: np.ndarray) -> CapacityProfile:
        """Capacity of one degree-C worker for a mix given by its class histogram: the profile
        of its reference mix, rescaled by mean batching work (class docstring).

        Args:
            degree: CP degree C, >= 1 and at most the pool's GPUs.
            shares: shape ``(num_classes,)``, request shares per length class, sum 1.

        Raises:
            ValueError: on a bad degree or histogram.
        """
        if not 1 <= degree <= self.config.pool.num_gpus:
            raise ValueError(f"degree must be in [1, {self.config.pool.num_gpus}], got {degree}")
        shares = np.asarray(shares, float)
        if shares.shape != (self.profile.num_classes,) or np.any(shares < 0) or abs(shares.sum() - 1.0) > 1e-6:
            raise ValueError(f"shares must be {self.profile.num_classes} non-negative request shares summing to 1")
        i = self._reference(shares)
        ref_shares = self.references[i].shares
        cap, mean_tokens, a0 = self._profile(degree, ref_shares)
        if not np.array_equal(shares, ref_shares):
            cap *= self.mean_work_s(degree, ref_shares) / self.mean_work_s(degree, shares)
            mean_tokens *= self._mean_tokens(shares) / self._mean_tokens(ref_shares)
        return CapacityProfile(degree, cap, cap * mean_tokens, mean_tokens, a0, i)

    def profiles(self, degrees, prompt_tokens: np.ndarray, mean_cached_tokens: float = 0.0) -> dict[int, CapacityProfile]:
        """:meth:`mix_profile` for each degree in ``degrees``."""
        return {d: self.mix_profile(d, prompt_tokens, mean_cached_tokens) for d in degrees}

    def profiled(self) -> list[CapacityProfile]:
        """The reference profiles memoised so far for this table's reference mixes, by
        reference then degree."""
        out = []
        for i, ref in enumerate(self.references):
            for d in range(1, self.config.pool.num_gpus + 1):
                got = self.cache._profiles.get((self._key, d, ref.shares.tobytes()))
                if got is not None:
                    out.append(CapacityProfile(d, got[0], got[0] * got[1], got[1], got[2], i))
        return out

    def _sample(self, shares: np.ndarray, rng: np.random.Generator, n: int) -> np.ndarray:
        cls = rng.choice(len(shares), size=n, p=shares / shares.sum())
        lo, hi = np.log(self._edges[cls]), np.log(self._edges[cls + 1])
        return np.exp(rng.uniform(lo, hi)).astype(np.int64)

    def _num_requests(self, degree: int, mix: np.ndarray) -> int:
        cm = self.calibration.cost_model()
        k = max(1, self.config.pool.num_gpus // degree)
        work = cm.a * mix + (cm.c * mix + cm.alpha * mix * (mix + 1) * 0.5) / degree  # E_C(L, 0) - d
        return max(self.profile.num_requests, math.ceil(0.75 * k / float(work.mean()) * self.profile.duration_s))

    def _reference_sample(self, shares: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Profile prompts [tokens], cumulative unit-rate Poisson arrival times and the pilot
        sample sizing the runs, for a reference mix: seeded by ``profile.seed`` and the
        histogram itself (a pure function of the mix), long enough for CP-1 (which needs the
        most requests); degree C uses the first n_C (common random numbers across degrees)."""
        key = (self._key, shares.tobytes())
        got = self.cache._samples.get(key)
        if got is None:
            entropy = [self.profile.seed, *np.round(shares * 1e9).astype(np.int64).tolist()]
            rng = np.random.default_rng(np.random.SeedSequence(entropy))
            mix = self._sample(shares, rng, 2000).astype(float)
            n_max = self._num_requests(1, mix)
            got = self.cache._samples[key] = (self._sample(shares, rng, n_max), np.cumsum(rng.exponential(1.0, n_max)), mix)
        return got

    def _profile(self, degree: int, shares: np.ndarray) -> tuple[float, float, float]:
        """``(capacity_rps per worker, mean prompt tokens, zero-load attainment)`` of a reference
        mix, memoised in the cache."""
        key = (self._key, degree, shares.tobytes())
        got = self.cache._profiles.get(key)
        if got is None:
            got = self.cache._profiles[key] = self._simulate_profile(degree, shares)
            self.cache.num_profiles_computed += 1
        return got

    def _simulate_profile(self, degree: int, shares: np.ndarray) -> tuple[float, float, float]:
        pc = self.profile
        pool0 = self.config.pool
        k = max(1, pool0.num_gpus // degree)  # workers of a homogeneous degree-C pool
        cal = self.calibration
        cm = cal.cost_model()
        lengths, arrivals, mix = self._reference_sample(shares)
        n = min(self._num_requests(degree, mix), lengths.size)
        L = lengths[:n]
        gaps = arrivals[:n]
        # uncached prompts: one KV block per prompt (the block size is the longest prompt) keeps
        # the cache bookkeeping of the profile runs at one entry per request (no hit either way)
        bs = max(512, int(L.max()))
        hashes = [(i,) for i in range(L.size)]
        gpn = max(degree, pool0.gpus_per_node - pool0.gpus_per_node % degree)
        pool = PoolConfig(num_gpus=k * degree, gpus_per_node=gpn, composition=f"cp{degree}x{k}", supported_degrees=(degree,),
                          allow_cross_node=True)
        cfg = replace(self.config, pool=pool, horizon_s=None, record_events=False, seed=pc.seed)
        Lf = L.astype(float)
        if int(L.max()) > min(cal.max_prompt_tokens, cal.kv_capacity_tokens(degree)):
            return 0.0, float(Lf.mean()), 0.0
        work = cm.a * Lf + (cm.c * Lf + cm.alpha * Lf * (Lf + 1) * 0.5) / degree  # E_C(L, 0) - d
        bound = k / float(work.mean())
        weights = Lf / Lf.sum()

        def simulate(lam: float) -> tuple[float, float]:
            self.num_simulations += 1
            self.cache.num_simulations += 1
            arrivals = zip((gaps / lam).tolist(), L.tolist(), hashes)
            reqs = tuple(Request(i, float(t), int(x), 1, hs) for i, (t, x, hs) in enumerate(arrivals))
            res = Simulator(Workload("capacity-profile", reqs, kv_block_size_tokens=bs), cfg, cal).run(LeastWorkRouter())
            ttft = res.records["ttft_s"]
            ok = ttft <= res.records["ttft_slo_s"]
            return float((weights * ok).sum()), float(np.nanmean(ttft))

        definition = self.definition
        a0, t0 = simulate(definition.zero_load_fraction * bound)

        def good(lam: float) -> bool:
            attainment, mean_ttft_s = simulate(lam)
            return definition.accepts(attainment, mean_ttft_s, a0, t0)

        lo_r, _ = search_capacity(good, definition.search, 0.0, bound)
        return lo_r / k, float(Lf.mean()), a0
