"""``cpgym cache-ablation``: Vertumnus with local prefix caches only vs with the global
prefix-cache manager on ``tool-agent`` at increasing request rates — a thin wrapper over
:func:`experiments.paper_experiments.cache_ablation.run_cache_ablation` (workload, policies and
metrics are documented there; the flags are generated from its ``CacheAblationConfig`` plus the
shared pool and simulator flags).

* Table: per rate and policy, with the % change of the manager vs local caches.
* ``--format json``: a list of objects with ``policy, rate_rps, mean_ttft_s, p90_ttft_s,
  slo_attainment_token_weighted, prefix_hit_rate, kv_transfer_bytes`` (plus
  ``max_link_utilization, mean_link_utilization, num_replications``), like ``cpgym compare``.
* ``--out DIR``: also ``results.csv`` (one row per rate and policy) and ``provenance.json``.
"""

from __future__ import annotations

import argparse

from envs.provenance import write_provenance
from envs.sim.options import check_out_dir, config_from_args
from experiments.common import dumps_json, sim_config_from_args
from experiments.flags.cache_ablation import add_arguments  # noqa: F401  (re-exported)
from experiments.paper_experiments.cache_ablation import (  # noqa: F401  (old import path)
    MEAN_CALLS_PER_SESSION,
    CacheAblationConfig,
    cache_ablation_plan,
    run_cache_ablation,
    run_one,
    tool_agent_at_rate,
)

JSON_KEYS = ("policy", "rate_rps", "mean_ttft_s", "p90_ttft_s", "slo_attainment_token_weighted", "prefix_hit_rate",
             "kv_transfer_bytes", "max_link_utilization", "mean_link_utilization", "num_replications")


def plan(args: argparse.Namespace) -> list[tuple]:
    """The ``(WorkloadSource, SimConfig, policy)`` runs the flags ask for (nothing runs)."""
    return cache_ablation_plan(config_from_args(CacheAblationConfig, args), sim_config_from_args(args))


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(CacheAblationConfig, args)
    config = sim_config_from_args(args)
    check_out_dir(args.out)
    on_row = None
    if args.out:
        import pandas as pd

        write_provenance(args.out, argv=getattr(args, "argv", None))  # first, and results.csv after each run:
        # a run stopped midway keeps its finished runs

        def on_row(rows):
            pd.DataFrame([{k: r[k] for k in JSON_KEYS} for r in rows]).to_csv(f"{args.out}/results.csv", index=False)

    rows = run_cache_ablation(cfg, config, on_row=on_row).rows
    if args.format == "json":
        print(dumps_json([{k: r[k] for k in JSON_KEYS} for r in rows]))
        return 0
    _print_table(rows, f"tool-agent, {cfg.duration_s:g} s, {config.pool.num_gpus} GPUs ({config.pool.composition}), "
                       f"seed {config.seed}, workload seed {cfg.workload_seed}")
    return 0


def _pct(new: float, old: float) -> str:
    return f"{100.0 * (new - old) / old:+.1f}%" if old else "-"


def _print_table(rows: list[dict], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"Prefix-cache ablation: {title}")
    for label in ("rate req/s", "policy", "mean TTFT s", "P90 TTFT s", "SLO tok", "hit rate", "transfer GB",
                  "max link util", "replications"):
        t.add_column(label, justify="left" if label == "policy" else "right")
    by_rate: dict[float, list[dict]] = {}
    for r in rows:
        by_rate.setdefault(r["rate_rps"], []).append(r)
    for rate, rs in by_rate.items():
        for r in rs:
            t.add_row(f"{rate:g}", r["policy"], f"{r['mean_ttft_s']:.3f}", f"{r['p90_ttft_s']:.3f}",
                      f"{r['slo_attainment_token_weighted']:.3f}", f"{r['prefix_hit_rate']:.4f}",
                      f"{r['kv_transfer_bytes'] / 1e9:.2f}", f"{r['max_link_utilization']:.4f}", f"{r['num_replications']:d}")
        if len(rs) == 2:
            a, b = rs
            t.add_row("", "change", _pct(b["mean_ttft_s"], a["mean_ttft_s"]), _pct(b["p90_ttft_s"], a["p90_ttft_s"]),
                      f"{100 * (b['slo_attainment_token_weighted'] - a['slo_attainment_token_weighted']):+.1f} pp",
                      f"{100 * (b['prefix_hit_rate'] - a['prefix_hit_rate']):+.2f} pp", "", "", "", end_section=True)
    Console(width=160).print(t)
