"""``cpgym faults SPEC``: every §9 policy and the learned router under the same fault scenarios
(one GPU failure, one straggler, one node failure) at a fraction of capacity; writes the table,
TTFT-over-time plots around each fault and the provenance (experiments/faults.py)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from envs.provenance import write_provenance
from envs.sim import SimConfig
from envs.sim.options import check_out_dir
from experiments.faults import load_spec, plot_ttft_over_time, run_fault_experiment
from experiments.flags.faults import add_arguments  # noqa: F401  (re-exported)


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    spec = load_spec(args.spec)
    if args.out is None:  # was results/faults: a run without --out overwrote the shipped results, part-way if stopped
        args.out = str(Path("runs") / "faults" / spec.name)
    out = Path(args.out)
    check_out_dir(args.out)  # a file, a path under a file or an unwritable folder: one line naming --out
    out.mkdir(parents=True, exist_ok=True)
    command = f"cpgym faults {args.spec} --out {args.out}"
    argv = ["cpgym", "faults", args.spec, "--out", args.out]
    # provenance first and table.csv after each run: a run stopped midway keeps its finished runs
    write_provenance(out, argv=argv, command=command, spec=spec.source)
    result = run_fault_experiment(spec, SimConfig(), log=lambda m: print(m, file=sys.stderr),
                                  on_row=lambda rows: pd.DataFrame(rows).to_csv(out / "table.csv", index=False))
    df = pd.DataFrame(result["rows"])
    df.to_csv(out / "table.csv", index=False)
    cols = ["scenario", "policy", "mean_ttft_s", "p90_ttft_s", "slo_attainment_token_weighted", "ttft_before_s",
            "ttft_after_s", "slo_attainment_before", "slo_attainment_after", "num_fault_affected_requests",
            "recompute_gpu_time_s", "recovery_time_s", "num_unfinished"]
    md = [f"# {spec.name}", "", spec.description, "",
          f"Capacity of `{spec.capacity_policy}`: {result['capacity_rps']:.2f} req/s (bisection, backlog drains within "
          f"{spec.capacity_drain_s:g} s of the last arrival); load {spec.load_fraction:g} x capacity = "
          f"{result['target_rps']:.2f} req/s, {result['num_requests']} requests.", "",
          "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in result["rows"]:
        md.append("| " + " | ".join(f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |")
    figs = plot_ttft_over_time(result, spec, out)
    md += ["", *[f"![{f.stem}]({f.name})" for f in figs], "", f"Command: `{command}`"]
    (out / "table.md").write_text("\n".join(md) + "\n")
    capacity = {"capacity_rps": result["capacity_rps"], "probes": result["probes"]}
    (out / "capacity.json").write_text(json.dumps(capacity, indent=2) + "\n")
    write_provenance(out, argv=argv, command=command, spec=spec.source)
    print(df[cols].to_string(index=False))
    return 0
