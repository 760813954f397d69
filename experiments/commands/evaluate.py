"""``cpgym evaluate``: compare a learned checkpoint (or any policy) with heuristics on held-out
episode windows and seeds; table with 95% confidence intervals, or JSON."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    from experiments.common import add_sim_arguments

    p.add_argument("--policy", required=True, metavar="CHECKPOINT|NAME",
                   help="checkpoint folder / model.zip, 'shipped' (the shipped routing checkpoint), or a policy name")
    p.add_argument("--against", default=None,
                   help="comma-separated policies to compare with (default least-work,prefix-affinity,round-robin; "
                        "for --kind reconfig see --kind)")
    g = p.add_argument_group("episodes (default: the checkpoint's training source)")
    src = g.add_mutually_exclusive_group()
    src.add_argument("--trace", metavar="PATH", help="trace file")
    src.add_argument("--workload", metavar="NAME", help="named synthetic workload")
    g.add_argument("--target-rps", type=float, help="time-scale arrivals to this mean rate [requests/s]")
    g.add_argument("--episode-window-s", type=float, help="episode window length [s] (default 60 or the checkpoint's)")
    g.add_argument("--eval-every", type=int, help="every N-th window is held out (default 4 or the checkpoint's)")
    g.add_argument("--windows", default="eval", metavar="eval|train|all|I,J,...",
                   help="which windows: the held-out part (default), the training part, all, or indices into the held-out part")
    g.add_argument("--seeds", default="1,2,3", help="comma-separated workload/simulator seeds (default 1,2,3)")
    add_sim_arguments(p)
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--out", metavar="CSV", help="also write the per-episode rows to this CSV")
    p.add_argument("--quiet", action="store_true", help="no per-episode progress lines on stderr")
    p.add_argument("--reference", metavar="LABEL", help="policy for the paired Δ columns (default: vertumnus if evaluated, else the first --against)")
    p.add_argument("--from-csv", metavar="CSV", help="re-aggregate per-episode rows written earlier by --out (runs nothing)")
    p.add_argument("--kind", choices=("auto", "routing", "reconfig"), default="auto",
                   help="routing or reconfiguration checkpoint (default auto: the checkpoint's train_config.json 'kind'). "
                        "reconfig: whole-workload episodes per --seeds, --against defaults to "
                        "vertumnus-adaptive,vertumnus,fixed:cp1x40,fixed:cp2x20,fixed:cp4x10,fixed:cp8x5 (all routed by Vertumnus)")


RECONFIG_AGAINST = "vertumnus-adaptive,vertumnus,fixed:cp1x40,fixed:cp2x20,fixed:cp4x10,fixed:cp8x5"


def _run_reconfig(args: argparse.Namespace) -> int:
    import sys

    from experiments.common import dumps_json, parse_list, sim_config_from_args
    from policies.evaluate_reconfig import aggregate_reconfig, evaluate_reconfig

    if args.trace:
        raise ValueError("--kind reconfig evaluates named workloads (--workload); traces are not supported yet")
    ckpt = None if args.policy in ("none", "-") else args.policy
    against = [n.strip() for n in (args.against or RECONFIG_AGAINST).split(",") if n.strip()]
    workload = args.workload
    if workload is None and ckpt:
        import json
        from pathlib import Path

        d = Path(ckpt).parent if ckpt.endswith(".zip") else Path(ckpt)
        workload = (json.loads((d / "train_config.json").read_text()).get("train_config") or {}).get("workload")
    workload = workload or "phases"
    seeds = parse_list(args.seeds, "--seeds", int)
    if ckpt:
        from policies.evaluate_reconfig import training_seeds

        overlap = sorted(set(seeds) & set(training_seeds(ckpt)))
        if overlap:
            print(f"warning: seeds {overlap} were used in training (not held out)", file=sys.stderr)
    config = sim_config_from_args(args)
    log = None if args.quiet else (lambda s: print(s, file=sys.stderr))
    if args.from_csv:
        import pandas as pd

        rows = pd.read_csv(args.from_csv).to_dict("records")
    else:
        rows = evaluate_reconfig(ckpt, against, workload, seeds, config, target_rps=args.target_rps, log=log)
    if args.out and not args.from_csv:
        import pandas as pd

        pd.DataFrame(rows).to_csv(args.out, index=False)
    table = aggregate_reconfig(rows)
    if args.format == "json":
        print(dumps_json(table))
        return 0
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{workload}: whole-workload episodes, seeds {seeds}; Vertumnus router; mean ± 95% CI over seeds")
    cols = ["policy", "episodes", "mean TTFT s", "P90 TTFT s", "SLO att. (tok)", "ops started", "ops committed", "unfinished"]
    for c in cols:
        t.add_column(c, justify="left" if c == "policy" else "right")
    for r in table:
        def f(m, fmt):
            v, ci = r[m], r[m + "_ci95"]
            return "-" if v != v else (fmt.format(v) + ("" if ci != ci else " ± " + fmt.format(ci)))
        t.add_row(r["policy"], str(r["num_episodes"]), f("mean_ttft_s", "{:.3f}"), f("p90_ttft_s", "{:.3f}"),
                  f("slo_attainment_token_weighted", "{:.3f}"), f("num_operations", "{:.1f}"),
                  f("num_committed_operations", "{:.1f}"), f("num_unfinished", "{:.1f}"))
    Console(width=160).print(t)
    return 0


def run(args: argparse.Namespace) -> int:
    import sys

    from experiments.common import dumps_json, parse_list, sim_config_from_args
    from policies.evaluate import aggregate, check_policy_argument, evaluate, is_checkpoint
    from policies.train import EpisodeSource

    if not (args.kind == "reconfig" and args.policy in ("none", "-")):
        check_policy_argument(args.policy)  # one line: a missing checkpoint path, or "did you mean"
    kind = args.kind
    if kind == "auto":
        from policies.evaluate_reconfig import is_reconfig_checkpoint

        kind = "reconfig" if is_reconfig_checkpoint(args.policy) else "routing"
    if kind == "reconfig":
        return _run_reconfig(args)
    if args.against is None:
        args.against = "least-work,prefix-affinity,round-robin"
    policies = [args.policy] + [n.strip() for n in args.against.split(",") if n.strip() and n.strip() != args.policy]
    base = {}
    if is_checkpoint(args.policy):
        from policies.checkpoint import resolve_checkpoint

        _, meta = resolve_checkpoint(args.policy)
        base = (meta.get("train_config") or {}).get("source") or {}
    if args.trace or args.workload:
        base = {"trace": args.trace, "workload": args.workload, "target_rps": None}
    if not base:
        from envs.workloads import default_traces_dir

        base = {"trace": str(default_traces_dir() / "conversation_trace.jsonl"), "workload": None}
    trace = base.get("trace")
    if trace and not args.trace:
        from pathlib import Path

        if not Path(trace).is_file():  # a checkpoint trained on another machine: same file name here
            from envs.workloads import default_traces_dir

            trace = str(default_traces_dir() / Path(trace).name)
    source = EpisodeSource(trace=trace, workload=base.get("workload"),
                           target_rps=args.target_rps if args.target_rps is not None else base.get("target_rps"),
                           window_s=args.episode_window_s or base.get("window_s", 60.0),
                           eval_every=args.eval_every or base.get("eval_every", 4))
    seeds = parse_list(args.seeds, "--seeds", int)
    if args.windows in ("eval", "train", "all"):
        part, idx = args.windows, None
    else:
        part, idx = "eval", parse_list(args.windows, "--windows", int)
    config = sim_config_from_args(args)
    log = None if args.quiet else (lambda s: print(s, file=sys.stderr))
    if args.from_csv:
        import pandas as pd

        rows = pd.read_csv(args.from_csv).to_dict("records")
    else:
        rows = evaluate(policies, source, config, seeds, part=part, window_indices=idx, log=log)
    labels = list(dict.fromkeys(r["policy"] for r in rows))
    reference = args.reference or ("vertumnus" if "vertumnus" in labels else (labels[1] if len(labels) > 1 else None))
    if reference is not None and reference not in labels:
        raise ValueError(f"--reference {reference!r} is not among the evaluated policies {labels}")
    table = aggregate(rows, reference)
    if args.out and not args.from_csv:
        import pandas as pd

        pd.DataFrame(rows).to_csv(args.out, index=False)
    if args.format == "json":
        print(dumps_json(table))
        return 0
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{source.label}: {part} windows of {source.window_s:g} s, seeds {seeds}; mean ± 95% CI over episodes")
    cols = ["policy", "episodes", "mean TTFT s", "P90 TTFT s", "SLO att. (tok)", "hit rate", "unfinished"]
    if reference:
        cols += [f"Δ mean TTFT s vs {reference} (paired)", "Δ SLO att."]
    for c in cols:
        t.add_column(c, justify="left" if c == "policy" else "right")
    for r in table:
        def f(m, fmt):
            v, ci = r[m], r[m + "_ci95"]
            return "-" if v != v else (fmt.format(v) + ("" if ci != ci else " ± " + fmt.replace("+", "").format(ci)))
        t.add_row(r["policy"], str(r["num_episodes"]), f("mean_ttft_s", "{:.3f}"), f("p90_ttft_s", "{:.3f}"),
                  f("slo_attainment_token_weighted", "{:.3f}"), f("prefix_hit_rate", "{:.3f}"), f("num_unfinished", "{:.1f}"),
                  *([f("delta_mean_ttft_s", "{:+.3f}"), f("delta_slo_attainment", "{:+.3f}")] if reference else []))
    Console(width=160).print(t)
    return 0
