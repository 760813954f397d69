"""``cpgym cache-curve``: replay a trace through one LRU prefix cache of N blocks (no timing) and
print the token-weighted prefix hit rate per N, including an unbounded cache — the standard
tool for sizing a prefix cache (a miss-ratio curve, as in the Mooncake FAST'25 cache-capacity
analysis). ``--workload NAME`` replays a named synthetic workload instead of a trace; the table then
also shows its reuse statistics (:func:`envs.workloads.prefix_reuse_stats`: cross- vs
within-session reuse, shared prefixes, block lifetimes, session structure), and ``--format json``
prints ``{"curve": [...], "reuse": {...}}``.

Replay, per request in arrival order: hit = leading blocks present in the cache
(:meth:`envs.sim.cache.PrefixCache.match_ready`); hit tokens = ``min(hit blocks * block, L - 1)``
(the simulator's rule: at least one token is computed); then the request's blocks are inserted
(LRU refresh, eviction of least recently used blocks, tail blocks of a prefix first). Hit rate =
sum of hit tokens / sum of prompt tokens, the definition of ``prefix_hit_rate`` in
``cpgym simulate``. Unbounded = capacity equal to the number of distinct blocks (nothing is ever
evicted), so it is the ideal reuse of the trace under the L-1 rule.

Per tier (``--dram-capacities``): the same replay through an HBM cache of each ``--capacities``
size with a host-DRAM tier below it (``envs/sim/tiers.py`` rules: an HBM eviction is demoted to
DRAM, LRU; a request's hit is its HBM run continued by blocks DRAM holds, which are fetched and
inserted into HBM with the rest of its blocks); each row reports the HBM and DRAM shares of the
hit rate.

Cost: O(total blocks) per capacity; the 12k-request Mooncake conversation trace takes about a
second per capacity.
"""

from __future__ import annotations

import argparse
import math

from envs.sim.cache import PrefixCache
from envs.sim.tiers import BlockTier
from envs.workloads import WorkloadSource, prefix_reuse_stats
from experiments.common import dumps_json
from experiments.flags.cache_curve import DEFAULT_CAPACITIES, add_arguments  # noqa: F401  (re-exported)
from policies.common.policy_args import check_distinct


def parse_capacities(text: str, flag: str = "--capacities") -> list[int]:
    """``"10000,1000"`` -> ``[1000, 10000]`` (sorted).

    Raises:
        ValueError: naming ``flag``, on a non-integer, a capacity < 1 or a repeated capacity.
    """
    out = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        try:
            v = int(item)
        except ValueError:
            raise ValueError(f"{flag} must be comma-separated integers (blocks), got {item!r}") from None
        if v < 1:
            raise ValueError(f"{flag} values must be >= 1 block, got {v}")
        out.append(v)
    if not out:
        raise ValueError(f"{flag} needs at least one capacity")
    # a repeated capacity was replayed once and shown once, without a word
    check_distinct(out, flag, text, "distinct capacities (each is one row)")
    return sorted(out)


def hit_rate_curve(workload, capacities: list[int | None]) -> list[dict]:
    """Token-weighted hit rate of one LRU cache per capacity (``None`` = unbounded).

    Args:
        workload: :class:`envs.sim.request.Workload` (its requests in arrival order).
        capacities: capacities [blocks]; ``None`` for unbounded.

    Returns:
        ``[{"capacity_blocks": N or None, "hit_rate": share in [0, 1]}, ...]`` in input order.
    """
    reqs = workload.requests
    bs = workload.kv_block_size_tokens
    total_tokens = sum(r.num_prompt_tokens for r in reqs)
    distinct = len({h for r in reqs for h in r.block_hashes}) if None in capacities else 0
    rows = []
    for cap in capacities:
        cache = PrefixCache(distinct if cap is None else cap)
        match = cache.match_ready
        insert = cache.insert
        hit_tokens = 0
        for r in reqs:
            hashes = r.block_hashes
            n = match(hashes) * bs
            L = r.num_prompt_tokens
            hit_tokens += n if n < L else L - 1
            insert(hashes)
        rows.append({"capacity_blocks": cap, "hit_rate": hit_tokens / total_tokens if total_tokens else 0.0})
    return rows


