"""Vertumnus cluster-level controller (paper §6): capacity profiling, initial composition and
the windowed split/merge rule.

The *mechanics* of an operation (drain, redirect, switch, epoch commit, KV reconciliation) are
in :mod:`envs.sim.reconfig`; this module only decides. The Gymnasium reconfiguration
environment uses the same mechanics (:func:`eligible_operations` / :func:`apply_operation`,
re-exported here) with a learned decision instead of :class:`ReconfigController`.

Capacity profiling (paper §6 "Capacity Profiling and Initialization": capacity is *profiled
under the TTFT SLO*, not counted in GPUs). For CP degree C and a length mix (prompt lengths
``L_i``, a token-weighted prefix-hit ratio h, so ``P_i = min(h L_i, L_i - 1)``, ``R_i = L_i -
P_i``), a pool of ``k = G / C`` degree-C workers is modelled as one M/G/k FCFS queue (a
load-aware router balances the workers) with service times ``S_i = E_C(R_i, P_i)`` (the
no-queue cost model of paper §3.2, as the paper profiles it). At arrival rate λ the mean wait is
the Allen-Cunneen approximation ``W(λ) = ErlangC(k, λE[S]) / (k/E[S] - λ) · (1 + c_s²)/2``;
request i meets its SLO iff ``W + S_i + handoff_i + first_decode <= SLO_i``. The pool capacity
is the largest λ whose token-weighted SLO attainment is at least ``target_attainment`` times the
attainment at zero load (requests a degree cannot serve within the SLO even when idle do not
make its capacity zero); the per-worker capacity ``λ_C`` is that over k. It ignores batching
(pessimistic for short prompts); a heterogeneous pool's capacity is ``Σ_w λ_{C_w}``.

Initial composition (paper §6): among all compositions of the pool with the supported degrees
whose load ``rate / capacity`` is at most ``initial_max_load``, favour more large-degree
workers (lexicographically most workers of the largest degree, then the next); if none has
enough capacity, the one with the largest capacity.

Runtime rule (paper §6 "Runtime Reconfiguration"; DESIGN.md "Cluster-level controller"), every
``window_s`` (paper: 20 s): load ρ = arrival rate of the window / pool capacity for the
window's mix.

* **split region** ρ >= ``split_load`` for ``k_windows`` consecutive windows: split one worker
  (more independent lanes);
* **merge region** ρ <= ``merge_load`` for ``k_windows`` windows: merge one sibling pair (more
  per-request parallelism at low load);
* **long-request signal** when load is stable (``merge_load < ρ < split_load``) and the fraction
  of long prompts (``>= long_prompt_tokens``) is at least ``long_fraction_merge`` for
  ``k_windows`` windows: merge;
* **capacity precedence**: a merge happens only if the projected load after it stays at most
  ``merge_max_projected_load`` (< ``split_load``), and the split region is checked first — so
  the long-request signal never overrides a capacity shortage and a merge never lands inside
  the split region (no flapping).

Between the regions nothing happens (hysteresis band); counters restart after an operation.
Among eligible operations of the chosen kind the controller prefers the shortest predicted drain,
then the least expected KV-reconciliation traffic, then pool order (paper §6). At most
``max_ops_per_window`` operations start per window; a worker is in at most one (only ACTIVE
workers are eligible).
"""

from __future__ import annotations

import itertools
import math
from bisect import bisect_left
from dataclasses import dataclass, field

import numpy as np

from envs.sim.config import SimConfig
from envs.sim.cost_model import Calibration, CostModel
from envs.sim.pool import PoolConfig, resolve_composition
from envs.sim.reconfig import (MERGE, SPLIT, Operation, OperationRecord, ReconfigConfig, apply_operation,
                               eligible_operations, get_reconfigurator)

__all__ = ["ControllerConfig", "CapacityProfile", "ReconfigController", "profile_capacity", "slo_for_lengths",
           "enumerate_compositions", "composition_capacity_rps", "initial_composition", "rank_operations",
           "Operation", "OperationRecord", "ReconfigConfig", "apply_operation", "eligible_operations"]


