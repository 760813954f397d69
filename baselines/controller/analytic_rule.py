"""The paper's §6 rule with a do-no-harm gate (``ControllerConfig.decision="analytic"``, the
default; the controller of ``vertumnus`` and ``vertumnus-adaptive``).

**Triggers** are the paper's (:class:`~baselines.controller.paper_rule.PaperRule`, unchanged):
the forecast load against the *profiled* capacity of the composition
(:mod:`baselines.controller.measurement`) above the upper threshold for ``k_windows`` windows
proposes splits, below the lower threshold merges, and at stable load a long-request fraction of
at least ``long_fraction_merge`` proposes merges; capacity takes precedence.

**Gate** (cpgym's; the paper does not say how a sustained condition becomes a number of
operations): a proposal becomes operations only when an analytic estimate predicts that they pay.
The operations of the proposed kind are planned as the paper ranks them (shortest predicted
drain, then least reconciliation traffic, within the per-window limits and the dwell-time
lockout); for every prefix of that plan (1, 2, ... operations) the rule predicts

    net(rate) = rate x gate_horizon_s x (T(now) - T(after)) - rate x t_op x (W(during) - W(now)) - R

[request-seconds]: ``T`` the mean TTFT of a composition from :func:`predicted_ttft_s` (an M/G/c
approximation from the window's service-time moments per CP degree, the profiled per-worker
capacities calibrated to the wait measured in the window (:meth:`AnalyticRule._calibrated_capacities`)
and the measured over-dispersion as the arrivals' variability), ``t_op`` the predicted operation time
(longest predicted drain of the participants + ``reconfig.drain_sync_s`` + ``reconfig.switch_s``
+ confirmation), ``W(during)`` the wait while the participants' capacity is out, ``R`` the
reversal cost below.

**Reversal** (issue #40, production day): the cost also counts undoing the prefix, since the
rule itself undoes a merge once the forecast load of the merged composition reaches
``split_load`` and a split once it falls to ``merge_load``: the drain of the workers the prefix
created at that rate (:meth:`AnalyticRule._reversal_cost_rs`). A merge at a night's low load
thus pays for the split it will need at the day's peak; a split pays little (its reversal drains
at low load). A merge proposed by the long-request signal alone (load above ``merge_load``) is
not charged: the mix, not the load, undoes it, and the rule forecasts no mix (charging it at
``split_load`` cost ``matched-phases`` its long-phase merges: +1.0 % instead of −8.5 % against no
reconfiguration). Measured on ``reconfig/production-day-v1`` (validation split,
``results/vertumnus/README.md``): without it the controller merged at night for predicted gains
of a few tens of request-seconds, then lagged or was refused the splits the peak needed.

The prefix with the largest net gain at the *pessimistic* end of the measured rate's noise band
starts, if that gain is positive at both ends
``rate ± gate_z x se``; ``se = sqrt(D x rate / (n x decision_window_s))`` over the regime's last
``n`` window rates with ``D`` the over-dispersion of the window counts measured in the run
(:meth:`~baselines.controller.measurement.WindowMeasurement.measured_dispersion`; the Mooncake
conversation trace's 20 s counts are 2.1-2.3x Poisson, ``results/README.md`` research log). No
simulation runs per decision: the capacity table simulates one profile per mix regime (the
largest needed degree; the others scaled by batching work,
:meth:`~baselines.controller.measurement.WindowMeasurement._anchored_profiles`), and everything
else is a few numpy reductions over the window's requests. Measurements:
``results/vertumnus/README.md``.

:class:`AnalyticRule` is a mixin of :class:`~baselines.controller.ReconfigController` (it reads
``self.sim``, ``self.config``, the measurement's window state and the actuation's lockout).
"""

from __future__ import annotations

import math
from bisect import bisect_left

import numpy as np

from baselines.controller.measurement import WindowRecord
from envs.planning.capacity import CapacityProfile
from envs.planning.operations import rank_operations
from envs.sim.reconfig import SPLIT

