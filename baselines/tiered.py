"""Routers with the KV pull path (runs with KV tiers below HBM, ``envs/sim/tiers.py``).

Every rule asks the run's :class:`envs.sim.tiers.TieredKV` for each candidate worker ``w``
(``route_estimate``): the prefix hit ``P'_w`` after the engine's fetch-or-recompute choice (the
HBM hit extended by blocks in the node's host memory or the store when fetching them is
predicted faster) and the predicted start delay ``D_w = max(q_w, R_w - now)`` (``R_w``: when
the fetched prefix would be ready on w, counting link queues and the store lookup). Without
tiers the routers in :mod:`baselines.industry` and :mod:`baselines.vertumnus` run unchanged.

* Mooncake (Qin et al., FAST'25 §5, "KVCache-centric scheduling"): the conductor picks the
  prefill instance with the least predicted TTFT counting the KV transfer,
  ``TTFT_w = D_w + E_{C_w}(L - P'_w, P'_w)``.
* Dynamo (ai-dynamo/dynamo KV router with the KV block manager's host/remote tiers): the
  overlap of the KV-overlap cost counts blocks of every tier the request will not recompute,
  ``cost_w = weight * (active_w + max(0, L - overlap_w * block)) / block + potential blocks_w``
  with ``overlap_w = max(HBM hit, ceil(P'_w / block))`` (:class:`baselines.industry.DynamoKVRouter`).
* Vertumnus, **an extension beyond the paper** (its §5 cost knows only local HBM hits): the
  queue term becomes the tiered ready time and the service terms use the tiered hit,
  ``J = D_w + beta * s' + lambda * (C_w * s' - C_min * E_{C_min}(R', P'))`` with
  ``s' = E_{C_w}(L - P'_w, P'_w)``.

In a heterogeneous pool every estimate (fetch or recompute, ready time, ``E_{C_w}``) uses the
worker's own cost model (``Worker.cost_model``, its node's GPU type), as the tier-less routers.

Hot path: ``route_estimate`` is called only for candidates whose first block after the HBM hit
is held by a lower tier reachable from their node (``TieredKV.lower_dicts``); for the others
``P' = P`` and ``D = q_w``. Ties: pool order (the first minimum), as in the tier-less routers;
Dynamo's as its tier-less router (fewest cached blocks, then the seeded generator).
"""

from __future__ import annotations

import math

from envs.sim.request import Request
from envs.sim.router import PoolView
from envs.sim.worker import Worker


def pull_estimate(tiers, w: Worker, request: Request, q_s: float) -> tuple[int, float, int]:
    """``(P' [tokens], D [s], HBM hit [blocks])`` of ``request`` on ``w`` (module docstring)."""
    hashes = request.block_hashes
    k0 = w.cache.match_ready(hashes)
    if k0 < len(hashes):
        h = hashes[k0]
        for d in tiers.lower_dicts[w.node]:
            if h in d:
                p, delay = tiers.route_estimate(w, request, k0, q_s)
                return p, delay, k0
    p = k0 * tiers.bs
    cap = request.num_prompt_tokens - 1
    return (p if p < cap else cap), q_s, k0


def _q(w: Worker, now_s: float) -> float:
    """``q_w`` [s] (as :meth:`PoolView.outstanding_work_s`)."""
    q = w.queued_predicted_s
    if w.batch:
        rem = w.step_predicted_end_s - now_s
        if rem > 0.0:
            q += rem
    return q


def mooncake_pull_route(request: Request, view: PoolView, tiers) -> int:
    """Least predicted TTFT with the pull path (module docstring)."""
    workers = view.workers
    L = request.num_prompt_tokens
    now = view.now_s
    best, best_t = -1, math.inf
    for wid in view.eligible_worker_ids(request):
        w = workers[wid]
        p, delay, _ = pull_estimate(tiers, w, request, _q(w, now))
        t = delay + w.cost_model.service_time_s(w.degree, L - p, p)  # the worker's own GPU type
        if t < best_t:
            best, best_t = wid, t
    return best


def dynamo_pull_overlap(request: Request, view: PoolView, tiers):
    """``overlap_blocks(worker) -> int`` of :meth:`baselines.industry.DynamoKVRouter.logits` with
    the overlap over all tiers (module docstring): the larger of the worker's HBM prefix blocks
    and the blocks of the prefix it could pull from host memory or the store [blocks]."""
    bs = view.kv_block_size_tokens
    now = view.now_s

    def overlap_blocks(w: Worker) -> int:
        p, _, hbm = pull_estimate(tiers, w, request, _q(w, now))
        return max(hbm, -(-p // bs))

    return overlap_blocks


def vertumnus_pull_route(router, request: Request, view: PoolView, cands: list[Worker], c_min: int) -> tuple[int, float]:
    """Vertumnus cost with the tiered ready time (an extension beyond the paper; module
    docstring). Returns ``(worker id, s' of the chosen worker)``."""
    tiers = view.kv_tiers
    cm = None  # each worker's own cost model (heterogeneous pools), as the tier-less router
    d = a = b = c = alpha = 0.0
    L = request.num_prompt_tokens
    beta = router.params.beta
    lam = router.params.lambda_
    now = view.now_s
    stale = router._stale
    last_p = -1
    A = B = s_min = 0.0
    best, best_j, best_s = -1, math.inf, 0.0
    for w in cands:
        q = _q(w, now) if stale is None else stale.worker_load_s(w, now)
        p, delay, _ = pull_estimate(tiers, w, request, q)
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
        j = delay + beta * s + lam * (C * s - c_min * s_min)
        if j < best_j:
            best, best_j, best_s = w.worker_id, j, s
    return best, best_s


__all__ = ["pull_estimate", "mooncake_pull_route", "dynamo_pull_overlap", "vertumnus_pull_route"]
