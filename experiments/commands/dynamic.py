"""``cpgym dynamic``: the paper §9 dynamic-phases experiment (worker reconfiguration): a thin
wrapper over :func:`experiments.paper_experiments.dynamic_phases.run_dynamic_phases` (workload,
policies and defaults are documented there; the flags are generated from
:class:`~experiments.paper_experiments.dynamic_phases.DynamicPhasesConfig` plus the shared pool
and simulator flags). The default ``--supported-degrees 2,4`` is the paper's run (Qwen3, paper §9):
``--compositions all`` then compares the 11 compositions of 40 GPUs; with more degrees the
number of compositions explodes (286 with 1,2,4,8), so ``all`` is refused beyond
``--max-compositions`` (default :data:`MAX_COMPOSITIONS`).

Output: per-phase mean TTFT per policy, the improvement of the adaptive policy over the best
fixed composition (overall best, and best per phase), every reconfiguration operation with its
drain / switch / confirm durations and their distribution; ``--plot`` writes the worker
composition over time above TTFT over time; ``--out-dir`` writes ``dynamic.json``, CSV tables
and ``provenance.json``.
"""

from __future__ import annotations

import argparse
import sys

from envs.provenance import write_provenance
from envs.sim import PoolConfig
from envs.sim.options import check_out_dir, config_from_args, with_flags
from envs.sim.pool import composition_counts
from experiments.common import check_plot_file, dumps_json, parse_list, sim_config_from_args
from experiments.flags.dynamic import MAX_COMPOSITIONS, add_arguments  # noqa: F401  (re-exported)
from experiments.paper_experiments.dynamic_phases import (  # noqa: F401  (re-exported defaults)
    DEFAULT_LONG_RATE_RPS,
    DEFAULT_RATE_SCALE,
    DEFAULT_SHORT_RATE_RPS,
    PAPER_SUPPORTED_DEGREES,
    DynamicPhasesConfig,
    _phase_means,
    check_compositions,
    dynamic_plan,
    fixed_compositions,
    run_dynamic_phases,
)


def base_config_from_args(args: argparse.Namespace):
    """The pool / simulator config of the shared flags, composed of the largest supported degree
    (each run replaces the composition); if it does not divide the pool, the smallest, then any
    other degree whose pool can be placed.

    Raises:
        ValueError: naming ``--supported-degrees``, ``--pool-gpus`` and ``--gpus-per-node`` when no
            degree gives a pool (was ``composition 'cp16x2' cannot be placed``, a composition the
            user never typed).
    """
    degrees = parse_list(args.supported_degrees, "--supported-degrees", int, positive=True)
    d = max(degrees)
    if args.pool_gpus % d:
        d = min(degrees)
    order = [d] + sorted(set(degrees) - {d}, reverse=True)  # d: the choice of every pool that has it
    for d in order:
        composition = f"cp{d}x{args.pool_gpus // d}"
        if args.pool_gpus % d == 0 and _placeable(args, degrees, composition):
            return sim_config_from_args(args, composition=composition)
    composition = f"cp{order[0]}x{args.pool_gpus // order[0]}"
    try:
        sim_config_from_args(args, composition=composition)  # another flag's own error first (--supported-degrees 3)
    except ValueError as exc:
        if f"'{composition}'" not in str(exc):
            raise
    raise ValueError(f"--supported-degrees {args.supported_degrees}: no CP degree both divides --pool-gpus {args.pool_gpus} "
                     f"and fits nodes of --gpus-per-node {args.gpus_per_node}: no pool of one CP degree (cp<C>x<count>), "
                     f"which `cpgym dynamic` starts from")


def _placeable(args: argparse.Namespace, degrees: list[int], composition: str) -> bool:
    try:
        PoolConfig(num_gpus=args.pool_gpus, gpus_per_node=args.gpus_per_node, supported_degrees=tuple(degrees),
                   composition=composition)
    except ValueError:
        return False
    return True


def plan(args: argparse.Namespace) -> list[tuple]:
    """The ``(WorkloadSource, SimConfig, policy)`` runs the flags ask for (nothing runs)."""
    return dynamic_plan(config_from_args(DynamicPhasesConfig, args), base_config_from_args(args))


