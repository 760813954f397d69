"""``cpgym bench-env``: speed of the routing environment and of the policies' decisions.

Measures, on the default 40-GPU pool (or the configured one) and episode windows of a trace:

* raw env steps/s: ``env.step`` only (the action — the first eligible worker — is computed
  outside the timed region), including observation building and reward accounting;
* steps/s under SB3 ``DummyVecEnv`` (``--n-envs`` copies, masks fetched per step);
* decision latency [us/decision] of heuristics (``Router.route`` inside ``Simulator.run``) and of
  a learned checkpoint (``model.predict`` with masks, batch 1, ``--torch-threads`` threads).
"""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    from experiments.common import add_sim_arguments

    g = p.add_argument_group("episodes")
    g.add_argument("--trace", metavar="PATH", help="trace (default: the Mooncake conversation trace)")
    g.add_argument("--target-rps", type=float, default=12.0, help="time-scale the trace to this rate (default 12)")
    g.add_argument("--episode-window-s", type=float, default=60.0, help="episode window [s] (default 60)")
    add_sim_arguments(p)
    p.add_argument("--steps", type=int, default=20_000, help="env steps per measurement (default 20000)")
    p.add_argument("--n-envs", type=int, default=2, help="DummyVecEnv size (default 2)")
    p.add_argument("--heuristics", default="least-work,prefix-affinity,vertumnus,round-robin",
                   help="heuristics whose decision latency is measured")
    p.add_argument("--policy", default="shipped", help="learned checkpoint for the latency ('none' to skip; default shipped)")
    p.add_argument("--torch-threads", type=int, default=1)
    p.add_argument("--format", choices=("table", "json"), default="table")


def run(args: argparse.Namespace) -> int:
    import time

    import numpy as np

    from envs import workloads
    from envs.routing_env import PrefillRoutingEnv, episode_windows
    from experiments.common import dumps_json, sim_config_from_args

    if args.steps < 1:
        raise ValueError(f"--steps must be >= 1, got {args.steps}")
    trace = args.trace or str(workloads.default_traces_dir() / "conversation_trace.jsonl")
    wl = workloads.scale_to_rate(workloads.load_trace(trace), args.target_rps)
    wins = episode_windows(wl, args.episode_window_s)
    config = sim_config_from_args(args)
    out = {"workload": wl.name, "num_windows": len(wins), "pool": config.pool.composition,
           "num_gpus": config.pool.num_gpus, "max_num_workers": config.pool.max_num_workers}

    # raw env
    env = PrefillRoutingEnv(wins, config)
    env.reset(seed=0)
    n = 0
    t_step = 0.0
    t_reset = 0.0
    pc = time.perf_counter
    while n < args.steps:
        a = int(env._mask.argmax())
        t0 = pc()
        _, _, term, trunc, _ = env.step(a)
        t_step += pc() - t0
        n += 1
        if term or trunc:
            t0 = pc()
            env.reset()
            t_reset += pc() - t0
    out["raw_env_steps_per_s"] = n / t_step
    out["raw_env_steps_per_s_incl_resets"] = n / (t_step + t_reset)

    # DummyVecEnv
    from stable_baselines3.common.vec_env import DummyVecEnv

    venv = DummyVecEnv([(lambda i=i: PrefillRoutingEnv(wins, config)) for i in range(args.n_envs)])
    venv.seed(0)
    venv.reset()
    steps = max(args.steps // args.n_envs, 1)
    t0 = pc()
    for _ in range(steps):
        masks = np.stack(venv.env_method("action_masks"))
        venv.step(masks.argmax(axis=1))
    dt = pc() - t0
    out["dummy_vec_env_steps_per_s"] = steps * args.n_envs / dt
    out["dummy_vec_env_n_envs"] = args.n_envs

    # heuristic decision latency
    from experiments.runner import build_simulator

    lat = {}
    for name in [x.strip() for x in args.heuristics.split(",") if x.strip()]:
        sim, spec = build_simulator(name, wins[0], config)
        router = spec.make_router()
        view = sim.view
        router.reset(view, sim.policy_rng)
        total, k = 0.0, 0
        while (req := sim.run_until_decision()) is not None:
            t0 = pc()
            wid = router.route(req, view)
            total += pc() - t0
            sim.decide(wid)
            router.on_dispatch(req, wid, view)
            k += 1
        lat[name] = 1e6 * total / max(k, 1)
    if args.policy != "none":
        import torch as th

        from policies.checkpoint import LearnedPolicy

        th.set_num_threads(args.torch_threads)
        pol = LearnedPolicy(args.policy)
        env = PrefillRoutingEnv(wins[:1], config)
        obs, _ = env.reset(seed=0, options={"window_index": 0, "sim_seed": 0})
        total, k = 0.0, 0
        while True:
            m = env.action_masks()
            t0 = pc()
            a, _ = pol.predict(obs, deterministic=True, action_masks=m)
            total += pc() - t0
            obs, _, term, trunc, _ = env.step(int(a))
            k += 1
            if term or trunc or k >= 3000:
                break
        lat[pol.name] = 1e6 * total / k
    out["decision_latency_us"] = lat
    if args.format == "json":
        print(dumps_json(out))
        return 0
    print(f"{out['workload']}: {out['num_windows']} windows of {args.episode_window_s:g} s; pool {out['num_gpus']} GPUs "
          f"({out['pool']}), {out['max_num_workers']} action slots")
    print(f"raw env:          {out['raw_env_steps_per_s']:10.0f} steps/s  ({out['raw_env_steps_per_s_incl_resets']:.0f} incl. resets)")
    print(f"DummyVecEnv x{args.n_envs}:   {out['dummy_vec_env_steps_per_s']:10.0f} steps/s  (incl. masks and auto-resets)")
    print("decision latency (us/decision):")
    for k2, v in lat.items():
        print(f"  {k2:28s} {v:10.1f}")
    return 0
