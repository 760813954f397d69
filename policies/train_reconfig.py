"""Training of a learned reconfiguration policy (``cpgym train reconfig``): MaskablePPO on
:class:`envs.reconfig_env.PrefillReconfigEnv` (one step per 20 s observation window; the inner
router is Vertumnus). Observations are normalised by SB3 ``VecNormalize`` (running mean/std,
saved next to the model as ``vecnormalize.pkl``); the policy is sb3-contrib's
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
    seed: int = 0
    torch_threads: int = 1
    wandb_mode: str = "offline"

    def __post_init__(self) -> None:
        if self.trace is None and self.workload is None:
            raise ValueError("give trace or workload")
        for name in ("episode_window_s", "window_s", "total_timesteps", "n_envs", "n_steps", "batch_size", "n_epochs", "torch_threads"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
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
    wl = (workloads.load_trace(cfg.trace, spread_seed=cfg.workload_seed) if cfg.trace
          else workloads.get_workload(cfg.workload, seed=cfg.workload_seed))
    if cfg.target_rps:
        wl = workloads.scale_to_rate(wl, cfg.target_rps)
    wins = split_windows(episode_windows(wl, cfg.episode_window_s), "train", 2) if wl.duration_s > 2 * cfg.episode_window_s else [wl]
    log(f"train reconfig: {len(wins)} episode windows of {cfg.episode_window_s:g} s from {wl.name}")

    def make(i):
        def _m():
            env = PrefillReconfigEnv(wins, sc, window_s=cfg.window_s)
            env.reset(seed=cfg.seed * 1000 + i)
            return Monitor(env)
        return _m

    venv = VecNormalize(DummyVecEnv([make(i) for i in range(cfg.n_envs)]), norm_obs=True, norm_reward=False)
    meta = {"kind": "reconfig", "train_config": asdict(cfg), "sim_config": asdict(sc), "argv": argv}
    (out / "train_config.json").write_text(json.dumps(meta, indent=2, default=str) + "\n")
    model = MaskablePPO("MultiInputPolicy", venv, n_steps=cfg.n_steps, batch_size=cfg.batch_size, n_epochs=cfg.n_epochs,
                        learning_rate=cfg.learning_rate, gamma=cfg.gamma, seed=cfg.seed, verbose=0)
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
