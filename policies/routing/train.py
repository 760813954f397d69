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
import numbers
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from envs.routing_env import DEFAULT_WINDOW_S
from envs.sim.options import option as _opt



@dataclass(frozen=True)
class EpisodeSource:
    """Where the episode windows come from (serialised into checkpoints).

    The full workload is built by the one workload builder, :class:`envs.workloads.WorkloadSource`
    (:meth:`workload_source`); the CLI fills the first eight fields from the shared workload flags
    (``--trace``/``--workload``, ``--workload-seed``, ``--target-rps``/``--rate-scale``,
    ``--window-s``, ``--skip-invalid``, ``--workload-param``).

    Args:
        trace: trace path (Mooncake JSONL, Azure CSV, L-Eval CSV), or ``None`` for ``workload``.
        workload: named synthetic workload (``envs.workloads.WORKLOADS``) when ``trace`` is None.
        workload_seed: generator seed / arrival-spreading seed of the trace loader.
        target_rps: time-scale arrivals to this mean rate [requests/s] (``None`` keeps it).
        rate_scale: multiply the arrival rate by this factor (exclusive with ``target_rps``).
        arrival_window_s: keep arrivals in ``[start, end)`` [s] before cutting episodes.
        skip_invalid: skip invalid trace lines instead of failing.
        params: keyword overrides of the named workload's generator, ``((name, value), ...)``.
        window_s: episode window length [s] (default 60, ``envs.routing_env.DEFAULT_WINDOW_S``).
        eval_every: every ``eval_every``-th window is held out (see
            ``envs.routing_env.split_windows``; default 4).

    Raises:
        ValueError: naming the field, on a missing source, ``window_s`` <= 0 or a rate <= 0.
    """

    trace: str | None = field(default=None, metadata={"cli": False})
    workload: str | None = field(default="mixed-default", metadata={"cli": False})
    workload_seed: int = field(default=0, metadata={"cli": False})
    target_rps: float | None = field(default=None, metadata={"cli": False})
    rate_scale: float | None = field(default=None, metadata={"cli": False})
    arrival_window_s: tuple[float, float] | None = field(default=None, metadata={"cli": False})
    skip_invalid: bool = field(default=False, metadata={"cli": False})
    params: tuple[tuple[str, Any], ...] = field(default=(), metadata={"cli": False})
    window_s: float = _opt(DEFAULT_WINDOW_S, "episode window length [s]", flag="--episode-window-s")
    eval_every: int = _opt(4, "hold out every N-th episode window for evaluation", metavar="N")

    def __post_init__(self) -> None:
        if self.trace is None and self.workload is None:
            raise ValueError("episode source: give trace or workload")
        if not self.window_s > 0:
            raise ValueError(f"window_s must be > 0, got {self.window_s}")
        if self.eval_every < 2:
            raise ValueError(f"eval_every must be >= 2, got {self.eval_every}")
        if self.arrival_window_s is not None:
            object.__setattr__(self, "arrival_window_s", tuple(float(x) for x in self.arrival_window_s))
        self.workload_source()  # validates rates, window and seed (ValueError naming the field)

    def workload_source(self, seed: int | None = None):
        """The :class:`~envs.workloads.WorkloadSource` of the full workload; ``seed`` overrides
        ``workload_seed``."""
        from envs.workloads import WorkloadSource

        return WorkloadSource(name=None if self.trace else self.workload, trace=self.trace,
                              seed=self.workload_seed if seed is None else seed, target_rps=self.target_rps,
                              rate_scale=self.rate_scale, window_s=self.arrival_window_s, skip_invalid=self.skip_invalid,
                              params=tuple(tuple(kv) for kv in self.params))

    def workload_obj(self, seed: int | None = None):
        """The full (rate-scaled, windowed) workload; ``seed`` overrides ``workload_seed``."""
        return self.workload_source(seed).build()

    def windows(self, part: str, seed: int | None = None):
        """Episode windows of a part (``"train"``, ``"eval"``, ``"all"``)."""
        from envs.routing_env import episode_windows, split_windows

        return split_windows(episode_windows(self.workload_obj(seed), self.window_s), part, self.eval_every)

    @property
    def label(self) -> str:
        name = Path(self.trace).stem if self.trace else self.workload
        return f"{name}@{self.target_rps:g}rps" if self.target_rps else name


