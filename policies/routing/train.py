"""Training of learned routing policies (MaskablePPO + :class:`~policies.common.extractor.WorkerSetPolicy`).

One entry point, :func:`train_routing`, behind ``cpgym train routing``. It writes under
``out_dir``: ``model.zip`` (final SB3 checkpoint; after Ctrl-C ``interrupted_model.zip`` instead,
see :mod:`policies.common.run_end`), ``checkpoints/`` (periodic), ``progress.csv``
(SB3 CSV log of the training scalars), ``episodes.csv`` (one row per finished episode) and
``train_config.json`` (everything needed to rebuild the environment and reproduce the run),
and logs the same scalars to wandb (offline by default; ``wandb_mode="disabled"`` in tests).
"""

from __future__ import annotations

import csv
import json
import math
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from baselines.registry import get_policy
from envs.sim import SimConfig
from policies.common.heuristic import heuristic_policy
from policies.common.run_end import TrainingRun
from policies.common.wandb_log import wandb_init
from policies.routing.train_config import TrainConfig  # noqa: F401  (re-exported: its historical import path)


def check_routing_setup(cfg: TrainConfig, sim_config) -> None:
    """What ``cfg`` needs of the pool and the policy registry, checked before anything is simulated
    or written to the output folder (both failed only after ``train_config.json``,
    ``progress.csv`` and ``provenance.json`` were written, the behaviour-cloning policy after the
    environments were built): ``bc_policy`` a registered heuristic, ``num_slots`` at least the
    pool's ``max_num_workers``.

    Raises:
        ValueError: naming the field (``bc_policy``: the known policies; ``num_slots``: the pool's
            number of worker slots).
    """
    if cfg.bc_policy is not None:
        try:
            get_policy(cfg.bc_policy)
        except ValueError as exc:
            raise ValueError(f"bc_policy: {exc}") from None
    pool = _sim_config(cfg, sim_config).pool
    if cfg.num_slots is not None and cfg.num_slots < pool.max_num_workers:
        raise ValueError(f"num_slots must be >= the pool's max_num_workers ({pool.max_num_workers}, pool of "
                         f"{pool.num_gpus} GPUs over CP degrees {','.join(map(str, pool.supported_degrees))}), "
                         f"got {cfg.num_slots}")


def _sim_config(cfg: TrainConfig, base=None):
    from dataclasses import replace

    sc = base or SimConfig()
    if cfg.pool_composition:
        sc = replace(sc, pool=replace(sc.pool, composition=cfg.pool_composition))
    return sc


def training_sim_config(cfg: TrainConfig, sim_config):
    """The simulator configuration of the training environments: ``sim_config`` with
    ``cfg.train_prediction_noise`` as the prediction-noise sigma (unchanged if None)."""
    from dataclasses import replace

    if cfg.train_prediction_noise is None:
        return sim_config
    return replace(sim_config, prediction_error=replace(sim_config.prediction_error, noise_sigma=cfg.train_prediction_noise))


def make_env_fn(cfg: TrainConfig, windows, sim_config, rank: int):
    """Picklable-enough factory of one training environment (for DummyVecEnv/SubprocVecEnv)."""

    def _make():
        from envs.routing_env import PrefillRoutingEnv, RoutingRewardConfig  # lazy: gymnasium (start-up of the CLI)
        from policies.common.callbacks import monitored  # lazy: torch (stable-baselines3)

        env = PrefillRoutingEnv(windows, sim_config, reward=RoutingRewardConfig(
            kind=cfg.reward, scale=cfg.reward_scale, invalid_action_penalty=cfg.invalid_action_penalty),
            num_slots=cfg.num_slots)
        if cfg.input_baseline:  # replicas: the same episodes in every environment
            from policies.common.time_discount import ReplicaSeed  # lazy: torch (stable-baselines3)

            env = ReplicaSeed(monitored(env), cfg.seed * 1000)
            env.reset(seed=cfg.seed * 1000)
            return env
        env.reset(seed=cfg.seed * 1000 + rank)
        return monitored(env)

    return _make


