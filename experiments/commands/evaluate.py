"""``cpgym evaluate``: compare a learned checkpoint (or any policy) with heuristics on held-out
episode windows and seeds; table with 95% confidence intervals, or JSON. A thin wrapper over
:func:`policies.evaluate.run_evaluation`; the evaluation flags are generated from
:class:`policies.evaluate.EvaluationConfig`.

``--out CSV`` is written after each finished episode (routing windows, ``--kind reconfig`` runs
and the ``--loads`` / ``--protocol`` cells alike): an evaluation that fails or is interrupted
midway leaves the episodes it finished in the CSV, in the format of a complete run (a reconfig
run's ``best-fixed-in-hindsight`` rows are added at the end only), and ``--from-csv`` reads it."""

from __future__ import annotations

import argparse

from rich.markup import escape

from envs.metrics.stats import ci_text
from envs.provenance import write_provenance
from envs.sim.options import add_config_arguments, check_out_file, config_from_args, split_name_list
from envs.sim.pool import DEFAULT_COMPOSITION
from experiments.common import add_sim_arguments, dumps_json, print_unclipped, sim_config_from_args, write_rows_csv
from policies.common.policy_args import check_checkpoint_kind, check_policy_argument
from policies.episode_rows import choose_reference, read_episode_rows, uneven_episodes
from policies.evaluate import DEFAULT_ROUTING_AGAINST, EvaluationConfig, reconfig_workload, run_evaluation
from policies.routing.evaluate import aggregate
from policies.routing.protocol import VERTUMNUS_ROUTER, cell_table, evaluate_scenario, load_tuned_cells, scenarios


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, EvaluationConfig, title="policies and episodes (default: the checkpoint's training source)")
    add_sim_arguments(p, seed=False)  # every episode's simulator seed is its --seeds entry
    p.add_argument("--format", choices=("table", "json"), default="table", help="stdout format (default table)")
    p.add_argument("--out", metavar="CSV", help="also write the per-episode rows to this CSV (and CSV.provenance.json); "
                                                "the CSV is rewritten after each episode, so a run stopped midway keeps "
                                                "its finished episodes (readable by --from-csv)")
    p.add_argument("--quiet", action="store_true", help="no per-episode progress lines on stderr")
    p.add_argument("--from-csv", metavar="CSV", help="re-aggregate per-episode rows written earlier by --out (runs nothing; "
                                                     "only --kind, --reference and --format apply): routing, --kind "
                                                     "reconfig or --loads/--protocol rows (told from the columns), "
                                                     "printed as that run's table")
    for action in p._actions:  # the CSV names its policies: --policy is required only when something runs
        if action.dest == "policy":
            action.required = False
            action.help += " (required unless --from-csv)"


#: EvaluationConfig fields that apply to ``--from-csv`` (the others choose what runs).
FROM_CSV_FIELDS = ("kind", "reference")


def _run_from_csv(args: argparse.Namespace) -> int:
    """``--from-csv``: the CSV's rows aggregated and printed like a run's; a flag that only
    chooses what runs is an error (nothing runs)."""
    import sys
    from dataclasses import fields

    for f in fields(EvaluationConfig):
        if f.name not in FROM_CSV_FIELDS and getattr(args, f.name, f.default) != f.default:
            raise ValueError(f"--{f.name.replace('_', '-')} does not apply with --from-csv (it re-aggregates the CSV's "
                             f"rows; nothing runs)")
    if args.out:
        raise ValueError("--out does not apply with --from-csv (the rows are already in a CSV)")
    kind, rows = read_episode_rows(args.from_csv, args.kind)
    uneven = uneven_episodes(rows, kind)
    if uneven:
        print(f"warning: {args.from_csv}: {uneven}", file=sys.stderr)
    if kind == "protocol":
        labels = list(dict.fromkeys(r["policy"] for r in rows))
        if args.reference is not None and args.reference not in labels:
            raise ValueError(f"--reference {args.reference!r} is not among the evaluated policies {labels}")
        reference = protocol_reference(labels, args.reference)
        return _print_protocol(rows, reference, f"{args.from_csv}: protocol windows", args.format)
    seeds = sorted({int(r["seed"]) for r in rows})
    if kind == "reconfig":
        return _print_reconfig(rows, args.from_csv, seeds, args.format, args.reference)
    return _print_routing(rows, args.reference, seeds, f"{args.from_csv}:", args.format)