def check_composition_count(cfg, base, max_compositions: int) -> None:
    """Raises ValueError (one line) when ``--compositions all`` would run more than
    ``max_compositions`` fixed compositions, or when a listed composition or ``--initial`` is not
    one of the pool (naming the flag; before any profiling or capacity search)."""
    if max_compositions < 1:
        raise ValueError(f"--max-compositions must be >= 1, got {max_compositions}")
    try:
        check_compositions(cfg, base.pool)
    except ValueError as exc:
        raise with_flags(DynamicPhasesConfig, exc) from None
    if cfg.compositions != "all":
        return
    n = len(fixed_compositions(cfg, base.pool))
    if n > max_compositions:
        degrees = ",".join(map(str, base.pool.supported_degrees))
        raise ValueError(f"--compositions all is {n} fixed compositions of CP degrees {degrees} on {base.pool.num_gpus} GPUs "
                         f"(more than --max-compositions {max_compositions}); use the paper's --supported-degrees "
                         f"{','.join(map(str, PAPER_SUPPORTED_DEGREES))}, list compositions with --compositions "
                         f"'cp4x10;cp2x20', or raise --max-compositions")


def check_load_replaces_rate(argv: list[str]) -> None:
    """``--short-load`` / ``--long-load`` replace ``--short-rate-rps`` / ``--long-rate-rps``:
    both on one command line is an error even when the rate equals its default (the config
    itself can only see a rate that differs from the default).

    Raises:
        ValueError: naming both flags.
    """
    given = {t.split("=", 1)[0] for t in argv if t.startswith("--")}
    for kind in ("short", "long"):
        if f"--{kind}-load" in given and f"--{kind}-rate-rps" in given:
            raise ValueError(f"--{kind}-load replaces --{kind}-rate-rps (the load is a fraction of the measured "
                             f"capacity); give one of them")


def run(args: argparse.Namespace) -> int:
    check_load_replaces_rate(getattr(args, "argv", None) or [])
    cfg = config_from_args(DynamicPhasesConfig, args)
    base = base_config_from_args(args)
    check_composition_count(cfg, base, args.max_compositions)
    check_out_dir(args.out_dir, "--out-dir")
    check_plot_file(args.plot, "--plot")  # these three before the runs, not after them
    if cfg.capacity_cache_dir and (cfg.short_load is not None or cfg.long_load is not None):
        check_out_dir(cfg.capacity_cache_dir, "--capacity-cache-dir")
    log = None if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    on_row = None
    if args.out_dir:
        write_provenance(args.out_dir, argv=getattr(args, "argv", None))  # first: a run stopped midway keeps it
        on_row = lambda rows, kinds: _write_policies(args.out_dir, rows, kinds)  # noqa: E731 - after each run
    result = run_dynamic_phases(cfg, base, log=log, on_policy_row=on_row)
    out = dict(result.summary)
    kinds, bounds = result.phase_kinds, result.phase_bounds_s
    if args.plot:
        best = result.best_fixed_composition
        _plot(args.plot, result.runs["vertumnus-adaptive"], result.runs[f"fixed {best}"], best, bounds, kinds)
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

    d = Path(path)
    d.mkdir(parents=True, exist_ok=True)
    (d / "dynamic.json").write_text(dumps_json(out) + "\n")
    _write_policies(path, out["policies"], kinds)
    pd.DataFrame(out["phases"]).to_csv(d / "phases.csv", index=False)
    pd.DataFrame(out["operations"]).to_csv(d / "operations.csv", index=False)
    pd.DataFrame(out["controller_windows"]).to_csv(d / "controller_windows.csv", index=False)
    pd.DataFrame(out["capacity_profiles"]).to_csv(d / "capacity_profiles.csv", index=False)


