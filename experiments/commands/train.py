"""``cpgym train routing|reconfig``: train a learned policy (MaskablePPO) on episode windows of a
trace or synthetic workload; writes checkpoints, CSV logs and (offline) wandb logs."""

from __future__ import annotations

import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    from experiments.common import add_sim_arguments

    p.add_argument("kind", choices=("routing", "reconfig"), help="which decision to learn")
    g = p.add_argument_group("episodes")
    src = g.add_mutually_exclusive_group()
    src.add_argument("--trace", metavar="PATH", help="trace file (default: the Mooncake conversation trace)")
    src.add_argument("--workload", metavar="NAME", help="named synthetic workload instead of a trace")
    g.add_argument("--workload-seed", type=int, default=0, help="generator / arrival-spreading seed (default 0)")
    g.add_argument("--target-rps", type=float, help="time-scale arrivals to this mean rate [requests/s]")
    g.add_argument("--episode-window-s", type=float, default=60.0, help="episode window length [s] (default 60)")
    g.add_argument("--eval-every", type=int, default=4, help="hold out every N-th window for evaluation (default 4)")
    add_sim_arguments(p)
    t = p.add_argument_group("training")
    t.add_argument("--timesteps", type=int, default=200_000, help="environment steps (default 200000)")
    t.add_argument("--n-envs", type=int, default=2, help="parallel environments (default 2)")
    t.add_argument("--vec-env", choices=("dummy", "subproc"), default="dummy", help="vectorisation (default dummy)")
    t.add_argument("--n-steps", type=int, default=1024, help="rollout length per env (default 1024)")
    t.add_argument("--batch-size", type=int, default=256)
    t.add_argument("--n-epochs", type=int, default=4)
    t.add_argument("--learning-rate", type=float, default=3e-4)
    t.add_argument("--gamma", type=float, default=0.995)
    t.add_argument("--ent-coef", type=float, default=0.01)
    t.add_argument("--hidden-dim", type=int, default=64)
    t.add_argument("--reward", choices=("time_in_system", "slo_miss_tokens"), default="time_in_system")
    t.add_argument("--reward-scale", type=float, default=0.1)
    t.add_argument("--train-seed", type=int, default=0, help="seed of PPO and the environments (default 0)")
    t.add_argument("--checkpoint-every", type=int, default=50_000, help="steps between checkpoints")
    t.add_argument("--torch-threads", type=int, default=1, help="torch CPU threads (default 1: small nets are faster single-threaded)")
    t.add_argument("--bc-policy", metavar="NAME", help="warm start by behaviour cloning of this heuristic (e.g. vertumnus), then PPO")
    t.add_argument("--bc-episodes", type=int, default=13, help="training windows demonstrated for behaviour cloning (default 13)")
    t.add_argument("--bc-epochs", type=int, default=10, help="behaviour-cloning epochs (default 10)")
    t.add_argument("--wandb", choices=("offline", "online", "disabled"), default="offline", help="wandb mode (default offline)")
    p.add_argument("--out", metavar="DIR", required=True, help="run folder (model.zip, checkpoints/, progress.csv, episodes.csv)")


def run(args: argparse.Namespace) -> int:
    from experiments.common import sim_config_from_args

    if args.trace is None and args.workload is None:
        if args.kind == "reconfig":
            args.workload = "phases"  # paper §9 dynamic test: short- vs long-request peaks
        else:
            from envs.workloads import default_traces_dir

            args.trace = str(default_traces_dir() / "conversation_trace.jsonl")
    sim_config = sim_config_from_args(args)
    if args.kind == "reconfig":
        from policies.train_reconfig import ReconfigTrainConfig, train_reconfig

        cfg = ReconfigTrainConfig(trace=args.trace, workload=args.workload, workload_seed=args.workload_seed,
                                  target_rps=args.target_rps, total_timesteps=args.timesteps, seed=args.train_seed,
                                  episode_window_s=args.episode_window_s, wandb_mode=args.wandb,
                                  torch_threads=args.torch_threads, n_steps=min(args.n_steps, 64),
                                  batch_size=min(args.batch_size, 32), n_envs=args.n_envs)
        train_reconfig(cfg, args.out, sim_config=sim_config, argv=sys.argv[1:])
        return 0
    from policies.train import EpisodeSource, TrainConfig, train_routing

    src = EpisodeSource(trace=args.trace, workload=args.workload, workload_seed=args.workload_seed,
                        target_rps=args.target_rps, window_s=args.episode_window_s, eval_every=args.eval_every)
    cfg = TrainConfig(source=src, total_timesteps=args.timesteps, n_envs=args.n_envs, vec_env=args.vec_env,
                      n_steps=args.n_steps, batch_size=args.batch_size, n_epochs=args.n_epochs,
                      learning_rate=args.learning_rate, gamma=args.gamma, ent_coef=args.ent_coef,
                      hidden_dim=args.hidden_dim, reward=args.reward, reward_scale=args.reward_scale,
                      seed=args.train_seed, checkpoint_every_steps=args.checkpoint_every,
                      torch_threads=args.torch_threads, wandb_mode=args.wandb, bc_policy=args.bc_policy,
                      bc_episodes=args.bc_episodes, bc_epochs=args.bc_epochs)
    train_routing(cfg, args.out, sim_config=sim_config, argv=sys.argv[1:])
    return 0