def tiered_hit_rate_curve(workload, hbm_capacities: list[int], dram_capacities: list[int]) -> list[dict]:
    """Token-weighted hit rate per tier of an HBM LRU cache with a DRAM tier below it (module
    docstring), for every (HBM, DRAM) capacity pair [blocks].

    Returns:
        ``[{"capacity_blocks", "dram_capacity_blocks", "hbm_hit_rate", "dram_hit_rate", "hit_rate"}, ...]``.
    """
    reqs = workload.requests
    bs = workload.kv_block_size_tokens
    total_tokens = sum(r.num_prompt_tokens for r in reqs) or 1
    rows = []
    for cap in hbm_capacities:
        for dcap in dram_capacities:
            cache = PrefixCache(cap)
            dram = BlockTier(dcap)
            cache.evict_batch_listeners.append(lambda _w, hs, dram=dram: dram.put(hs, 0.0))
            hbm_tokens = dram_tokens = 0
            for r in reqs:
                hashes = r.block_hashes
                k0 = cache.match_ready(hashes)
                k = k0
                while k < len(hashes) and hashes[k] in dram:
                    k += 1
                cap_tokens = r.num_prompt_tokens - 1
                p0 = min(k0 * bs, cap_tokens)
                hbm_tokens += p0
                dram_tokens += min(k * bs, cap_tokens) - p0
                if k > k0:
                    dram.touch(hashes[k0:k])
                cache.insert(hashes)
            rows.append({"capacity_blocks": cap, "dram_capacity_blocks": dcap, "hbm_hit_rate": hbm_tokens / total_tokens,
                         "dram_hit_rate": dram_tokens / total_tokens, "hit_rate": (hbm_tokens + dram_tokens) / total_tokens})
    return rows


def _print_tiered(wl, rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{wl.name}: {wl.num_requests} requests, HBM LRU cache + host-DRAM tier "
                    "(token-weighted hit rate per tier)")
    for col in ("HBM blocks", "DRAM blocks", "HBM hit", "DRAM hit", "hit rate"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(f"{r['capacity_blocks']:,d}", f"{r['dram_capacity_blocks']:,d}", f"{r['hbm_hit_rate']:.4f}",
                  f"{r['dram_hit_rate']:.4f}", f"{r['hit_rate']:.4f}")
    Console().print(t)


def _load(args: argparse.Namespace):
    if args.workload is not None:
        if args.duration_s is not None and not (math.isfinite(args.duration_s) and args.duration_s > 0):
            raise ValueError(f"--duration-s must be a finite number of seconds > 0, got {args.duration_s}")
        if args.workload_seed is not None and args.workload_seed < 0:
            raise ValueError(f"--workload-seed must be an integer >= 0, got {args.workload_seed}")
        params = () if args.duration_s is None else (("duration_s", args.duration_s),)
        seed = 0 if args.workload_seed is None else args.workload_seed
        return WorkloadSource(name=args.workload, seed=seed, params=params).build()
    if args.duration_s is not None:
        raise ValueError("--duration-s applies to --workload only (a trace keeps its own window)")
    if args.workload_seed is not None:
        raise ValueError("--workload-seed applies to --workload only (a trace is replayed in its own order)")
    wl = WorkloadSource(trace=args.trace, skip_invalid=args.skip_invalid).build()  # a TraceWarning reports skipped lines
    if wl.metadata.get("format") == "azure-2023-csv":  # envs/workloads/traces/azure.py: fresh blocks per request
        raise ValueError(f"{args.trace}: an Azure 2023 trace has no prefix information (every request gets fresh "
                         "blocks), so every hit rate would be 0; give a Mooncake JSONL trace with hash_ids, the L-Eval "
                         "lengths CSV or --workload")
    return wl


def run(args: argparse.Namespace) -> int:
    caps: list[int | None] = [*parse_capacities(args.capacities), None]
    dram_caps = parse_capacities(args.dram_capacities, "--dram-capacities") if args.dram_capacities else None
    wl = _load(args)
    if dram_caps is not None:
        rows = tiered_hit_rate_curve(wl, caps[:-1], dram_caps)
        if args.format == "json":
            print(dumps_json(rows))
        else:
            _print_tiered(wl, rows)
        return 0
    rows = hit_rate_curve(wl, caps)
    reuse = prefix_reuse_stats(wl) if args.workload is not None else None
    if args.format == "json":
        print(dumps_json({"curve": rows, "reuse": reuse} if reuse is not None else rows))
        return 0
    from rich.console import Console
    from rich.table import Table

    bs = wl.kv_block_size_tokens
    t = Table(title=f"{wl.name}: {wl.num_requests} requests, {bs}-token blocks, one LRU cache (token-weighted hit rate)")
    t.add_column("capacity blocks", justify="right")
    t.add_column("capacity tokens", justify="right")
    t.add_column("hit rate", justify="right")
    for r in rows:
        cap = r["capacity_blocks"]
        t.add_row("unbounded" if cap is None else f"{cap:,d}", "-" if cap is None else f"{cap * bs:,d}",
                  f"{r['hit_rate']:.4f}")
    console = Console(width=max(Console().width, 110))
    console.print(t)
    if reuse is not None:
        u = Table(title="prefix reuse (ideal, infinite cache)")
        u.add_column("statistic")
        u.add_column("value", justify="right")
        for k, v in reuse.items():
            if isinstance(v, dict):
                shown = " / ".join(f"{x:,.3g}" for x in v.values()) + "  (mean / p50 / p90)"
            else:
                shown = f"{v:,.4g}"
            u.add_row(k, shown)
        console.print(u)
    return 0
