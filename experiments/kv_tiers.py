"""Multi-tier KV experiments (``cpgym kv-tiers``; tiers: ``envs/sim/tiers.py``).

On a rate-scaled window of a trace, at a fraction of the pool's capacity:

1. **Tiers**: each policy with HBM only, + host DRAM, + DRAM and the remote store: TTFT, SLO
   attainment, pool hit rate and the hit rate per tier, bytes fetched, fetch time hidden vs
   exposed.
2. **Eviction**: LRU vs queue-aware next-use eviction of host memory, at two DRAM capacities,
   with queue-head prefetch of depth 1 (where the rule matters: requests behind the head of a
   queue need their DRAM blocks until their fetch starts), next to routing-time fetch with LRU.

Capacity (:func:`estimate_capacity_rps`): a short rate search of its own (it predates
``cpgym capacity``, whose ``sustainable-slo`` definition it does not use): the highest target
rate at which the reference policy, tiers off, keeps its backlog from growing over the window —
every request finishes and the mean queueing delay of the last quarter of the window's arrivals
stays within ``queue_delay_bound_s`` (1 s; a growing backlog makes it grow with the window) — by
bisection between a stable and an unstable rate (the ``kv-tiers-queueing-delay`` definition of
``envs.planning.capacity_definitions``). The plot helper :func:`plot_tier_sweep` draws the
DRAM-capacity x link-bandwidth sweep of ``experiments/specs/kv-tiers-sweep.yaml``.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from baselines.runner import run_policy
from envs import workloads
from envs.metrics import summarize
from envs.planning.capacity_definitions import CapacityBracketError, KVTiersQueueingDefinition, search_capacity
from envs.provenance import write_provenance
from envs.sim import SimConfig, Workload
from envs.sim.tier_config import TierConfig
from experiments.common import dumps_json

TIER_VARIANTS: dict[str, tuple[str, ...]] = {"hbm": ("hbm",), "hbm,dram": ("hbm", "dram"),
                                              "hbm,dram,store": ("hbm", "dram", "store")}
ROW_KEYS = ("policy", "kv_tiers", "eviction", "dram_capacity_gb_per_node", "rate_rps", "num_requests", "mean_ttft_s",
            "p90_ttft_s", "p99_ttft_s", "slo_attainment_token_weighted", "prefix_hit_rate", "hbm_hit_rate", "dram_hit_rate",
            "store_hit_rate", "dram_fetch_bytes", "store_fetch_bytes", "num_fetches", "num_recompute_decisions",
            "mean_fetch_hidden_s", "mean_fetch_exposed_s", "max_link_utilization", "wall_time_s")


def trace_window(trace: str, rate_rps: float, arrival_window_s: tuple[float, float], seed: int = 0) -> Workload:
    """The trace time-scaled to ``rate_rps`` [requests/s], arrivals in ``[start, end)`` s."""
    wl = workloads.load_trace(trace, spread_seed=seed)
    return workloads.window(workloads.scale_to_rate(wl, rate_rps), *arrival_window_s)


def estimate_capacity_rps(trace: str, config: SimConfig, policy: str, arrival_window_s: tuple[float, float],
                          start_rps: float = 4.0, queue_delay_bound_s: float = 1.0, iterations: int = 6) -> dict:
    """Capacity [requests/s] by a short rate search (module docstring).

    Returns:
        ``{"capacity_rps", "policy", "probes": [(rate, drained), ...]}``.

    Raises:
        ValueError: if ``start_rps`` <= 0 or the pool does not drain even at ``start_rps / 64``.
    """
    if not start_rps > 0:
        raise ValueError(f"start_rps must be > 0, got {start_rps}")
    definition = KVTiersQueueingDefinition(queue_delay_bound_s=queue_delay_bound_s, iterations=iterations)
    probes: list[tuple[float, bool]] = []

    def ok(rate: float) -> bool:
        d = definition.verdict(run_policy(policy, trace_window(trace, rate, arrival_window_s), config))
        probes.append((rate, d))
        return d

    try:
        lo, _ = search_capacity(ok, definition.search, start_rps)
    except CapacityBracketError as exc:
        raise ValueError(f"{policy} does not drain the window even at {exc.rate:g} requests/s") from None
    return {"capacity_rps": lo, "policy": policy, "queue_delay_bound_s": queue_delay_bound_s, "probes": probes}


def _row(summary: dict, **extra) -> dict:
    if "dram_hit_rate" not in summary:  # tiers off: every hit is an HBM hit, nothing is fetched
        summary = {**summary, "hbm_hit_rate": summary["prefix_hit_rate"], "dram_hit_rate": 0.0, "store_hit_rate": 0.0,
                   "num_fetches": 0, "num_recompute_decisions": 0}
    return {k: (extra[k] if k in extra else summary.get(k, math.nan)) for k in ROW_KEYS}


@dataclass
class TierStudy:
    """Result of :func:`run_tier_study` (rows with ``ROW_KEYS``)."""

    capacity: dict
    load_fraction: float
    rate_rps: float
    tiers: list[dict] = field(default_factory=list)
    eviction: list[dict] = field(default_factory=list)


def run_tier_study(trace: str, config: SimConfig, policies: list[str], arrival_window_s: tuple[float, float],
                   load_fraction: float = 0.9, capacity_policy: str = "vertumnus-router", capacity_rps: float | None = None,
                   eviction_capacities_gb: tuple[float, float] = (16.0, 64.0),
                   eviction_policies: tuple[str, ...] = ("mooncake-ttft", "dynamo-kv"), progress=None) -> TierStudy:
    """Runs the tier and eviction tables (module docstring) at ``load_fraction`` of capacity."""
    if capacity_rps is None:
        cap = estimate_capacity_rps(trace, config, capacity_policy, arrival_window_s)
    else:
        cap = {"capacity_rps": capacity_rps, "policy": "given", "probes": []}
    rate = load_fraction * cap["capacity_rps"]
    wl = trace_window(trace, rate, arrival_window_s)
    study = TierStudy(capacity=cap, load_fraction=load_fraction, rate_rps=rate)
    base_tiers = config.kv_tiers
    for policy in policies:
        for label, levels in TIER_VARIANTS.items():
            tiers = replace(base_tiers, levels=levels) if len(levels) > 1 else TierConfig()
            s = summarize(run_policy(policy, wl, replace(config, kv_tiers=tiers)))
            dram_gb = tiers.dram_capacity_bytes_per_node / 1e9 if "dram" in levels else 0.0
            study.tiers.append(_row(s, kv_tiers=label, eviction=tiers.eviction if len(levels) > 1 else "-",
                                    dram_capacity_gb_per_node=dram_gb, rate_rps=rate))
            if progress:
                progress(study.tiers[-1])
    variants = (("routing", "lru"), ("queue-head", "lru"), ("queue-head", "next-use"))
    for policy in eviction_policies:
        for gb in eviction_capacities_gb:
            for prefetch, eviction in variants:  # routing-time fetches never wait in a queue: LRU only
                tiers = replace(base_tiers, levels=("hbm", "dram"), dram_capacity_bytes_per_node=gb * 1e9,
                                eviction=eviction, prefetch=prefetch, prefetch_depth_requests=1)
                s = summarize(run_policy(policy, wl, replace(config, kv_tiers=tiers)))
                study.eviction.append(_row(s, kv_tiers=f"hbm,dram ({prefetch})", eviction=eviction,
                                           dram_capacity_gb_per_node=gb, rate_rps=rate))
                if progress:
                    progress(study.eviction[-1])
    return study


def markdown_table(rows: list[dict], cols: list[tuple[str, str, str]]) -> str:
    """Rows as a Markdown table; ``cols`` = (key, header, format)."""
    out = ["| " + " | ".join(h for _, h, _ in cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join(fmt.format(r[k]) if r.get(k) is not None else "-" for k, _, fmt in cols) + " |")
    return "\n".join(out)


SWEEP_COLS = [("policy", "policy", "{}"), ("dram_capacity_gb_per_node", "DRAM GB/node", "{:.0f}"),
              ("dram_gbps_per_gpu", "PCIe GB/s per GPU", "{:g}"), ("mean_ttft_s", "mean TTFT s", "{:.3f}"),
              ("p90_ttft_s", "P90 s", "{:.3f}"), ("prefix_hit_rate", "hit rate", "{:.3f}"),
              ("dram_hit_rate", "DRAM", "{:.3f}"), ("num_fetches", "fetches", "{:.0f}"),
              ("num_recompute_decisions", "recompute", "{:.0f}"),
              ("mean_fetch_exposed_s", "exposed s", "{:.4f}")]

TABLE_COLS = [("policy", "policy", "{}"), ("kv_tiers", "KV tiers", "{}"), ("eviction", "eviction", "{}"),
              ("dram_capacity_gb_per_node", "DRAM GB/node", "{:.0f}"), ("mean_ttft_s", "mean TTFT s", "{:.3f}"),
              ("p90_ttft_s", "P90 s", "{:.3f}"), ("slo_attainment_token_weighted", "SLO tok", "{:.3f}"),
              ("prefix_hit_rate", "hit rate", "{:.3f}"), ("hbm_hit_rate", "HBM", "{:.3f}"),
              ("dram_hit_rate", "DRAM", "{:.3f}"),
              ("store_hit_rate", "store", "{:.3f}"), ("num_fetches", "fetches", "{:.0f}"),
              ("num_recompute_decisions", "recompute", "{:.0f}"), ("mean_fetch_hidden_s", "hidden s", "{:.4f}"),
              ("mean_fetch_exposed_s", "exposed s", "{:.4f}")]


def write_study(study: TierStudy, out_dir: str | Path, argv: list[str]) -> Path:
    """Writes ``kv_tiers.json``, ``tables.md`` and ``provenance.json`` under ``out_dir``; returns
    the folder (``cpgym kv-tiers --out`` also writes ``rows.csv`` after each run, and
    ``provenance.json`` before the first)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    (out / "kv_tiers.json").write_text(dumps_json({**asdict(study), "argv": argv}) + "\n")
    text = (f"Capacity {study.capacity['capacity_rps']:.2f} req/s ({study.capacity['policy']}); "
            f"load {study.load_fraction:g} x capacity = {study.rate_rps:.2f} req/s\n\n"
            f"## Tiers\n\n{markdown_table(study.tiers, TABLE_COLS)}\n\n"
            f"## Host-memory eviction\n\n{markdown_table(study.eviction, TABLE_COLS)}\n")
    (out / "tables.md").write_text(text)

    write_provenance(out, argv)
    return out