__all__ = ["AnalyticRule", "predicted_ttft_s", "service_moments", "ttft_from_moments", "service_times_s", "ROUTER_BETA",
           "ROUTER_LAMBDA", "MAX_QUEUE_LOAD", "CALIBRATION_MIN", "CALIBRATION_MAX"]

#: The router's weights (``baselines.vertumnus.VertumnusParams`` defaults, paper §5) used to give
#: each request its preferred degree: ``argmin_C beta x E_C + lambda x C x E_C`` (zero queue).
ROUTER_BETA = 3.0
ROUTER_LAMBDA = 1.0
#: Load at which the M/G/c wait stops growing and the fluid backlog term takes over (so the
#: estimate stays finite and monotone in the rate at and past capacity; cpgym's choice).
MAX_QUEUE_LOAD = 0.99
#: Range of the factor calibrating the profiled capacities to the measured wait
#: (:meth:`AnalyticRule._calibrated_capacities`); cpgym's choice, not the paper's: one window mix's
#: profiled capacity scatters by +-17 % (sd) around its regime's (``ProfileConfig.refine_max_mixes``)
#: and the SLO-attainment capacity sits below the rate where the mean wait explodes, so 2x either
#: way bounds a gross error of the estimate without letting one window's mean TTFT set the capacity.
CALIBRATION_MIN = 0.5
CALIBRATION_MAX = 2.0


def service_times_s(cost_model, degrees, prompt_tokens: np.ndarray, mean_cached_tokens: float) -> np.ndarray:
    """No-queue prefill time ``E_C(R, P)`` [s] of each prompt at each degree, shape
    ``(len(degrees), n)``: every prompt gets the measured mean prefix hit (at most its length
    minus one token), as the capacity table's mixes do."""
    L = np.asarray(prompt_tokens, float)
    p = np.minimum(max(0.0, mean_cached_tokens), np.maximum(L - 1.0, 0.0))
    r = L - p
    cm = cost_model
    base = cm.d + cm.a * r + cm.b * p
    par = cm.c * r + cm.alpha * (r * p + r * (r + 1.0) * 0.5)
    return np.stack([base + par / d for d in degrees])


def predicted_ttft_s(counts: dict[int, int], rate_rps: float, service_s: np.ndarray, degrees: list[int],
                     capacity_rps: dict[int, float], arrival_scv: float, horizon_s: float) -> float:
    """Predicted mean queueing + prefill time [s] of a composition at a constant rate.

    Args:
        counts: ``{degree: workers}``.
        rate_rps: arrival rate [req/s].
        service_s: :func:`service_times_s` of the window's prompts, rows in ``degrees`` order.
        degrees: the degrees of ``service_s``'s rows (must include every degree of ``counts``).
        capacity_rps: profiled capacity of one worker per degree [req/s].
        arrival_scv: squared coefficient of variation of the arrivals (the measured over-dispersion
            of window counts; 1 for Poisson).
        horizon_s: span [s] over which an overload backlog grows (fluid term).

    Model: each request prefers the present degree minimising the router's zero-queue cost
    (:data:`ROUTER_BETA`, :data:`ROUTER_LAMBDA`); a degree whose share of the pool's GPUs is
    smaller than its preferred GPU-time demand serves only that fraction of them, the rest run at
    the next-best present degree. Service moments ``E[S]``, ``E[S^2]`` follow. The wait is the
    Allen-Cunneen / Sakasegawa M/G/c approximation with ``c`` = number of workers, utilisation
    ``rho = rate / sum_C n_C capacity_C`` (capped at :data:`MAX_QUEUE_LOAD`) and mean server time
    ``c / sum capacity``, plus, past capacity, the fluid backlog ``(rate - capacity) /
    capacity x horizon / 2``. Returns ``inf`` for a composition without capacity.
    """
    moments = service_moments(counts, service_s, degrees)
    return ttft_from_moments(moments, counts, rate_rps, capacity_rps, arrival_scv, horizon_s)


