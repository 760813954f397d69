"""Cost of the full ``vertumnus`` system's look-ahead under overload: wall and CPU time per
simulated request of ``vertumnus`` (the ``"target"`` decision's look-ahead,
:class:`baselines.lookahead.LookaheadPredictor`) beside ``vertumnus-router`` (the router alone)
at loads relative to the workload's capacity, measured side by side in one process.

Per (load, policy) it reports the wall and CPU milliseconds per simulated request, the share of
the wall time spent inside the look-ahead (the predictor's ``score_from_requests`` / ``predict``
calls, timed by wrapping them on the run's predictor; the rest is the run itself and the
capacity profiles), the look-ahead simulations and the requests they simulated per request of
the run (deterministic: a cost measure free of the machine's load), and the controller's
sequence of target compositions (identical rows mean identical decisions).

``vertumnus-unclipped`` is ``vertumnus`` with ``LookaheadConfig.overload_rate_factor = inf``:
the look-ahead streams at the forecast rate however far above every candidate's throughput
bound (the behaviour before the clip), so one run shows before and after side by side.

Usage (repo root; the default trace is the Mooncake conversation trace, whose measured capacity
on the default pool is 15.91 req/s, ``results/dynamic-phases/target-controller/README.md``)::

    python -m experiments.scripts.lookahead_overload_bench --loads 0.5,1,3,10 --duration-s 30

``--duration-s``: simulated span of arrivals per run [s] (the trace time-scaled to ``load x
capacity``, then its first ``duration-s`` seconds); ``--profile N``: also print the N
functions with the largest cumulative time of each ``vertumnus*`` run (cProfile; slower).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

DEFAULT_POLICIES = "vertumnus-router,vertumnus-unclipped,vertumnus"


def _spec(name: str):
    from dataclasses import replace

    from baselines.controller import ControllerConfig
    from baselines.registry import full_system_spec, get_policy

    if name == "vertumnus-unclipped":
        base = ControllerConfig()
        return full_system_spec(replace(base, lookahead=replace(base.lookahead, overload_rate_factor=math.inf)),
                                name="vertumnus-unclipped")
    return get_policy(name)


def measure(name: str, workload, config, profile_top: int = 0) -> dict:
    """One run of policy ``name`` on ``workload``: times, look-ahead share and counts, targets."""
    import cProfile
    import io
    import pstats

    from baselines.runner import build_simulator

    spec = _spec(name)
    prof = cProfile.Profile() if profile_top and name != "vertumnus-router" else None
    t0, c0 = time.perf_counter(), time.process_time()
    if prof is not None:
        prof.enable()
    sim, spec = build_simulator(spec, workload, config)
    ctrl = sim.attachments.get("controller")
    pred = getattr(ctrl, "predictor", None)
    stats = {"lookahead_s": 0.0, "lookahead_sims": 0, "lookahead_requests": 0}
    if pred is not None:
        def timed(fn):
            def wrapper(*a, **kw):
                t = time.perf_counter()
                try:
                    return fn(*a, **kw)
                finally:
                    stats["lookahead_s"] += time.perf_counter() - t
            return wrapper

        def counted(fn):
            def wrapper(composition, workload, *a, **kw):
                stats["lookahead_sims"] += 1
                stats["lookahead_requests"] += workload.num_requests
                return fn(composition, workload, *a, **kw)
            return wrapper

        pred.score_from_requests = timed(pred.score_from_requests)
        pred.predict = timed(pred.predict)
        pred._simulate = counted(pred._simulate)
    res = sim.run(spec.make_router())
    if prof is not None:
        prof.disable()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    n = workload.num_requests
    windows = res.extras.get("controller_windows", [])
    targets = [w.get("target_composition", "") for w in windows if w.get("target_composition")]
    row = {"policy": name, "num_requests": n, "wall_s": wall, "cpu_s": cpu, "wall_ms_per_request": 1e3 * wall / n,
           "cpu_ms_per_request": 1e3 * cpu / n, "lookahead_share": stats["lookahead_s"] / wall,
           "lookahead_simulations": stats["lookahead_sims"],
           "lookahead_requests_per_request": stats["lookahead_requests"] / n,
           "mean_ttft_s": float(res.records["ttft_s"].mean()), "targets": targets}
    if prof is not None:
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(profile_top)
        row["profile"] = s.getvalue()
    return row


def main(argv: list[str] | None = None) -> int:
    from envs.sim import SimConfig
    from envs.sim.options import split_name_list
    from envs.workloads import build_workload, default_traces_dir

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", default=str(default_traces_dir() / "conversation_trace.jsonl"))
    p.add_argument("--capacity-rps", type=float, default=15.91,
                   help="the workload's capacity on the default pool [req/s] (default 15.91: the conversation trace)")
    p.add_argument("--loads", default="0.5,1,3,10", help="arrival rates as multiples of --capacity-rps")
    p.add_argument("--duration-s", type=float, default=30.0, help="simulated span of arrivals per run [s] (default 30)")
    p.add_argument("--policy", default=DEFAULT_POLICIES, help=f"comma-separated (default {DEFAULT_POLICIES})")
    p.add_argument("--profile", type=int, default=0, metavar="N", help="print the top N cProfile entries per run")
    p.add_argument("--format", choices=("table", "json"), default="table")
    args = p.parse_args(argv)
    loads = [float(x) for x in args.loads.split(",") if x.strip()]
    if not loads or any(not (x > 0 and math.isfinite(x)) for x in loads):
        raise SystemExit(f"--loads must be numbers > 0, got {args.loads!r}")
    if not (args.capacity_rps > 0 and args.duration_s > 0):
        raise SystemExit("--capacity-rps and --duration-s must be > 0")
    policies = split_name_list(args.policy, "--policy")
    config = SimConfig()
    # warm-up (imports, first-call costs) so that the first measured run is not charged for them
    measure("vertumnus", build_workload(trace=args.trace, target_rps=args.capacity_rps, window_s=(0.0, 5.0)), config)
    rows = []
    for load in loads:
        wl = build_workload(trace=args.trace, target_rps=load * args.capacity_rps, window_s=(0.0, args.duration_s))
        for name in policies:
            row = {"load": load, "rate_rps": load * args.capacity_rps, **measure(name, wl, config, args.profile)}
            rows.append(row)
            if args.format == "table":
                print(f"  done load {load:g} {name}: {row['wall_s']:.1f} s", file=sys.stderr, flush=True)
    if args.format == "json":
        print(json.dumps({"trace": args.trace, "capacity_rps": args.capacity_rps, "duration_s": args.duration_s,
                          "rows": rows}, indent=2))
        return 0
    print(f"trace {args.trace}: first {args.duration_s:g} s at load x {args.capacity_rps:g} req/s; default pool")
    head = f"{'load':>5s} {'reqs':>6s} " + " ".join(f"{n[:22]:>22s}" for n in policies)
    print("wall ms per request (look-ahead share of wall time)")
    print(head)
    by = {(r["load"], r["policy"]): r for r in rows}
    for load in loads:
        cells = [f"{by[(load, n)]['wall_ms_per_request']:9.2f} ({100 * by[(load, n)]['lookahead_share']:4.1f} %)"
                 for n in policies]
        print(f"{load:5g} {by[(load, policies[0])]['num_requests']:6d} " + " ".join(f"{c:>22s}" for c in cells))
    print("CPU ms per request; look-ahead simulations / look-ahead requests simulated per request")
    print(head)
    for load in loads:
        cells = [f"{by[(load, n)]['cpu_ms_per_request']:7.2f}; {by[(load, n)]['lookahead_simulations']:3d}/"
                 f"{by[(load, n)]['lookahead_requests_per_request']:5.0f}" for n in policies]
        print(f"{load:5g} {by[(load, policies[0])]['num_requests']:6d} " + " ".join(f"{c:>22s}" for c in cells))
    base = policies[0]
    if len(policies) > 1:
        print(f"wall time per request relative to {base}")
        print(head)
        for load in loads:
            b = by[(load, base)]["wall_ms_per_request"]
            print(f"{load:5g} {by[(load, base)]['num_requests']:6d} "
                  + " ".join(f"{by[(load, n)]['wall_ms_per_request'] / b:21.1f}x" for n in policies))
    print("mean TTFT s; targets per window")
    for load in loads:
        for n in policies:
            r = by[(load, n)]
            print(f"{load:5g} {n:22s} {r['mean_ttft_s']:10.3f}  {' '.join(r['targets']) or '-'}")
    for r in rows:
        if "profile" in r:
            print(f"--- profile: load {r['load']:g} {r['policy']}\n{r['profile']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
