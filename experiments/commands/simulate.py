"""``cpgym simulate``: the main job — replay a trace or workload under several routing policies
and print the comparison (table or JSON)."""

from __future__ import annotations

import argparse
import sys

from baselines.capacity import CapacityDefinition, saturated
from baselines.registry import POLICIES, get_policy
from baselines.runner import policy_pool, run_policy, write_run
from envs.metrics import summarize
from envs.metrics.summary import FAULT_KEYS, TIER_SUMMARY_KEYS
from envs.progress import Progress, progress_mode
from envs.sim.options import check_out_dir, split_name_list
from experiments.common import dumps_json, sim_config_from_args, workload_from_args
from experiments.flags.simulate import DEFAULT_POLICIES, add_arguments  # noqa: F401  (re-exported)
from policies.common.checkpoint import SHIPPED_CHECKPOINTS, looks_like_path

#: ``num_unfinished`` counts every request without a TTFT, the ``num_rejected`` ones (longer than any
#: worker holds, never served) included: ``num_requests`` = finished + ``num_unfinished``.
JSON_KEYS = ("policy", "pool", "num_requests", "num_unfinished", "num_rejected", "mean_ttft_s", "p50_ttft_s",
             "p90_ttft_s", "p99_ttft_s", "slo_attainment_token_weighted", "slo_attainment_requests", "prefix_hit_rate",
             "gpu_time_s", "sim_time_s", "wall_time_s")


#: What the table's abbreviated columns mean (printed under it).
TABLE_CAPTION = ("SLO tok: token-weighted SLO attainment (share of prompt tokens in requests that met their TTFT SLO); "
                 "SLO req: share of requests that met it; hit rate: cached share of the prompt tokens of started "
                 "requests; util: GPU busy time / (GPUs x simulated time)")

#: Appended to a table's caption when a run has unfinished requests (e.g. cut by ``--horizon-s``).
UNFINISHED_CAPTION = ("mean / P50 / P90 / P99 TTFT: finished requests only (the unfinished ones count as SLO misses, "
                      "not in the TTFT columns)")


