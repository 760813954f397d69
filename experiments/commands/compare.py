"""``cpgym compare``: a thin wrapper over
:func:`experiments.paper_experiments.end_to_end.run_compare`. Runs a suite of policies on one
workload at several request rates and print
the paper-style table (paper §9: mean TTFT, P90 TTFT, token-weighted SLO attainment per policy
and rate, and the % change of Vertumnus vs the strongest baseline).

* ``--suite paper`` = Vertumnus + the paper's §9 baselines; ``--suite all`` = every registered
  policy; any other value is a comma-separated list of suite and/or policy names.
* Rates: ``--rates 10,20,40`` (time-scale the workload to these mean rates [requests/s]),
  ``--rate-scales 1,2,4`` (multiply its native rate) or ``--loads 0.5,0.7,0.85,0.95`` (fractions
  of the strongest static baseline's sustainable rate, ``cpgym capacity``; the window
  ``--arrival-window-s`` (default 0 600) is scaled to each rate); neither = the native rate.
* Overload: with ``--loads`` (or ``--label-overload``) every policy's capacity is measured
  (cached on disk) and a rate above a policy's capacity is labelled ``overloaded`` in the table,
  the JSON (``overloaded``) and the plot (open markers). Without them, a run past saturation by
  both tests of ``cpgym capacity`` on that run alone (backlog grows and token-weighted SLO
  attainment < 0.9, :func:`baselines.capacity.sustainable`) is labelled ``saturated`` in the
  table (in any seed) and the JSON / results.csv (``saturated``).
* ``--seeds 0,1,2``: each seed sets the run seed and offsets the synthetic generator seed
  (``--workload-seed + seed``); metrics are averaged over seeds in the table and JSON.
* The strongest baseline at a rate is the non-Vertumnus policy (name not starting with
  ``vertumnus``) with the lowest mean TTFT; % change = ``(vertumnus - baseline) / baseline``
  (P90 against the same baseline); SLO change in percentage points. The Vertumnus policy compared
  is ``vertumnus`` (the full system), or ``vertumnus-router`` when the suite has only the router;
  its name is in the table title and the ``vertumnus`` column.
* ``--out DIR``: ``results.csv`` / ``results.parquet`` (one tidy row per policy, rate, seed),
  ``summary.csv`` (averaged over seeds), ``vertumnus_vs_strongest.csv`` (the % changes below),
  ``compare.png`` (mean and P90 TTFT vs rate), ``sweep.csv`` with ``--beta``/``--lambda``,
  ``provenance.json``. ``provenance.json`` is written first and ``results.csv`` (atomically) after
  each finished run, so a compare stopped midway (an error, Ctrl-C) keeps the rows of its finished
  runs in the complete run's format (with ``--jobs`` N, the runs finished in task order); the
  other files aggregate every run and are written at the end.
* ``--jobs N``: runs in a process pool of N workers (default 1).
* ``--beta B1,B2,...`` / ``--lambda L1,L2,...``: the beta/lambda sensitivity sweep of the
  Vertumnus cost (paper §5): adds one policy ``vertumnus-router[beta=B,lambda=L]`` (the router
  alone, as ``vertumnus-router``; ``vertumnus`` is the full system) per grid point (a
  missing list = the registered default) to the suite, and prints each variant's change vs the
  strongest baseline per rate and averaged over the rates (``sweep.csv`` under ``--out``).
"""

from __future__ import annotations

import argparse
import copy
import math
import sys

from baselines.capacity import capacities, is_overloaded, rates_for_loads, static_baselines
from baselines.registry import get_policy
from baselines.runner import policy_pool
from envs.provenance import write_provenance
from envs.sim.options import check_out_dir
from experiments.commands.capacity import (
    cache_dir_from_args,
    check_capacity_flags_unused,
    definition_from_args,
    rated_from_args,
)
from experiments.commands.simulate import UNFINISHED_CAPTION
from experiments.common import (
    dumps_json,
    parse_list,
    sim_config_from_args,
    workload_source_from_args,
    write_rows_csv,
)
from experiments.flags.compare import add_arguments  # noqa: F401  (re-exported)
from experiments.paper_experiments.end_to_end import (
    VERTUMNUS,
    compare_plan,
    resolve_suite,
    run_compare,
    vertumnus_variants,
)
from policies.common.policy_args import check_distinct