@dataclass(frozen=True)
class ControllerConfig:
    """Parameters of :class:`ReconfigController`.

    Args:
        window_s: observation window [s]; paper §6/§9: 20 s.
        split_load: lower edge of the split region (load = rate / profiled capacity); 0.85.
        merge_load: upper edge of the low-load merge region; 0.45.
        merge_max_projected_load: a merge must keep the projected load at most this (capacity
            precedence); must lie in [merge_load, split_load); 0.7.
        k_windows: consecutive windows a condition must hold; 2 (paper: "sustained").
        long_prompt_tokens: a prompt at least this long is a long request [tokens]; 8192 (the
            paper's long requests are the 4-8 % of arrivals carrying 32-54 % of tokens, §2).
        long_fraction_merge: long-request fraction (of arrivals) that signals a merge at stable
            load; 0.3.
        target_attainment: capacity = largest rate keeping token-weighted SLO attainment at least
            this share of its zero-load value; 0.9.
        min_window_requests: windows with fewer arrivals keep all counters unchanged; 10.
        max_ops_per_window: operations started per window; 1.
        reconfig: protocol costs (switch, confirmation).

    These thresholds are not given in the paper's copies; the values are chosen so that the
    split and merge regions are separated by a band of 0.4 load and a merge cannot land in the
    split region (documented choice; ``cpgym dynamic`` prints them).

    Raises:
        ValueError: naming the field, on out-of-range values or overlapping regions.
    """

    window_s: float = 20.0
    split_load: float = 0.85
    merge_load: float = 0.45
    merge_max_projected_load: float = 0.7
    k_windows: int = 2
    long_prompt_tokens: int = 8192
    long_fraction_merge: float = 0.3
    target_attainment: float = 0.9
    min_window_requests: int = 10
    max_ops_per_window: int = 1
    reconfig: ReconfigConfig = field(default_factory=ReconfigConfig)

    def __post_init__(self) -> None:
        def check(cond: bool, msg: str) -> None:
            if not cond:
                raise ValueError(msg)

        check(self.window_s > 0 and math.isfinite(self.window_s), f"controller.window_s must be > 0, got {self.window_s}")
        check(0 < self.merge_load < self.split_load, f"controller.merge_load ({self.merge_load}) must be > 0 and < split_load ({self.split_load})")
        check(self.merge_load <= self.merge_max_projected_load < self.split_load,
              f"controller.merge_max_projected_load ({self.merge_max_projected_load}) must be in [merge_load, split_load)")
        check(isinstance(self.k_windows, int) and self.k_windows >= 1, f"controller.k_windows must be an integer >= 1, got {self.k_windows}")
        check(self.long_prompt_tokens >= 1, f"controller.long_prompt_tokens must be >= 1, got {self.long_prompt_tokens}")
        check(0 <= self.long_fraction_merge <= 1, f"controller.long_fraction_merge must be in [0, 1], got {self.long_fraction_merge}")
        check(0 < self.target_attainment <= 1, f"controller.target_attainment must be in (0, 1], got {self.target_attainment}")
        check(self.min_window_requests >= 0, f"controller.min_window_requests must be >= 0, got {self.min_window_requests}")
        check(self.max_ops_per_window >= 1, f"controller.max_ops_per_window must be >= 1, got {self.max_ops_per_window}")


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
class CapacityProfile:
    """Profiled capacity of one degree-C worker for one length mix.

    Attributes:
        degree: CP degree C.
        capacity_rps: sustainable arrival rate under the SLO rule [requests/s per worker].
        capacity_tokens_per_s: ``capacity_rps x mean prompt length`` [prompt tokens/s].
        mean_service_s: mean no-queue service time ``E[S]`` [s].
        zero_load_attainment: token-weighted SLO attainment with no queueing, in [0, 1].
    """

    degree: int
    capacity_rps: float
    capacity_tokens_per_s: float
    mean_service_s: float
    zero_load_attainment: float


