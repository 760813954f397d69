"""Vertumnus cluster-level controller (paper §6): capacity profiling, initial composition and
the windowed split/merge rule.

The *mechanics* of an operation (drain, redirect, switch, epoch commit, KV reconciliation) are
in :mod:`envs.sim.reconfig`; this module only decides. The Gymnasium reconfiguration
environment uses the same mechanics (:func:`eligible_operations` / :func:`apply_operation`,
re-exported here) with a learned decision instead of :class:`ReconfigController`.

Capacity profiling (paper §6 "Capacity Profiling and Initialization": capacity is *profiled
under the TTFT SLO*, not counted in GPUs): :class:`CapacityTable` simulates a homogeneous pool
of degree-C workers of the real simulator (batching, pooling, head-of-line blocking included)
on the window's length mix and bisects the largest arrival rate keeping token-weighted SLO
attainment at least ``target_attainment`` (0.9) of its zero-load value; profiles are cached per
length-class histogram. A composition's capacity is ``Σ_w λ_{C_w}`` (per-worker capacities).

Initial composition (paper §6): among all compositions of the pool with the supported degrees
whose load ``rate / capacity`` is at most ``initial_max_load``, favour more large-degree
workers (lexicographically most workers of the largest degree, then the next); if none has
enough capacity, the one with the largest capacity.

Runtime rule (paper §6 "Runtime Reconfiguration"; DESIGN.md "Cluster-level controller"), every
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
``results/issue4/README.md``):

* the number of operations in a window follows the capacity gap (splits stop at
  ``split_target_load``; merges stop before the projected load exceeds
  ``merge_max_projected_load``), and at most ``max_gpu_share_per_window`` of the pool's GPUs
  take part in operations started in one window;
* dwell-time lockout: a GPU in an operation started less than ``min_dwell_s`` ago takes part in
  no operation of the opposite kind;
* merges are judged on a *forecast* rate (measured rate plus the positive rate trend over
  ``trend_horizon_s``): no merge at the foot of a rising ramp.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass, field, replace

import numpy as np

from baselines.simple import LeastWorkRouter
from envs.sim.config import SimConfig
from envs.sim.cost_model import Calibration
from envs.sim.pool import PoolConfig, resolve_composition
from envs.sim.request import Request, Workload
from envs.sim.simulator import Simulator
from envs.sim.reconfig import (MERGE, SPLIT, Operation, OperationRecord, ReconfigConfig, apply_operation,
                               eligible_operations, get_reconfigurator)

__all__ = ["ControllerConfig", "CapacityProfile", "ReconfigController", "profile_capacity", "slo_for_lengths",
           "enumerate_compositions", "composition_capacity_rps", "initial_composition", "rank_operations",
           "Operation", "OperationRecord", "ReconfigConfig", "apply_operation", "eligible_operations"]


# ---------------------------------------------------------------------------------- capacity
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
        mix_tolerance: a mix reuses the profile of a reference mix whose class histogram is
            within this total-variation distance, in [0, 1); 0.1 (windows of one phase of the
            ``phases`` workload differ by ~0.02-0.06; a short-heavy and a long-heavy phase by
            ~0.6). 0 profiles every distinct histogram.
        num_requests: minimum requests per profiling simulation; 300.
        duration_s: simulated span of a profiling run near capacity [s]: a run gets
            ``max(num_requests, ceil(0.75 x bound x duration_s))`` requests, ``bound`` the
            batching throughput bound; 60 s (three 20 s windows: the capacity is the rate the
            pool sustains over a few windows — shorter runs never build the backlog of a rate
            near capacity and over-state it).
        num_bisection_steps: halvings of the rate interval ``[0, k / mean(E_C - d)]``; 10
            (resolution 0.1 % of the batching throughput bound).
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
        seed: seeds the profile prompts and arrivals.

    Raises:
        ValueError: naming the field, on non-increasing edges or out-of-range values.
    """

    length_bin_edges_tokens: tuple[int, ...] = (128, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
    mix_tolerance: float = 0.1
    num_requests: int = 300
    duration_s: float = 60.0
    num_bisection_steps: int = 10
    target_attainment: float = 0.9
    refine_max_mixes: int = 16
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
    profiles: dict[int, CapacityProfile] = field(default_factory=dict)
    lengths: np.ndarray | None = None  # profile prompts [tokens], shared by every degree
    gaps: np.ndarray | None = None  # cumulative unit-rate Poisson arrival times
    mix: np.ndarray | None = None  # pilot sample sizing the runs [tokens]
    sum_shares: np.ndarray | None = None  # sum of the observed window mixes assigned to it
    num_mixes: int = 0  # observed window mixes assigned to it


class CapacityTable:
    """Per-CP-degree capacity under the TTFT SLO for length mixes, profiled by simulation and
    cached (paper §6: capacity is profiled under the TTFT SLO, not counted in GPUs).

    Profile of degree C for a mix: a *homogeneous* pool of ``k = num_gpus // C`` degree-C
    workers of the real :class:`Simulator` (the run's engine, latency, SLO and prediction-error
    settings — token-budget batching with step time ``d + Σ(E_C - d)``, FCFS head-of-line
    blocking, short requests stuck behind long ones — are all included) under the
    least-outstanding-work router receives ``max(num_requests, 0.75 x bound x duration_s)``
    uncached prompts drawn (seeded) from the mix's class histogram (class by its share, length
    log-uniform inside the class), as a Poisson stream (unit-rate gaps
    scaled by 1/λ: common random numbers over λ). The pool capacity is the largest λ
    (bisection on ``[0, k / mean(E_C - d)]``, the batching throughput bound) whose
    token-weighted SLO attainment is at least ``target_attainment`` times the zero-load
    attainment (a simulation at 1e-3 of the bound); if that is 0 (a fixed SLO below the
    isolated prefill) the criterion is a mean TTFT at most twice the zero-load mean. The
    per-worker capacity ``λ_C`` is the pool capacity / k, and a composition's capacity is
    ``Σ_w λ_{C_w}`` (a heterogeneous pool is approximated by its per-degree parts).

    Prefix hits enter as shorter prompts: with a mean prefix hit of P̄ tokens per request a
    prompt of L tokens counts as ``max(1, L - P̄)`` (a shared-system-prompt model: the hit is
    about the same number of tokens for short and long prompts; scaling L by a token-weighted
    hit ratio instead shrank the long prompts' quadratic cost and over-stated a 5 %-long mix's
    capacity by ~45 %; the SLO of the shorter prompt is used: slightly pessimistic). Mixes are cached by their class histogram over
    ``length_bin_edges_tokens``: a mix within ``mix_tolerance`` (total variation) of a
    profiled reference mix reuses its profiles, so a run pays one profile per distinct regime
    (one per degree: ``1 + num_bisection_steps`` simulations, ~1-4 s for a 40-GPU pool).

    Why simulation rather than a closed form: the earlier M/G/k (Allen-Cunneen) model treated a
    worker as serving one request at a time and found no composition of the 40-GPU pool with
    enough capacity for the phases workload; a per-length-class table combined by time sharing
    missed the head-of-line blocking of short requests behind the few long ones (it over-stated
    the capacity of a 5 %-long mix by ~25 %). Simulating the mix on a homogeneous pool captures
    batching, pooling over k workers (more, smaller workers queue less) and head-of-line
    blocking, at the price of a few seconds per regime.

    Args:
        config: the run's :class:`SimConfig` (its pool supplies ``num_gpus``; the profile pool
            is homogeneous).
        calibration: cost model and memory figures.
        profile: :class:`ProfileConfig`.
    """

    def __init__(self, config: SimConfig, calibration: Calibration, profile: ProfileConfig | None = None) -> None:
        self.config = config
        self.calibration = calibration
        self.profile = profile or ProfileConfig()
        self._edges = np.asarray(self.profile.length_bin_edges_tokens, float)
        self.references: list[_ReferenceMix] = []
        self.num_simulations = 0

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
                ref.shares = mean
                ref.profiles, ref.lengths, ref.gaps, ref.mix = {}, None, None, None  # re-profiled on demand
        return i

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

    def shares_profile(self, degree: int, shares: np.ndarray) -> CapacityProfile:
        """Capacity of one degree-C worker for a mix given by its class histogram.

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
        ref = self.references[i]
        p = ref.profiles.get(degree)
        if p is None:
            p = ref.profiles[degree] = self._profile(degree, ref.shares, i)
        return p

    def profiles(self, degrees, prompt_tokens: np.ndarray, mean_cached_tokens: float = 0.0) -> dict[int, CapacityProfile]:
        """:meth:`mix_profile` for each degree in ``degrees``."""
        return {d: self.mix_profile(d, prompt_tokens, mean_cached_tokens) for d in degrees}

    def profiled(self) -> list[CapacityProfile]:
        """Every profile computed so far, by reference mix then degree."""
        return [ref.profiles[d] for ref in self.references for d in sorted(ref.profiles)]

    def _sample(self, shares: np.ndarray, rng: np.random.Generator, n: int) -> np.ndarray:
        cls = rng.choice(len(shares), size=n, p=shares / shares.sum())
        lo, hi = np.log(self._edges[cls]), np.log(self._edges[cls + 1])
        return np.exp(rng.uniform(lo, hi)).astype(np.int64)

    def _num_requests(self, degree: int, mix: np.ndarray) -> int:
        cm = self.calibration.cost_model()
        k = max(1, self.config.pool.num_gpus // degree)
        work = cm.a * mix + (cm.c * mix + cm.alpha * mix * (mix + 1) * 0.5) / degree  # E_C(L, 0) - d
        return max(self.profile.num_requests, math.ceil(0.75 * k / float(work.mean()) * self.profile.duration_s))

    def _profile(self, degree: int, shares: np.ndarray, ref_index: int) -> CapacityProfile:
        pc = self.profile
        pool0 = self.config.pool
        k = max(1, pool0.num_gpus // degree)  # workers of a homogeneous degree-C pool
        cal = self.calibration
        cm = cal.cost_model()
        ref = self.references[ref_index]
        if ref.lengths is None:
            # one sample per reference mix, long enough for every supported degree: degree C uses
            # its first n_C prompts and arrivals (common random numbers across degrees)
            rng = np.random.default_rng(np.random.SeedSequence([pc.seed, ref_index]))
            mix = self._sample(shares, rng, 2000).astype(float)
            n_max = max(self._num_requests(C, mix) for C in set(pool0.supported_degrees) | {1, degree})  # CP-1 needs most
            ref.lengths = self._sample(shares, rng, n_max)
            ref.gaps = np.cumsum(rng.exponential(1.0, n_max))
            ref.mix = mix
        n = min(self._num_requests(degree, ref.mix), ref.lengths.size)
        L = ref.lengths[:n]
        gaps = ref.gaps[:n]
        bs = 512
        hashes, h = [], 0
        for x in L.tolist():
            nb = -(-x // bs)
            hashes.append(tuple(range(h, h + nb)))
            h += nb
        gpn = max(degree, pool0.gpus_per_node - pool0.gpus_per_node % degree)
        pool = PoolConfig(num_gpus=k * degree, gpus_per_node=gpn, composition=f"cp{degree}x{k}", supported_degrees=(degree,),
                          allow_cross_node=True)
        cfg = replace(self.config, pool=pool, horizon_s=None, record_events=False)
        Lf = L.astype(float)
        if int(L.max()) > min(cal.max_prompt_tokens, cal.kv_capacity_tokens(degree)):
            return CapacityProfile(degree, 0.0, 0.0, float(Lf.mean()), 0.0, ref_index)
        work = cm.a * Lf + (cm.c * Lf + cm.alpha * Lf * (Lf + 1) * 0.5) / degree  # E_C(L, 0) - d
        bound = k / float(work.mean())
        weights = Lf / Lf.sum()

        def simulate(lam: float) -> tuple[float, float]:
            self.num_simulations += 1
            reqs = tuple(Request(i, float(t), int(x), 1, hs) for i, (t, x, hs) in enumerate(zip((gaps / lam).tolist(), L.tolist(), hashes)))
            res = Simulator(Workload("capacity-profile", reqs, kv_block_size_tokens=bs), cfg, cal).run(LeastWorkRouter())
            ttft = res.records["ttft_s"]
            ok = ttft <= res.records["ttft_slo_s"]
            return float((weights * ok).sum()), float(np.nanmean(ttft))

        a0, t0 = simulate(1e-3 * bound)
        if a0 > 0.0:
            goal = pc.target_attainment * a0

            def good(lam: float) -> bool:
                return simulate(lam)[0] >= goal
        else:
            def good(lam: float) -> bool:
                return simulate(lam)[1] <= 2.0 * t0
        lo_r, hi_r = 0.0, bound
        for _ in range(pc.num_bisection_steps):
            mid = 0.5 * (lo_r + hi_r)
            if good(mid):
                lo_r = mid
            else:
                hi_r = mid
        lam = lo_r / k
        return CapacityProfile(degree, lam, lam * float(Lf.mean()), float(Lf.mean()), a0, ref_index)


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

    These thresholds are not given in the paper's copies; they were tuned on the ``phases``
    workload with the roofline calibration (``results/issue4/README.md``): the split and merge
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

    def __post_init__(self) -> None:
        def check(cond: bool, msg: str) -> None:
            if not cond:
                raise ValueError(msg)

        check(self.window_s > 0 and math.isfinite(self.window_s), f"controller.window_s must be > 0, got {self.window_s}")
        check(0 < self.merge_load < self.split_load, f"controller.merge_load ({self.merge_load}) must be > 0 and < split_load ({self.split_load})")
        check(self.merge_load <= self.merge_max_projected_load < self.split_load,
              f"controller.merge_max_projected_load ({self.merge_max_projected_load}) must be in [merge_load, split_load)")
        check(self.merge_load < self.split_target_load <= self.split_load,
              f"controller.split_target_load ({self.split_target_load}) must be in (merge_load, split_load]")
        check(self.split_load_long > 0 and math.isfinite(self.split_load_long),
              f"controller.split_load_long must be a finite number > 0, got {self.split_load_long}")
        check(isinstance(self.k_windows, int) and self.k_windows >= 1, f"controller.k_windows must be an integer >= 1, got {self.k_windows}")
        check(self.long_prompt_tokens >= 1, f"controller.long_prompt_tokens must be >= 1, got {self.long_prompt_tokens}")
        check(0 <= self.long_fraction_merge <= 1, f"controller.long_fraction_merge must be in [0, 1], got {self.long_fraction_merge}")
        check(self.min_window_requests >= 0, f"controller.min_window_requests must be >= 0, got {self.min_window_requests}")
        check(0 < self.mix_change_distance <= 1, f"controller.mix_change_distance must be in (0, 1], got {self.mix_change_distance}")
        check(0 < self.mix_smoothing <= 1, f"controller.mix_smoothing must be in (0, 1], got {self.mix_smoothing}")
        check(isinstance(self.max_ops_per_window, int) and self.max_ops_per_window >= 1,
              f"controller.max_ops_per_window must be an integer >= 1, got {self.max_ops_per_window}")
        check(0 < self.max_gpu_share_per_window <= 1,
              f"controller.max_gpu_share_per_window must be in (0, 1], got {self.max_gpu_share_per_window}")
        check(self.min_dwell_s >= 0 and math.isfinite(self.min_dwell_s), f"controller.min_dwell_s must be a finite number >= 0, got {self.min_dwell_s}")
        check(self.trend_horizon_s >= 0 and math.isfinite(self.trend_horizon_s),
              f"controller.trend_horizon_s must be a finite number >= 0, got {self.trend_horizon_s}")


def enumerate_compositions(pool: PoolConfig) -> list[str]:
    """Every composition (counts form, largest degree first) of ``pool``'s GPUs with its
    supported degrees that can be placed on aligned groups, from most large-degree workers to
    fewest; e.g. 40 GPUs in nodes of 8 with {2, 4}: ``cp4x10``, ``cp4x9,cp2x2``, ..., ``cp2x20``."""
    degrees = sorted(pool.supported_degrees, reverse=True)
    out: list[tuple[tuple[int, ...], str]] = []

    def rec(i: int, left: int, counts: list[int]) -> None:
        if i == len(degrees):
            if left == 0:
                text = ",".join(f"cp{d}x{n}" for d, n in zip(degrees, counts) if n)
                try:
                    resolve_composition(text, pool)
                except ValueError:
                    return
                out.append((tuple(counts), text))
            return
        d = degrees[i]
        for n in range(left // d, -1, -1):
            rec(i + 1, left - n * d, counts + [n])

    rec(0, pool.num_gpus, [])
    out.sort(key=lambda x: x[0], reverse=True)
    return [t for _, t in out]


def _degree_counts(composition: str, pool: PoolConfig) -> dict[int, int]:
    counts: dict[int, int] = {}
    for d, _ in resolve_composition(composition, pool):
        counts[d] = counts.get(d, 0) + 1
    return counts


def composition_capacity_rps(counts: dict[int, int], profiles: dict[int, CapacityProfile]) -> float:
    """Pool capacity ``Σ_C n_C λ_C`` [requests/s] of a composition given per-degree profiles."""
    return sum(n * profiles[d].capacity_rps for d, n in counts.items())


def initial_composition(pool: PoolConfig, config: SimConfig, calibration: Calibration, prompt_tokens: np.ndarray,
                        rate_rps: float, mean_cached_tokens: float = 0.0, max_load: float = 0.8,
                        table: CapacityTable | None = None) -> tuple[str, dict]:
    """Initial composition from historical demand (paper §6); see the module docstring.

    Args:
        pool: GPUs, topology and supported degrees (its ``composition`` is ignored).
        config, calibration: engine, SLO rule and cost model (used by a new ``table``).
        prompt_tokens: shape (n,), historical prompt lengths [tokens].
        rate_rps: historical arrival rate [requests/s].
        mean_cached_tokens: historical mean prefix hit per request [tokens] (0: unknown, pessimistic).
        max_load: a composition has enough capacity if ``rate / capacity <= max_load``; 0.8
            (below the controller's split region, so the start does not trigger a split).
        table: capacity profiles to use (and fill); default a new :class:`CapacityTable`.

    Returns:
        ``(composition, info)`` with ``info`` = ``{"capacity_rps", "load", "feasible",
        "profiles": {degree: capacity_rps per worker for the mix}}``.
    """
    table = table or CapacityTable(config, calibration)
    profiles = table.profiles(pool.supported_degrees, prompt_tokens, mean_cached_tokens)
    info_profiles = {d: p.capacity_rps for d, p in profiles.items()}
    best, best_cap = None, -1.0
    for comp in enumerate_compositions(pool):  # most large-degree workers first
        cap = composition_capacity_rps(_degree_counts(comp, pool), profiles)
        if cap > 0 and rate_rps / cap <= max_load:
            return comp, {"capacity_rps": cap, "load": rate_rps / cap, "feasible": True, "profiles": info_profiles}
        if cap > best_cap:
            best, best_cap = comp, cap
    return best, {"capacity_rps": best_cap, "load": rate_rps / best_cap if best_cap > 0 else math.inf, "feasible": False,
                  "profiles": info_profiles}


def rank_operations(sim, ops: list[Operation]) -> list[Operation]:
    """``ops`` ordered by predicted drain time, then expected KV-reconciliation traffic, then
    pool order (paper §6 "Eligible operations are prioritized by predicted drain interval and
    then expected KV-reconciliation traffic")."""
    r = get_reconfigurator(sim)
    return sorted(ops, key=lambda op: (r.predicted_drain_s(op), r.expected_reconciliation_bytes(op),
                                       sim.workers[op.worker_ids[0]].first_gpu))


# ---------------------------------------------------------------------------------- controller
class ReconfigController:
    """The windowed split/merge controller; attach with :meth:`attach` (a policy attachment).

    Args:
        config: :class:`ControllerConfig`.
        table: capacity profiles to share (e.g. with :func:`initial_composition`); default a new
            :class:`CapacityTable` for the simulator's config and calibration, built lazily.

    After a run, ``windows`` holds one dict per window (time, rate, capacity, load, long
    fraction, hit ratio, action) — also in ``SimResult.extras["controller_windows"]``.
    """

    def __init__(self, config: ControllerConfig | None = None, table: CapacityTable | None = None) -> None:
        self.config = config or ControllerConfig()
        self.table = table
        self.windows: list[dict] = []

    def attach(self, sim) -> None:
        cfg = self.config
        self.sim = sim
        self.reconfig = get_reconfigurator(sim, cfg.reconfig)
        if self.table is None:
            self.table = CapacityTable(sim.config, sim.calibration, cfg.profile)
        reqs = sim.workload.requests
        self._arrivals = np.array([r.arrival_time_s for r in reqs], dtype=float)
        self._lengths = np.array([r.num_prompt_tokens for r in reqs], dtype=float)
        self._last_arrival_s = float(self._arrivals[-1]) if len(reqs) else 0.0
        self._hit_tokens = 0
        self._num_finished = 0
        self._mean_cached_tokens = 0.0
        self._shares: np.ndarray | None = None
        self._above = self._below = self._long = 0
        self._rates: list[float] = []  # window rates [req/s] since the last regime change
        self._gpu_last_op: dict[int, tuple[float, str]] = {}  # GPU -> (start time [s], kind) of its last operation
        sim.finish_listeners.append(self._on_finish)
        sim.extras_providers.append(lambda: {"controller_windows": list(self.windows)})
        sim.attachments["controller"] = self
        if len(reqs):
            from envs.sim.simulator import EventPriority

            self._priority = EventPriority.CONTROL
            sim.schedule(cfg.window_s, self._priority, self._on_window, None)

    def _on_finish(self, sim, batch, w) -> None:
        # Mean prefix hit per request of the window (from the simulator's request records).
        self._num_finished += len(batch)
        self._hit_tokens += sum(sim.num_cached_tokens(req.request_id) for req in batch)

    # --- one window --------------------------------------------------------------------------
    def profiles(self, idx: np.ndarray) -> dict[int, CapacityProfile]:
        """Per-degree capacity profiles (per worker) for the smoothed length mix after adding the
        requests ``idx`` of the workload (updates the smoothed class histogram)."""
        s = self.table.shares(self._lengths[idx], self._mean_cached_tokens)
        a = self.config.mix_smoothing
        if self._shares is None or 0.5 * float(np.abs(s - self._shares).sum()) > self.config.mix_change_distance:
            self._shares = s  # a regime change (e.g. a new phase): no smoothing across it
            self._rates = []  # nor a rate trend
        else:
            self._shares = (1.0 - a) * self._shares + a * s
        self.table.observe(self._shares)
        return {d: self.table.shares_profile(d, self._shares) for d in self.sim.config.pool.supported_degrees}

    def _on_window(self, _payload) -> None:
        sim = self.sim
        cfg = self.config
        now = sim.env.now
        if now < self._last_arrival_s:
            sim.schedule(cfg.window_s, self._priority, self._on_window, None)
        i0 = bisect_left(self._arrivals, now - cfg.window_s)
        i1 = bisect_left(self._arrivals, now)
        n = i1 - i0
        if self._num_finished:
            self._mean_cached_tokens = self._hit_tokens / self._num_finished
        self._hit_tokens = self._num_finished = 0
        entry = {"time_s": now, "num_arrivals": n, "rate_rps": n / cfg.window_s, "mean_cached_tokens": self._mean_cached_tokens,
                 "capacity_rps": math.nan, "load": math.nan, "forecast_load": math.nan, "long_fraction": math.nan, "action": "none"}
        self.windows.append(entry)
        if n < max(1, cfg.min_window_requests):
            entry["action"] = "too-few-requests"
            return
        idx = np.arange(i0, i1)
        profiles = self.profiles(idx)
        counts: dict[int, int] = {}
        for w in sim.workers.values():
            counts[w.degree] = counts.get(w.degree, 0) + 1
        cap = composition_capacity_rps(counts, profiles)
        rate = n / cfg.window_s
        load = rate / cap if cap > 0 else math.inf
        long_frac = float((self._lengths[idx] >= cfg.long_prompt_tokens).mean())
        self._rates = (self._rates + [rate])[-(cfg.k_windows + 1):]
        forecast = rate + max(0.0, self.rate_slope()) * cfg.trend_horizon_s
        load_fc = forecast / cap if cap > 0 else math.inf
        entry.update(capacity_rps=cap, load=load, long_fraction=long_frac, forecast_load=load_fc)
        long_mix = long_frac >= cfg.long_fraction_merge
        split_at = max(cfg.split_load, cfg.split_load_long) if long_mix else cfg.split_load
        self._above = self._above + 1 if load_fc >= split_at else 0
        self._below = self._below + 1 if load_fc <= cfg.merge_load else 0
        self._long = self._long + 1 if (load_fc < split_at and long_mix) else 0
        kind = None
        if self._above >= cfg.k_windows:
            kind = SPLIT
        elif self._below >= cfg.k_windows or self._long >= cfg.k_windows:
            kind = MERGE
        if kind is None:
            return
        started = []
        gpu_budget = cfg.max_gpu_share_per_window * sim.config.pool.num_gpus
        num_locked = 0
        for _ in range(cfg.max_ops_per_window):
            if kind == SPLIT and started and forecast / cap <= cfg.split_target_load:
                break  # capacity gap closed
            ops = [op for op in self.reconfig.eligible_operations() if op.kind == kind]
            ok, new_caps = [], {}
            for op in ops:
                C = sim.workers[op.worker_ids[0]].degree
                if C * len(op.worker_ids) > gpu_budget + 1e-9:
                    continue  # pool-wide change limit of this window
                if self.locked(op, now):
                    num_locked += 1
                    continue
                if kind == SPLIT:
                    new_cap = cap - profiles[C].capacity_rps + 2 * profiles[C // 2].capacity_rps
                    if new_cap > cap:  # a split must add capacity
                        ok.append(op)
                else:
                    new_cap = cap - 2 * profiles[C].capacity_rps + profiles[2 * C].capacity_rps
                    if new_cap > 0 and forecast / new_cap <= cfg.merge_max_projected_load:
                        ok.append(op)
                new_caps[op] = new_cap
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
            entry["action"] = ";".join(started)
            entry["projected_load"] = rate / cap if cap > 0 else math.inf
            self._above = self._below = self._long = 0
        else:
            entry["action"] = f"{kind}-locked" if num_locked else f"{kind}-blocked"

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
