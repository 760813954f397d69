"""Does successive screening of the look-ahead candidates change the ``"target"`` decision?

Runs the adaptive policy of ``cpgym dynamic`` (one fixed comparison composition only, to save
time) with screening off (``--lookahead-screen-margin inf``: every candidate on every stream,
the full evaluation), records every score call of the controller's look-ahead predictor and its
per-stream results, then replays each call with each screening margin from those results
(:func:`baselines.lookahead.screened_scores`, the function the predictor uses) and reports per
margin: the calls whose best candidate differs from the full evaluation's, the calls whose
hysteresis class differs (predicted gain of the best over the kept target: <= ``target_margin``,
up to ``target_urgent_gain``, above), the largest relative error of the kept target's score
(must be 0: it runs every stream), and the simulations the screening needs vs the full
evaluation (distinct composition x rate bucket x stream over the run).

Usage (repo root)::

    python -m experiments.scripts.lookahead_screening --seeds 0,1,2 --margins 0.05,0.1,0.2 \\
        --out results/dynamic-phases/target-controller/screening/screening.json
    python -m experiments.scripts.lookahead_screening --seeds 0,1,2 --steady ...

``--steady``: the steady-short scenario (one constant short-heavy phase, ``--num-phases 1
--no-rising-rate``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path


def replay(predictor, margin: float, num_streams: int, target_margin: float, urgent_gain: float) -> dict:
    """Replays the predictor's recorded score calls with screening ``margin`` against the full
    evaluation (``margin = inf``) from its per-stream memo. Returns the counts described in the
    module docstring."""
    from baselines.lookahead import screened_scores

    def klass(gain: float) -> int:
        return 0 if gain <= target_margin else (1 if gain <= urgent_gain else 2)

    touched: set = set()
    full_touched: set = set()
    out = {"margin": margin, "num_calls": 0, "best_differs": 0, "class_differs": 0, "moving_best_differs": 0,
           "max_target_error": 0.0}
    for comps, rates, key, keep, span in predictor.score_calls:
        def value(c, rate, rep, _seen=touched, _key=key, _span=span):
            _seen.add((_key, rate, rep, _span, c))
            return predictor.stream_memo[(_key, rate, rep, _span)][c]

        def full_value(c, rate, rep, _key=key, _span=span):
            full_touched.add((_key, rate, rep, _span, c))
            return predictor.stream_memo[(_key, rate, rep, _span)][c]

        got = screened_scores(list(comps), list(rates), value, num_streams, margin, keep)
        ref = screened_scores(list(comps), list(rates), full_value, num_streams, math.inf, keep)
        b, rb = min(comps, key=got.__getitem__), min(comps, key=ref.__getitem__)
        out["num_calls"] += 1
        out["best_differs"] += b != rb
        for t in keep:
            g, rg = got[t] / got[b] - 1.0, ref[t] / ref[rb] - 1.0
            out["class_differs"] += klass(g) != klass(rg)
            out["moving_best_differs"] += (klass(rg) > 0 and b != rb)
            out["max_target_error"] = max(out["max_target_error"], abs(got[t] / ref[t] - 1.0))
    out["num_simulations"] = len(touched)
    out["num_simulations_full"] = len(full_touched)
    return out


def main(argv: list[str] | None = None) -> int:
    from baselines.controller import ControllerConfig
    from experiments.cli import build_parser
    from experiments.commands.dynamic import base_config_from_args
    from experiments.paper_experiments.dynamic_phases import DynamicPhasesConfig, run_dynamic_phases

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0,1,2", help="seeds (simulator and workload)")
    p.add_argument("--margins", default="0.05,0.1,0.2,0.3", help="screening margins to replay")
    p.add_argument("--steady", action="store_true", help="one constant short-heavy phase (steady-short scenario)")
    p.add_argument("--lookahead-replications", type=int, default=None)
    p.add_argument("--lookahead-warmup-s", type=float, default=None)
    p.add_argument("--out", required=True, help="JSON file")
    p.add_argument("--dump-dir", help="also write each seed's score calls and per-stream predictions (JSON) here")
    args = p.parse_args(argv)
    ccfg = ControllerConfig()
    rows = []
    for seed in [int(x) for x in args.seeds.split(",")]:
        flags = ["dynamic", "--supported-degrees", "2,4", "--seed", str(seed)]
        base = base_config_from_args(build_parser().parse_args(flags))
        cfg = DynamicPhasesConfig(workload_seed=seed, initial="cp4x10", compositions="cp4x10",
                                  lookahead_screen_margin=math.inf, lookahead_replications=args.lookahead_replications,
                                  lookahead_warmup_s=args.lookahead_warmup_s,
                                  **({"num_phases": 1, "rising_rate": False} if args.steady else {}))
        got = []
        run_dynamic_phases(cfg, base, on_controller=got.append)
        pred = got[0].predictor
        if args.dump_dir:
            dump = {"calls": [[list(x) for x in c] for c in pred.score_calls],
                    "memo": [[list(k[0]), k[1], k[2], list(k[3]), v] for k, v in pred.stream_memo.items()]}
            d = Path(args.dump_dir)
            d.mkdir(parents=True, exist_ok=True)
            (d / f"lookahead_seed{seed}{'_steady' if args.steady else ''}.json").write_text(json.dumps(dump))
        for m in [float(x) for x in args.margins.split(",")]:
            r = replay(pred, m, pred.config.num_replications, ccfg.target_margin, ccfg.target_urgent_gain)
            rows.append({"seed": seed, "steady": args.steady, **r})
            print(json.dumps(rows[-1]), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2) + "\n")
    from envs.provenance import write_provenance

    write_provenance(out.parent, argv=["python", "-m", "experiments.scripts.lookahead_screening", *(argv or sys.argv[1:])])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