def profile_capacity(cost_model: CostModel, degree: int, prompt_tokens: np.ndarray, ttft_slo_s: np.ndarray,
                     overhead_s: np.ndarray | float = 0.0, hit_ratio: float = 0.0,
                     target_attainment: float = 0.9, num_workers: int = 1) -> CapacityProfile:
    """Capacity of one degree-C worker for a length mix (module docstring: M/G/k + SLO rule).

    Args:
        cost_model: predicted ``E_C(R, P)``.
        degree: CP degree C.
        prompt_tokens: shape (n,), prompt lengths L of the mix [tokens].
        ttft_slo_s: shape (n,) or scalar, each request's TTFT SLO [s].
        overhead_s: shape (n,) or scalar, TTFT outside the pool (KV hand-off + first decode) [s].
        hit_ratio: token-weighted prefix-hit share in [0, 1).
        target_attainment: share of the zero-load attainment to keep, in (0, 1].
        num_workers: k, the number of degree-C workers sharing the load (the pool's GPUs / C):
            the pool is approximated as one M/G/k queue (a load-aware router balances the
            workers), and the result is per worker (pool capacity / k).

    Raises:
        ValueError: on an empty mix, a degree < 1 or a ratio outside its range.
    """
    L = np.asarray(prompt_tokens, dtype=float)
    if L.size == 0:
        raise ValueError("profile_capacity needs a non-empty length mix")
    if degree < 1:
        raise ValueError(f"degree must be >= 1, got {degree}")
    if num_workers < 1:
        raise ValueError(f"num_workers must be >= 1, got {num_workers}")
    if not 0.0 <= hit_ratio < 1.0:
        raise ValueError(f"hit_ratio must be in [0, 1), got {hit_ratio}")
    if not 0.0 < target_attainment <= 1.0:
        raise ValueError(f"target_attainment must be in (0, 1], got {target_attainment}")
    P = np.minimum(np.floor(hit_ratio * L), L - 1)
    R = L - P
    cm = cost_model
    S = cm.d + cm.a * R + cm.b * P + (cm.c * R + cm.alpha * (R * P + R * (R + 1) * 0.5)) / degree
    slack = np.broadcast_to(np.asarray(ttft_slo_s, float), L.shape) - np.broadcast_to(np.asarray(overhead_s, float), L.shape) - S
    es, es2 = float(S.mean()), float((S * S).mean())
    total = float(L.sum())

    k = num_workers
    cs2 = es2 / (es * es) - 1.0

    def attainment(lam: float) -> float:
        a = lam * es  # offered load [Erlangs]
        if a >= k:
            return 0.0
        # Erlang C by the stable recursion on the Erlang B formula, then the M/G/k
        # Allen-Cunneen approximation W = C(k, a) / (k/E[S] - lam) * (1 + cs^2) / 2.
        b = 1.0
        for j in range(1, k + 1):
            b = a * b / (j + a * b)
        c_wait = b / (1.0 - (a / k) * (1.0 - b))
        wait = c_wait / (k / es - lam) * (1.0 + cs2) / 2.0
        return float(L[slack >= wait].sum()) / total

    a0 = attainment(0.0)
    goal = target_attainment * a0
    lo, hi = 0.0, k / es
    if a0 <= 0.0:
        lam = 0.0
    else:
        for _ in range(50):
            mid = 0.5 * (lo + hi)
            if attainment(mid) >= goal:
                lo = mid
            else:
                hi = mid
        lam = lo
    lam /= k
    return CapacityProfile(degree, lam, lam * float(L.mean()), es, a0)


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
                        rate_rps: float, hit_ratio: float = 0.0, max_load: float = 0.65,
                        target_attainment: float = 0.9) -> tuple[str, dict]:
    """Initial composition from historical demand (paper §6); see the module docstring.

    Args:
        pool: GPUs, topology and supported degrees (its ``composition`` is ignored).
        config, calibration: SLO rule and cost model.
        prompt_tokens: shape (n,), historical prompt lengths [tokens].
        rate_rps: historical arrival rate [requests/s].
        hit_ratio: historical token-weighted prefix-hit share.
        max_load: a composition has enough capacity if ``rate / capacity <= max_load``.

    Returns:
        ``(composition, info)`` with ``info`` = ``{"capacity_rps", "load", "feasible",
        "profiles": {degree: capacity_rps}}``.
    """
    cm = calibration.cost_model()
    L = np.asarray(prompt_tokens, float)
    slo = slo_for_lengths(config, calibration, L)
    overhead = L * calibration.kv_bytes_per_token / config.latency.kv_handoff_bandwidth_bytes_per_s + config.latency.first_decode_step_s
    profiles = {d: profile_capacity(cm, d, L, slo, overhead, hit_ratio, target_attainment, max(1, pool.num_gpus // d))
                for d in pool.supported_degrees}
    best, best_cap = None, -1.0
    for comp in enumerate_compositions(pool):  # most large-degree workers first
        cap = composition_capacity_rps(_degree_counts(comp, pool), profiles)
        if cap > 0 and rate_rps / cap <= max_load:
            return comp, {"capacity_rps": cap, "load": rate_rps / cap, "feasible": True,
                          "profiles": {d: p.capacity_rps for d, p in profiles.items()}}
        if cap > best_cap:
            best, best_cap = comp, cap
    return best, {"capacity_rps": best_cap, "load": rate_rps / best_cap if best_cap > 0 else math.inf, "feasible": False,
                  "profiles": {d: p.capacity_rps for d, p in profiles.items()}}


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

    After a run, ``windows`` holds one dict per window (time, rate, capacity, load, long
    fraction, hit ratio, action) — also in ``SimResult.extras["controller_windows"]``.
    """

    def __init__(self, config: ControllerConfig | None = None) -> None:
        self.config = config or ControllerConfig()
        self.windows: list[dict] = []

    def attach(self, sim) -> None:
        cfg = self.config
        self.sim = sim
        self.reconfig = get_reconfigurator(sim, cfg.reconfig)
        reqs = sim.workload.requests
        self._arrivals = np.array([r.arrival_time_s for r in reqs], dtype=float)
        self._lengths = np.array([r.num_prompt_tokens for r in reqs], dtype=float)
        self._last_arrival_s = float(self._arrivals[-1]) if len(reqs) else 0.0
        cal = sim.calibration
        self._slo = np.array([sim.ttft_slo_s(i) for i in range(len(reqs))], dtype=float)
        lat = sim.config.latency
        self._overhead = self._lengths * cal.kv_bytes_per_token / lat.kv_handoff_bandwidth_bytes_per_s + lat.first_decode_step_s
        self._hit_tokens = 0
        self._tokens = 0
        self._hit_ratio = 0.0
        self._above = self._below = self._long = 0
        self._last_mix: np.ndarray | None = None
        sim.finish_listeners.append(self._on_finish)
        sim.extras_providers.append(lambda: {"controller_windows": list(self.windows)})
        sim.attachments["controller"] = self
        if len(reqs):
            from envs.sim.simulator import EventPriority

            self._priority = EventPriority.CONTROL
            sim.schedule(cfg.window_s, self._priority, self._on_window, None)

    def _on_finish(self, sim, batch, w) -> None:
        # Token-weighted prefix-hit ratio of the window (from the simulator's request records).
        for req in batch:
            self._tokens += req.num_prompt_tokens
        self._hit_tokens += sum(sim.num_cached_tokens(req.request_id) for req in batch)

    # --- one window --------------------------------------------------------------------------
    def profiles(self, idx: np.ndarray) -> dict[int, CapacityProfile]:
        """Per-degree capacity profiles for the requests ``idx`` of the workload."""
        sim = self.sim
        return {d: profile_capacity(sim.cost_model, d, self._lengths[idx], self._slo[idx], self._overhead[idx],
                                    min(self._hit_ratio, 0.99), self.config.target_attainment,
                                    max(1, sim.config.pool.num_gpus // d))
                for d in sim.config.pool.supported_degrees}

    def _on_window(self, _payload) -> None:
        sim = self.sim
        cfg = self.config
        now = sim.env.now
        if now < self._last_arrival_s:
            sim.schedule(cfg.window_s, self._priority, self._on_window, None)
        i0 = bisect_left(self._arrivals, now - cfg.window_s)
        i1 = bisect_left(self._arrivals, now)
        n = i1 - i0
        if self._tokens:
            self._hit_ratio = self._hit_tokens / self._tokens
        self._hit_tokens = self._tokens = 0
        entry = {"time_s": now, "num_arrivals": n, "rate_rps": n / cfg.window_s, "hit_ratio": self._hit_ratio,
                 "capacity_rps": math.nan, "load": math.nan, "long_fraction": math.nan, "action": "none"}
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
        entry.update(capacity_rps=cap, load=load, long_fraction=long_frac)
        self._above = self._above + 1 if load >= cfg.split_load else 0
        self._below = self._below + 1 if load <= cfg.merge_load else 0
        stable = cfg.merge_load < load < cfg.split_load
        self._long = self._long + 1 if (stable and long_frac >= cfg.long_fraction_merge) else 0
        kind = None
        if self._above >= cfg.k_windows:
            kind = SPLIT
        elif self._below >= cfg.k_windows or self._long >= cfg.k_windows:
            kind = MERGE
        if kind is None:
            return
        started = []
        for _ in range(cfg.max_ops_per_window):
            ops = [op for op in self.reconfig.eligible_operations() if op.kind == kind]
            if kind == MERGE:
                ok = []
                for op in ops:
                    C = sim.workers[op.worker_ids[0]].degree
                    new_cap = cap - 2 * profiles[C].capacity_rps + profiles[2 * C].capacity_rps
                    if new_cap > 0 and rate / new_cap <= cfg.merge_max_projected_load:
                        ok.append(op)
                ops = ok
            if not ops:
                break
            op = rank_operations(sim, ops)[0]
            self.reconfig.apply(op)
            started.append(str(op))
            C = sim.workers[op.worker_ids[0]].degree  # still present (DRAINING) until its switch ends
            if kind == SPLIT:
                cap += 2 * profiles[C // 2].capacity_rps - profiles[C].capacity_rps
            else:
                cap += profiles[2 * C].capacity_rps - 2 * profiles[C].capacity_rps
        if started:
            entry["action"] = ";".join(started)
            self._above = self._below = self._long = 0
        else:
            entry["action"] = f"{kind}-blocked"


def adaptive_policy_router():
    """Router of ``vertumnus-adaptive``: the Vertumnus cost router (paper §5)."""
    from baselines.vertumnus import VertumnusParams, VertumnusRouter

    return VertumnusRouter(VertumnusParams(), "vertumnus-adaptive")