@dataclass(frozen=True)
class TrainConfig:
    """MaskablePPO training of a routing policy (``cpgym train routing``: one flag per field,
    generated by ``envs.sim.options``).

    Defaults: PPO settings of SB3 (``n_epochs`` 10 -> 4, smaller batches, Adam 3e-4) tuned
    down for a 2-core CPU budget; ``gamma`` 0.995 because a routing decision's cost (queueing
    it causes) lands over the next hundreds of decisions.

    ``bc_policy``: optional warm start by behaviour cloning (then PPO fine-tuning): the named
    heuristic (e.g. ``"vertumnus-router"``) routes ``bc_episodes`` training windows through the
    environment; the policy is fitted for ``bc_epochs`` epochs to its masked actions
    (cross-entropy) and the value head to the discounted returns (MSE).

    ``gamma_per_s``: discount per simulated second (``policies.common.time_discount``: transition ``i``
    is discounted by ``gamma_per_s ** dt_i``, ``dt_i`` the time to the next decision), so the
    look-ahead is the same number of seconds at every load; ``None`` keeps the per-decision
    ``gamma``. ``train_prediction_noise``: the training environments run with this
    prediction-noise sigma (``envs.sim.config.PredictionErrorConfig``; default 0.1), so the
    simulator seed of an episode matters and the policy does not overfit exact service times;
    validation and evaluation keep the scenario's own (noise-free by default).

    ``residual_tau_s``: residual policy over the Vertumnus cost (``policies.common.extractor``: logits
    ``-J/tau + f``, ``f`` zero at the start, so training starts at Vertumnus's decisions;
    ``J`` with ``residual_beta``/``residual_lambda``, e.g. the tuned pair). ``num_slots``: pad the
    worker slots to this many (a checkpoint for pools of up to that many workers).

    ``warmup_s``: train on the evaluation protocol's windows (``policies.routing.protocol``: the
    ``train`` part of ``source.window_s``-second windows, each preceded by ``warmup_s`` seconds
    of the trace) instead of the legacy ``split_windows`` part. ``validate_every_steps``: every so
    many environment steps (and before the first), the deterministic policy routes the first
    ``num_validation_windows`` *validation* windows; ``validation.csv`` logs their mean TTFT and
    the best one is kept: ``model.zip`` is then the best-validation model and ``last_model.zip``
    the final one (model selection on validation only).

    Raises:
        ValueError: naming the field, for non-positive sizes or rates, a minibatch larger
            than one rollout (``batch_size > n_steps * n_envs``), or a ``seed`` outside
            ``[0, MAX_TRAIN_SEED]`` (:func:`check_train_seed`).
    """

    source: EpisodeSource = field(default_factory=EpisodeSource, metadata={"cli": False})
    total_timesteps: int = _opt(200_000, "environment steps to train for, rounded up to whole rollouts of "
                                         "n_steps x n_envs steps", flag="--timesteps")
    n_envs: int = _opt(2, "parallel environments")
    vec_env: str = _opt("dummy", "vectorisation of the environments", choices=("dummy", "subproc"))
    n_steps: int = _opt(1024, "rollout length per environment (PPO n_steps)")
    batch_size: int = _opt(256, "PPO minibatch size (<= n_steps x n_envs)")
    n_epochs: int = _opt(4, "PPO epochs per rollout")
    learning_rate: float = _opt(3e-4, "Adam learning rate")
    gamma: float = _opt(0.995, "discount factor per decision in (0, 1] (see --gamma-per-s)")
    gamma_per_s: float | None = _opt(None, "discount per second of simulated time in (0, 1] instead of the per-decision "
                                           "gamma in GAE (policies.common.time_discount)", metavar="G")
    input_baseline: bool = _opt(False, "input-driven baseline: the environments replay the same episodes and each "
                                       "step's baseline is the other replicas' return-to-go from the same time "
                                       "(policies.common.time_discount.InputDrivenRolloutBuffer; needs --gamma-per-s, n_envs >= 2)")
    train_prediction_noise: float | None = _opt(0.1, "log-normal sigma of actual vs predicted step time in the TRAINING "
                                                     "environments (validation keeps the scenario's --prediction-noise); "
                                                     "none = the scenario's", metavar="SIGMA")
    gae_lambda: float = _opt(0.95, "GAE lambda in [0, 1]")
    ent_coef: float = _opt(0.01, "entropy coefficient")
    clip_range: float = _opt(0.2, "PPO clip range")
    hidden_dim: int = _opt(64, "width of the per-worker network")
    reward: str = _opt("time_in_system", "reward: -(time in system) or -(token-weighted SLO misses)",
                       choices=("time_in_system", "slo_miss_tokens"))
    reward_scale: float = _opt(0.1, "reward multiplier")
    invalid_action_penalty: float = _opt(1.0, "subtracted from the reward on an ineligible worker")
    seed: int = _opt(0, "seed of PPO and the environments", flag="--train-seed")
    checkpoint_every_steps: int = _opt(50_000, "environment steps between checkpoints", flag="--checkpoint-every")
    torch_threads: int = _opt(1, "torch CPU threads (small nets are faster single-threaded)")
    wandb_mode: str = _opt("offline", "wandb mode", flag="--wandb", choices=("offline", "online", "disabled"))
    pool_composition: str | None = field(default=None, metadata={"cli": False})  # CLI: --pool-composition (sim flags)
    bc_policy: str | None = _opt(None, "warm start by behaviour cloning of this heuristic (e.g. vertumnus), then PPO",
                                 metavar="NAME")
    bc_episodes: int = _opt(13, "training windows demonstrated for behaviour cloning")
    bc_epochs: int = _opt(10, "behaviour-cloning epochs")
    residual_tau_s: float | None = _opt(None, "residual policy over the Vertumnus cost: logits -J/TAU + f with "
                                              "the temperature TAU [s] (J is a time), f zero-initialised (default off)",
                                        metavar="TAU")
    residual_beta: float = _opt(3.0, "beta of the residual prior's cost J")
    residual_lambda: float = _opt(1.0, "lambda of the residual prior's cost J")
    num_slots: int | None = _opt(None, "pad worker slots to N (default: the pool's max number of workers)", metavar="N")
    warmup_s: float | None = _opt(None, "train on the evaluation protocol's train windows (policies.routing.protocol), "
                                        "each with S s of warm-up trace", metavar="S")
    validate_every_steps: int | None = _opt(None, "validate on the protocol's validation windows every STEPS steps; "
                                                  "model.zip = best (needs --warmup-s)", flag="--validate-every",
                                            metavar="STEPS")
    num_validation_windows: int = _opt(8, "validation windows per validation")

    def __post_init__(self) -> None:
        for name in ("total_timesteps", "n_envs", "n_steps", "batch_size", "n_epochs", "hidden_dim",
                     "checkpoint_every_steps", "torch_threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        check_minibatch(self.n_steps, self.n_envs, self.batch_size)
        check_train_seed(self.seed)
        if self.vec_env not in ("dummy", "subproc"):
            raise ValueError(f"vec_env must be 'dummy' or 'subproc', got {self.vec_env!r}")
        if self.wandb_mode not in ("offline", "online", "disabled"):
            raise ValueError(f"wandb_mode must be 'offline', 'online' or 'disabled', got {self.wandb_mode!r}")
        for name in ("learning_rate", "reward_scale"):
            if not (getattr(self, name) > 0 and math.isfinite(getattr(self, name))):
                raise ValueError(f"{name} must be a finite number > 0, got {getattr(self, name)}")
        if self.bc_episodes < 1 or self.bc_epochs < 1:
            raise ValueError(f"bc_episodes and bc_epochs must be >= 1, got {self.bc_episodes}, {self.bc_epochs}")
        if not 0 < self.gamma <= 1:
            raise ValueError(f"gamma must be in (0, 1], got {self.gamma}")
        if self.gamma_per_s is not None and not 0 < self.gamma_per_s <= 1:
            raise ValueError(f"gamma_per_s must be in (0, 1], got {self.gamma_per_s}")
        if self.input_baseline and (self.gamma_per_s is None or self.n_envs < 2):
            raise ValueError(f"input_baseline needs gamma_per_s and n_envs >= 2, got {self.gamma_per_s}, {self.n_envs}")
        if self.train_prediction_noise is not None and not (self.train_prediction_noise >= 0
                                                            and math.isfinite(self.train_prediction_noise)):
            raise ValueError(f"train_prediction_noise must be a finite number >= 0, got {self.train_prediction_noise}")
        if not 0 <= self.gae_lambda <= 1:
            raise ValueError(f"gae_lambda must be in [0, 1], got {self.gae_lambda}")
        if not (self.ent_coef >= 0 and math.isfinite(self.ent_coef)) or not (self.clip_range > 0
                                                                             and math.isfinite(self.clip_range)):
            raise ValueError(f"ent_coef must be a finite number >= 0 and clip_range a finite number > 0, "
                             f"got {self.ent_coef}, {self.clip_range}")
        self._check_residual_and_protocol()

    def _check_residual_and_protocol(self) -> None:
        if self.residual_tau_s is not None and not (self.residual_tau_s > 0 and math.isfinite(self.residual_tau_s)):
            raise ValueError(f"residual_tau_s must be a finite number > 0, got {self.residual_tau_s}")  # inf: no prior
        from baselines.vertumnus import VertumnusParams

        VertumnusParams(beta=self.residual_beta, lambda_=self.residual_lambda)  # ValueError naming the field
        if self.num_slots is not None and self.num_slots < 1:
            raise ValueError(f"num_slots must be >= 1, got {self.num_slots}")
        if self.warmup_s is not None and not self.warmup_s >= 0:
            raise ValueError(f"warmup_s must be >= 0, got {self.warmup_s}")
        if self.validate_every_steps is not None and (self.warmup_s is None or self.validate_every_steps < 1):
            raise ValueError("validate_every_steps needs warmup_s (protocol windows) and must be >= 1, "
                             f"got {self.validate_every_steps} with warmup_s {self.warmup_s}")
        if self.num_validation_windows < 1:
            raise ValueError(f"num_validation_windows must be >= 1, got {self.num_validation_windows}")

    @property
    def policy_kwargs(self) -> dict:
        """``policy_kwargs`` of :class:`~policies.common.extractor.WorkerSetPolicy` for this config."""
        fe = {"hidden_dim": self.hidden_dim}
        if self.residual_tau_s is not None:
            fe.update(residual_tau_s=self.residual_tau_s, residual_beta=self.residual_beta,
                      residual_lambda=self.residual_lambda)
        return {"features_extractor_kwargs": fe}

    def windows(self, part: str) -> list:
        """Episode windows of ``part``: the protocol's (``"train"``/``"validation"``/``"test"``)
        with ``warmup_s``, else ``source.windows(part)`` (legacy ``"train"``/``"eval"``)."""
        if self.warmup_s is None:
            return self.source.windows(part)
        from policies.routing.protocol import protocol_windows

        return protocol_windows(self.source.workload_obj(), self.source.window_s, part, self.warmup_s)


#: Largest ``--train-seed``: SB3 seeds numpy's legacy global generator with it (``np.random.seed``
#: takes ``[0, 2**32 - 1]``); the seeds derived from it (``seed * 1000 + rank`` of the environments,
#: ``seed + episode`` of the simulator) go to ``numpy.random.SeedSequence``, which takes any integer >= 0.
MAX_TRAIN_SEED = 2**32 - 1


def check_train_seed(seed: Any) -> None:
    """The PPO / environment seed of a training config must be an integer in ``[0, MAX_TRAIN_SEED]``.

    Raises:
        ValueError: naming the field ``seed`` (the CLI adds ``--train-seed``) and the range otherwise.
    """
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed <= MAX_TRAIN_SEED:
        raise ValueError(f"seed must be an integer in [0, {MAX_TRAIN_SEED}], got {seed!r}")


def check_minibatch(n_steps: int, n_envs: int, batch_size: int) -> None:
    """PPO needs ``2 <= batch_size <= n_steps * n_envs`` (one rollout holds ``n_steps * n_envs``
    transitions; SB3 ``PPO`` asserts ``batch_size > 1``).

    Raises:
        ValueError: naming both sizes otherwise.
    """
    if not 2 <= batch_size <= n_steps * n_envs:
        raise ValueError(f"batch_size must be in [2, n_steps x n_envs = {n_steps * n_envs}], got {batch_size}")


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
        from baselines.registry import get_policy

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

    from envs.sim import SimConfig

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
        from envs.routing_env import PrefillRoutingEnv, RoutingRewardConfig
        from policies.common.callbacks import monitored

        env = PrefillRoutingEnv(windows, sim_config, reward=RoutingRewardConfig(
            kind=cfg.reward, scale=cfg.reward_scale, invalid_action_penalty=cfg.invalid_action_penalty),
            num_slots=cfg.num_slots)
        if cfg.input_baseline:  # replicas: the same episodes in every environment
            from policies.common.time_discount import ReplicaSeed

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

    from policies.common.extractor import WorkerSetPolicy
    from policies.common.run_end import TrainingRun

    check_routing_setup(cfg, sim_config)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    th.set_num_threads(cfg.torch_threads)
    sc = _sim_config(cfg, sim_config)
    windows = cfg.windows("train")
    log(f"train: {len(windows)} windows of {cfg.source.window_s:g} s from {cfg.source.label}, "
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
            from policies.common.wandb_log import wandb_init  # keeps wandb's files under out/

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

    from policies.common.callbacks import TrainingProgress

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
        from policies.common.callbacks import ValidationCallback

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

    from envs.routing_env import PrefillRoutingEnv, RoutingRewardConfig
    from policies.common.heuristic import heuristic_policy

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
