"""``cpgym bench-env``: speed of the routing environment and of the policies' decisions (a thin
wrapper over :func:`experiments.benchmarks.bench_routing_env`).

Measures, on the default 40-GPU pool (or the configured one) and episode windows of a trace:

* raw env steps/s: ``env.step`` only (the action — the first eligible worker — is computed
  outside the timed region), including observation building and reward accounting;
* steps/s under SB3 ``DummyVecEnv`` (``--n-envs`` copies, masks fetched per step);
* decision latency [us/decision] of heuristics (``Router.route`` inside ``Simulator.run``) and of
  a learned checkpoint: its numpy forward pass (``policies.common.numpy_policy``, what ``cpgym evaluate``
  uses) and SB3 ``model.predict`` (batch 1, ``--torch-threads`` threads), with the steps/s of each
  policy's decide-and-step loop; ``(observation + decision)`` adds the time to build the
  observation the numpy forward pass reads (a heuristic's latency includes its own feature work).

The default heuristics are routers alone (``vertumnus-router``, not the full ``vertumnus``
system); a policy with a controller or cache manager is labelled with them
(:func:`experiments.benchmarks.heuristic_label`).

``--format json`` prints one row per measurement: ``{policy, decision_latency_us,
env_steps_per_s}`` (``decision_latency_us`` null for the raw env and DummyVecEnv rows).
"""

from __future__ import annotations

import argparse

from envs.sim.options import config_from_args
from envs.workloads import WorkloadSource, default_trace_path
from experiments.benchmarks import EnvBenchConfig, bench_routing_env
from experiments.common import dumps_json, sim_config_from_args
from experiments.flags.bench_env import add_arguments  # noqa: F401  (re-exported)


def run(args: argparse.Namespace) -> int:
    import math

    cfg = config_from_args(EnvBenchConfig, args)
    for flag, v in (("--target-rps", args.target_rps), ("--episode-window-s", args.episode_window_s)):
        if not (math.isfinite(v) and v > 0):  # named the workload's / window's fields (target_rps, episode_window_s)
            raise ValueError(f"{flag} must be a finite number > 0, got {v}")
    trace = args.trace or str(default_trace_path())
    wl = WorkloadSource(trace=trace, target_rps=args.target_rps).build()
    res = bench_routing_env(cfg, wl, args.episode_window_s, sim_config_from_args(args))
    if args.format == "json":
        print(dumps_json(res.rows()))
        return 0
    print(f"{res.workload}: {res.num_windows} windows of {args.episode_window_s:g} s; pool {res.num_gpus} GPUs "
          f"({res.pool}), {res.max_num_workers} action slots")
    print(f"raw env:          {res.raw_env_steps_per_s:10.0f} steps/s  "
          f"({res.raw_env_steps_per_s_incl_resets:.0f} incl. resets)")
    print(f"DummyVecEnv x{res.dummy_vec_env_n_envs}:   {res.dummy_vec_env_steps_per_s:10.0f} steps/s  "
          "(incl. masks and auto-resets)")
    print("decision latency (us/decision):")
    for k, v in res.decision_latency_us.items():
        print(f"  {k:28s} {v:10.1f}")
    return 0