def run(args: argparse.Namespace) -> int:
    import sys

    if args.from_csv:
        return _run_from_csv(args)
    if args.policy is None:
        raise ValueError("--policy is required (a checkpoint, 'shipped' or a policy name), unless --from-csv")
    check_out_file(args.out)  # before hours of evaluation, not after
    cfg = config_from_args(EvaluationConfig, args)
    if cfg.loads or cfg.protocol:
        check_policy_argument(cfg.policy)
        check_checkpoint_kind(cfg.policy, "routing")
        return _run_protocol(args, cfg)
    if not (cfg.kind == "reconfig" and cfg.policy in ("none", "-")):
        check_policy_argument(cfg.policy)  # one line: a missing checkpoint path, or "did you mean"
    kind = cfg.resolved_kind()
    cfg = cfg.with_default_seeds(kind)  # reconfig: held-out seeds by default, never a checkpoint's training seeds
    check_checkpoint_kind(cfg.policy, kind)  # a routing checkpoint with --kind reconfig, or the converse
    if kind == "reconfig":
        cfg.check_reconfig_fields()  # before the training-seed warning
    if kind == "reconfig" and cfg.policy not in ("none", "-"):
        from policies.reconfig.evaluate import check_held_out_seeds  # lazy: gymnasium (start-up of the CLI)

        # a training seed is refused (before any run); a validation seed is model selection, not a held-out result
        validation = check_held_out_seeds(cfg.policy, list(cfg.seeds), reconfig_workload(cfg))
        if validation:
            print(f"warning: seeds {validation} are validation seeds of {cfg.policy} (model selection data, not held out)",
                  file=sys.stderr)
    log = None if args.quiet else (lambda s: print(s, file=sys.stderr))
    start = None
    if kind == "reconfig" and cfg.policy not in ("none", "-") and args.pool_composition is None:
        start = _checkpoint_start(cfg.policy, log)
    try:
        config = sim_config_from_args(args, composition=start)
    except ValueError as exc:
        if start is None or "composition" not in str(exc):  # another flag's error stays as it is
            raise
        raise ValueError(f"--policy {cfg.policy}: its training composition {start!r} does not fit this pool ({exc}); "
                         "give --pool-composition") from None
    save = episode_writer(args)
    res = run_evaluation(cfg, config, log=log, on_row=save)
    rows, source, part = res.rows, res.source, res.part
    if save is not None:
        save(rows)  # every row (reconfig: with the best-fixed-in-hindsight rows)
    if kind == "reconfig":
        from policies.reconfig.evaluate import overload_warnings  # lazy: gymnasium (start-up of the CLI)

        for line in overload_warnings(rows):
            print(line, file=sys.stderr)
        return _print_reconfig(rows, source, cfg.seeds, args.format, cfg.reference)
    where = f"{source.label}: {part} windows of {source.episode_window_s:g} s" if source is not None else f"{part} windows"
    return _print_routing(rows, cfg.reference, cfg.seeds, where + ",", args.format)


def _checkpoint_start(policy: str, log=None) -> str | None:
    """The composition the reconfiguration checkpoint ``policy`` was trained from
    (:func:`policies.reconfig.evaluate.checkpoint_pool_composition`), where every controller and
    ``vertumnus-router`` start when ``--pool-composition`` is not given, so that the comparison
    stays paired; says so through ``log`` when it is not the default composition. ``None`` when the
    checkpoint does not record one (the default then).

    Raises:
        ValueError: naming the file and field, on an ill-typed record.
    """
    from policies.reconfig.evaluate import checkpoint_pool_composition  # lazy: gymnasium (start-up of the CLI)

    comp = checkpoint_pool_composition(policy)
    if comp is not None and comp != DEFAULT_COMPOSITION and log:
        log(f"pool composition {comp}: the composition {policy} was trained from; every controller starts there "
            "(--pool-composition overrides)")
    return comp


