"""``cpgym tune vertumnus``: grid search of the Vertumnus router's (beta, lambda) on the TRAINING
windows (``policies.routing.protocol``) of each (workload, load) cell; writes one JSON file that
``cpgym evaluate --tuned FILE`` reads for ``vertumnus-tuned``.

The file is rewritten (atomically) after each tuned cell: a run stopped midway (an error, Ctrl-C)
leaves the cells it finished, in the complete run's format (``cpgym evaluate --tuned`` reads it and
names a missing cell)."""

from __future__ import annotations

import argparse

from envs.sim.options import check_out_file
from experiments.common import parse_list, sim_config_from_args, write_text_atomic
from experiments.flags.tune import add_arguments, add_scenario_arguments  # noqa: F401  (re-exported)
from policies.common.policy_args import check_distinct
from policies.routing.protocol import scenarios, tune_vertumnus


def scenarios_from_args(args: argparse.Namespace, config, log=None) -> list:
    """The :class:`policies.routing.protocol.Scenario` of each requested load (``policies.routing.protocol.scenarios``)."""
    loads = parse_list(args.loads, "--loads", float, positive=True) if args.loads else ()
    return scenarios(config, trace=args.trace, workload=args.workload, loads=loads, target_rps=args.target_rps,
                     # 0 is an error, not 10
                     episode_window_s=10.0 if args.episode_window_s is None else args.episode_window_s,
                     warmup_s=args.warmup_s, log=log)


def _grid(args: argparse.Namespace) -> tuple[list[float], list[float]]:
    """``--betas`` / ``--lambdas`` and the window flags, checked by flag before any run (the
    router's own check named its field, ``vertumnus lambda_``; a repeated value ran twice).

    Raises:
        ValueError: naming the flag: a beta < 1 or a lambda < 0 (paper §5), a non-finite or
            repeated value, ``--episode-window-s`` <= 0 or ``--warmup-s`` < 0.
    """
    import math

    grids = []
    for flag, text, low in (("--betas", args.betas, 1.0), ("--lambdas", args.lambdas, 0.0)):
        vals = parse_list(text, flag, float)
        bad = [v for v in vals if not (math.isfinite(v) and v >= low)]
        if bad:
            raise ValueError(f"{flag} values must be finite numbers >= {low:g} (paper §5), got {bad[0]:g} in {text!r}")
        check_distinct(vals, flag, text, "distinct values (each is one grid point)")
        grids.append(vals)
    if args.episode_window_s is not None and not (math.isfinite(args.episode_window_s) and args.episode_window_s > 0):
        raise ValueError(f"--episode-window-s must be a finite number > 0 [s], got {args.episode_window_s:g}")
    if args.warmup_s is not None and not (math.isfinite(args.warmup_s) and args.warmup_s >= 0):
        raise ValueError(f"--warmup-s must be a finite number >= 0 [s], got {args.warmup_s:g}")
    return grids[0], grids[1]


def run(args: argparse.Namespace) -> int:
    import json
    import sys
    from pathlib import Path

    out = Path(args.out)
    if out.exists():
        raise ValueError(f"--out {out} exists; choose a new file")
    check_out_file(args.out)  # before the tuning runs, not after
    config = sim_config_from_args(args)
    log = None if args.quiet else (lambda s: print(s, file=sys.stderr))
    betas, lambdas = _grid(args)
    result = {"heuristic": args.heuristic, "argv": sys.argv[1:], "cells": {}}

    def save(doc: dict) -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(out, json.dumps(doc, indent=2) + "\n")

    for sc in scenarios_from_args(args, config, log):
        t = tune_vertumnus(sc.windows("train", max_windows=args.max_windows), config, betas, lambdas, log=log)
        t.update(rate_rps=sc.rate_rps, load_fraction=sc.load_fraction, episode_window_s=sc.episode_window_s,
                 warmup_s=sc.warmup_s)
        result["cells"][sc.key] = t
        save(result)  # after each cell: a run stopped midway keeps its finished cells
        print(f"{sc.key}: beta {t['beta']:g}, lambda {t['lambda']:g} (mean TTFT {t['mean_ttft_s']:.4f} s on "
              f"{t['num_windows']} training windows at {sc.rate_rps:.2f} requests/s)")
    save(result)
    return 0