def print_table(rows: list[dict], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    caption = TABLE_CAPTION
    if any(r.get("num_unfinished") for r in rows):  # the TTFT columns leave them out: say so where it matters
        caption += "; " + UNFINISHED_CAPTION
    t = Table(title=title, caption=caption)
    cols = [("policy", "policy", "{}"), ("pool", "pool", "{}"), ("num_requests", "requests", "{:d}"),
            ("num_unfinished", "unfinished", "{:d}"),
            ("mean_ttft_s", "mean TTFT s", "{:.3f}"), ("p50_ttft_s", "P50 s", "{:.3f}"), ("p90_ttft_s", "P90 s", "{:.3f}"),
            ("p99_ttft_s", "P99 s", "{:.3f}"), ("slo_attainment_token_weighted", "SLO tok", "{:.3f}"),
            ("slo_attainment_requests", "SLO req", "{:.3f}"), ("prefix_hit_rate", "hit rate", "{:.3f}"),
            ("utilization", "util", "{:.3f}"), ("wall_time_s", "wall s", "{:.2f}")]
    if any("dram_hit_rate" in r for r in rows):  # KV tiers on: hit rate per tier
        cols[-2:-2] = [("hbm_hit_rate", "HBM hit", "{:.3f}"), ("dram_hit_rate", "DRAM hit", "{:.3f}"),
                       ("store_hit_rate", "store hit", "{:.3f}")]
    for _, label, _ in cols:
        t.add_column(label, justify="left" if label in ("policy", "pool") else "right")
    for r in rows:  # no value (None, or NaN: e.g. TTFT of a run with no finished request) is '-', as null in the JSON
        t.add_row(*["-" if r.get(k) is None or r[k] != r[k] else fmt.format(r[k]) for k, _, fmt in cols])
    Console(width=200).print(t)


def warn_if_overloaded(policy: str, result, summary: dict, workload) -> bool:
    """One stderr line when the run is past saturation (:func:`baselines.capacity.saturated`,
    default :class:`~baselines.capacity.CapacityDefinition`: the backlog grows, the last third's
    mean TTFT slowdown > 1.2x the first third's, *and* token-weighted SLO attainment < 0.9). Past
    saturation the TTFTs measure how far the backlog grew in this window, not the policy, and the
    table gave no sign of it. Returns whether it warned."""
    if workload.num_requests < 3 or workload.duration_s <= 0:
        return False
    d = CapacityDefinition()
    past, growth, slo = saturated(result, summary, d)
    if not past:
        return False
    print(f"warning: {policy}: overloaded at {rate_text(workload)}: the last third's mean TTFT slowdown is {growth:.2f}x "
          f"the first third's (> {d.drain_ratio:g}: the backlog grows) and token-weighted SLO attainment is {slo:.3f} "
          f"(< {d.min_slo_attainment:g}); its TTFTs measure this window's backlog (sustainable rates: cpgym capacity)",
          file=sys.stderr)
    return True


def rate_text(workload) -> str:
    """The title's mean arrival rate: ``12.34 req/s``; ``3.4e+300 req/s`` from 1e6 on (the fixed
    format printed 300 digits); ``rate undefined (...)`` for one request or when every request
    arrives at one instant (was ``0.00 req/s``, read as an idle workload)."""
    if workload.num_requests < 2:
        return "rate undefined (one request)"
    if workload.duration_s <= 0:
        return f"rate undefined (every request arrives at {workload.requests[0].arrival_time_s:g} s)"
    rate = workload.mean_rate_rps
    return f"{rate:.2f} req/s" if rate < 1e6 else f"{rate:.3g} req/s"


def run(args: argparse.Namespace) -> int:
    if args.list_policies:
        for name, spec in POLICIES.items():
            print(f"{name:24s} {spec.description}  [{spec.source}]")
        return 0

    names = split_name_list(DEFAULT_POLICIES if args.policy is None else args.policy, "--policy")
    for n in names:  # a learned checkpoint is not a registered policy: say where it runs
        if n not in POLICIES:
            if n in SHIPPED_CHECKPOINTS or looks_like_path(n):
                raise ValueError(f"--policy {n}: learned checkpoints run under `cpgym evaluate --policy {n}` (a benchmark "
                                 "task, paired CIs); cpgym simulate runs the registered policies of --list-policies")
    specs = [get_policy(n) for n in names]  # fail on a typo before running anything
    check_out_dir(args.out)
    config = sim_config_from_args(args)
    for spec in specs:  # a baseline whose own pool does not fit the flags fails before any run
        policy_pool(spec, config.pool)
    workload = workload_from_args(args)

    mode = progress_mode(args.progress, quiet=args.quiet)
    rows = []
    for spec in specs:
        with Progress(workload.num_requests, spec.name, "req", mode=mode, leave=False) as bar:
            result = run_policy(spec, workload, config, progress=bar.update if mode != "off" else None)
        summary = summarize(result)
        if summary["num_rejected"]:
            print(f"warning: {spec.name}: {summary['num_rejected']} request(s) are longer than any worker can hold "
                  f"(model limit {result.calibration.max_prompt_tokens} tokens or the workers' KV capacity); "
                  f"they are not served and count as unfinished SLO misses", file=sys.stderr)
        warn_if_overloaded(spec.name, result, summary, workload)
        rows.append({"pool": result.config.pool.composition, **summary})  # a baseline's own pool, or the one chosen
        if args.out:
            write_run(args.out, result, summary, {"workload_source": workload.source, "argv": getattr(args, "argv", sys.argv)})
    if args.format == "json":
        extra = FAULT_KEYS if config.faults is not None else ()
        print(dumps_json([{k: r[k] for k in JSON_KEYS} | {"utilization": r["utilization"], "num_gpus": r["num_gpus"]}
                          | {k: r[k] for k in (*TIER_SUMMARY_KEYS, "link_utilization") if k in r}
                          | {k: r[k] for k in extra} for r in rows]))
    else:
        print_table(rows, f"{workload.name}: {workload.num_requests} requests, {rate_text(workload)}, "
                          f"{config.pool.num_gpus} GPUs (pool flags: {config.pool.composition}; pool column: the "
                          f"composition each policy started on), seed {config.seed}")
    return 0
