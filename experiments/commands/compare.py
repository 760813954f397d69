"""``cpgym compare``: run a suite of policies on one workload at several request rates and print
the paper-style table (paper §9: mean TTFT, P90 TTFT, token-weighted SLO attainment per policy
and rate, and the % change of Vertumnus vs the strongest baseline).

* ``--suite paper`` = Vertumnus + the paper's §9 baselines; ``--suite all`` = every registered
  policy; any other value is a comma-separated list of suite and/or policy names.
* Rates: ``--rates 10,20,40`` (time-scale the workload to these mean rates [requests/s]) or
  ``--rate-scales 1,2,4`` (multiply its native rate); neither = the native rate.
* ``--seeds 0,1,2``: each seed sets the run seed and offsets the synthetic generator seed
  (``--workload-seed + seed``); metrics are averaged over seeds in the table and JSON.
* The strongest baseline at a rate is the non-Vertumnus policy (name not starting with
  ``vertumnus``) with the lowest mean TTFT; % change = ``(vertumnus - baseline) / baseline``
  (P90 against the same baseline); SLO change in percentage points.
* ``--out DIR``: ``results.csv`` / ``results.parquet`` (one tidy row per policy, rate, seed),
  ``summary.csv`` (averaged over seeds), ``compare.png`` (mean and P90 TTFT vs rate).
* ``--jobs N``: runs in a process pool of N workers (default 1).
* ``--beta B1,B2,...`` / ``--lambda L1,L2,...``: the beta/lambda sensitivity sweep of the
  Vertumnus cost (paper §5): adds one policy ``vertumnus[beta=B,lambda=L]`` per grid point (a
  missing list = the registered default) to the suite, and prints each variant's change vs the
  strongest baseline per rate and averaged over the rates (``sweep.csv`` under ``--out``).
"""

from __future__ import annotations

import argparse
import sys

JSON_KEYS = ("policy", "rate_rps", "mean_ttft_s", "p90_ttft_s", "p99_ttft_s", "slo_attainment_token_weighted",
             "slo_attainment_requests", "prefix_hit_rate", "utilization", "num_unfinished", "num_requests", "num_seeds")
METRICS = ("mean_ttft_s", "p50_ttft_s", "p90_ttft_s", "p99_ttft_s", "slo_attainment_token_weighted",
           "slo_attainment_requests", "prefix_hit_rate", "utilization", "mean_queueing_delay_s", "gpu_time_s",
           "num_unfinished", "num_requests", "wall_time_s")
VERTUMNUS = "vertumnus"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from experiments.common import add_sim_arguments, add_workload_arguments

    add_workload_arguments(p)
    add_sim_arguments(p)
    p.add_argument("--suite", default="paper", help="'paper', 'all', or comma-separated suite/policy names (default paper)")
    rates = p.add_mutually_exclusive_group()
    rates.add_argument("--rates", metavar="R1,R2,...", help="target mean request rates [requests/s], e.g. 10,20,40")
    rates.add_argument("--rate-scales", metavar="X1,X2,...", help="multiply the workload's native rate by each factor")
    p.add_argument("--seeds", default="0", help="comma-separated run seeds (default 0)")
    p.add_argument("--jobs", type=int, default=1, help="parallel simulation processes (default 1)")
    p.add_argument("--out", metavar="DIR", help="write results.csv/.parquet, summary.csv and compare.png under DIR")
    p.add_argument("--format", choices=("table", "json"), default="table", help="stdout format (default table)")
    p.add_argument("--beta", metavar="B1,B2,...", help="sweep: add vertumnus[beta=B,lambda=L] variants for these beta values (>= 1)")
    p.add_argument("--lambda", dest="lambda_", metavar="L1,L2,...",
                   help="sweep: add vertumnus[beta=B,lambda=L] variants for these lambda values (>= 0)")


def _grid(text: str | None, flag: str, default: float) -> list[float]:
    from experiments.common import parse_list

    return [default] if text is None else parse_list(text, flag)


