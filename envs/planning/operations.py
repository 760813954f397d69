"""Planning split/merge operations towards a target composition (paper §6 mechanics, shared by
the heuristic controller and the learned reconfiguration policies).

A *target* is a composition in counts form, ``{CP degree: number of workers}``, covering the pool's
GPUs. :func:`operations_towards` picks eligible operations (:func:`envs.sim.reconfig.eligible_operations`)
that move the pool's *projected* composition (in-flight operations counted as done,
:func:`projected_degree_counts`) towards the target, one at a time in the order of a ranking (the
paper's: shortest predicted drain, then least expected KV-reconciliation traffic, then pool order,
:func:`rank_operations`), within a GPU budget. Nothing is started here: the caller applies the
returned operations (they involve disjoint workers, so all stay eligible until applied).

Distance. For each degree ``d`` let ``G_d(c) = Σ_{d' >= d} d' · c_{d'}`` be the GPUs held by workers
of degree at least ``d``. A split of a CP-``C`` worker lowers only ``G_C`` (by ``C``); a merge into
CP-``2C`` raises only ``G_{2C}`` (by ``2C``). The distance ``Σ_d |G_d(c) − G_d(t)|`` therefore falls by
exactly the operation's size when the operation goes the right way and rises otherwise, so a
greedy pass never oscillates and multi-step paths (CP-8 → CP-4 → CP-2) are found one level at a time.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from envs.sim.reconfig import MERGE, SPLIT, Operation, eligible_operations, get_reconfigurator

__all__ = ["rank_operations", "projected_degree_counts", "composition_distance", "operations_towards"]


def rank_operations(sim, ops: list[Operation], traffic: dict[Operation, int] | None = None) -> list[Operation]:
    """``ops`` ordered by predicted drain time, then expected KV-reconciliation traffic, then
    pool order (paper §6 "Eligible operations are prioritized by predicted drain interval and
    then expected KV-reconciliation traffic").

    Args:
        traffic: optional memo ``{operation: expected reconciliation bytes}`` for a caller that
            ranks overlapping sets of operations at one simulated instant (the traffic does not
            change while the simulation does not advance); filled here.
    """
    r = get_reconfigurator(sim)
    drains = [r.predicted_drain_s(op) for op in ops]
    num_with_drain = Counter(drains)
    memo = traffic if traffic is not None else {}

    def bytes_of(op: Operation) -> int:
        got = memo.get(op)
        if got is None:
            got = memo[op] = r.expected_reconciliation_bytes(op)
        return got

    # the traffic only orders operations of equal predicted drain: it is computed for those alone
    # (a merge's costs a pass over both caches), the order is the same
    keys = [(d, bytes_of(op) if num_with_drain[d] > 1 else 0,
             sim.workers[op.worker_ids[0]].first_gpu) for d, op in zip(drains, ops)]
    return [op for _, op in sorted(zip(keys, ops), key=lambda ko: ko[0])]


def projected_degree_counts(sim) -> dict[int, int]:
    """``{CP degree: number of workers}`` of ``sim``'s pool once every in-flight operation has
    committed (operations past their switch already show their new workers)."""
    counts: dict[int, int] = {}
    for w in sim.workers.values():
        counts[w.degree] = counts.get(w.degree, 0) + 1
    recon = sim.attachments.get("reconfig")
    for rec in (recon.in_flight() if recon is not None else ()):
        if not any(wid in sim.workers for wid in rec.old_worker_ids):
            continue  # switched: the new workers are counted above
        counts[rec.old_degree] -= len(rec.old_worker_ids)
        counts[rec.new_degree] = counts.get(rec.new_degree, 0) + (2 if rec.kind == SPLIT else 1)
    return {d: n for d, n in counts.items() if n}


def covers_pool(counts: dict[int, int], pool) -> bool:
    """True if a composition ``{CP degree: number of workers}`` holds every GPU of ``pool`` (a
    :class:`~envs.sim.PoolConfig`): what a target composition must do, and what a pool degraded by
    a fault does not (failed GPUs, or healthy spares that fit no worker until repair:
    :mod:`envs.sim.faults`)."""
    return sum(d * n for d, n in counts.items()) == pool.num_gpus


def composition_distance(counts: dict[int, int], target: dict[int, int]) -> int:
    """``Σ_d |G_d(counts) − G_d(target)|`` [GPUs] over the degrees of either and every halving
    between them (split and merge change the degree by a factor of 2; module docstring); 0 iff the
    two compositions have the same number of workers of every degree."""
    present = set(counts) | set(target)
    levels = set(present)
    for d in present:
        while d % 2 == 0 and d // 2 >= min(present):
            d //= 2
            levels.add(d)
    degrees = sorted(levels, reverse=True)
    dist = g_c = g_t = 0
    for d in degrees:
        g_c += d * counts.get(d, 0)
        g_t += d * target.get(d, 0)
        dist += abs(g_c - g_t)
    return dist


def operations_towards(sim, target: dict[int, int], max_gpus: float = float("inf"),
                       rank: Callable | None = rank_operations, allowed: Callable[[Operation], bool] | None = None,
                       ) -> list[Operation]:
    """Eligible operations that move ``sim``'s projected composition towards ``target``.

    Greedy: repeatedly take the first operation in ``rank`` order that strictly lowers
    :func:`composition_distance`, involves no worker already taken, fits in the remaining GPU
    budget and passes ``allowed``; stop when none does.

    Args:
        sim: a simulator with the pool to change.
        target: ``{CP degree: number of workers}``; its GPUs must equal the pool's, every degree
            must be supported.
        max_gpus: at most this many GPUs take part in the returned operations.
        rank: orders the eligible operations (``sim, ops -> ops``); ``None`` keeps pool order.
        allowed: optional filter (e.g. a dwell-time lockout).

    Returns:
        Operations on disjoint workers, in the order to apply them (empty when the projected
        composition already is the target or nothing eligible helps).

    Raises:
        ValueError: if ``target`` does not cover the pool's GPUs or names an unsupported degree.
    """
    pool = sim.config.pool
    bad = sorted(d for d in target if d not in pool.supported_degrees)
    if bad:
        raise ValueError(f"target composition {target}: CP degree(s) {bad} not supported (supported: "
                         f"{list(pool.supported_degrees)})")
    if not covers_pool(target, pool) or any(n < 0 for n in target.values()):
        raise ValueError(f"target composition {target} must cover the pool's {pool.num_gpus} GPUs with counts >= 0")
    counts = projected_degree_counts(sim)
    dist = composition_distance(counts, target)
    if dist == 0:
        return []
    ops = eligible_operations(sim)
    if rank is not None:
        ops = rank(sim, ops)
    taken: set[int] = set()
    out: list[Operation] = []
    budget = max_gpus
    for op in ops:
        if dist == 0:
            break
        if taken.intersection(op.worker_ids):
            continue
        degree = sim.workers[op.worker_ids[0]].degree
        size = degree * len(op.worker_ids)
        if size > budget + 1e-9 or (allowed is not None and not allowed(op)):
            continue
        new = dict(counts)
        if op.kind == SPLIT:
            new[degree] -= 1
            new[degree // 2] = new.get(degree // 2, 0) + 2
        else:
            assert op.kind == MERGE
            new[degree] -= 2
            new[2 * degree] = new.get(2 * degree, 0) + 1
        new_dist = composition_distance(new, target)
        if new_dist >= dist:
            continue
        out.append(op)
        taken.update(op.worker_ids)
        counts, dist, budget = new, new_dist, budget - size
    return out