def _training_vec_env(cfg: TrainConfig, windows, sim_config):
    """``(VecEnv, extra MaskablePPO kwargs)`` of the training environments: with ``gamma_per_s``
    the VecEnv records step durations and the rollout buffer discounts per second."""
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    fns = [make_env_fn(cfg, windows, training_sim_config(cfg, sim_config), i) for i in range(cfg.n_envs)]
    venv = SubprocVecEnv(fns) if cfg.vec_env == "subproc" else DummyVecEnv(fns)
    if cfg.gamma_per_s is None:
        return venv, {}
    # lazy: torch (stable-baselines3)
    # lazy: torch (stable-baselines3)
    # lazy: torch (stable-baselines3)
    from policies.common.time_discount import InputDrivenRolloutBuffer, StepDurationRecorder, TimeDiscountedRolloutBuffer

    buffer = InputDrivenRolloutBuffer if cfg.input_baseline else TimeDiscountedRolloutBuffer
    return StepDurationRecorder(venv), {"rollout_buffer_class": buffer,
                                        "rollout_buffer_kwargs": {"gamma_per_s": cfg.gamma_per_s}}


def train_routing(cfg: TrainConfig, out_dir: str | Path, sim_config=None, argv: list[str] | None = None,
                  log=print, progress: str | bool | None = None) -> Path:
    """Trains a routing policy; returns the path of the final ``model.zip``.

    Args:
        cfg: the training configuration.
        out_dir: run folder (created).
        sim_config: base :class:`~envs.sim.SimConfig` (pool, SLO, ...); default ``SimConfig()``.
        argv: the command line, stored in ``train_config.json``.
        progress: progress display on stderr (:class:`policies.common.callbacks.TrainingProgress`; ``"off"`` silences).

    Raises:
        ValueError: on an unknown ``cfg.bc_policy`` or a ``cfg.num_slots`` below the pool's
            ``max_num_workers`` (:func:`check_routing_setup`), before ``out_dir`` is created.
        policies.common.run_end.TrainingInterrupted: on Ctrl-C (a ``KeyboardInterrupt``), after saving
            the model at that moment as ``interrupted_model.zip`` (no ``model.zip``) and marking
            ``train_config.json``; the environments are closed and the wandb run finished after
            an error too (:class:`policies.common.run_end.TrainingRun`).
    """
    import torch as th
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.callbacks import CallbackList
    from stable_baselines3.common.logger import configure

    from policies.common.extractor import WorkerSetPolicy  # lazy: torch

    check_routing_setup(cfg, sim_config)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    th.set_num_threads(cfg.torch_threads)
    sc = _sim_config(cfg, sim_config)
    windows = cfg.windows("train")
    log(f"train: {len(windows)} windows of {cfg.source.episode_window_s:g} s from {cfg.source.label}, "
        f"{sum(w.num_requests for w in windows)} requests; pool {sc.pool.composition}")
    venv, buffer_kw = _training_vec_env(cfg, windows, sc)
    meta = {"kind": "routing", "train_config": _jsonable(asdict(cfg)), "sim_config": _jsonable(asdict(sc)),
            "argv": argv, "num_train_windows": len(windows)}

    def write_meta(m: dict) -> None:
        (out / "train_config.json").write_text(json.dumps(m, indent=2) + "\n")

    write_meta(meta)
    with TrainingRun(out, meta, write_meta, cfg.total_timesteps, venv) as tr:  # Ctrl-C, errors: policies.common.run_end
        model = tr.model = MaskablePPO(
            WorkerSetPolicy, venv, n_steps=cfg.n_steps, batch_size=cfg.batch_size, n_epochs=cfg.n_epochs,
            learning_rate=cfg.learning_rate, gamma=cfg.gamma, gae_lambda=cfg.gae_lambda, ent_coef=cfg.ent_coef,
            clip_range=cfg.clip_range, seed=cfg.seed, verbose=0, policy_kwargs=cfg.policy_kwargs, **buffer_kw)
        if cfg.gamma_per_s is not None:
            model.rollout_buffer.durations = venv
        model.set_logger(configure(str(out), ["csv"]))
        if cfg.bc_policy:
            stats = behaviour_clone(model, cfg, windows, sc, log)
            meta["bc"] = stats
        if cfg.wandb_mode != "disabled":
            tr.run = wandb_init(out, project="cpgym", mode=cfg.wandb_mode, config=meta, name=out.name,
                                reinit="finish_previous", quiet=progress == "off")
        callbacks, validation = _routing_callbacks(cfg, out, sc, tr, progress, log)
        t0 = time.perf_counter()
        model.learn(cfg.total_timesteps, callback=CallbackList(callbacks), log_interval=1)
        model.logger.dump(model.num_timesteps)  # the last update's train/* (SB3 dumps them only at the next rollout)
        wall = time.perf_counter() - t0
        path = out / "model.zip"
        if validation is not None:
            validation.validate(model)
            model.save(out / "last_model.zip")
            import shutil

            shutil.copyfile(out / "best_model.zip", path)
            meta["validation"] = validation.summary()
            log(f"validation: best mean TTFT {validation.best_ttft_s:.4f} s at {validation.best_step} steps "
                f"(warm start {validation.history[0][1]:.4f} s)")
        else:
            model.save(path)
        meta["train_wall_s"] = wall
        meta["timesteps"] = int(model.num_timesteps)
        write_meta(meta)
        log(f"trained {model.num_timesteps} steps in {wall:.0f} s -> {path}")
    return path