def episode_writer(args: argparse.Namespace):
    """``--out CSV``: a ``callable(rows)`` that writes the per-episode rows so far (called after each
    episode and once at the end; ``None`` without ``--out``). The first call also writes
    ``CSV.provenance.json``, so an earlier run's CSV and provenance stay a pair until this run has
    an episode to replace them with; each write is atomic (``experiments.common.write_rows_csv``).
    An evaluation stopped midway (an error, Ctrl-C) thus leaves its finished episodes in the CSV,
    readable by ``--from-csv`` (which warns that the policies have uneven episodes)."""
    if not args.out:
        return None
    from pathlib import Path

    out = Path(args.out)
    started = []

    def save(rows: list[dict]) -> None:
        if not started:
            out.parent.mkdir(parents=True, exist_ok=True)
            write_provenance(out.parent, argv=getattr(args, "argv", None), name=f"{out.name}.provenance.json")
            started.append(True)
        write_rows_csv(out, rows)

    return save


def _run_protocol(args: argparse.Namespace, cfg) -> int:
    """``--loads`` / ``--protocol``: :mod:`policies.routing.protocol` cells (test windows by default)."""
    import sys

    against = DEFAULT_ROUTING_AGAINST if cfg.against is None else cfg.against
    policies = [cfg.policy] + [n for n in split_name_list(against, "--against") if n != cfg.policy]
    part = {"eval": "test"}.get(cfg.windows, cfg.windows)
    if part not in ("train", "validation", "test"):
        raise ValueError(f"--windows must be test, validation or train with --loads/--protocol, got {cfg.windows!r}")
    config = sim_config_from_args(args)
    log = None if args.quiet else (lambda s: print(s, file=sys.stderr))
    tuned_cells = load_tuned_cells(cfg.tuned) if cfg.tuned else {}
    rows = []
    episode_window_s = cfg.episode_window_s or 10.0
    save = episode_writer(args)
    for sc in scenarios(config, trace=cfg.trace, workload=cfg.workload, loads=cfg.loads,
                        target_rps=None if cfg.loads else cfg.target_rps, episode_window_s=episode_window_s,
                        warmup_s=cfg.warmup_s, log=log):
        tuned = tuned_cells.get(sc.key)
        if cfg.tuned and "vertumnus-tuned" in policies and tuned is None:
            raise ValueError(f"--tuned {cfg.tuned} has no cell {sc.key!r}; cells: {sorted(tuned_cells)}")
        done = list(rows)  # the earlier cells' rows: each save writes them and this cell's so far
        rows += evaluate_scenario(policies, sc, config, part, tuned=tuned, log=log, max_windows=cfg.max_windows,
                                  on_row=None if save is None else (lambda rs, done=done: save(done + rs)))
    if save is not None:
        save(rows)
    return _print_protocol(rows, protocol_reference(policies, cfg.reference),
                           f"{part} windows ({episode_window_s:g} s, warm-up {cfg.warmup_s:g} s)", args.format)


def protocol_reference(policies: list[str], reference: str | None) -> str:
    """The reference of a protocol evaluation's paired deltas: ``reference``, else
    ``vertumnus-tuned`` or ``vertumnus-router`` if evaluated, else the last policy."""
    return reference or ("vertumnus-tuned" if "vertumnus-tuned" in policies else
                         VERTUMNUS_ROUTER if VERTUMNUS_ROUTER in policies else policies[-1])


def _print_protocol(rows: list[dict], reference: str, what: str, fmt: str) -> int:
    """Prints the protocol table of ``rows`` (``policies.routing.protocol.cell_table``); ``what`` starts the
    title (the windows, or the CSV they were read from)."""
    table = cell_table(rows, reference)
    if fmt == "json":
        print(dumps_json(table))
        return 0
    from rich.table import Table

    t = Table(title=escape(f"{what}; mean over windows; Δ paired per window vs {reference} with 95% CI"))
    for c in ("policy", "workload", "load", "rate rps", "windows", "mean TTFT s", "P90 TTFT s", "SLO att. (tok)",
              f"Δ mean TTFT % vs {reference}", "95% CI"):
        t.add_column(escape(c), justify="left" if c in ("policy", "workload") else "right", overflow="fold")
    for r in table:
        lf = "-" if r["load_fraction"] is None else f"{r['load_fraction']:g}"
        # no interval: one window, or zero width (every window gave the same change)
        ci = "-" if r["ci_low"] != r["ci_low"] or r["ci_low"] == r["ci_high"] else f"[{r['ci_low']:+.1f}, {r['ci_high']:+.1f}]"
        t.add_row(escape(r["policy"]), escape(r["workload"]), lf, f"{r['rate_rps']:.2f}", str(r["num_windows"]),
                  f"{r['mean_ttft_s']:.3f}",
                  f"{r['p90_ttft_s']:.3f}", f"{r['slo_attainment_token_weighted']:.4f}",
                  f"{r['delta_mean_ttft_pct_vs_ref']:+.2f}", ci)
    print_unclipped(t)
    return 0


