"""``cpgym dynamic``: the paper §9 dynamic-phases experiment (worker reconfiguration).

Workload: the named ``phases`` generator (``envs.workloads``): ``--num-phases`` phases of
``--phase-duration-s`` alternating short-request-heavy and long-request-heavy traffic, with a
rising rate inside every phase (``rising_rate=True``: linear ramp from 0.5x to 1.5x the phase
rate). Mean phase rates ``--short-rate-rps`` (default 40 req/s, 5 % long prompts) and
``--long-rate-rps`` (default 4 req/s, 60 % long prompts), both times ``--rate-scale``: the
short-heavy phases peak where aggregate capacity binds (between the all-CP-4 and all-CP-2
capacities), the long-heavy ones stay at moderate load where CP-4 latency wins (numbers at
``DEFAULT_SHORT_RATE_RPS``; the command prints the capacity profile it used).

Policies, all on the same GPUs and with the same Vertumnus router (paper §5):

* ``vertumnus-adaptive``: the §6 controller (``baselines/controller.py``) starting from the
  initial composition chosen from *historical* demand — the same generator with the next
  workload seed (another "day"): its length mix and mean rate;
* every fixed composition of the pool with the supported degrees (40 GPUs, nodes of 8, {2, 4}:
  ``cp4x10`` ... ``cp2x20``), router ``vertumnus``, no controller.

Output: per-phase mean TTFT per policy, the improvement of the adaptive policy over the best
fixed composition (overall best, and best per phase), every reconfiguration operation with its
drain / switch / confirm durations and their distribution; ``--plot`` writes the worker
composition over time above TTFT over time.
"""

from __future__ import annotations

import argparse
import sys

#: Mean phase rates [requests/s] (the ``phases`` generator's rising rate runs 0.5x -> 1.5x of
#: them), chosen from the capacity profile (``CapacityTable`` mean over the history day's 20 s
#: windows; roofline calibration, 40 GPUs, nodes of 8, {2, 4}; printed by this command) and the
#: constant-rate behaviour of the full simulator, NOT from the adaptive policy's result:
#:
#: * short-heavy (5 % long prompts): profiled all-CP-4 pool 57 req/s, all-CP-2 pool 67 req/s
#:   (constant-rate runs: ``cp4x10`` degrades from ~55 req/s, 1.05 s mean TTFT at 60; ``cp2x20``
#:   holds to ~62). 40 req/s ramps 20 -> 60 req/s: it starts at 0.35 of the all-CP-4 capacity
#:   and peaks between the all-CP-4 and all-CP-2 capacities (1.05x / 0.9x), so aggregate
#:   capacity binds at the peak and more CP-2 lanes are needed (paper §9 "rising request rates");
#: * long-heavy (60 % long prompts): profiled all-CP-4 8.3 req/s (constant-rate ``cp4x10`` keeps
#:   1.3-1.55 s mean TTFT up to 7.5 req/s, ``cp2x20`` 2.2-2.3 s). 4 req/s ramps 2 -> 6 req/s,
#:   at most 0.72 of the all-CP-4 capacity: moderate load, where CP-4's lower latency wins.
#:
#: The previous default (6 req/s, peak 9 > every composition's long-mix capacity) made the long
#: phases capacity-bound too, so a CP-4-heavy mix with a few CP-2 lanes was never far from
#: optimal in any phase and adaptation had nothing to gain.
DEFAULT_SHORT_RATE_RPS = 40.0
DEFAULT_LONG_RATE_RPS = 4.0
DEFAULT_RATE_SCALE = 1.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    from envs.sim.cost_model import DEFAULT_CALIBRATION, DEFAULT_CALIBRATION_DESCRIPTION

    g = p.add_argument_group("workload (phases generator)")
    g.add_argument("--num-phases", type=int, default=4, help="phases, alternating short-heavy / long-heavy (default 4)")
    g.add_argument("--phase-duration-s", type=float, default=150.0, help="duration of one phase [s] (default 150)")
    g.add_argument("--short-rate-rps", type=float, default=DEFAULT_SHORT_RATE_RPS,
                   help=f"mean arrival rate of short-heavy phases [req/s] (default {DEFAULT_SHORT_RATE_RPS:g})")
    g.add_argument("--long-rate-rps", type=float, default=DEFAULT_LONG_RATE_RPS,
                   help=f"mean arrival rate of long-heavy phases [req/s] (default {DEFAULT_LONG_RATE_RPS:g})")
    g.add_argument("--rate-scale", type=float, default=DEFAULT_RATE_SCALE,
                   help=f"multiply both phase rates by this (default {DEFAULT_RATE_SCALE:g})")
    g.add_argument("--no-rising-rate", action="store_true", help="constant rate inside each phase (default: rising 0.5x -> 1.5x)")
    g.add_argument("--workload-seed", type=int, default=0, help="seed of the workload; history uses seed+1 (default 0)")
    g = p.add_argument_group("pool, controller and protocol")
    g.add_argument("--pool-gpus", type=int, default=40, help="GPUs in the prefill pool (default 40, paper §9)")
    g.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per topology group (default 8)")
    g.add_argument("--supported-degrees", default="2,4", help="CP degrees (default 2,4: paper §9 Qwen3)")
    g.add_argument("--initial", default="auto", help="initial composition of the adaptive policy: 'auto' (from historical demand) or a composition")
    g.add_argument("--compositions", default="all", help="fixed compositions to compare, ';'-separated, or 'all' (default)")
    g.add_argument("--window-s", type=float, default=20.0, help="controller observation window [s] (default 20, paper §6)")
    g.add_argument("--k-windows", type=int, default=2, help="consecutive windows before a change (default 2)")
    g.add_argument("--switch-s", type=float, default=0.5, help="switch time at the common step boundary [s] (default 0.5, paper: < 1 s)")
    g.add_argument("--seed", type=int, default=0, help="seed of the runs (default 0)")
    g.add_argument("--calibration", metavar="FILE",
                   help=f"calibration JSON (default: shipped {DEFAULT_CALIBRATION}, {DEFAULT_CALIBRATION_DESCRIPTION})")
    p.add_argument("--format", choices=("table", "json"), default="table", help="stdout format (default table)")
    p.add_argument("--plot", metavar="PNG", help="write worker composition over time above TTFT over time")
    p.add_argument("--out-dir", metavar="DIR", help="also write dynamic.json and CSV tables (policies, phases, operations, "
                                                    "controller windows, capacity profiles) to DIR")