JSON_KEYS = ("policy", "rate_rps", "mean_ttft_s", "p90_ttft_s", "p99_ttft_s", "slo_attainment_token_weighted",
             "slo_attainment_requests", "prefix_hit_rate", "utilization", "num_unfinished", "num_requests", "num_seeds")


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
            if "overloaded" in g:  # open markers: rates above the policy's capacity
                over = g[g["overloaded"] == True]  # noqa: E712 (NaN = unknown)
                ax.scatter(over["rate_rps"], over[key], s=90, facecolors="white", edgecolors=style["color"], zorder=3,
                           label="overloaded" if policy == VERTUMNUS else None)
        ax.set_xlabel("request rate [requests/s]")
        ax.set_ylabel(label)
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
    axes[1].legend(fontsize=8, loc="upper left")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _capacities_for(args, names: list[str], seeds: list[int]):
    """With ``--loads`` or ``--label-overload``: each policy's capacity on the window
    (:mod:`baselines.capacity`, seed ``seeds[0]``), the window per seed, and for ``--loads``
    the absolute rates (``caps["_rates"]``) and rate -> load fraction (``caps["_load_of"]``).
    Otherwise ``({}, None, {})``."""
    if args.loads is None and not args.label_overload:
        return {}, None, {}

    loads = parse_list(args.loads, "--loads", positive=True) if args.loads is not None else None
    if loads is not None:
        check_distinct(loads, "--loads", args.loads, "distinct loads (each is one row per policy)")
        if not static_baselines(names):  # before the bisections, not after them (minutes per policy)
            raise ValueError(f"--loads are fractions of the strongest static baseline's capacity, but the suite "
                             f"({', '.join(names)}) has none (Vertumnus variants and policies choosing their own pool "
                             "are not static baselines); add one, e.g. homogeneous-cp4, or give absolute --rates")
    definition = definition_from_args(args)  # a bad threshold fails before the traces are read
    rated = {}
    for seed in seeds:
        a = copy.copy(args)
        a.workload_seed = args.workload_seed + seed
        a.target_rps = a.rate_scale = None
        rated[seed] = rated_from_args(a, duration_param=True)
    log = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))  # stderr: any --format
    res = capacities(names, rated[seeds[0]], sim_config_from_args(args, seed=seeds[0]), definition=definition,
                     cache_dir=cache_dir_from_args(args), log=log)
    caps: dict = {p: r.capacity_rps for p, r in res.items()}
    if loads is None:
        return caps, None, {}
    rates, best, cap = rates_for_loads(loads, res, static_baselines(names))
    print(f"loads relative to {best}: {cap:.3f} req/s", file=sys.stderr)
    caps["_rates"], caps["_load_of"] = rates, dict(zip(rates, loads))
    return caps, rated, {}


def _label_overload(summary, caps: dict, load_of: dict) -> None:
    """Adds ``capacity_rps`` / ``overloaded`` (and ``load_fraction``) columns when known."""
    if load_of:
        # the summary's rate is the mean over seeds of the measured rate: equal to the requested
        # rate only up to rounding (the mean of three copies of 6.133497413308303 is
        # 6.1334974133083024), so an exact lookup lost the load of some rates
        def load_for(rate: float) -> float:
            return next((f for r, f in load_of.items() if math.isclose(r, rate, rel_tol=1e-9)), math.nan)

        summary["load_fraction"] = summary["rate_rps"].map(load_for)
    if caps:
        summary["capacity_rps"] = summary["policy"].map(caps)
        summary["overloaded"] = [is_overloaded(r, c) if c == c else None
                                 for r, c in zip(summary["rate_rps"], summary["capacity_rps"])]


