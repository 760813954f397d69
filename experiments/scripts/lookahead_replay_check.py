"""Does the controller's look-ahead see the run's prefix hits and load? Per composition, the full
run's mean TTFT and token prefix hit rate next to the look-ahead's (:mod:`baselines.lookahead`)
on streams resampled from a sample of the trace's requests, once from an idle pool with cold caches
(the default) and once after the sample's replay (``ControllerConfig.target_replay_sample``).

For each composition: the full run (``vertumnus-router`` on the fixed pool, the whole workload);
then ``--num-replications`` look-ahead streams at ``--rate-rps`` resampled from requests
``[--sample-start, --sample-start + --sample-size)`` of the workload, each simulated cold and after
the replay, with the scored requests' mean TTFT and hit rate (cached / prompt tokens) averaged over
the streams. The look-ahead's Vertumnus router is the controller's.

Usage (repo root)::

    python -m experiments.scripts.lookahead_replay_check --trace ../shared/data/traces/conversation_trace.jsonl \\
        --target-rps 12 --window-s 0 600 --sample-start 0 --sample-size 1024 --rate-rps 12 \\
        --out-dir results/dynamic-phases/lookahead-replay/lookahead-check-sample0

Writes ``lookahead_replay_check.csv`` (one row per composition) and prints it.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

import numpy as np

DEFAULT_COMPOSITIONS = "cp8x2,cp4x6;cp8x3,cp4x4;cp4x10;cp4x6,cp2x8;cp2x20;cp8x1,cp4x2,cp2x10,cp1x4"


def _scored(res, scored_from_s: float) -> tuple[float, float]:
    """``(mean TTFT [s], token prefix hit rate)`` of the requests arriving at or after ``scored_from_s``."""
    rec = res.records
    m = rec["arrival_s"] >= scored_from_s
    ttft = rec["ttft_s"][m]
    ttft = ttft[np.isfinite(ttft)]
    hit = float(rec["num_cached_tokens"][m].sum() / max(1.0, rec["num_prompt_tokens"][m].sum()))
    return (float(ttft.mean()) if ttft.size else float("inf")), hit


def main(argv: list[str] | None = None) -> int:
    import pandas as pd

    from baselines.lookahead import LookaheadConfig, LookaheadPredictor
    from baselines.registry import get_policy
    from baselines.runner import run_policy
    from baselines.vertumnus import VertumnusRouter
    from envs.metrics import summarize
    from envs.planning.capacity import CapacityTable, ProfileConfig
    from envs.provenance import write_provenance
    from envs.sim import Calibration, Simulator
    from envs.sim.options import check_out_dir
    from experiments.cli import build_parser
    from experiments.common import sim_config_from_args, workload_from_args

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", required=True, help="trace file (JSONL), as `cpgym simulate --trace`")
    p.add_argument("--target-rps", type=float, required=True, help="time-scale the trace to this mean rate [req/s]")
    p.add_argument("--window-s", type=float, nargs=2, metavar=("START", "END"), default=None,
                   help="keep arrivals in [START, END) s")
    p.add_argument("--compositions", default=DEFAULT_COMPOSITIONS, help="';'-separated compositions")
    p.add_argument("--sample-start", type=int, default=0, help="first request of the look-ahead sample (index)")
    p.add_argument("--sample-size", type=int, default=LookaheadConfig().max_sample_requests,
                   help="requests in the look-ahead sample")
    p.add_argument("--rate-rps", type=float, required=True, help="look-ahead stream rate [req/s]")
    p.add_argument("--num-replications", type=int, default=LookaheadConfig().num_replications,
                   help="look-ahead streams per composition")
    p.add_argument("--out-dir", required=True)
    args = p.parse_args(argv)
    flags = ["simulate", "--trace", args.trace, "--target-rps", str(args.target_rps)]
    if args.window_s:
        flags += ["--window-s", *(str(x) for x in args.window_s)]
    try:  # every input checked before the runs: one usage line, not a traceback
        check_out_dir(args.out_dir, "--out-dir")
        cfg = LookaheadConfig(num_replications=args.num_replications)
        rate = cfg.bucket_rate(args.rate_rps)
        sim_args = build_parser().parse_args(flags)
        wl = workload_from_args(sim_args)
        base = sim_config_from_args(sim_args)
        cal = Calibration.resolve(base.calibration_path)
    except (ValueError, OSError) as exc:
        p.error(str(exc))
    comps = [c.strip() for c in args.compositions.split(";")]
    try:
        if "" in comps or len(set(comps)) != len(comps):
            raise ValueError(f"an empty or repeated item in {args.compositions!r}")
        for c in comps:
            replace(base.pool, composition=c)
    except ValueError as exc:
        p.error(f"--compositions: {exc}")
    if not (0 <= args.sample_start and args.sample_size >= 1 and args.sample_start + args.sample_size <= wl.num_requests):
        p.error(f"--sample-start {args.sample_start} / --sample-size {args.sample_size}: the sample must lie inside "
                f"the workload's {wl.num_requests} requests")
    sample = list(wl.requests[args.sample_start:args.sample_start + args.sample_size])
    pred = LookaheadPredictor(CapacityTable(base, cal, ProfileConfig()), lambda: VertumnusRouter(name="vertumnus-lookahead"),
                              cfg)
    key = (args.sample_start, args.sample_size)
    streams = [pred.resampled_stream(sample, wl.kv_block_size_tokens, rate, key + ((rep,) if rep else ()))
               for rep in range(args.num_replications)]
    replayed = [pred.after_replay(sample, wl.kv_block_size_tokens, s) for s in streams]
    router = get_policy("vertumnus-router")
    rows = []
    for c in comps:
        pool_cfg = replace(base, pool=replace(base.pool, composition=c))
        full = summarize(run_policy(router, wl, pool_cfg, cal))
        la_cfg = replace(pool_cfg, horizon_s=None, record_events=False, seed=cfg.seed)
        cold = [_scored(Simulator(s, la_cfg, cal).run(pred.make_router()), 0.0) for s in streams]
        warm = [_scored(Simulator(w, la_cfg, cal).run(pred.make_router()), t) for w, t in replayed]
        rows.append({"composition": c, "full_mean_ttft_s": full["mean_ttft_s"],
                     "full_prefix_hit_rate": full["prefix_hit_rate"],
                     "cold_mean_ttft_s": float(np.mean([x[0] for x in cold])),
                     "cold_prefix_hit_rate": float(np.mean([x[1] for x in cold])),
                     "replay_mean_ttft_s": float(np.mean([x[0] for x in warm])),
                     "replay_prefix_hit_rate": float(np.mean([x[1] for x in warm]))})
        print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in rows[-1].items()), flush=True)
    df = pd.DataFrame(rows)
    for kind in ("full", "cold", "replay"):
        best = df.loc[df[f"{kind}_mean_ttft_s"].idxmin(), "composition"]
        print(f"best by {kind}: {best}")
    from pathlib import Path

    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "lookahead_replay_check.csv", index=False)
    write_provenance(out, argv=["python", "-m", "experiments.scripts.lookahead_replay_check", *(argv or sys.argv[1:])])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