def _routing_callbacks(cfg: TrainConfig, out: Path, sim_config, tr, progress, log) -> tuple[list, Any]:
    """``(callbacks, validation callback or None)`` of ``model.learn``: periodic checkpoints,
    ``episodes.csv`` (+ wandb), progress and, with ``validate_every_steps``, validation. The
    episode log and the progress display are added to ``tr.closers`` (closed after Ctrl-C or an
    error too)."""
    from stable_baselines3.common.callbacks import BaseCallback, CheckpointCallback

    from policies.common.callbacks import TrainingProgress  # lazy: torch (stable-baselines3)

    run = tr.run

    class _Episodes(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.fh = open(out / "episodes.csv", "w", newline="")
            self.w = csv.writer(self.fh)
            self.w.writerow(EPISODE_COLUMNS)
            self.t0 = time.perf_counter()

        def _on_step(self) -> bool:
            for i, (done, info) in enumerate(zip(self.locals["dones"], self.locals["infos"])):
                if done and "episode" in info:
                    row = [self.num_timesteps, round(time.perf_counter() - self.t0, 2), i, info.get("window_index"),
                           info["episode"]["r"], info["episode"]["l"], info.get("num_invalid_actions", 0),
                           info.get("episode_mean_ttft_s"), info.get("episode_p90_ttft_s"),
                           info.get("episode_slo_attainment_token_weighted")]
                    self.w.writerow(row)
                    self.fh.flush()
                    if run is not None:
                        run.log({f"episode/{k}": v for k, v in zip(EPISODE_COLUMNS[4:], row[4:])}
                                | {"timesteps": self.num_timesteps})
            return True

        def _on_rollout_end(self) -> None:
            if run is not None and self.model.logger.name_to_value:
                run.log({**{k: v for k, v in self.model.logger.name_to_value.items()}, "timesteps": self.num_timesteps})

        def close(self) -> None:
            self.fh.close()

        def _on_training_end(self) -> None:
            self.close()

    ckpt = CheckpointCallback(max(cfg.checkpoint_every_steps // cfg.n_envs, 1), str(out / "checkpoints"),
                              name_prefix="routing")
    episodes, shown = _Episodes(), TrainingProgress(cfg.total_timesteps, progress)
    tr.closers += [episodes.close, shown.close]
    callbacks = [ckpt, episodes, shown]
    validation = None
    if cfg.validate_every_steps is not None:
        from policies.common.callbacks import ValidationCallback  # lazy: torch (stable-baselines3)

        validation = ValidationCallback(cfg.windows("validation")[: cfg.num_validation_windows], sim_config, out,
                                        cfg.validate_every_steps, run, log)
        callbacks.append(validation)
    return callbacks, validation


EPISODE_COLUMNS = ("timesteps", "wall_s", "env", "window_index", "episode_return", "episode_length", "num_invalid_actions",
                   "mean_ttft_s", "p90_ttft_s", "slo_attainment_token_weighted")


def behaviour_clone(model, cfg: TrainConfig, windows, sim_config, log=print) -> dict:
    """Warm start: fit ``model.policy`` to a heuristic's decisions on training windows.

    Returns ``{"num_samples", "accuracy"}`` (share of demonstrated actions that the fitted
    policy's most likely action reproduces, on the demonstrations)."""
    import numpy as np
    import torch as th

    from envs.routing_env import PrefillRoutingEnv, RoutingRewardConfig  # lazy: gymnasium (start-up of the CLI)

    env = PrefillRoutingEnv(windows, sim_config, reward=RoutingRewardConfig(kind=cfg.reward, scale=cfg.reward_scale),
                            num_slots=cfg.num_slots)
    pol = heuristic_policy(cfg.bc_policy, env)
    obs_l, mask_l, act_l, ret_l = [], [], [], []
    t0 = time.perf_counter()
    for ep in range(cfg.bc_episodes):
        obs, _ = env.reset(seed=cfg.seed, options={"window_index": ep % len(windows), "sim_seed": cfg.seed + ep})
        rewards = []
        while True:
            m = env.action_masks()
            a, _ = pol.predict(obs)
            obs_l.append(obs)
            mask_l.append(m)
            act_l.append(int(a))
            obs, r, term, trunc, _ = env.step(int(a))
            rewards.append(r)
            if term or trunc:
                break
        g, rets = 0.0, []
        for r in reversed(rewards):
            g = r + cfg.gamma * g
            rets.append(g)
        ret_l.extend(reversed(rets))
    n = len(act_l)
    log(f"behaviour cloning: {n} decisions of {cfg.bc_policy} collected in {time.perf_counter() - t0:.0f} s")
    obs_t = {k: th.as_tensor(np.stack([o[k] for o in obs_l])) for k in obs_l[0]}
    masks = np.stack(mask_l)
    acts = th.as_tensor(act_l)
    rets = th.as_tensor(ret_l, dtype=th.float32)
    policy = model.policy
    policy.set_training_mode(True)
    opt = policy.optimizer
    rng = np.random.default_rng(cfg.seed)
    bs = cfg.batch_size
    for _epoch in range(cfg.bc_epochs):
        perm = rng.permutation(n)
        for i in range(0, n, bs):
            idx = perm[i:i + bs]
            ob = {k: v[idx] for k, v in obs_t.items()}
            feats = policy.extract_features(ob)
            lat_pi, lat_vf = policy.mlp_extractor(feats)
            dist = policy._get_action_dist_from_latent(lat_pi)
            dist.apply_masking(masks[idx])
            value_loss = th.nn.functional.mse_loss(policy.value_net(lat_vf).squeeze(-1), rets[idx])
            loss = -dist.log_prob(acts[idx]).mean() + 0.5 * value_loss
            opt.zero_grad()
            loss.backward()
            th.nn.utils.clip_grad_norm_(policy.parameters(), 0.5)
            opt.step()
    policy.set_training_mode(False)
    with th.no_grad():
        correct = 0
        for i in range(0, n, 1024):
            ob = {k: v[i:i + 1024] for k, v in obs_t.items()}
            a, _ = model.predict({k: v.numpy() for k, v in ob.items()}, deterministic=True, action_masks=masks[i:i + 1024])
            correct += int((th.as_tensor(a) == acts[i:i + 1024]).sum())
    acc = correct / n
    log(f"behaviour cloning: {cfg.bc_epochs} epochs, accuracy {acc:.3f} on the demonstrations")
    return {"num_samples": n, "accuracy": acc, "policy": cfg.bc_policy}


def _jsonable(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x