def _print_table(summary, changes, title: str) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=title)
    for label in ("rate rps", "policy", "mean TTFT s", "P90 TTFT s", "SLO tok", "hit rate", "util", "unfinished"):
        t.add_column(label, justify="left" if label == "policy" else "right")
    measured = "overloaded" in summary  # capacities measured (--loads / --label-overload): that label only
    for rate, g in summary.groupby("rate_rps", sort=True):
        for _, r in g.iterrows():
            ov = r.get("overloaded")
            label = escape(r["policy"]) + (" (overloaded)" if ov is not None and ov == ov and bool(ov) else "")
            if not measured and bool(r.get("saturated", False)):
                label += " (saturated)"
            t.add_row(f"{rate:g}", label, f"{r['mean_ttft_s']:.3f}", f"{r['p90_ttft_s']:.3f}",
                      f"{r['slo_attainment_token_weighted']:.3f}", f"{r['prefix_hit_rate']:.3f}", f"{r['utilization']:.3f}",
                      f"{r['num_unfinished']:.0f}")
        t.add_section()
    captions = []
    if not measured and "saturated" in summary and bool(summary["saturated"].astype(bool).any()):
        captions.append("(saturated): past this policy's saturation in this run (in any seed): the last third's mean TTFT "
                        "slowdown > 1.2x the first third's and token-weighted SLO attainment < 0.9 (the two tests of "
                        "cpgym capacity); its TTFTs measure the window's backlog. --label-overload measures each "
                        "policy's capacity instead")
    if bool((summary["num_unfinished"] > 0).any()):  # e.g. cut by --horizon-s: the TTFT columns leave them out

        captions.append(UNFINISHED_CAPTION.replace("mean / P50 / P90 / P99", "mean / P90")
                        + "; a run whose last third of arrivals has no finished request is not judged saturated")
    if captions:
        t.caption = "\n".join(captions)
    con = Console(width=max(120, Console().width))
    con.print(t)
    if changes:
        c = Table(title=escape(f"{changes[0]['vertumnus']} vs the strongest baseline (lowest mean TTFT among "
                               f"non-Vertumnus policies)"), caption=CHANGE_CAPTION)
        for label in ("rate rps", "strongest baseline", "mean TTFT %", "P90 TTFT %", "SLO tok pp"):
            c.add_column(label, justify="right")
        for ch in changes:
            c.add_row(f"{ch['rate_rps']:g}", escape(ch["baseline"]), f"{ch['mean_ttft_change_pct']:+.1f}",
                      f"{ch['p90_ttft_change_pct']:+.1f}", f"{ch['slo_change_pp']:+.1f}")
        con.print(c)


def _inputs(args: argparse.Namespace, load_rates: list[float] | None = None) -> dict:
    """The keyword arguments of ``run_compare`` / ``compare_plan`` given by the flags.

    Raises:
        ValueError: naming the flag, on a bad suite, rate list, seed list or --jobs.
    """
    if args.target_rps is not None or args.rate_scale is not None:
        raise ValueError("compare takes --rates or --rate-scales (lists), not --target-rps / --rate-scale")
    if args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
    names = resolve_suite(args.suite)
    for n in names:
        get_policy(n)
    variants = vertumnus_variants(args.beta, args.lambda_)
    policies = list(names) + [v for v in variants if v[0] not in names]
    seeds = parse_seeds(args)
    rates = parse_list(args.rates, "--rates", positive=True) if args.rates is not None else load_rates
    scales = parse_list(args.rate_scales, "--rate-scales", positive=True) if args.rate_scales is not None else None
    for flag, values, text, what in (("--rates", rates, args.rates, "rates"),
                                     ("--rate-scales", scales, args.rate_scales, "rate factors")):
        if text is not None:  # a repeated rate was run and shown once
            check_distinct(values, flag, text, f"distinct {what} (each is one row per policy)")
    base_config = sim_config_from_args(args, seed=seeds[0])
    for n in names:  # a baseline whose own pool does not fit the flags fails before any run
        policy_pool(get_policy(n), base_config.pool)
    return {"source": workload_source_from_args(args), "base_config": base_config,
            "policies": policies, "rates_rps": rates, "rate_scales": scales, "seeds": seeds}


