"""Mooncake's conductor: the worker of least predicted TTFT (Mooncake, FAST'25).

Part of the industry baselines (:mod:`baselines.industry`)."""

from __future__ import annotations

import math

from baselines.tiered import mooncake_pull_route
from envs.sim.request import Request
from envs.sim.router import PoolView, Router


class MooncakeTTFTRouter(Router):
    """Mooncake conductor-style selection (Qin et al., FAST'25, §5 "KVCache-centric scheduling"):
    the worker with the minimum predicted TTFT = predicted queueing ``q_w`` + predicted prefill
    ``E_C(R, P)`` with the worker's own ready prefix hit (no remote-cache transfer in cpgym's
    per-worker caches). Equal to Vertumnus with beta = 1, lambda = 0. Ties: pool order.
    With KV tiers on, the predicted TTFT counts the pull of the prefix from host memory or the
    store (Mooncake's transfer-aware selection, baselines/tiered.py). Not modelled: the paper's
    early rejection of requests predicted to miss the TTFT/TBT SLO (cpgym serves every request)."""

    name = "mooncake-ttft"

    def route(self, request: Request, view: PoolView) -> int:
        tiers = view.kv_tiers
        if tiers is not None:
            return mooncake_pull_route(request, view, tiers)
        best, best_t = -1, math.inf
        for w in view.eligible_worker_ids(request):
            t = view.outstanding_work_s(w) + view.predicted_service_s(w, request)
            if t < best_t:
                best, best_t = w, t
        return best