def vertumnus_variants(beta_text: str | None, lambda_text: str | None) -> list[tuple[str, float, float]]:
    """``(name, beta, lambda)`` of the sweep grid of ``--beta`` / ``--lambda`` (empty if neither).

    Raises:
        ValueError: on a malformed list or a value outside the paper's range (beta >= 1, lambda >= 0).
    """
    from baselines.vertumnus import VertumnusParams

    if beta_text is None and lambda_text is None:
        return []
    d = VertumnusParams()
    out = []
    for b in _grid(beta_text, "--beta", d.beta):
        for lam in _grid(lambda_text, "--lambda", d.lambda_):
            VertumnusParams(beta=b, lambda_=lam)  # validates
            out.append((f"vertumnus[beta={b:g},lambda={lam:g}]", b, lam))
    return out


def _policy(policy):
    """A registry name, or ``(name, beta, lambda)`` of a sweep variant -> a policy for run_policy
    (variants are built inside the worker process: PolicySpec factories do not pickle)."""
    if isinstance(policy, str):
        return policy
    from baselines.registry import PolicySpec
    from baselines.vertumnus import VertumnusParams, VertumnusRouter

    name, beta, lam = policy
    return PolicySpec(name, lambda: VertumnusRouter(VertumnusParams(beta=beta, lambda_=lam), name),
                      f"Vertumnus with beta={beta:g}, lambda={lam:g} (sweep)", "paper §5; cpgym compare --beta/--lambda")


def resolve_suite(text: str) -> list[str]:
    """Policy names of a suite expression (``paper``, ``all``, or a comma list of suites/policies).

    Raises:
        ValueError: naming an unknown suite or policy.
    """
    from baselines.registry import POLICIES, SUITES

    names: list[str] = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        if item == "all":
            add = list(POLICIES)
        elif item in SUITES:
            add = list(SUITES[item])
        elif item in POLICIES:
            add = [item]
        else:
            raise ValueError(f"unknown suite or policy {item!r}; suites: all, {', '.join(SUITES)}; policies: {', '.join(POLICIES)}")
        names += [n for n in add if n not in names]
    if not names:
        raise ValueError("--suite selects no policy")
    return names


def _run_task(task: tuple) -> dict:
    """Runs one (policy, workload, config) in a worker process and returns its summary row."""
    from envs.metrics import summarize
    from experiments.runner import run_policy

    policy, workload, config, meta = task
    row = summarize(run_policy(_policy(policy), workload, config))
    row.update(meta)
    return row


def strongest_baseline_changes(summary, vertumnus: str = VERTUMNUS):
    """Per rate: the strongest non-Vertumnus baseline (lowest mean TTFT) and Vertumnus's change.

    Args:
        summary: DataFrame with ``policy, rate_rps, mean_ttft_s, p90_ttft_s,
            slo_attainment_token_weighted`` (one row per policy and rate).

    Returns:
        list of dicts ``rate_rps, baseline, mean_ttft_change_pct, p90_ttft_change_pct,
        slo_change_pp`` (empty if Vertumnus or no baseline is present).
    """
    out = []
    for rate, g in summary.groupby("rate_rps", sort=True):
        v = g[g["policy"] == vertumnus]
        b = g[~g["policy"].str.startswith("vertumnus")].dropna(subset=["mean_ttft_s"])
        if v.empty or b.empty:
            continue
        best = b.loc[b["mean_ttft_s"].idxmin()]
        v = v.iloc[0]
        out.append({
            "rate_rps": float(rate), "baseline": best["policy"],
            "mean_ttft_change_pct": 100.0 * (v["mean_ttft_s"] - best["mean_ttft_s"]) / best["mean_ttft_s"],
            "p90_ttft_change_pct": 100.0 * (v["p90_ttft_s"] - best["p90_ttft_s"]) / best["p90_ttft_s"],
            "slo_change_pp": 100.0 * (v["slo_attainment_token_weighted"] - best["slo_attainment_token_weighted"]),
        })
    return out