def _reuse_prefix_tokens(workload) -> float:
    """Mean per-request prefix (whole KV blocks) already seen in an earlier request of
    ``workload`` [tokens]: the prefix hit of an unbounded, perfectly placed cache (an upper
    bound of the run's hit; on ``phases`` the shared system prompts, ~0.9k tokens)."""
    seen: set = set()
    total = 0
    for r in workload.requests:
        n = 0
        for h in r.block_hashes:
            if h not in seen:
                break
            n += 1
        total += min(n * workload.kv_block_size_tokens, max(0, r.num_prompt_tokens - 1))
        seen.update(r.block_hashes)
    return total / max(1, workload.num_requests)


def _observe_history(table, history, prompt_tokens, mean_cached_tokens: float, window_s: float) -> None:
    """Feed the history day's window mixes to the capacity table, so that its reference mixes are
    means over many windows before the run (paper §6: capacity profiled from historical
    demand) instead of one noisy window each."""
    import numpy as np

    t = np.array([r.arrival_time_s for r in history.requests], float)
    edges = np.arange(0.0, (t.max() if t.size else 0.0) + window_s, window_s)
    for a, b in zip(edges[:-1], edges[1:]):
        m = (t >= a) & (t < b)
        if m.sum() >= 10:
            table.observe(table.shares(prompt_tokens[m], mean_cached_tokens))


def _long_share(table, ref: int, long_prompt_tokens: int) -> float:
    """Request share of a reference mix's classes that start at or above ``long_prompt_tokens``."""
    edges = table.profile.length_bin_edges_tokens
    sh = table.references[ref].shares
    return float(sum(x for e, x in zip(edges[:-1], sh) if e >= long_prompt_tokens))


def _phase_means(ttft, phase, num_phases: int) -> list[float]:
    import numpy as np

    out = []
    for k in range(num_phases):
        m = phase == k
        v = ttft[m]
        v = v[~np.isnan(v)]
        out.append(float(v.mean()) if len(v) else float("nan"))
    return out