def parse_seeds(args: argparse.Namespace) -> list[int]:
    """The ``--seeds`` list.

    Raises:
        ValueError: naming ``--seeds``, on a malformed list, a negative seed or a repeated one (was
            run once but shown as given in the title).
    """
    seeds = parse_list(args.seeds, "--seeds", int)
    if any(s < 0 for s in seeds):
        raise ValueError(f"--seeds needs integers >= 0, got {args.seeds!r}")
    check_distinct(seeds, "--seeds", args.seeds, "distinct seeds (each is one repetition)")
    return seeds


def plan(args: argparse.Namespace) -> list[tuple]:
    """The ``(WorkloadSource, SimConfig, policy)`` runs the flags ask for (nothing runs)."""
    return compare_plan(**_inputs(args))


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    import pandas as pd

    check_out_dir(args.out)  # before the capacity bisections of --loads / --label-overload
    if args.loads is not None or args.label_overload:
        seeds0 = parse_seeds(args)
        caps, _, load_of = _capacities_for(args, resolve_suite(args.suite), seeds0)
        load_rates = caps.pop("_rates", None)
        load_of = caps.pop("_load_of", load_of)
    else:
        check_capacity_flags_unused(args, "capacities are measured only with --loads or --label-overload")
        caps, load_of, load_rates = {}, {}, None
    inputs = _inputs(args, load_rates)
    config0, seeds = inputs["base_config"], inputs["seeds"]
    out = Path(args.out) if args.out else None
    if out is not None:
        write_provenance(out, argv=getattr(args, "argv", None))

    def save(rows: list[dict]) -> None:  # nothing is lost: every finished run is on disk before the next one is awaited
        if out is not None:
            write_rows_csv(out / "results.csv", rows)

    result = run_compare(**inputs, jobs=args.jobs, on_row=save)
    summary, changes = result.summary, result.changes
    _label_overload(summary, caps, load_of)
    title = (f"{result.workload_name}: {config0.pool.num_gpus} GPUs (run pool {config0.pool.composition}), "
             f"seeds {','.join(map(str, seeds))}")
    if out is not None:
        result.rows.to_csv(out / "results.csv", index=False)
        result.rows.to_parquet(out / "results.parquet", index=False)
        summary.to_csv(out / "summary.csv", index=False)
        pd.DataFrame(changes).to_csv(out / "vertumnus_vs_strongest.csv", index=False)
        if result.sweep is not None:
            result.sweep.to_csv(out / "sweep.csv", index=False)
        plot(summary, out / "compare.png", title)
        written = ["results.csv", "results.parquet", "summary.csv", "vertumnus_vs_strongest.csv"]
        written += ["sweep.csv"] * (result.sweep is not None)
        print(f"wrote {', '.join(written + ['compare.png'])} under {out}", file=sys.stderr)
    if args.format == "json":
        keys = JSON_KEYS + tuple(k for k in ("saturated", "load_fraction", "capacity_rps", "overloaded") if k in summary)
        recs = [{k: (r[k].item() if hasattr(r[k], "item") else r[k]) for k in keys} for _, r in summary.iterrows()]
        print(dumps_json(recs))
    else:
        _print_table(summary, changes, title)
        if result.sweep is not None:
            _print_sweep(result.sweep)
    return 0


#: The sign convention of the change tables (printed under them).
CHANGE_CAPTION = ("TTFT %: (Vertumnus - baseline) / baseline, negative = Vertumnus faster; "
                  "SLO tok pp: token-weighted SLO attainment difference in percentage points, positive = Vertumnus better")


def _print_sweep(sweep) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    if sweep.empty:
        return
    t = Table(title="beta/lambda sweep: change vs the strongest non-Vertumnus baseline (mean over rates last)",
              caption=CHANGE_CAPTION)
    for label in ("variant", "rate rps", "strongest baseline", "mean TTFT %", "P90 TTFT %", "SLO tok pp"):
        t.add_column(label, justify="left" if label == "variant" else "right")
    for _, r in sweep.iterrows():
        t.add_row(escape(r["variant"]), "mean" if r["rate_rps"] != r["rate_rps"] else f"{r['rate_rps']:g}", r["baseline"],
                  f"{r['mean_ttft_change_pct']:+.1f}", f"{r['p90_ttft_change_pct']:+.1f}", f"{r['slo_change_pp']:+.1f}")
    Console(width=max(120, Console().width)).print(t)
