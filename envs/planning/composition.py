"""Pool compositions (paper §6): enumeration of the compositions of a pool with its supported
degrees, their profiled capacity, and the initial composition chosen from historical demand.

Initial composition (paper §6): among all compositions of the pool with the supported degrees
whose load ``rate / capacity`` is at most ``max_load``, favour more large-degree workers
(lexicographically most workers of the largest degree, then the next); if none has enough
capacity, the one with the largest capacity.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from envs.planning.capacity import CapacityProfile, CapacityTable, DemandHistory
from envs.sim.config import SimConfig
from envs.sim.cost_model import Calibration
from envs.sim.pool import PoolConfig, resolve_composition
from envs.sim.request import Workload

__all__ = ["enumerate_compositions", "node_homogeneous_compositions",
           "pool_over_degrees", "degree_counts", "composition_capacity_rps", "initial_composition",
           "deployment_pool", "workload_initial_pool", "given_initial_pool", "PROFILED"]

#: The full system's ``initial_composition`` parameter value that selects the paper's §6 rule
#: (:func:`workload_initial_pool`) rather than a given composition (:func:`given_initial_pool`).
PROFILED = "profile"


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


def node_homogeneous_compositions(pool: PoolConfig, degrees=None) -> list[str]:
    """The compositions of ``pool`` over CP ``degrees`` (default its ``supported_degrees``) in
    which every node holds workers of one degree: each degree's GPU count is a multiple of
    ``pool.gpus_per_node`` (workers are placed largest degree first, node-aligned). In
    :func:`enumerate_compositions`' order; e.g. 40 GPUs in nodes of 8 over {2, 4, 8}: the 21 ways
    to give each of the 5 nodes one CP-8, two CP-4 or four CP-2 workers (of the 36 compositions).
    A smaller candidate set for the fixed-pool references of ``baselines.fixed_compositions``.

    Raises:
        ValueError: when ``degrees`` is not a non-empty subset of the pool's supported degrees.
    """
    degrees = tuple(sorted({int(d) for d in (pool.supported_degrees if degrees is None else degrees)}))
    if not degrees or not set(degrees) <= set(pool.supported_degrees):
        raise ValueError(f"degrees {list(degrees)}: expected a non-empty subset of the pool's supported degrees "
                         f"{list(pool.supported_degrees)}")
    restricted = pool_over_degrees(pool, degrees)
    if restricted is None:
        return []
    out = []
    for comp in enumerate_compositions(restricted):
        counts = degree_counts(comp, restricted)
        if all(d * n % pool.gpus_per_node == 0 for d, n in counts.items()):
            out.append(comp)
    return out


def pool_over_degrees(pool: PoolConfig, degrees) -> PoolConfig | None:
    """``pool`` restricted to CP ``degrees`` (a subset of its ``supported_degrees``), whose
    compositions (:func:`enumerate_compositions`) use only those degrees; ``None`` when no
    composition of its GPUs over them fits its topology. The restriction behind both target
    menus: the learned controller's (``envs.reconfig_env.target_menu``) and the heuristic's
    (``ControllerConfig.target_degrees``).

    The restricted pool's own composition is the homogeneous smallest-degree one: degrees are
    powers of two, so the smallest divides every composition's GPU count, and it fits if any does.
    """
    degrees = tuple(sorted(set(degrees)))
    d_min = degrees[0]
    if pool.num_gpus % d_min:
        return None
    try:
        return replace(pool, supported_degrees=degrees, composition=f"cp{d_min}x{pool.num_gpus // d_min}")
    except ValueError:  # even the homogeneous smallest-degree pool does not fit the topology
        return None


def degree_counts(composition: str, pool: PoolConfig) -> dict[int, int]:
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
        cap = composition_capacity_rps(degree_counts(comp, pool), profiles)
        if cap > 0 and rate_rps / cap <= max_load:
            return comp, {"capacity_rps": cap, "load": rate_rps / cap, "feasible": True, "profiles": info_profiles}
        if cap > best_cap:
            best, best_cap = comp, cap
    return best, {"capacity_rps": best_cap, "load": rate_rps / best_cap if best_cap > 0 else math.inf, "feasible": False,
                  "profiles": info_profiles}



def deployment_pool(pool: PoolConfig) -> PoolConfig:
    """``pool`` with its supported degrees narrowed to the degrees of its configured composition
    (the deployment's CP degrees: the default ``cp4x6,cp2x8`` gives {2, 4}, the paper's degrees
    for Qwen3, §9), so that a full-system run chooses and reconfigures among those only."""
    degrees = tuple(sorted({d for d, _ in resolve_composition(pool.composition, pool)}))
    return replace(pool, supported_degrees=degrees)


def given_initial_pool(pool: PoolConfig, composition: str) -> tuple[PoolConfig, dict]:
    """The full system's starting pool when its ``initial_composition`` is given (e.g. the best
    fixed composition chosen on a task's training episodes, ``benchmark.tuning``): ``composition``
    (``+`` or ``,`` between groups: ``cp8x2+cp4x3+cp2x6``), its degrees added to the deployment's
    (:func:`deployment_pool`) so that the controller splits and merges among both.

    Returns:
        ``(pool, {"given": composition})``.

    Raises:
        ValueError: naming ``initial_composition`` when the composition does not fit the pool.
    """
    comp = composition.replace("+", ",")
    dep = deployment_pool(pool)
    try:
        degrees = {d for d, _ in resolve_composition(comp, replace(pool, composition=comp))}
        out = replace(dep, supported_degrees=tuple(sorted(set(dep.supported_degrees) | degrees)), composition=comp)
        out.placements()
    except ValueError as exc:
        raise ValueError(f"initial_composition {composition!r}: expected {PROFILED!r} or a composition of the "
                         f"{pool.num_gpus}-GPU pool such as 'cp4x7+cp2x6' ({exc})") from None
    return out, {"given": comp}


def workload_initial_pool(pool: PoolConfig, history: DemandHistory | Workload, config: SimConfig,
                          calibration: Calibration, cache=None, max_load: float = 0.8,
                          profile=None) -> tuple[PoolConfig, dict]:
    """The full Vertumnus system's starting pool (paper §6 "Capacity Profiling and
    Initialization"): the deployment's degrees (:func:`deployment_pool`) and the composition
    :func:`initial_composition` chooses for the historical demand (its prompt-length mix, mean
    rate and the prefix reuse of an unbounded cache, :class:`~envs.planning.capacity.DemandHistory`).

    Args:
        pool: the run's configured pool (its composition gives the degrees).
        history: the demand history: a :class:`~envs.planning.capacity.DemandHistory` (a benchmark
            run passes its task's training episodes), or a non-empty
            :class:`~envs.sim.request.Workload` standing in for it (the run's own workload outside
            the benchmark: the paper profiles a production history of the same service).
        config, calibration: the run's settings and cost model.
        cache: a :class:`~envs.planning.capacity.CapacityCache` to memoise profiles in (shared with
            the run's controller), or ``None``.
        max_load: as in :func:`initial_composition`.
        profile: :class:`~envs.planning.capacity.ProfileConfig` (default settings if ``None``).

    Returns:
        ``(pool, info)``: the pool with the chosen composition, and :func:`initial_composition`'s
        info plus ``"history"`` (the history's ``source``).

    Raises:
        ValueError: for an empty workload or something that is neither a history nor a workload.
    """
    if not isinstance(history, DemandHistory):
        history = DemandHistory.of(history, "run workload")
    dep = deployment_pool(pool)
    cfg = replace(config, pool=dep)
    table = CapacityTable(cfg, calibration, profile, cache=cache)
    L, hit = history.prompt_tokens, history.mean_cached_tokens
    table.seed_history(L, hit)
    comp, info = initial_composition(dep, cfg, calibration, L, history.rate_rps, mean_cached_tokens=hit,
                                     max_load=max_load, table=table)
    return replace(dep, composition=comp), {**info, "history": history.source}
