"""``cpgym cache-curve``: replay a trace through one LRU prefix cache of N blocks (no timing) and
print the token-weighted prefix hit rate per N, including an unbounded cache — the standard
tool for sizing a prefix cache (a miss-ratio curve, as in the Mooncake FAST'25 cache-capacity
analysis).

Replay, per request in arrival order: hit = leading blocks present in the cache
(:meth:`envs.sim.cache.PrefixCache.match_ready`); hit tokens = ``min(hit blocks * block, L - 1)``
(the simulator's rule: at least one token is computed); then the request's blocks are inserted
(LRU refresh, eviction of least recently used blocks, tail blocks of a prefix first). Hit rate =
sum of hit tokens / sum of prompt tokens, the definition of ``prefix_hit_rate`` in
``cpgym simulate``. Unbounded = capacity equal to the number of distinct blocks (nothing is ever
evicted), so it is the ideal reuse of the trace under the L-1 rule.

Cost: O(total blocks) per capacity; the 12k-request Mooncake conversation trace takes about a
second per capacity.
"""

from __future__ import annotations

import argparse

DEFAULT_CAPACITIES = "1000,2000,5000,10000,20000,50000"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace", metavar="PATH", required=True,
                   help="trace file (Mooncake JSONL with hash_ids; CSV traces have no prefixes)")
    p.add_argument("--capacities", default=DEFAULT_CAPACITIES,
                   help="comma-separated cache capacities [blocks]; the unbounded cache is always added "
                        f"(default {DEFAULT_CAPACITIES})")
    p.add_argument("--format", choices=("table", "json"), default="table", help="stdout format (default table)")
    p.add_argument("--skip-invalid", action="store_true", help="skip invalid trace lines instead of failing")


def parse_capacities(text: str) -> list[int]:
    """``"1000,10000"`` -> ``[1000, 10000]`` (sorted, deduplicated).

    Raises:
        ValueError: on a non-integer or a capacity < 1.
    """
    out = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        try:
            v = int(item)
        except ValueError:
            raise ValueError(f"--capacities must be comma-separated integers (blocks), got {item!r}") from None
        if v < 1:
            raise ValueError(f"--capacities values must be >= 1 block, got {v}")
        out.append(v)
    if not out:
        raise ValueError("--capacities needs at least one capacity")
    return sorted(set(out))


def hit_rate_curve(workload, capacities: list[int | None]) -> list[dict]:
    """Token-weighted hit rate of one LRU cache per capacity (``None`` = unbounded).

    Args:
        workload: :class:`envs.sim.request.Workload` (its requests in arrival order).
        capacities: capacities [blocks]; ``None`` for unbounded.

    Returns:
        ``[{"capacity_blocks": N or None, "hit_rate": share in [0, 1]}, ...]`` in input order.
    """
    from envs.sim.cache import PrefixCache

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


def run(args: argparse.Namespace) -> int:
    import sys

    from envs.workloads import WorkloadSource
    from experiments.common import dumps_json

    caps: list[int | None] = [*parse_capacities(args.capacities), None]
    wl = WorkloadSource(trace=args.trace, skip_invalid=args.skip_invalid).build()
    skipped = wl.metadata.get("num_skipped_invalid", 0)
    if skipped:
        print(f"warning: skipped {skipped} invalid lines of {args.trace}", file=sys.stderr)
    rows = hit_rate_curve(wl, caps)
    if args.format == "json":
        print(dumps_json(rows))
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
    Console().print(t)
    return 0