def plot_tier_sweep(run_dir: str | Path, out_png: str | Path) -> list[dict]:
    """Plots a sweep over ``kv_tiers.dram_capacity_bytes_per_node`` x
    ``kv_tiers.dram_bytes_per_s_per_gpu`` (``cpgym sweep experiments/specs/kv-tiers-sweep.yaml``):
    mean TTFT and pool hit rate vs DRAM capacity, one line per bandwidth. Returns the points.

    Raises:
        ValueError: if ``run_dir`` holds no finished cells with those axes.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = []
    for cell in sorted(Path(run_dir).glob("*/cell.json")):
        c = json.loads(cell.read_text())
        s = json.loads((cell.parent / "summary.json").read_text())
        tiers = c["sim_config"].get("kv_tiers", {})
        points.append({"dram_capacity_gb_per_node": tiers.get("dram_capacity_bytes_per_node", 0) / 1e9,
                       "dram_gbps_per_gpu": tiers.get("dram_bytes_per_s_per_gpu", 0) / 1e9,
                       "policy": c["policy"], "mean_ttft_s": s["mean_ttft_s"], "p90_ttft_s": s["p90_ttft_s"],
                       "prefix_hit_rate": s["prefix_hit_rate"], "dram_hit_rate": s.get("dram_hit_rate", 0.0),
                       "num_fetches": s.get("num_fetches", 0), "num_recompute_decisions": s.get("num_recompute_decisions", 0),
                       "mean_fetch_exposed_s": s.get("mean_fetch_exposed_s", 0.0)})
    points.sort(key=lambda p: (p["policy"], p["dram_capacity_gb_per_node"], p["dram_gbps_per_gpu"]))
    if not points:
        raise ValueError(f"{run_dir}: no finished sweep cells (*/cell.json)")
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for bw in sorted({p["dram_gbps_per_gpu"] for p in points}):
        pts = sorted((p for p in points if p["dram_gbps_per_gpu"] == bw), key=lambda p: p["dram_capacity_gb_per_node"])
        x = [p["dram_capacity_gb_per_node"] for p in pts]
        axes[0].plot(x, [p["mean_ttft_s"] for p in pts], marker="o", label=f"{bw:g} GB/s per GPU")
        axes[1].plot(x, [p["prefix_hit_rate"] for p in pts], marker="o", label=f"{bw:g} GB/s per GPU")
    for ax, yl in zip(axes, ("mean TTFT [s]", "pool prefix hit rate")):
        ax.set_xscale("log")
        ax.set_xlabel("host DRAM for KV per node [GB]")
        ax.set_ylabel(yl)
        ax.grid(alpha=0.3)
    axes[1].legend(title="host->GPU link")
    fig.tight_layout()
    fig.savefig(out_png, dpi=120)
    plt.close(fig)
    return points


__all__ = ["TierStudy", "estimate_capacity_rps", "run_tier_study", "write_study", "plot_tier_sweep", "trace_window"]