def _dist(values: list[float]) -> dict:
    import numpy as np

    if not values:
        return {"count": 0}
    v = np.asarray(values, float)
    return {"count": int(v.size), "min": float(v.min()), "p50": float(np.percentile(v, 50)), "mean": float(v.mean()),
            "p90": float(np.percentile(v, 90)), "max": float(v.max())}


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    import numpy as np

    from baselines.controller import (CapacityTable, ControllerConfig, ReconfigController, enumerate_compositions,
                                      initial_composition)
    from baselines.registry import PolicySpec, get_policy
    from envs.metrics import summarize
    from envs.sim import Calibration, PoolConfig, SimConfig
    from envs.sim.reconfig import ReconfigConfig
    from envs.workloads import get_workload
    from experiments.common import dumps_json
    from experiments.runner import run_policy

    for name in ("rate_scale", "short_rate_rps", "long_rate_rps"):
        if not getattr(args, name) > 0:
            raise ValueError(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}")
    degrees = tuple(int(x) for x in args.supported_degrees.split(",") if x.strip())
    pool = PoolConfig(num_gpus=args.pool_gpus, gpus_per_node=args.gpus_per_node, supported_degrees=degrees,
                      composition=f"cp{max(degrees)}x{args.pool_gpus // max(degrees)}" if args.pool_gpus % max(degrees) == 0 else "cp1x1")
    calibration = Calibration.load(args.calibration) if args.calibration else Calibration.default()
    wl_params = dict(num_phases=args.num_phases, phase_duration_s=args.phase_duration_s, rising_rate=not args.no_rising_rate,
                     short_phase_rate_rps=args.short_rate_rps * args.rate_scale,
                     long_phase_rate_rps=args.long_rate_rps * args.rate_scale)
    workload = get_workload("phases", seed=args.workload_seed, **wl_params)
    history = get_workload("phases", seed=args.workload_seed + 1, **wl_params)
    base = SimConfig(pool=pool, seed=args.seed, calibration_path=args.calibration)
    ccfg = ControllerConfig(window_s=args.window_s, k_windows=args.k_windows, reconfig=ReconfigConfig(switch_s=args.switch_s))
    table = CapacityTable(base, calibration, ccfg.profile)  # shared by the initial composition and the controller
    fixed = enumerate_compositions(pool) if args.compositions == "all" else [c.strip() for c in args.compositions.split(";") if c.strip()]
    hist_L = np.array([r.num_prompt_tokens for r in history.requests], float)
    hist_hit = _reuse_prefix_tokens(history)
    _observe_history(table, history, hist_L, hist_hit, ccfg.window_s)
    if args.initial == "auto":
        initial, init_info = initial_composition(pool, base, calibration, hist_L, history.mean_rate_rps,
                                                 mean_cached_tokens=hist_hit, table=table)
    else:
        initial, init_info = args.initial, {"given": True}
    for comp in [initial] + fixed:
        PoolConfig(num_gpus=pool.num_gpus, gpus_per_node=pool.gpus_per_node, supported_degrees=degrees, composition=comp)

    phase = np.asarray(workload.metadata["phase_of_request"])
    kinds = list(workload.metadata["phase_kinds"])
    bounds = list(workload.metadata["phase_boundaries_s"])
    router_spec = get_policy("vertumnus")
    adaptive = PolicySpec("vertumnus-adaptive", get_policy("vertumnus-adaptive").make_router,
                          "Vertumnus router + split/merge controller", "paper §5-§6",
                          make_attachments=lambda: [ReconfigController(ccfg, table)])
    runs = [("vertumnus-adaptive", initial, adaptive)] + [(f"fixed {c}", c, router_spec) for c in fixed]
    rows, results = [], {}
    for label, comp, spec in runs:
        cfg = replace(base, pool=replace(pool, composition=comp))
        print(f"running {label} ...", file=sys.stderr, flush=True)
        res = run_policy(spec, workload, cfg, calibration)
        s = summarize(res)
        ttft = res.records["ttft_s"]
        rows.append({"policy": label, "composition": comp, "mean_ttft_s": s["mean_ttft_s"], "p90_ttft_s": s["p90_ttft_s"],
                     "slo_attainment_token_weighted": s["slo_attainment_token_weighted"],
                     "phase_mean_ttft_s": _phase_means(ttft, phase, len(kinds)), "num_unfinished": s["num_unfinished"],
                     "wall_time_s": s["wall_time_s"]})
        results[label] = res
    ad = rows[0]
    fixed_rows = rows[1:]
    best = min(fixed_rows, key=lambda r: r["mean_ttft_s"])
    per_phase = []
    for k, kind in enumerate(kinds):
        bp = min(fixed_rows, key=lambda r: r["phase_mean_ttft_s"][k])
        a = ad["phase_mean_ttft_s"][k]
        per_phase.append({"phase": k, "kind": kind, "start_s": bounds[k], "end_s": bounds[k + 1],
                          "adaptive_mean_ttft_s": a,
                          "best_fixed_overall": best["composition"], "best_fixed_overall_mean_ttft_s": best["phase_mean_ttft_s"][k],
                          "change_vs_best_fixed_overall_pct": 100.0 * (a / best["phase_mean_ttft_s"][k] - 1.0),
                          "best_fixed_in_phase": bp["composition"], "best_fixed_in_phase_mean_ttft_s": bp["phase_mean_ttft_s"][k],
                          "change_vs_best_fixed_in_phase_pct": 100.0 * (a / bp["phase_mean_ttft_s"][k] - 1.0)})
    ex = results["vertumnus-adaptive"].extras
    ops = ex.get("reconfig_operations", [])
    keep = ("index", "kind", "old_worker_ids", "new_worker_ids", "old_degree", "new_degree", "first_gpu", "start_s",
            "drain_end_s", "switch_end_s", "commit_s", "drain_s", "switch_s", "confirm_s", "total_s", "epoch",
            "num_redirected_requests", "pending_blocks_created", "ready_blocks_retained", "reconciliation_bytes",
            "num_reconciled_blocks", "num_source_lost_blocks")
    ops = [{k: o[k] for k in keep} for o in ops]
    done = [o for o in ops if o["commit_s"] == o["commit_s"]]
    out = {
        "workload": {"name": workload.name, "num_requests": workload.num_requests, "seed": args.workload_seed,
                     "params": wl_params, "source": workload.source},
        "pool": {"num_gpus": pool.num_gpus, "gpus_per_node": pool.gpus_per_node, "supported_degrees": list(degrees)},
        "controller": {"window_s": ccfg.window_s, "k_windows": ccfg.k_windows, "split_load": ccfg.split_load,
                       "split_target_load": ccfg.split_target_load, "merge_load": ccfg.merge_load,
                       "merge_max_projected_load": ccfg.merge_max_projected_load, "max_ops_per_window": ccfg.max_ops_per_window,
                       "max_gpu_share_per_window": ccfg.max_gpu_share_per_window, "min_dwell_s": ccfg.min_dwell_s,
                       "trend_horizon_s": ccfg.trend_horizon_s, "split_load_long": ccfg.split_load_long,
                       "long_prompt_tokens": ccfg.long_prompt_tokens, "long_fraction_merge": ccfg.long_fraction_merge,
                       "switch_s": ccfg.reconfig.switch_s, "confirm_s_per_rank": ccfg.reconfig.confirm_s_per_rank},
        "initial_composition": initial, "initial_composition_info": init_info,
        "policies": rows,
        "best_fixed_composition": best["composition"],
        "adaptive_vs_best_fixed_overall_mean_ttft_pct": 100.0 * (ad["mean_ttft_s"] / best["mean_ttft_s"] - 1.0),
        "phases": per_phase,
        "operations": ops,
        "num_operations": {"split": sum(o["kind"] == "split" for o in ops), "merge": sum(o["kind"] == "merge" for o in ops)},
        "drain_s": _dist([o["drain_s"] for o in done]),
        "switch_s": _dist([o["switch_s"] for o in done]),
        "drain_plus_switch_s": _dist([o["total_s"] for o in done]),
        "final_composition": ex.get("composition"),
        "controller_windows": ex.get("controller_windows", []),
        "capacity_profiles": [{"reference_mix": p.reference, "degree": p.degree, "mean_prompt_tokens": p.mean_prompt_tokens,
                               "num_window_mixes": table.references[p.reference].num_mixes,
                               "long_share": _long_share(table, p.reference, ccfg.long_prompt_tokens),
                               "capacity_rps_per_worker": p.capacity_rps, "capacity_tokens_per_s_per_worker": p.capacity_tokens_per_s,
                               "capacity_tokens_per_s_per_gpu": p.capacity_tokens_per_s / p.degree,
                               "homogeneous_pool_capacity_rps": p.capacity_rps * (pool.num_gpus // p.degree)}
                              for p in table.profiled()],
        "phase_peak_rates_rps": {"short": args.short_rate_rps * args.rate_scale * (1.5 if not args.no_rising_rate else 1.0),
                                 "long": args.long_rate_rps * args.rate_scale * (1.5 if not args.no_rising_rate else 1.0)},
        "history_mean_cached_tokens": hist_hit,
    }
    if args.plot:
        _plot(args.plot, results["vertumnus-adaptive"], results[f"fixed {best['composition']}"], best["composition"], bounds, kinds)
        out["plot"] = args.plot
    if args.out_dir:
        _write_dir(args.out_dir, out, kinds)
    if args.format == "json":
        print(dumps_json(out))
    else:
        _print_tables(out, kinds)
    return 0


def _write_dir(path: str, out: dict, kinds: list[str]) -> None:
    from pathlib import Path

    import pandas as pd

    from experiments.common import dumps_json

    d = Path(path)
    d.mkdir(parents=True, exist_ok=True)
    (d / "dynamic.json").write_text(dumps_json(out) + "\n")
    pol = []
    for r in out["policies"]:
        row = {k: v for k, v in r.items() if k != "phase_mean_ttft_s"}
        row.update({f"phase{k}_{kind}_mean_ttft_s": v for k, (kind, v) in enumerate(zip(kinds, r["phase_mean_ttft_s"]))})
        pol.append(row)
    pd.DataFrame(pol).to_csv(d / "policies.csv", index=False)
    pd.DataFrame(out["phases"]).to_csv(d / "phases.csv", index=False)
    pd.DataFrame(out["operations"]).to_csv(d / "operations.csv", index=False)
    pd.DataFrame(out["controller_windows"]).to_csv(d / "controller_windows.csv", index=False)
    pd.DataFrame(out["capacity_profiles"]).to_csv(d / "capacity_profiles.csv", index=False)


def _print_tables(out: dict, kinds: list[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console(width=140)
    pk = out["phase_peak_rates_rps"]
    t = Table(title=f"capacity profile (reference mixes; phase peaks: short {pk['short']:.1f}, long {pk['long']:.1f} req/s)")
    for c in ("mix", "windows", "long share", "mean prompt tok", "CP", "per worker req/s", "homogeneous pool req/s"):
        t.add_column(c, justify="right")
    for p in out["capacity_profiles"]:
        t.add_row(str(p["reference_mix"]), str(p["num_window_mixes"]), f"{p['long_share']:.2f}", f"{p['mean_prompt_tokens']:.0f}",
                  str(p["degree"]), f"{p['capacity_rps_per_worker']:.3f}", f"{p['homogeneous_pool_capacity_rps']:.1f}")
    con.print(t)
    t = Table(title=f"{out['workload']['name']}: {out['workload']['num_requests']} requests; mean TTFT [s] per phase (arrival)")
    t.add_column("policy")
    t.add_column("composition")
    for k, kind in enumerate(kinds):
        t.add_column(f"P{k} {kind}", justify="right")
    t.add_column("all", justify="right")
    t.add_column("SLO tok", justify="right")
    for r in out["policies"]:
        t.add_row(r["policy"], r["composition"], *[f"{v:.3f}" for v in r["phase_mean_ttft_s"]], f"{r['mean_ttft_s']:.3f}",
                  f"{r['slo_attainment_token_weighted']:.3f}")
    con.print(t)
    t = Table(title=f"adaptive vs best fixed ({out['best_fixed_composition']}: {out['adaptive_vs_best_fixed_overall_mean_ttft_pct']:+.1f}% overall)")
    for c in ("phase", "adaptive s", "best fixed overall s", "change %", "best in phase", "s", "change %"):
        t.add_column(c, justify="right")
    for p in out["phases"]:
        t.add_row(f"{p['phase']} {p['kind']}", f"{p['adaptive_mean_ttft_s']:.3f}", f"{p['best_fixed_overall_mean_ttft_s']:.3f}",
                  f"{p['change_vs_best_fixed_overall_pct']:+.1f}", p["best_fixed_in_phase"], f"{p['best_fixed_in_phase_mean_ttft_s']:.3f}",
                  f"{p['change_vs_best_fixed_in_phase_pct']:+.1f}")
    con.print(t)
    t = Table(title=f"reconfiguration operations (initial {out['initial_composition']})")
    for c in ("#", "kind", "workers", "start s", "drain s", "switch s", "confirm s", "total s", "redirected", "pending blocks", "recon MB"):
        t.add_column(c, justify="right")
    for o in out["operations"]:
        t.add_row(str(o["index"]), o["kind"], f"{o['old_worker_ids']}->{o['new_worker_ids']}", f"{o['start_s']:.1f}",
                  f"{o['drain_s']:.3f}", f"{o['switch_s']:.3f}", f"{o['confirm_s']:.3f}", f"{o['total_s']:.3f}",
                  str(o["num_redirected_requests"]), str(o["pending_blocks_created"]), f"{o['reconciliation_bytes'] / 1e6:.1f}")
    con.print(t)
    n = out["num_operations"]
    con.print(f"operations: {n['split'] + n['merge']} ({n['split']} splits, {n['merge']} merges); final composition {out['final_composition']}")
    for k in ("drain_s", "switch_s", "drain_plus_switch_s"):
        d = out[k]
        if d.get("count"):
            con.print(f"{k}: n={d['count']} min {d['min']:.3f} p50 {d['p50']:.3f} mean {d['mean']:.3f} p90 {d['p90']:.3f} max {d['max']:.3f}")


def _plot(path: str, adaptive, best, best_comp: str, bounds: list[float], kinds: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    series = adaptive.extras.get("composition_series", [])
    end = bounds[-1]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 6.5), sharex=True, gridspec_kw={"height_ratios": [1, 1.3]})
    degrees = sorted({int(k[2:]) for e in series for k in e["num_workers_by_degree"]}, reverse=True)
    times = [e["time_s"] for e in series] + [end]
    bottom = np.zeros(len(series))
    for d in degrees:
        gpus = np.array([e["num_workers_by_degree"].get(f"cp{d}", 0) * d for e in series], float)
        ax1.fill_between(times[:-1] + [end], np.append(bottom, bottom[-1]), np.append(bottom + gpus, (bottom + gpus)[-1]),
                         step="post", label=f"CP-{d} workers (GPUs)", alpha=0.8)
        bottom = bottom + gpus
    rec = np.array([e["num_reconfiguring_gpus"] for e in series], float)
    ax1.fill_between(times[:-1] + [end], np.append(bottom, bottom[-1]), np.append(bottom + rec, (bottom + rec)[-1]),
                     step="post", label="draining / switching", color="0.6")
    ax1.set_ylabel("GPUs")
    ax1.set_title("vertumnus-adaptive: worker composition over time")
    ax1.legend(loc="lower right", fontsize=8)
    bins = np.arange(0.0, end + 10.0, 10.0)
    for res, label in ((adaptive, "vertumnus-adaptive"), (best, f"best fixed ({best_comp})")):
        a = res.records["arrival_s"]
        t = res.records["ttft_s"]
        idx = np.digitize(a, bins) - 1
        means = [np.nanmean(t[idx == i]) if np.any(idx == i) else np.nan for i in range(len(bins) - 1)]
        ax2.step(bins[:-1], means, where="post", label=label)
    for b, kind in zip(bounds[:-1], kinds):
        for ax in (ax1, ax2):
            ax.axvline(b, color="k", lw=0.5, ls=":")
        ax2.text(b + 2, 0.98, kind, transform=ax2.get_xaxis_transform(), va="top", fontsize=8)
    ax2.set_yscale("log")
    ax2.set_ylabel("mean TTFT [s] (10 s bins, by arrival)")
    ax2.set_xlabel("time [s]")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