def sweep_table(summary, variants: list[str]):
    """Per sweep variant: mean/P90 TTFT % and SLO pp vs the strongest baseline at each rate, and
    their means over the rates (tidy DataFrame, one row per variant and rate plus ``rate_rps`` NaN
    for the mean)."""
    import pandas as pd

    rows = []
    base = summary[~summary["policy"].str.startswith("vertumnus")]
    for v in variants:
        ch = strongest_baseline_changes(pd.concat([base, summary[summary["policy"] == v].assign(policy=VERTUMNUS)]))
        for c in ch:
            rows.append({"variant": v, **c})
        if ch:
            rows.append({"variant": v, "rate_rps": float("nan"), "baseline": "mean over rates",
                         **{k: sum(c[k] for c in ch) / len(ch) for k in ("mean_ttft_change_pct", "p90_ttft_change_pct", "slo_change_pp")}})
    return pd.DataFrame(rows)


def plot(summary, path, title: str) -> None:
    """PNG of mean and P90 TTFT vs request rate, one line per policy (matplotlib Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for ax, key, label in ((axes[0], "mean_ttft_s", "mean TTFT [s]"), (axes[1], "p90_ttft_s", "P90 TTFT [s]")):
        for i, (policy, g) in enumerate(summary.groupby("policy", sort=False)):
            g = g.sort_values("rate_rps")
            style = dict(lw=2.5, color="black") if policy == VERTUMNUS else dict(lw=1.2, color=f"C{i % 10}",
                                                                                 ls=("-", "--", ":")[(i // 10) % 3])
            ax.plot(g["rate_rps"], g[key], marker="o", label=policy, **style)
        ax.set_xlabel("request rate [requests/s]")
        ax.set_ylabel(label)
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
    axes[1].legend(fontsize=8, loc="upper left")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _print_table(summary, changes, title: str) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=title)
    for label in ("rate rps", "policy", "mean TTFT s", "P90 TTFT s", "SLO tok", "hit rate", "util", "unfinished"):
        t.add_column(label, justify="left" if label == "policy" else "right")
    for rate, g in summary.groupby("rate_rps", sort=True):
        for _, r in g.iterrows():
            t.add_row(f"{rate:g}", escape(r["policy"]), f"{r['mean_ttft_s']:.3f}", f"{r['p90_ttft_s']:.3f}",
                      f"{r['slo_attainment_token_weighted']:.3f}", f"{r['prefix_hit_rate']:.3f}", f"{r['utilization']:.3f}",
                      f"{r['num_unfinished']:.0f}")
        t.add_section()
    con = Console(width=max(120, Console().width))
    con.print(t)
    if changes:
        c = Table(title="Vertumnus vs the strongest baseline (lowest mean TTFT among non-Vertumnus policies)")
        for label in ("rate rps", "strongest baseline", "mean TTFT %", "P90 TTFT %", "SLO tok pp"):
            c.add_column(label, justify="right")
        for ch in changes:
            c.add_row(f"{ch['rate_rps']:g}", escape(ch["baseline"]), f"{ch['mean_ttft_change_pct']:+.1f}",
                      f"{ch['p90_ttft_change_pct']:+.1f}", f"{ch['slo_change_pp']:+.1f}")
        con.print(c)


def run(args: argparse.Namespace) -> int:
    import copy
    from concurrent.futures import ProcessPoolExecutor
    from pathlib import Path

    import pandas as pd

    from baselines.registry import get_policy
    from envs import workloads
    from experiments.common import check_out_dir, dumps_json, parse_list, sim_config_from_args, workload_from_args

    if args.target_rps is not None or args.rate_scale is not None:
        raise ValueError("compare takes --rates or --rate-scales (lists), not --target-rps / --rate-scale")
    if args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
    names = resolve_suite(args.suite)
    for n in names:
        get_policy(n)
    variants = vertumnus_variants(args.beta, args.lambda_)
    policies = list(names) + [v for v in variants if v[0] not in names]
    names = names + [v[0] for v in variants if v[0] not in names]
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"--seeds must be a comma-separated list of integers, got {args.seeds!r}") from None
    if not seeds or any(s < 0 for s in seeds):
        raise ValueError(f"--seeds needs integers >= 0, got {args.seeds!r}")
    rates = parse_list(args.rates, "--rates", positive=True) if args.rates is not None else None
    scales = parse_list(args.rate_scales, "--rate-scales", positive=True) if args.rate_scales is not None else None

    tasks = []
    wl_name = ""
    for seed in seeds:
        wargs = copy.copy(args)
        wargs.workload_seed = args.workload_seed + seed
        wargs.window_s = None
        base = workload_from_args(wargs)
        wl_name = base.name
        config = sim_config_from_args(args, seed=seed)
        points = [(r, None) for r in rates] if rates else [(None, s) for s in scales] if scales else [(None, None)]
        for target, scale in points:
            wl = workloads.scale_to_rate(base, target) if target is not None else workloads.scale_rate(base, scale) if scale is not None else base
            if args.window_s:
                wl = workloads.window(wl, args.window_s[0], args.window_s[1])
            rate = target if target is not None else wl.mean_rate_rps
            meta = {"rate_rps": float(rate), "rate_scale": scale, "seed": seed, "workload": wl.name,
                    "native_rate_rps": base.mean_rate_rps}
            for n in policies:
                tasks.append((n, wl, config, meta))
    out = Path(args.out) if args.out else None
    if out is not None:
        check_out_dir(args.out)
        out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []

    def keep(row: dict) -> None:
        # nothing is lost: every finished run is on disk before the next one is awaited
        rows.append(row)
        if out is not None:
            pd.DataFrame(rows).to_csv(out / "results.csv", index=False)

    if args.jobs == 1:
        for t in tasks:
            keep(_run_task(t))
    else:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            for row in pool.map(_run_task, tasks):
                keep(row)
    df = pd.DataFrame(rows)
    order = {n: i for i, n in enumerate(names)}
    agg = {k: "mean" for k in METRICS if k in df}
    summary = df.groupby(["rate_rps", "policy"], sort=False).agg(agg).reset_index()
    summary["num_seeds"] = len(seeds)
    summary["_o"] = summary["policy"].map(order)
    summary = summary.sort_values(["rate_rps", "_o"]).drop(columns="_o").reset_index(drop=True)
    changes = strongest_baseline_changes(summary)
    config0 = sim_config_from_args(args, seed=seeds[0])
    title = (f"{wl_name}: {config0.pool.num_gpus} GPUs (run pool {config0.pool.composition}), "
             f"seeds {','.join(map(str, seeds))}")
    if out is not None:
        df.to_csv(out / "results.csv", index=False)
        df.to_parquet(out / "results.parquet", index=False)
        summary.to_csv(out / "summary.csv", index=False)
        pd.DataFrame(changes).to_csv(out / "vertumnus_vs_strongest.csv", index=False)
        if variants:
            sweep_table(summary, [v[0] for v in variants]).to_csv(out / "sweep.csv", index=False)
        plot(summary, out / "compare.png", title)
        print(f"wrote {out / 'results.csv'}, {out / 'summary.csv'}, {out / 'compare.png'}", file=sys.stderr)
    if args.format == "json":
        recs = [{k: (r[k].item() if hasattr(r[k], "item") else r[k]) for k in JSON_KEYS} for _, r in summary.iterrows()]
        print(dumps_json(recs))
    else:
        _print_table(summary, changes, title)
        if variants:
            _print_sweep(sweep_table(summary, [v[0] for v in variants]))
    return 0


def _print_sweep(sweep) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    if sweep.empty:
        return
    t = Table(title="beta/lambda sweep: change vs the strongest non-Vertumnus baseline (mean over rates last)")
    for label in ("variant", "rate rps", "strongest baseline", "mean TTFT %", "P90 TTFT %", "SLO tok pp"):
        t.add_column(label, justify="left" if label == "variant" else "right")
    for _, r in sweep.iterrows():
        t.add_row(escape(r["variant"]), "mean" if r["rate_rps"] != r["rate_rps"] else f"{r['rate_rps']:g}", r["baseline"],
                  f"{r['mean_ttft_change_pct']:+.1f}", f"{r['p90_ttft_change_pct']:+.1f}", f"{r['slo_change_pp']:+.1f}")
    Console(width=max(120, Console().width)).print(t)