def _write_policies(path: str, rows: list[dict], kinds: list[str]) -> None:
    """``DIR/policies.csv``: one row per finished policy run, the per-phase mean TTFTs as
    ``phase{i}_{kind}_mean_ttft_s`` columns (rewritten after each run and at the end)."""
    from pathlib import Path

    import pandas as pd

    pol = []
    for r in rows:
        row = {k: v for k, v in r.items() if k != "phase_mean_ttft_s"}
        row.update({f"phase{k}_{kind}_mean_ttft_s": v for k, (kind, v) in enumerate(zip(kinds, r["phase_mean_ttft_s"]))})
        pol.append(row)
    Path(path).mkdir(parents=True, exist_ok=True)
    pd.DataFrame(pol).to_csv(Path(path) / "policies.csv", index=False)


def _print_tables(out: dict, kinds: list[str]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    con = Console(width=140)
    pk = out["phase_peak_rates_rps"]
    t = Table(title=f"capacity profile (reference mixes; phase peaks: short {pk['short']:.1f}, long {pk['long']:.1f} req/s)")
    for c in ("mix", "windows", "long share", "mean prompt tok", "CP", "per worker req/s", "homogeneous pool req/s"):
        t.add_column(c, justify="right")
    for p in out["capacity_profiles"]:
        t.add_row(str(p["reference_mix"]), str(p["num_window_mixes"]), f"{p['long_share']:.2f}",
                  f"{p['mean_prompt_tokens']:.0f}",
                  str(p["degree"]), f"{p['capacity_rps_per_worker']:.3f}", f"{p['homogeneous_pool_capacity_rps']:.1f}")
    con.print(t)
    wl = out["workload"]
    t = Table(title=escape(f"{wl['name']}: {wl['num_requests']} requests; mean TTFT [s] per phase (arrival)"))
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
    change = out["adaptive_vs_best_fixed_overall_mean_ttft_pct"]
    t = Table(title=f"adaptive vs best fixed ({out['best_fixed_composition']}: {change:+.1f}% overall)")
    for c in ("phase", "adaptive s", "best fixed overall s", "change %", "best in phase", "s", "change %"):
        t.add_column(c, justify="right")
    for p in out["phases"]:
        t.add_row(f"{p['phase']} {p['kind']}", f"{p['adaptive_mean_ttft_s']:.3f}",
                  f"{p['best_fixed_overall_mean_ttft_s']:.3f}", f"{p['change_vs_best_fixed_overall_pct']:+.1f}",
                  p["best_fixed_in_phase"], f"{p['best_fixed_in_phase_mean_ttft_s']:.3f}",
                  f"{p['change_vs_best_fixed_in_phase_pct']:+.1f}")
    con.print(t)
    t = Table(title=f"reconfiguration operations (initial {out['initial_composition']})")
    for c in ("#", "kind", "workers", "start s", "drain s", "switch s", "confirm s", "total s", "redirected", "pending blocks",
              "recon MB"):
        t.add_column(c, justify="right")
    for o in out["operations"]:
        t.add_row(str(o["index"]), o["kind"], f"{o['old_worker_ids']}->{o['new_worker_ids']}", f"{o['start_s']:.1f}",
                  f"{o['drain_s']:.3f}", f"{o['switch_s']:.3f}", f"{o['confirm_s']:.3f}", f"{o['total_s']:.3f}",
                  str(o["num_redirected_requests"]), str(o["pending_blocks_created"]),
                  f"{o['reconciliation_bytes'] / 1e6:.1f}")
    con.print(t)
    n = out["num_operations"]
    con.print(f"operations: {n['split'] + n['merge']} ({n['split']} splits, {n['merge']} merges); "
              f"final composition {composition_counts([d for d, _ in out['final_composition']])}")
    for k in ("drain_s", "switch_s", "drain_plus_switch_s"):
        d = out[k]
        if d.get("count"):
            con.print(f"{k}: n={d['count']} min {d['min']:.3f} p50 {d['p50']:.3f} mean {d['mean']:.3f} "
                      f"p90 {d['p90']:.3f} max {d['max']:.3f}")


def _plot(path: str, adaptive, best, best_comp: str, bounds: list[float], kinds: list[str]) -> None:
    from pathlib import Path

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
        means = _phase_means(t, np.digitize(a, bins) - 1, len(bins) - 1)  # NaN for a bin without finished requests
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
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
