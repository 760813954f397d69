"""Where the TTFT of the cache ablation's local-caches run goes: queueing vs prefill execution, for
all requests and for the P90 tail, with uncached tokens and the prefix hit share beside the
workload's ideal reuse. Run: ``python -m experiments.scripts.ttft_breakdown [RATE] [SEED]``
(default 48 req/s, seed 0; tool-agent as in ``cpgym cache-ablation``; policy ``vertumnus``)."""

from __future__ import annotations

import sys

import numpy as np

from baselines.registry import get_policy
from baselines.runner import run_policy
from envs.sim import SimConfig
from envs.workloads import workload_stats
from experiments.paper_experiments.cache_ablation import tool_agent_at_rate


def request_arrays(records) -> dict[str, np.ndarray]:
    """Per-request arrays of a run's records: ``ttft`` [s], ``queue`` (start − arrival) [s],
    ``exec`` (actual service) [s], ``prompt`` / ``cached`` [tokens], ``degree``, and ``tail``
    (TTFT at or above its P90)."""
    ttft = np.asarray(records["ttft_s"])
    return {"ttft": ttft, "queue": np.asarray(records["start_s"]) - np.asarray(records["arrival_s"]),
            "exec": np.asarray(records["actual_service_s"]), "prompt": np.asarray(records["num_prompt_tokens"]),
            "cached": np.asarray(records["num_cached_tokens"]), "degree": np.asarray(records["degree"]),
            "tail": ttft >= np.percentile(ttft, 90)}


def parse_rate_seed(argv: list[str]) -> tuple[float, int]:
    """``[RATE] [SEED]`` (default 48 req/s, seed 0)."""
    return (float(argv[0]) if argv else 48.0), (int(argv[1]) if len(argv) > 1 else 0)


def main(argv: list[str]) -> int:
    rate, seed = parse_rate_seed(argv)
    wl = tool_agent_at_rate(rate, 300.0, seed)
    a = request_arrays(run_policy(get_policy("vertumnus-router"), wl, SimConfig(seed=seed)).records)
    ttft, queue, exec_s, prompt, cached, tail = (a[k] for k in ("ttft", "queue", "exec", "prompt", "cached", "tail"))
    print(f"tool-agent {rate:g} req/s seed {seed}: ideal reuse {workload_stats(wl)['ideal_reuse_fraction']:.4f}, "
          f"hit share {cached.sum() / prompt.sum():.4f}, mean TTFT {ttft.mean():.3f} s, P90 {np.percentile(ttft, 90):.3f} s")
    for name, m in (("all", np.ones_like(tail)), ("P90 tail", tail)):
        print(f"  {name:8s}: mean queueing {queue[m].mean():.3f} s, mean execution {exec_s[m].mean():.3f} s, "
              f"mean uncached {(prompt - cached)[m].mean():,.0f} tokens, hit share {cached[m].sum() / prompt[m].sum():.3f}, "
              f"CP-4 share {(a['degree'][m] == 4).mean():.2f}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main(sys.argv[1:]))