def _print_reconfig(rows: list[dict], workload: str, seeds, fmt: str, reference: str | None = None) -> int:
    from policies.reconfig.evaluate import aggregate_reconfig  # lazy: gymnasium (start-up of the CLI)

    table = aggregate_reconfig(rows, workload, reference)
    ref = table[0]["reference"] if table else None
    if fmt == "json":
        print(dumps_json(table))
        return 0
    from rich.table import Table

    t = Table(title=escape(f"{workload}: whole-workload episodes, seeds {list(seeds)}; Vertumnus router; "
                           f"mean ± 95% CI over seeds (none: one seed or a zero-width interval)"))
    cols = ["policy", "episodes", "mean TTFT s", "P90 TTFT s", "SLO att. (tok)", "ops started", "ops committed", "unfinished"]
    if ref:
        cols += [f"Δ mean TTFT % vs {ref} (paired 95% CI)", "Δ SLO att."]
    for c in cols:
        t.add_column(escape(c), justify="left" if c == "policy" else "right", overflow="fold")
    for r in table:
        def f(m, fmt):
            return ci_text(r[m], r[m + "_ci95"], fmt)
        d = r["delta_mean_ttft_pct_vs_ref"]
        no_interval = r["ci_low"] != r["ci_low"] or r["ci_low"] == r["ci_high"]  # one seed, or zero width
        delta = ["-" if d != d else f"{d:+.1f}" if no_interval else f"{d:+.1f} [{r['ci_low']:+.1f}, {r['ci_high']:+.1f}]",
                 f("delta_slo_attainment", "{:+.3f}")]
        t.add_row(escape(r["policy"]), str(r["num_episodes"]), f("mean_ttft_s", "{:.3f}"), f("p90_ttft_s", "{:.3f}"),
                  f("slo_attainment_token_weighted", "{:.3f}"), f("num_operations", "{:.1f}"),
                  f("num_committed_operations", "{:.1f}"), f("num_unfinished", "{:.1f}"), *(delta if ref else []))
    print_unclipped(t)
    return 0


def _print_routing(rows: list[dict], reference: str | None, seeds, where: str, fmt: str) -> int:
    """Prints the routing table of ``rows``; ``where`` starts the title (the episodes' source)."""
    reference = choose_reference(rows, reference)
    table = aggregate(rows, reference)
    if fmt == "json":
        print(dumps_json(table))
        return 0
    from rich.table import Table

    t = Table(title=escape(f"{where} seeds {list(seeds)}; mean ± 95% CI over episodes (none: one episode or a zero-width "
                           "interval)"))
    cols = ["policy", "episodes", "mean TTFT s", "P90 TTFT s", "SLO att. (tok)", "hit rate", "unfinished"]
    if reference:
        cols += [f"Δ mean TTFT s vs {reference} (paired)", "Δ SLO att."]
    for c in cols:
        t.add_column(escape(c), justify="left" if c == "policy" else "right", overflow="fold")
    for r in table:
        def f(m, fmt):
            return ci_text(r[m], r[m + "_ci95"], fmt)
        t.add_row(escape(r["policy"]), str(r["num_episodes"]), f("mean_ttft_s", "{:.3f}"), f("p90_ttft_s", "{:.3f}"),
                  f("slo_attainment_token_weighted", "{:.3f}"), f("prefix_hit_rate", "{:.3f}"), f("num_unfinished", "{:.1f}"),
                  *([f("delta_mean_ttft_s", "{:+.3f}"), f("delta_slo_attainment", "{:+.3f}")] if reference else []))
    print_unclipped(t)
    return 0
