"""``cpgym kv-tiers``: multi-tier KV study on a trace window at a fraction of capacity — each
policy with HBM / + host DRAM / + remote store, and LRU vs queue-aware host-memory eviction at
two DRAM capacities (``experiments/kv_tiers.py``); ``--plot-sweep DIR`` plots a
``kv-tiers-sweep.yaml`` sweep instead."""

from __future__ import annotations

import argparse

from baselines.registry import get_policy
from baselines.runner import policy_pool
from envs.provenance import write_provenance
from envs.sim.options import check_out_dir, split_name_list
from envs.workloads import default_trace_path
from experiments.common import parse_list, sim_config_from_args
from experiments.flags.kv_tiers import add_arguments  # noqa: F401  (re-exported)
from experiments.kv_tiers import SWEEP_COLS, TABLE_COLS, markdown_table, plot_tier_sweep, run_tier_study, write_study


def check_policy_names(flag: str, names) -> None:
    """Raises ValueError ``FLAG: unknown policy ...`` (:func:`baselines.registry.get_policy`) if a
    name of ``names`` is not a registered policy."""
    for name in names:
        try:
            get_policy(name)
        except ValueError as exc:
            raise ValueError(f"{flag}: {exc}") from None


def _progress(r: dict) -> None:
    import sys

    print(f"  {r['policy']} {r['kv_tiers']} {r['eviction']}: mean TTFT {r['mean_ttft_s']:.3f} s, "
          f"hit {r['prefix_hit_rate']:.3f}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    import math
    import sys

    check_out_dir(args.out)
    if args.plot_sweep:
        from pathlib import Path

        out = Path(args.out or args.plot_sweep)
        out.mkdir(parents=True, exist_ok=True)
        points = plot_tier_sweep(args.plot_sweep, out / "kv_tiers_sweep.png")
        table = markdown_table(points, SWEEP_COLS)
        (out / "sweep_table.md").write_text(table + "\n")

        write_provenance(out, sys.argv[1:], name="provenance_sweep_plot.json")
        print(table)
        print(f"{len(points)} cells plotted to {out / 'kv_tiers_sweep.png'}; table in {out / 'sweep_table.md'}")
        return 0
    start, end = args.arrival_window_s
    if not (math.isfinite(start) and math.isfinite(end) and 0 <= start < end):
        raise ValueError(f"--arrival-window-s START END needs finite 0 <= START < END, got {start:g} {end:g}")
    if args.kv_tiers != "hbm":  # the study runs every tier level itself (levels replaced per row)
        raise ValueError(f"--kv-tiers {args.kv_tiers} has no effect here: the tier table runs each policy with hbm, "
                         "hbm,dram and hbm,dram,store, the eviction table with hbm,dram (the other KV-tier flags apply)")
    if not 0 < args.load <= 1.5:
        raise ValueError(f"--load must be in (0, 1.5], got {args.load}")
    if args.capacity_rps is not None and not (args.capacity_rps > 0 and math.isfinite(args.capacity_rps)):
        raise ValueError(f"--capacity-rps must be a finite number > 0 [requests/s], got {args.capacity_rps}")

    policies = split_name_list(args.policies, "--policies")
    ev_policies = tuple(split_name_list(args.eviction_policies, "--eviction-policies"))
    # every name checked before any run (an unknown one failed after the capacity search or the tier table);
    # --capacity-policy even when --capacity-rps skips the search
    for flag, names in (("--capacity-policy", [args.capacity_policy]), ("--policies", policies),
                        ("--eviction-policies", ev_policies)):
        check_policy_names(flag, names)
    gbs = parse_list(args.eviction_dram_gb, "--eviction-dram-gb", positive=True)
    if len(gbs) != 2:
        raise ValueError(f"--eviction-dram-gb needs two capacities, got {args.eviction_dram_gb!r}")
    trace = args.trace
    if trace is None:
        trace = str(default_trace_path())
    config = sim_config_from_args(args)

    for name in {args.capacity_policy, *policies, *ev_policies}:  # a baseline's own pool must fit the pool flags
        policy_pool(get_policy(name), config.pool)
    progress = _progress
    if args.out:  # provenance first and rows.csv after each run: a run stopped midway keeps its finished runs
        from pathlib import Path

        import pandas as pd

        write_provenance(args.out, sys.argv[1:])
        done: list[dict] = []

        def progress(row: dict) -> None:
            _progress(row)
            done.append(row)
            pd.DataFrame(done).to_csv(Path(args.out) / "rows.csv", index=False)

    study = run_tier_study(trace, config, policies, tuple(args.arrival_window_s), args.load, args.capacity_policy,
                           args.capacity_rps,
                           tuple(gbs), ev_policies, progress=progress)
    # --load may be up to 1.5: above 1 the rate is past the capacity it refers to, so say so
    over = (f" (overloaded: above {args.capacity_policy}'s capacity; every TTFT below includes a backlog that grows "
            f"over the window)") if args.load > 1 else ""
    print(f"capacity {study.capacity['capacity_rps']:.2f} req/s; load {args.load:g} -> {study.rate_rps:.2f} req/s{over}\n")
    print(markdown_table(study.tiers, TABLE_COLS) + "\n\n" + markdown_table(study.eviction, TABLE_COLS))
    if args.out:
        write_study(study, args.out, sys.argv[1:])
    return 0
