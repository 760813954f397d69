"""Ranking accuracy of the controller's look-ahead TTFT predictor (:mod:`baselines.lookahead`)
against full constant-rate runs, on the ``phases`` workload's two mixes.

For each mix (``short``: 5 % long prompts; ``long``: 60 %) and rate, every fixed composition of the
pool runs the full simulator (router ``vertumnus-router``) on a single constant-rate phase of the
``phases`` generator (real prompts with their shared system prompts; ``--duration-s``), and the
predictor scores the same compositions for that mix (class histogram of the phase's prompts after
the unbounded-cache prefix reuse, as the controller sees it) and rate. Reported per (mix, rate):
Spearman rank correlation of predicted vs measured mean TTFT, the measured best and the predicted
best, and the *regret* (measured mean TTFT of the predicted best over the measured best, -1, %).

Usage (repo root)::

    python -m experiments.scripts.lookahead_accuracy --out-dir results/dynamic-phases/target-controller/predictor

Writes ``predictor_accuracy.csv`` (one row per mix, rate, composition) and
``predictor_accuracy.json`` (per mix and rate: Spearman, best, predicted best, regret).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra = np.argsort(np.argsort(a)).astype(float)
    rb = np.argsort(np.argsort(b)).astype(float)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def main(argv: list[str] | None = None) -> int:
    from baselines.lookahead import LookaheadConfig, LookaheadPredictor
    from baselines.registry import get_policy
    from baselines.runner import run_policy
    from envs.planning.capacity import CapacityTable, ProfileConfig, reuse_prefix_tokens
    from envs.planning.composition import enumerate_compositions
    from envs.sim import Calibration
    from envs.workloads import get_workload
    from experiments.cli import build_parser
    from experiments.commands.dynamic import base_config_from_args

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--short-rates", default="20,30,40,50,55,60", help="short-heavy mix rates [req/s]")
    p.add_argument("--long-rates", default="2,3,4,5,6,7.5", help="long-heavy mix rates [req/s]")
    p.add_argument("--duration-s", type=float, default=120.0, help="constant-rate phase of the full runs [s]")
    p.add_argument("--workload-seed", type=int, default=0)
    p.add_argument("--lookahead-duration-s", type=float, default=LookaheadConfig().duration_s)
    p.add_argument("--num-replications", type=int, default=LookaheadConfig().num_replications)
    p.add_argument("--lookahead-warmup-s", type=float, default=LookaheadConfig().warmup_s,
                   help="score only look-ahead requests arriving after this [s]")
    p.add_argument("--screen-margin", type=float, default=LookaheadConfig().screen_margin,
                   help="successive screening margin of the look-ahead candidates ('inf': every candidate on every stream)")
    p.add_argument("--seed", type=int, default=0, help="simulator seed of the full runs")
    p.add_argument("--source", choices=("requests", "histogram"), default=LookaheadConfig().source,
                   help="look-ahead stream: resampled from the phase's first requests, or from its class histogram")
    p.add_argument("--out-dir", required=True)
    args = p.parse_args(argv)
    flags = ["dynamic", "--supported-degrees", "2,4", "--seed", str(args.seed)]
    base = base_config_from_args(build_parser().parse_args(flags))
    cal = Calibration.resolve(base.calibration_path)
    comps = enumerate_compositions(base.pool)
    table = CapacityTable(base, cal, ProfileConfig(mix_tolerance=0.1, refine_max_mixes=16, num_bisection_steps=10))
    router = get_policy("vertumnus-router")
    pred = LookaheadPredictor(table, router.make_router, LookaheadConfig(
        duration_s=args.lookahead_duration_s, num_replications=args.num_replications, warmup_s=args.lookahead_warmup_s,
        screen_margin=args.screen_margin))
    rows, summary = [], []
    for kind, rates in (("short", args.short_rates), ("long", args.long_rates)):
        for rate in [float(x) for x in rates.split(",") if x.strip()]:
            key = "short_phase_rate_rps" if kind == "short" else "long_phase_rate_rps"
            wl = get_workload("phases", seed=args.workload_seed, num_phases=1, phase_duration_s=args.duration_s,
                              first_phase=kind, rising_rate=False, **{key: rate})
            sims0 = pred.num_simulations
            L = np.array([r.num_prompt_tokens for r in wl.requests], float)
            shares = table.shares(L, reuse_prefix_tokens(wl))
            if args.source == "histogram":
                predicted = pred.predict(comps, shares, rate)
            else:
                n = min(LookaheadConfig().max_sample_requests, wl.num_requests)
                predicted = pred.predict_from_requests(comps, list(wl.requests[:n]), wl.kv_block_size_tokens, rate,
                                                       (args.workload_seed, n))
            measured = {}
            for c in comps:
                res = run_policy(router, wl, replace(base, pool=replace(base.pool, composition=c)), cal)
                t = res.records["ttft_s"]
                measured[c] = float(np.nanmean(t))
                rows.append({"mix": kind, "rate_rps": rate, "composition": c, "measured_mean_ttft_s": measured[c],
                             "predicted_mean_ttft_s": predicted[c]})
            m = np.array([measured[c] for c in comps])
            q = np.array([predicted[c] for c in comps])
            best, pbest = comps[int(m.argmin())], comps[int(q.argmin())]
            summary.append({"mix": kind, "rate_rps": rate, "spearman": _spearman(m, q), "measured_best": best,
                            "predicted_best": pbest, "regret_pct": 100.0 * (measured[pbest] / measured[best] - 1.0),
                            "measured_best_mean_ttft_s": measured[best],
                            "num_lookahead_simulations": pred.num_simulations - sims0})
            print(json.dumps(summary[-1]), flush=True)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    import pandas as pd

    pd.DataFrame(rows).to_csv(out / "predictor_accuracy.csv", index=False)
    (out / "predictor_accuracy.json").write_text(json.dumps({"args": vars(args), "per_rate": summary}, indent=2) + "\n")
    from envs.provenance import write_provenance

    write_provenance(out, argv=["python", "-m", "experiments.scripts.lookahead_accuracy", *(argv or sys.argv[1:])])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
