"""The paper's static baselines (§9): homogeneous pools and the static length threshold.

Part of the industry baselines (:mod:`baselines.industry`)."""

from __future__ import annotations

import math

import numpy as np

from envs.sim.cost_model import CostModel
from envs.sim.pool import PoolConfig
from envs.sim.request import Request
from envs.sim.router import PoolView, Router


def homogeneous_composition(degree: int):
    """Composition callable for a homogeneous CP-``degree`` pool of the run's size.

    Returns ``f(pool) -> "cp{degree}x{num_gpus // degree}"`` (e.g. ``cp4x10`` for the paper's
    40-GPU prefill pool, ``cp2x20`` for CP-2).

    Raises:
        ValueError (from the callable): if ``num_gpus`` is not a multiple of ``degree``.
    """

    def composition(pool: PoolConfig) -> str:
        if pool.num_gpus % degree:
            raise ValueError(f"a homogeneous CP-{degree} pool needs a GPU count divisible by {degree}, got {pool.num_gpus}")
        return f"cp{degree}x{pool.num_gpus // degree}"

    composition.__name__ = f"homogeneous_cp{degree}"
    return composition


def default_length_threshold_tokens(cost_model: CostModel, small_degree: int, large_degree: int,
                                    min_efficiency: float = 0.9, kv_block_size_tokens: int = 512,
                                    max_tokens: int = 131072) -> int:
    """Length threshold of ``static-threshold`` from the pool's profile (the cost model): the
    smallest uncached prompt length L (a multiple of the block size) at which the large degree's
    parallel efficiency ``small*E_small(L,0) / (large*E_large(L,0))`` reaches ``min_efficiency``,
    i.e. from where the larger worker spends at most ``1/min_efficiency`` times the GPU time.

    Raises:
        ValueError: if ``min_efficiency`` is not in (0, 1] or the degrees are not increasing.
    """
    if not 0.0 < min_efficiency <= 1.0:
        raise ValueError(f"min_efficiency must be in (0, 1], got {min_efficiency}")
    if not 1 <= small_degree < large_degree:
        raise ValueError(f"need 1 <= small_degree < large_degree, got {small_degree}, {large_degree}")
    cm = cost_model
    top = max_tokens
    L = kv_block_size_tokens
    while L <= top:
        eff = small_degree * cm.service_time_s(small_degree, L, 0) / (large_degree * cm.service_time_s(large_degree, L, 0))
        if eff >= min_efficiency:
            return L
        L += kv_block_size_tokens
    return top


class StaticThresholdRouter(Router):
    """Static heterogeneous pool with a length-threshold router (paper §9 "static-threshold"):
    prompts of at least ``threshold_tokens`` go to the largest-degree workers, shorter ones to the
    smallest-degree workers (if a class has no eligible worker, all eligible workers are used);
    within the class the least predicted outstanding work ``q_w`` (ties: pool order).

    Args:
        threshold_tokens: length threshold [tokens]; ``None`` = derived at reset from the pool's
            profile with :func:`default_length_threshold_tokens` (efficiency 0.9).
        min_efficiency: efficiency target of the derived threshold.
    """

    name = "static-threshold"

    def __init__(self, threshold_tokens: int | None = None, min_efficiency: float = 0.9) -> None:
        if threshold_tokens is not None and threshold_tokens < 1:
            raise ValueError(f"static-threshold threshold_tokens must be >= 1, got {threshold_tokens}")
        self.threshold_tokens = threshold_tokens
        self.min_efficiency = min_efficiency

    def reset(self, view: PoolView, rng: np.random.Generator) -> None:
        super().reset(view, rng)
        degrees = sorted({view.degree(w) for w in view.worker_ids})
        self.small, self.large = degrees[0], degrees[-1]
        if self.threshold_tokens is not None:
            self.threshold = self.threshold_tokens
        elif self.small == self.large:
            self.threshold = math.inf
        else:
            self.threshold = default_length_threshold_tokens(view.cost_model, self.small, self.large,
                                                             self.min_efficiency, view.kv_block_size_tokens)

    def route(self, request: Request, view: PoolView) -> int:
        cands = view.eligible_worker_ids(request)
        want = self.large if request.num_prompt_tokens >= self.threshold else self.small
        cls = [w for w in cands if view.degree(w) == want] or cands
        return min(cls, key=lambda w: view.outstanding_work_s(w))
