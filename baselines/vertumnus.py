"""Vertumnus request-level router (paper §5) and its ablations.

Placement cost of request i on eligible worker w (paper §5, ``../shared/DESIGN.md``,
``../shared/paper/vertumnus-walkthrough.zh.txt``)::

    J_{i,w} = q_w + beta * s + lambda * (C_w * s - C_min * E_{C_min}(R_{i,w}, P_{i,w}))
    s       = E_{C_w}(R_{i,w}, P_{i,w})

* ``q_w``: predicted outstanding work of w [s] (:meth:`PoolView.outstanding_work_s`: predicted
  remainder of the running step + routing-time predicted service of the queued requests);
* ``R_{i,w}``, ``P_{i,w}``: new / ready-cached tokens of the request *on this worker*;
* ``C_min``: smallest CP degree among the eligible candidates;
* the bracket is the extra GPU time [GPU s] of running on C_w instead of C_min *with the
  candidate's own R and P* (counterfactual baseline, never another worker's cache state). With
  ``E_C = A + B/C`` it equals ``(C_w - C_min) * A`` (:func:`extra_gpu_time_s`).

Eligibility (paper §5): ACTIVE workers that can hold the prompt (model max length, the worker's
KV memory); draining/switching workers are excluded; a cache miss never excludes
(:meth:`PoolView.eligible_worker_ids`).

Reservation (paper §5): the chosen worker's ``q_w`` grows by ``s`` at once. This is inherent in
the simulator: ``Simulator.decide`` adds the routing-time ``s`` to the worker's queued predicted
work before the next decision, so a burst of simultaneous arrivals sees it. The
"without reservation" ablation (:class:`StaleLoadView`) therefore gives the router a *stale*
load instead: the load each worker last reported at its most recent engine-step boundary (as a
router polling engine metrics would see it), so requests dispatched since that boundary are
invisible until the worker starts its next step.

Defaults ``beta = 3``, ``lambda = 1`` (the paper's copies give no numbers; paper §5 only bounds
``beta >= 1``, ``lambda >= 0``). Chosen with the current default calibration (roofline with
``cp_serial_fraction`` 0.15, so CP costs GPU time) by the sweep below: 15 (beta, lambda) points on
three workloads at two loads each (6 points), ranked by the mean over the points of the mean-TTFT
change vs the strongest non-Vertumnus baseline (``results/README.md``, research log; the folder is at commit ``ea84fd9``)::

    cpgym compare --workload mixed-default --rate-scales 1,1.5 --beta 1,2,3 --lambda 0,0.25,0.5,1,2 \
        --suite paper,industry --jobs 2 --out runs/beta-lambda-sweep/mixed-default
    (same for --workload tool-agent / leval-like with --arrival-window-s 0 120)

* ``lambda = 1`` [s of cost per GPU-s]: one extra GPU-second of the CP surplus ``(C_w - C_min)*A``
  is charged like one second of waiting (under saturation every GPU-second taken from the pool
  delays the work queued behind it, so a unit exchange rate is the neutral choice). The sweep
  agrees without tuning: for every beta >= 2, lambda in [1, 2] is best or within 1.5 points of
  the best on the mean, and lambda < 0.5 is clearly worse at high load (mixed-default x1.5).
* ``beta = 3`` (the walk-through's worked example value): beta = 1 (``q + s`` = the plain TTFT
  estimate) is best at light load (mixed-default x1: +5.6% vs +19.7%) but collapses near
  saturation (mixed-default x1.5: +140% vs -4.9%) because it trades prefix hits for momentary
  queue balance; beta 3 was the best or tied-best beta on every high-load point (mean over the 6
  points: beta 3 +19.5%, beta 2 +21.0%, beta 1 +47.7% at lambda 1). beta = 3 with lambda = 2 was
  marginally better on the mean (+18.4%) but worse in SLO attainment; we keep the unit rate.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass

import numpy as np

from baselines.tiered import vertumnus_pull_route
from envs.sim.cost_model import CostModel
from envs.sim.request import Request
from envs.sim.router import PoolView, Router
from envs.sim.worker import Worker, WorkerState

_ACTIVE = WorkerState.ACTIVE


@dataclass(frozen=True)
class VertumnusParams:
    """Parameters of the Vertumnus placement cost.

    Args:
        beta: weight of the cache-aware service time ``s`` (paper §5: ``beta >= 1``). Default 3
            (module docstring: sweep and reasons).
        lambda_: weight of the extra GPU time ``C_w*s - C_min*E_{C_min}`` [cost s per GPU s]
            (paper §5: ``lambda >= 0``). Default 1 (module docstring explains the choice).
        reservation: ``True`` (paper): the router sees ``q_w`` including every dispatched
            request at once. ``False``: ablation, ``q_w`` as reported at the worker's last
            engine-step boundary (:class:`StaleLoadView`).
        length_only: ablation: choose the CP degree by prompt length only (cache- and
            load-blind: minimise ``beta*E_C(L,0) + lambda*(C*E_C(L,0) - C_min*E_{C_min}(L,0))``),
            then the least ``q_w`` worker of that degree.

    Raises:
        ValueError: if ``beta < 1``, ``lambda_ < 0`` or either is not finite.
    """

    beta: float = 3.0
    lambda_: float = 1.0
    reservation: bool = True
    length_only: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.beta, (int, float)) or not math.isfinite(self.beta) or self.beta < 1.0:
            raise ValueError(f"vertumnus beta must be a finite number >= 1 (paper §5), got {self.beta!r}")
        if not isinstance(self.lambda_, (int, float)) or not math.isfinite(self.lambda_) or self.lambda_ < 0.0:
            raise ValueError(f"vertumnus lambda must be a finite number >= 0 (paper §5), got {self.lambda_!r}")


def extra_gpu_time_s(cost_model: CostModel, degree: int, min_degree: int, num_new_tokens: int,
                     num_cached_tokens: int) -> float:
    """``C*E_C(R,P) - C_min*E_{C_min}(R,P)`` [GPU s] for the same R, P; equals ``(C - C_min)*A``
    with ``A = d + a*R + b*P`` (paper §5 counterfactual baseline; identity in the walk-through)."""
    return (cost_model.service_time_s(degree, num_new_tokens, num_cached_tokens) * degree
            - cost_model.service_time_s(min_degree, num_new_tokens, num_cached_tokens) * min_degree)


def placement_cost(q_s: float, s: float, degree: int, min_degree: int, service_at_min_s: float,
                   beta: float, lambda_: float) -> float:
    """``J = q + beta*s + lambda*(C*s - C_min*E_{C_min})`` [s] (paper §5).

    Args:
        q_s: predicted outstanding work of the worker [s].
        s: ``E_{C}(R, P)`` on this worker [s].
        degree / min_degree: ``C_w`` and ``C_min``.
        service_at_min_s: ``E_{C_min}(R, P)`` with *this worker's* R, P [s].
    """
    return q_s + beta * s + lambda_ * (degree * s - min_degree * service_at_min_s)


class StaleLoadView:
    """Router-side stale load for the "without reservation" ablation.

    The router's ``q_w`` is the load the worker reported at its last engine-step boundary: the
    predicted remainder of the running step plus the routing-time predicted work of the queued
    requests that were dispatched *before* that step started. Requests dispatched after the
    boundary are invisible until the next step starts (or, on an idle worker, the first one is
    seen as soon as it starts running). The router records its own dispatches (time, predicted
    ``s``) per worker; the queue is FCFS, so the queued requests are the last
    ``num_queued_requests`` dispatched, and a prefix sum plus a bisection give the visible part in
    O(log n) per worker.

    Redirections (drain, paper §6) keep this exact for every *eligible* worker: a drained
    worker's whole queue is redirected (its entries become stale, but it is no longer a candidate),
    a redirected request is recorded again at its new dispatch, and a worker created by a
    split/merge that reuses a retired worker's id only ever receives dispatches after the old
    entries, so its queue is still the last ``len(queue)`` entries of the id's list.
    """

    def __init__(self) -> None:
        self._times: dict[int, list[float]] = {}
        self._cum: dict[int, list[float]] = {}

    def record(self, worker_id: int, now_s: float, s: float) -> None:
        t = self._times.setdefault(worker_id, [])
        c = self._cum.setdefault(worker_id, [0.0])
        t.append(now_s)
        c.append(c[-1] + s)

    def outstanding_work_s(self, view: PoolView, worker_id: int) -> float:
        """Stale ``q_w`` [s] of ``worker_id`` at ``view.now_s`` (see the class docstring)."""
        return self.worker_load_s(view.workers[worker_id], view.now_s)

    def worker_load_s(self, w: Worker, now_s: float) -> float:
        """Stale ``q_w`` [s] of worker ``w`` at ``now_s``; O(log dispatches)."""
        rem = w.step_predicted_end_s - now_s if w.batch else 0.0
        if rem < 0.0:
            rem = 0.0
        nq = len(w.queue)
        if nq == 0:
            return rem
        times = self._times.get(w.worker_id)
        if not times:
            return rem
        cum = self._cum[w.worker_id]
        n = len(times)
        boundary = w.step_start_s if w.batch else now_s
        seen_end = bisect_left(times, boundary)  # dispatches strictly before the boundary
        first_queued = n - nq
        if seen_end <= first_queued:
            return rem
        return rem + cum[seen_end] - cum[first_queued]


class VertumnusRouter(Router):
    """The Vertumnus cost router (paper §5); see the module docstring.

    Args:
        params: :class:`VertumnusParams` (default: beta 3, lambda 1, reservation on).
        name: policy name stored in results.

    Ties on J go to the worker first in pool order (ascending first GPU). Per decision cost is
    O(workers x prefix blocks).
    """

    def __init__(self, params: VertumnusParams | None = None, name: str = "vertumnus") -> None:
        self.params = params or VertumnusParams()
        self.name = name
        self._stale: StaleLoadView | None = None
        self._last_s = 0.0

    def reset(self, view: PoolView, rng: np.random.Generator) -> None:
        super().reset(view, rng)
        self._stale = None if self.params.reservation else StaleLoadView()

    def _q(self, view: PoolView, wid: int) -> float:
        if self._stale is None:
            return view.outstanding_work_s(wid)
        return self._stale.outstanding_work_s(view, wid)

    def route(self, request: Request, view: PoolView) -> int:
        """Eligible worker with the least ``J`` (ties: pool order).

        Hot path (one call per arrival): one pass over the pool collects the eligible workers and
        ``C_min``; a second computes, per candidate, the ready hit ``P`` and ``A = d + aR + bP``,
        ``B = cR + alpha*W`` once (reused while consecutive candidates have the same ``P``), then
        ``s = A + B/C_w`` and ``E_{C_min} = A + B/C_min``. These are the same floating-point
        operations as :meth:`CostModel.service_time_s`, so the decisions are bit-identical to the
        direct formula (``tests/baselines/test_vertumnus_fast.py`` checks this against a reference).

        Raises:
            RuntimeError: if no worker is eligible.
        """
        if self.params.length_only:
            cands = view.eligible_worker_ids(request)
            if not cands:
                raise RuntimeError(f"no eligible worker for request {request.request_id}")
            return self._route_length_only(request, view, cands, min(view.degree(w) for w in cands))
        workers = view.workers
        L = request.num_prompt_tokens
        active = _ACTIVE
        cands = []
        c_min = 1 << 30
        for wid in view.worker_ids:
            w = workers[wid]
            if w.state == active and L <= w.max_prompt_tokens:
                cands.append(w)
                if w.degree < c_min:
                    c_min = w.degree
        if not cands:
            raise RuntimeError(f"no eligible worker for request {request.request_id}")
        if view.kv_tiers is not None:  # extension beyond the paper: tiered ready time (baselines/tiered.py)

            best, self._last_s = vertumnus_pull_route(self, request, view, cands, c_min)
            return best
        cm = None  # each worker's own cost model (heterogeneous pools); one object in a homogeneous pool
        d = a = b = c = alpha = 0.0
        bs = view.kv_block_size_tokens
        hashes = request.block_hashes
        cap = L - 1
        now = view.now_s
        beta = self.params.beta
        lam = self.params.lambda_
        stale = self._stale
        last_p = -1
        A = B = s_min = 0.0
        best, best_j, best_s = None, math.inf, 0.0
        for w in cands:
            p = w.cache.match_ready(hashes) * bs
            if p > cap:
                p = cap
            wcm = w.cost_model
            if p != last_p or wcm is not cm:
                if wcm is not cm:
                    cm = wcm
                    d, a, b, c, alpha = cm.d, cm.a, cm.b, cm.c, cm.alpha
                r = L - p
                A = d + a * r + b * p
                B = c * r + alpha * (r * p + r * (r + 1) * 0.5)
                s_min = A + B / c_min
                last_p = p
            C = w.degree
            s = A + B / C
            if stale is None:
                q = w.queued_predicted_s
                if w.batch:
                    rem = w.step_predicted_end_s - now
                    q += rem if rem > 0.0 else 0.0
                else:
                    q += 0.0
            else:
                q = stale.worker_load_s(w, now)
            j = q + beta * s + lam * (C * s - c_min * s_min)
            if j < best_j:
                best, best_j, best_s = w, j, s
        self._last_s = best_s
        return best.worker_id

    def _route_length_only(self, request: Request, view: PoolView, cands: list[int], c_min: int) -> int:
        L = request.num_prompt_tokens
        beta, lam = self.params.beta, self.params.lambda_
        degree_cost: dict[int, float] = {}
        for wid in cands:
            c = view.degree(wid)
            if c not in degree_cost:  # the first worker of a degree sets its cost (one GPU type per degree assumed here)
                cm = view.worker_cost_model(wid)
                s = cm.service_time_s(c, L, 0)
                degree_cost[c] = beta * s + lam * (c * s - c_min * cm.service_time_s(c_min, L, 0))
        best_degree = min(degree_cost, key=lambda c: (degree_cost[c], c))
        best, best_q = -1, math.inf
        for wid in cands:
            if view.degree(wid) != best_degree:
                continue
            q = self._q(view, wid)
            if q < best_q:
                best, best_q = wid, q
        self._last_s = view.predicted_service_s(best, request)
        return best

    def on_dispatch(self, request: Request, worker_id: int, view: PoolView) -> None:
        if self._stale is not None:
            # the dispatch does not change the worker's cache, so this is the routing-time s
            self._stale.record(worker_id, view.now_s, view.predicted_service_s(worker_id, request))


__all__ = ["VertumnusParams", "VertumnusRouter", "StaleLoadView", "extra_gpu_time_s", "placement_cost"]