def service_moments(counts: dict[int, int], service_s: np.ndarray, degrees: list[int],
                    preference_memo: dict | None = None) -> tuple[list[int], float, float] | None:
    """``(present degrees, E[S] [s], E[S^2] [s^2])`` of a composition: the part of
    :func:`predicted_ttft_s` that depends on the composition and the window's prompts only (not
    on the rate or the capacities), so callers that vary those reuse it; None without workers.

    ``preference_memo``: optional dict a caller keeps for one ``service_s``, memoising per set of
    present degrees what does not depend on the worker counts (each request's first and second
    preferred degree, their service times, the GPU-time demand per preferred degree)."""
    present = [d for d in degrees if counts.get(d, 0) > 0]
    if not present:
        return None
    key = tuple(present)
    got = preference_memo.get(key) if preference_memo is not None else None
    if got is None:
        rows = np.array([degrees.index(d) for d in present])
        S = service_s[rows]  # (k, n)
        cost = S * (ROUTER_BETA + ROUTER_LAMBDA * np.array(present, float)[:, None])
        order = np.argsort(cost, axis=0, kind="stable")
        first = order[0]
        cols = np.arange(S.shape[1])
        s_first = S[first, cols]
        if len(present) > 1:
            s_second = S[order[1], cols]
            # GPU-time demand per preferred degree
            demand = np.bincount(first, weights=s_first * np.array(present, float)[first], minlength=len(present))
            got = (first, s_first, s_second, demand, s_first ** 2, s_second ** 2)
        else:
            got = (first, s_first, None, None, s_first ** 2, None)
        if preference_memo is not None:
            preference_memo[key] = got
    first, s_first, s_second, demand, sq_first, sq_second = got
    if len(present) > 1:
        gpus = np.array([counts[d] * d for d in present], float)
        with np.errstate(divide="ignore", invalid="ignore"):
            served = np.where(demand > 0, np.minimum(1.0, (gpus / gpus.sum()) / (demand / demand.sum())), 1.0)
        p = served[first]
        m1 = float(np.mean(p * s_first + (1 - p) * s_second))
        m2 = float(np.mean(p * sq_first + (1 - p) * sq_second))
    else:
        m1, m2 = float(s_first.mean()), float(sq_first.mean())
    return present, m1, m2


def ttft_from_moments(moments: tuple[list[int], float, float] | None, counts: dict[int, int], rate_rps: float,
                      capacity_rps: dict[int, float], arrival_scv: float, horizon_s: float) -> float:
    """:func:`predicted_ttft_s` from the composition's :func:`service_moments` (same arguments)."""
    if moments is None:
        return math.inf
    present, m1, m2 = moments
    cap = sum(counts[d] * capacity_rps[d] for d in present)
    if cap <= 0:
        return math.inf
    scv = max(0.0, m2 / (m1 * m1) - 1.0) if m1 > 0 else 0.0
    c = sum(counts[d] for d in present)
    rho = rate_rps / cap
    q = min(rho, MAX_QUEUE_LOAD)
    wait = q ** (math.sqrt(2.0 * (c + 1)) - 1.0) / (cap * (1.0 - q)) * 0.5 * (arrival_scv + scv)
    if rho > 1.0:
        wait += (rate_rps - cap) / cap * horizon_s * 0.5
    return m1 + wait


