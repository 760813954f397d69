"""Upper bound of any global prefix-cache manager on the cache ablation's tool-agent workload:
Vertumnus (router only) with local caches vs the same run where every worker reads and writes one
pooled LRU cache (the sum of the workers' capacities), i.e. every prefix is a ready hit on every
worker at no transfer cost. Prints mean / P90 TTFT, queueing and hit share, and per CP degree the
request share and mean queueing (all requests and the P90 tail). Run:
``python -m experiments.scripts.pooled_cache_bound [RATE] [SEED]`` (default 48 req/s, seed 0;
300 s of sessions as in ``cpgym cache-ablation``)."""

from __future__ import annotations

import sys

import numpy as np

from baselines.registry import get_policy
from baselines.runner import build_simulator
from envs.sim import SimConfig
from envs.sim.cache import PrefixCache
from experiments.paper_experiments.cache_ablation import tool_agent_at_rate
from experiments.scripts.ttft_breakdown import parse_rate_seed, request_arrays


def main(argv: list[str]) -> int:
    rate, seed = parse_rate_seed(argv)
    wl = tool_agent_at_rate(rate, 300.0, seed)
    for mode in ("local", "pooled"):
        sim, spec = build_simulator(get_policy("vertumnus-router"), wl, SimConfig(seed=seed))
        if mode == "pooled":
            workers = list(sim.workers.values())
            shared = PrefixCache(sum(w.cache.capacity_blocks for w in workers), 0)
            for w in workers:
                w.cache = shared
        a = request_arrays(sim.run(spec.make_router()).records)
        ttft, queue, prompt, cached, degree, tail = (a[k] for k in ("ttft", "queue", "prompt", "cached", "degree", "tail"))
        print(f"{mode:6s} tool-agent {rate:g} req/s seed {seed}: mean TTFT {ttft.mean():.3f} s, "
              f"P90 {np.percentile(ttft, 90):.3f} s, mean queueing {queue.mean():.3f} s, "
              f"hit share {cached.sum() / prompt.sum():.4f}")
        for d in sorted(set(degree.tolist())):
            m = degree == d
            print(f"  CP-{d}: request share {m.mean():.2f}, mean queueing {queue[m].mean():.3f} s; P90 tail share "
                  f"{(degree[tail] == d).mean():.2f}, tail queueing {queue[tail & m].mean():.3f} s")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main(sys.argv[1:]))
