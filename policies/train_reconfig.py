"""Training of a learned reconfiguration policy (``cpgym train reconfig``): MaskablePPO on
:class:`envs.reconfig_env.PrefillReconfigEnv` (one step per 20 s observation window; the inner
router is Vertumnus). Observations are normalised by SB3 ``VecNormalize`` (running mean/std,
saved next to the model as ``vecnormalize.pkl``; rewards too with ``norm_reward``); the policy is sb3-contrib's
``MultiInputPolicy`` (the reconfiguration action is a pool-level choice, so no per-worker head).

Minimal by design: one step simulates a whole window of traffic, so a 2-core machine gets a
few hundred steps per hour — enough to exercise the pipeline, not to train a competitive
controller.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class ReconfigTrainConfig:
    """Args: episode source (trace or named workload, seed, rate), ``episode_window_s`` (episode
    length [s], default 300), ``window_s`` (observation window [s], paper §6: 20), PPO sizes.

    Raises:
        ValueError: naming the field, on non-positive sizes.
    """

    trace: str | None = None
    workload: str | None = "phases"
    workload_seed: int = 0
    workload_seeds: tuple[int, ...] = ()
    target_rps: float | None = None
    episode_window_s: float = 300.0
    window_s: float = 20.0
    total_timesteps: int = 2_000
    n_envs: int = 1
    n_steps: int = 64
    batch_size: int = 32
    n_epochs: int = 4
    learning_rate: float = 3e-4
    gamma: float = 0.99
    ent_coef: float = 0.0
    norm_reward: bool = False
    seed: int = 0
    torch_threads: int = 1
    wandb_mode: str = "offline"

    def __post_init__(self) -> None:
        if self.trace is None and self.workload is None:
            raise ValueError("give trace or workload")
        for name in ("episode_window_s", "window_s", "total_timesteps", "n_envs", "n_steps", "batch_size", "n_epochs", "torch_threads"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        object.__setattr__(self, "workload_seeds", tuple(int(x) for x in self.workload_seeds))
        if self.wandb_mode not in ("offline", "online", "disabled"):
            raise ValueError(f"wandb_mode must be 'offline', 'online' or 'disabled', got {self.wandb_mode!r}")


def train_reconfig(cfg: ReconfigTrainConfig, out_dir: str | Path, sim_config=None, argv=None, log=print) -> Path:
    """Trains; writes ``model.zip``, ``vecnormalize.pkl``, ``progress.csv``, ``train_config.json``."""
    import torch as th
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.logger import configure
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from envs import workloads
    from envs.reconfig_env import PrefillReconfigEnv
    from envs.routing_env import episode_windows, split_windows
    from envs.sim import SimConfig

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    th.set_num_threads(cfg.torch_threads)
    sc = sim_config or SimConfig()
    wins = []
    for ws in (cfg.workload_seeds or (cfg.workload_seed,)):
        wl = (workloads.load_trace(cfg.trace, spread_seed=ws) if cfg.trace
              else workloads.get_workload(cfg.workload, seed=ws))
        if cfg.target_rps:
            wl = workloads.scale_to_rate(wl, cfg.target_rps)
        wins += split_windows(episode_windows(wl, cfg.episode_window_s), "train", 2) if wl.duration_s > 2 * cfg.episode_window_s else [wl]
    log(f"train reconfig: {len(wins)} episode windows of {cfg.episode_window_s:g} s from {wl.name} "
        f"(workload seeds {list(cfg.workload_seeds or (cfg.workload_seed,))})")

    def make(i):
        def _m():
            env = PrefillReconfigEnv(wins, sc, window_s=cfg.window_s)
            env.reset(seed=cfg.seed * 1000 + i)
            return Monitor(env)
        return _m

    venv = VecNormalize(DummyVecEnv([make(i) for i in range(cfg.n_envs)]), norm_obs=True, norm_reward=cfg.norm_reward, gamma=cfg.gamma)
    meta = {"kind": "reconfig", "train_config": asdict(cfg), "sim_config": asdict(sc), "argv": argv}
    (out / "train_config.json").write_text(json.dumps(meta, indent=2, default=str) + "\n")
    model = MaskablePPO("MultiInputPolicy", venv, n_steps=cfg.n_steps, batch_size=cfg.batch_size, n_epochs=cfg.n_epochs,
                        learning_rate=cfg.learning_rate, gamma=cfg.gamma, ent_coef=cfg.ent_coef, seed=cfg.seed, verbose=0)
    model.set_logger(configure(str(out), ["csv"]))
    run = None
    if cfg.wandb_mode != "disabled":
        import wandb

        run = wandb.init(project="cpgym", mode=cfg.wandb_mode, dir=str(out), config=meta, name=out.name, reinit="finish_previous")
    t0 = time.perf_counter()
    model.learn(cfg.total_timesteps, log_interval=1)
    model.save(out / "model.zip")
    venv.save(str(out / "vecnormalize.pkl"))
    meta["train_wall_s"] = time.perf_counter() - t0
    meta["timesteps"] = int(model.num_timesteps)
    (out / "train_config.json").write_text(json.dumps(meta, indent=2, default=str) + "\n")
    if run is not None:
        run.log({"timesteps": model.num_timesteps, "train_wall_s": meta["train_wall_s"]})
        run.finish()
    log(f"trained {model.num_timesteps} steps in {meta['train_wall_s']:.0f} s -> {out / 'model.zip'}")
    return out / "model.zip"


def main(argv=None) -> int:
    """``python -m policies.train_reconfig --out DIR [--workload-seeds 0,1,...] ...``: the
    multi-seed training entry point (``cpgym train reconfig`` takes one workload seed)."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m policies.train_reconfig")
    p.add_argument("--out", required=True)
    p.add_argument("--workload", default="phases")
    p.add_argument("--workload-seeds", default="0", help="comma-separated generator seeds (default 0)")
    p.add_argument("--episode-window-s", type=float, default=600.0)
    p.add_argument("--timesteps", type=int, default=2_000)
    p.add_argument("--n-envs", type=int, default=1)
    p.add_argument("--n-steps", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--n-epochs", type=int, default=4)
    p.add_argument("--learning-rate", type=float, default=3e-4)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--ent-coef", type=float, default=0.0)
    p.add_argument("--train-seed", type=int, default=0)
    p.add_argument("--norm-reward", action="store_true", help="VecNormalize also scales rewards (running return std)")
    p.add_argument("--wandb", choices=("offline", "online", "disabled"), default="disabled")
    a = p.parse_args(argv)
    seeds = tuple(int(x) for x in a.workload_seeds.split(",") if x.strip())
    cfg = ReconfigTrainConfig(workload=a.workload, workload_seed=seeds[0], workload_seeds=seeds,
                              episode_window_s=a.episode_window_s, total_timesteps=a.timesteps, n_envs=a.n_envs,
                              n_steps=a.n_steps, batch_size=a.batch_size, n_epochs=a.n_epochs,
                              learning_rate=a.learning_rate, gamma=a.gamma, ent_coef=a.ent_coef, norm_reward=a.norm_reward, seed=a.train_seed,
                              wandb_mode=a.wandb)
    train_reconfig(cfg, a.out, argv=list(argv) if argv is not None else None)
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