class AnalyticRule:
    """The ``"analytic"`` decision (module docstring)."""

    def decide_analytic(self, record: WindowRecord, profiles: dict[int, CapacityProfile]) -> list[str]:
        """Runs the paper's triggers (:meth:`~baselines.controller.paper_rule.PaperRule.decide`)
        and, on a proposal, the gate (module docstring); starts the chosen operations and records
        them (``record.action``; ``"<kind>-no-gain"`` when the gate refused, with the best
        pessimistic net gain in ``record.predicted_gain`` [request-seconds]). The paper rule's
        counters restart after the whole plan started; when the gate started only part of it the
        sustained condition still holds, so the next window may continue. Returns the started
        operations."""
        kind = self.decide(record)
        if kind is None:
            return []
        plan, num_locked = self._plan_operations(kind, record, profiles, exact=False)
        exact = plan is None
        if exact:
            plan, num_locked = self._plan_operations(kind, record, profiles)
        if not plan:
            record.action = f"{kind}-locked" if num_locked else f"{kind}-blocked"
            return []
        k, net = self._best_prefix(plan, record, profiles)
        record.predicted_gain = net
        if k == 0:
            record.action = f"{kind}-no-gain"
            return []
        if not exact:  # the operations to start: the paper's ranking, traffic included (same degrees, drains)
            plan, _ = self._plan_operations(kind, record, profiles)
        started = []
        now = self.sim.env.now
        for op in plan[:k]:
            gpus = self.operation_gpus(op)
            self.reconfig.apply(op)
            for g in gpus:
                self._gpu_last_op[g] = (now, kind)
            started.append(str(op))
        record.action = ";".join(started)
        cap = sum(n * profiles[d].capacity_rps for d, n in self._counts_after(plan[:k]).items())
        record.projected_load = record.rate_rps / cap if cap > 0 else math.inf
        if k == len(plan):  # the gate kept part of the plan: the condition still holds, the next window continues
            self._reset_counters()
        return started

    # --- planning ------------------------------------------------------------------------------
    def _current_counts(self) -> dict[int, int]:
        counts: dict[int, int] = {}
        for w in self.sim.workers.values():
            counts[w.degree] = counts.get(w.degree, 0) + 1
        return counts

    def _counts_after(self, ops) -> dict[int, int]:
        counts = self._current_counts()
        for op in ops:
            d = self.sim.workers[op.worker_ids[0]].degree
            new = d // 2 if op.kind == SPLIT else 2 * d
            counts[d] -= len(op.worker_ids)
            counts[new] = counts.get(new, 0) + (2 if op.kind == SPLIT else 1)
        return {d: n for d, n in counts.items() if n}

    def _plan_operations(self, kind: str, record: WindowRecord, profiles: dict[int, CapacityProfile],
                         exact: bool = True):
        """The operations of ``kind`` the paper rule would start this window, in order (ranked as
        :meth:`~baselines.controller.actuation.Actuation.act` ranks them, disjoint workers, within
        ``max_ops_per_window`` / ``max_gpu_share_per_window`` and the lockout; splits stop at
        ``split_target_load``, merges at ``merge_max_projected_load``), without starting them.
        Returns ``(plan, number of candidates the lockout refused)``.

        ``exact=False`` (the gate's first pass) defers the reconciliation traffic, which costs a
        pass over both caches of every merge tied on drain: among operations of equal predicted
        drain and equal degree it takes the first in pool order instead. The gate reads an
        operation's kind, degree, size and predicted drain only, and every other step of the
        plan depends on those alone (the candidates are disjoint, so taking one removes no
        other), so that plan gives the exact plan's gate result. It returns ``(None, 0)`` when
        the traffic would decide between degrees (the caller then plans exactly)."""
        sim, cfg = self.sim, self.config
        now = sim.env.now
        cap, forecast = record.capacity_rps, record.forecast_rps
        budget = cfg.max_gpu_share_per_window * sim.config.pool.num_gpus
        used: set[int] = set()
        plan, num_locked = [], 0
        candidates = [op for op in self.reconfig.eligible_operations() if op.kind == kind]
        traffic: dict = {}  # nothing is started while planning: each candidate's traffic is computed once
        for _ in range(cfg.max_ops_per_window):
            if kind == SPLIT and plan and cap > 0 and forecast / cap <= cfg.split_target_load:
                break
            ok, new_caps, locked = self.admissible_operations(
                (op for op in candidates if not used.intersection(op.worker_ids)), kind, cap, forecast, budget,
                profiles, now)
            num_locked += locked
            if not ok:
                break
            if exact:
                op = rank_operations(sim, ok, traffic)[0]
            else:
                drains = [self.reconfig.predicted_drain_s(o) for o in ok]
                first = min(drains)
                tied = [o for o, d in zip(ok, drains) if d == first]
                if len({sim.workers[o.worker_ids[0]].degree for o in tied}) > 1:
                    return None, 0
                op = min(tied, key=lambda o: sim.workers[o.worker_ids[0]].first_gpu)
            plan.append(op)
            used.update(op.worker_ids)
            budget -= sim.workers[op.worker_ids[0]].degree * len(op.worker_ids)
            cap = new_caps[op]
        return plan, num_locked

    # --- the gate ------------------------------------------------------------------------------
    def _gate_rates(self, record: WindowRecord) -> tuple[float, float]:
        """``(low, high)`` ends of the measured rate's noise band [req/s] (module docstring):
        centred on the forecast rate when the regime's rate trend is significant (``target_trend_min_t``
        standard errors with the measured dispersion), else on the mean of its recent windows."""
        cfg = self.config
        rates = self._rates or [record.rate_rps]
        n = len(rates)
        disp = self.measured_dispersion()
        mean = float(np.mean(rates))
        centre = mean
        slope = self.rate_slope()
        if n >= 2:
            x = np.arange(n, dtype=float) * cfg.decision_window_s
            se_slope = math.sqrt(disp * max(mean, 0.0) / cfg.decision_window_s / float(((x - x.mean()) ** 2).sum()))
            if slope > cfg.target_trend_min_t * se_slope:
                centre = record.rate_rps + slope * cfg.trend_horizon_s * 0.5
        se = math.sqrt(disp * max(centre, 0.0) / (n * cfg.decision_window_s))
        return max(0.0, centre - cfg.gate_z * se), centre + cfg.gate_z * se

    def _calibrated_capacities(self, record: WindowRecord, profiles, counts, moments, scv, i0: int,
                               i1: int) -> dict[int, float]:
        """Per-worker capacities [req/s] for the estimate: the profiled ones times the factor
        ``m`` in ``[CALIBRATION_MIN, CALIBRATION_MAX]`` at which the estimate's wait of the
        current composition at the window's rate equals the wait measured in the window (its mean
        TTFT minus the estimate's service time, the KV hand-off and the first decode step); the
        profiled ones when nothing finished. Why: the profile is the rate keeping 90 % of the SLO
        attainment, which a pool can exceed with a small mean wait, so an uncalibrated estimate
        read a load of 1 as overload and paid for splits that a fixed pool did not need
        (``matched-phases`` seed 1000)."""
        caps = {d: p.capacity_rps for d, p in profiles.items()}
        observed = record.observed_ttft_s
        if not math.isfinite(observed) or i1 <= i0:
            return caps
        sim = self.sim
        lat = sim.config.latency
        L = self._lengths[i0:i1]
        overhead = float(np.mean(L)) * sim.calibration.kv_bytes_per_token / lat.kv_handoff_bandwidth_bytes_per_s \
            + lat.first_decode_step_s
        rate = record.rate_rps
        # ``moments``: the composition's service_moments (fixed here: only m varies)
        service = ttft_from_moments(moments, counts, 0.0, caps, scv, 0.0)
        wait_obs = observed - overhead - service
        window_s = self.config.decision_window_s

        def wait(m: float) -> float:
            return ttft_from_moments(moments, counts, rate, {d: c * m for d, c in caps.items()}, scv, window_s) - service

        lo, hi = math.log(CALIBRATION_MIN), math.log(CALIBRATION_MAX)
        if wait(math.exp(hi)) >= wait_obs:
            m = math.exp(hi)
        elif wait(math.exp(lo)) <= wait_obs:
            m = math.exp(lo)
        else:
            for _ in range(20):  # wait(m) falls with m
                mid = 0.5 * (lo + hi)
                if wait(math.exp(mid)) > wait_obs:
                    lo = mid
                else:
                    hi = mid
            m = math.exp(0.5 * (lo + hi))
        record.capacity_calibration = m
        return {d: c * m for d, c in caps.items()}

    def _best_prefix(self, plan, record: WindowRecord, profiles: dict[int, CapacityProfile]) -> tuple[int, float]:
        """``(k, net)``: the number of planned operations whose predicted net gain is largest at
        the pessimistic end of the rate band and positive at both ends (0 if none), and that
        pessimistic net gain [request-seconds]."""
        sim, cfg = self.sim, self.config
        now = sim.env.now
        i0 = bisect_left(self._arrivals, now - cfg.decision_window_s)
        i1 = bisect_left(self._arrivals, now)
        degrees = sorted(profiles)
        S = service_times_s(sim.cost_model, degrees, self._lengths[i0:i1], self._mean_cached_tokens)
        scv = self.measured_dispersion()
        H = cfg.gate_horizon_s
        now_counts = self._current_counts()
        preferences: dict = {}  # service_moments' memo for this window's prompts
        now_moments = service_moments(now_counts, S, degrees, preferences)
        caps = self._calibrated_capacities(record, profiles, now_counts, now_moments, scv, i0, i1)
        rc = cfg.reconfig
        rates = self._gate_rates(record)
        # composition -> service_moments (T is asked a few per prefix)
        moments: dict[tuple, tuple | None] = {tuple(sorted(now_counts.items())): now_moments}

        def T(counts, rate, horizon):
            key = tuple(sorted(counts.items()))
            got = moments.get(key, False)
            if got is False:
                got = moments[key] = service_moments(counts, S, degrees, preferences)
            return ttft_from_moments(got, counts, rate, caps, scv, horizon)

        base = {r: T(now_counts, r, H) for r in rates}
        best_k, best_net = 0, -math.inf
        during = dict(now_counts)
        t_op = 0.0
        new_workers: dict[int, int] = {}  # degree -> workers the plan's prefix creates (what its reversal takes out)
        # a merge proposed by the long-request signal alone is undone by the mix, not the load: no reversal charge
        load_driven = plan[0].kind == SPLIT or self._below >= cfg.k_windows
        for k, op in enumerate(plan, start=1):
            d = sim.workers[op.worker_ids[0]].degree
            during[d] -= len(op.worker_ids)
            new_d = d // 2 if op.kind == SPLIT else 2 * d
            new_workers[new_d] = new_workers.get(new_d, 0) + (2 if op.kind == SPLIT else 1)
            ranks = d * len(op.worker_ids)
            t_op = max(t_op, self.reconfig.predicted_drain_s(op) + rc.drain_sync_s + rc.switch_s
                       + rc.confirm_s_per_rank * ranks)
            after = self._counts_after(plan[:k])
            reversal = self._reversal_cost_rs(op.kind, after, new_workers, caps, t_op, T) if load_driven else 0.0
            nets = []
            for r in rates:
                gain = r * H * (base[r] - T(after, r, H))
                cost = r * t_op * (T(during, r, t_op) - T(now_counts, r, t_op)) + reversal
                nets.append(gain - cost if math.isfinite(cost) else -math.inf)
            worst = min(nets)
            if worst > best_net:
                best_net = worst
                if worst > 0:
                    best_k = k
        return best_k, (best_net if math.isfinite(best_net) else math.nan)

    def _reversal_cost_rs(self, kind: str, after: dict[int, int], new_workers: dict[int, int],
                          caps: dict[int, float], t_op: float, T) -> float:
        """Predicted cost [request-seconds] of undoing a plan prefix (module docstring, "Reversal"):
        the rule undoes a merge when the forecast load of the composition ``after`` rises to
        ``split_load`` and a split when it falls to ``merge_load``; the reversal drains the workers
        the prefix created (``new_workers``, ``{degree: count}``) at that rate ``r_rev``, for the
        prefix's own operation time ``t_op``: ``r_rev x t_op x (T(after without them) - T(after))``."""
        cfg = self.config
        r_rev = (cfg.merge_load if kind == SPLIT else cfg.split_load) * sum(n * caps[d] for d, n in after.items())
        out = {d: n - new_workers.get(d, 0) for d, n in after.items() if n > new_workers.get(d, 0)}
        return r_rev * t_op * (T(out, r_rev, t_op) - T(after, r_rev, t_op))
