"""Which part of the full Vertumnus system costs it mean TTFT at a steady load: the full system
(``vertumnus``) and its parts — the router alone on the run's pool (``vertumnus-router``), router +
global prefix-cache manager (``vertumnus-global-cache``), router + split/merge controller on the
run's pool (``vertumnus-adaptive``), the full system with the paper's §6 rule
(``vertumnus-paper-rule``) — and the full system with the controller's opt-in look-ahead setting
that met the steady-load criterion on the conversation trace
(``results/dynamic-phases/transition-lookahead/``: transition-aware look-ahead, latest sample
replayed, target margin 0.2, urgent gain 1.0; labelled ``vertumnus[transition-lookahead]``).

The runs are the points of ``cpgym reproduce --quick --experiments end-to-end``: the same
workload, 300 s window, trace spreading and run seed, and the rate factor of the chosen load read
from that run's ``end-to-end-runs.csv`` (``--runs``; its ``rate_scale`` column), so the full
system's rows can be checked against that file. Each finished run is appended to
``OUT/runs.csv`` at once (an interrupted run keeps them); at the end ``OUT/table.md`` gives each
policy's mean TTFT per seed and its paired change against the router alone, mean and 95 %
Student-t CI over the seeds::

    python -m experiments.scripts.full_system_ablation --workload production --load 0.85 \\
        --out results/end-to-end/full-system-ablation/production-0.85
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

#: The reference of the paired changes.
REFERENCE = "vertumnus-router"
#: Registry policies run, in this order, then the opt-in setting (``TRANSITION_LABEL``).
POLICIES = ("vertumnus-router", "vertumnus-global-cache", "vertumnus-adaptive", "vertumnus-paper-rule", "vertumnus",
            "homogeneous-cp4", "homogeneous-cp2")
TRANSITION_LABEL = "vertumnus[transition-lookahead]"
FIELDS = ("workload", "load_fraction", "seed", "rate_rps", "rate_scale", "policy", "mean_ttft_s", "p90_ttft_s",
          "slo_attainment_token_weighted", "prefix_hit_rate", "num_unfinished", "num_reconfig_operations", "wall_s")


def transition_spec():
    """The full system with the opt-in look-ahead setting (module docstring)."""
    from baselines.controller import ControllerConfig
    from baselines.registry import full_system_spec

    return full_system_spec(ControllerConfig(target_transition=True, target_sample="latest", target_replay_sample=True,
                                             target_margin=0.2, target_urgent_gain=1.0), TRANSITION_LABEL)


def rate_scale_of(runs_csv: str, workload: str, load: float) -> float:
    """The rate factor of ``workload`` at ``load`` in a ``cpgym reproduce`` runs file.

    Raises:
        ValueError: naming the file, when it has no such point or several factors for it.
    """
    with open(runs_csv, newline="") as f:
        scales = {float(r["rate_scale"]) for r in csv.DictReader(f)
                  if r["workload"] == workload and abs(float(r["load_fraction"]) - load) < 1e-9}
    if len(scales) != 1:
        raise ValueError(f"{runs_csv}: expected one rate_scale for workload {workload!r} at load {load:g}, "
                         f"found {sorted(scales)}")
    return scales.pop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.scripts.full_system_ablation",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", default="production", choices=("production", "tool-agent", "leval-like"))
    p.add_argument("--load", type=float, default=0.85, help="load fraction of the reproduce run (default 0.85)")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--runs", default="results/end-to-end/quick/end-to-end-runs.csv",
                   help="the reproduce run whose rate factor is used")
    p.add_argument("--policies", default=",".join(POLICIES + (TRANSITION_LABEL,)))
    p.add_argument("--out", required=True, help="output folder (runs.csv, table.md)")
    args = p.parse_args(argv)
    from envs.sim.options import split_name_list, split_number_list

    seeds = split_number_list(args.seeds, int)
    policies = split_name_list(args.policies, "--policies")
    scale = rate_scale_of(args.runs, args.workload, args.load)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = run(args.workload, args.load, scale, seeds, policies, out / "runs.csv")
    table = paired_table(rows, policies, seeds)
    (out / "table.md").write_text(table)
    print(table)
    return 0


def run(workload: str, load: float, scale: float, seeds: list[int], policies: list[str], runs_csv: Path) -> list[dict]:
    """Runs every policy on every seed's point (as ``cpgym reproduce``), appending each row to
    ``runs_csv`` as it finishes; returns the rows."""
    from baselines.runner import run_policy
    from envs.metrics import summarize
    from envs.planning.capacity import CapacityCache
    from envs.sim import Calibration, SimConfig
    from experiments.reproduce import _model_sim, _rated

    case = _workload_case(workload)
    calibration = Calibration.resolve(None)
    rows = []
    with open(runs_csv, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        for seed in seeds:
            sim = _model_sim(SimConfig(), None, None, seed)
            wl = _rated(case, 300.0, seed).at_scale(scale)
            cache = CapacityCache()
            for name in policies:
                policy = transition_spec() if name == TRANSITION_LABEL else name
                t0 = time.perf_counter()
                res = run_policy(policy, wl, sim, calibration, capacity_cache=cache)
                s = summarize(res)
                ops = int(res.extras.get("num_reconfigurations", 0))  # committed split/merge operations
                row = {"workload": workload, "load_fraction": load, "seed": seed, "rate_rps": wl.mean_rate_rps,
                       "rate_scale": scale, "policy": name, "num_reconfig_operations": ops,
                       "wall_s": time.perf_counter() - t0,
                       **{k: s[k] for k in ("mean_ttft_s", "p90_ttft_s", "slo_attainment_token_weighted",
                                            "prefix_hit_rate", "num_unfinished")}}
                writer.writerow(row)
                f.flush()
                rows.append(row)
                print(f"seed {seed} {name}: mean TTFT {row['mean_ttft_s']:.3f} s, {ops} operations, "
                      f"{row['wall_s']:.0f} s", file=sys.stderr, flush=True)
    return rows


def _workload_case(workload: str):
    from experiments.reproduce import WorkloadCase

    if workload == "production":
        from envs.workloads import default_traces_dir  # as cpgym reproduce

        return WorkloadCase("production", trace=str(default_traces_dir() / "conversation_trace.jsonl"))
    return WorkloadCase(workload, name=workload)


def paired_table(rows: list[dict], policies: list[str], seeds: list[int]) -> str:
    """Markdown: per policy, mean TTFT per seed [s], SLO attainment (mean over seeds) and the
    paired change of mean TTFT vs :data:`REFERENCE` [%] with its 95 % Student-t CI."""
    from envs.metrics.stats import paired_ci

    by = {(r["policy"], r["seed"]): r for r in rows}
    lines = [f"| policy | mean TTFT per seed {'/'.join(map(str, seeds))} [s] | SLO tok | reconfig ops | "
             f"vs {REFERENCE} [%] (95 % CI) |", "|---|---|---|---|---|"]
    for name in policies:
        ttft = [by[(name, s)]["mean_ttft_s"] for s in seeds]
        slo = sum(by[(name, s)]["slo_attainment_token_weighted"] for s in seeds) / len(seeds)
        ops = sum(by[(name, s)]["num_reconfig_operations"] for s in seeds) / len(seeds)
        change = ""
        if REFERENCE in policies and name != REFERENCE:
            m, lo, hi = paired_ci([100.0 * (t / by[(REFERENCE, s)]["mean_ttft_s"] - 1.0) for t, s in zip(ttft, seeds)])
            change = f"{m:+.1f} [{lo:+.1f}, {hi:+.1f}]"
        lines.append(f"| {name} | {' / '.join(f'{t:.3f}' for t in ttft)} | {slo:.3f} | {ops:.1f} | {change} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
