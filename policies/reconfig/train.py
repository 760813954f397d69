"""Training of a learned reconfiguration policy (``cpgym train reconfig``): MaskablePPO on
:class:`envs.reconfig_env.PrefillReconfigEnv` (one step per 20 s observation window; the inner
router is Vertumnus). Observations are normalised by SB3 ``VecNormalize`` (running mean/std; the
0/1 flags are left as they are, :class:`policies.reconfig.flag_normalize.FlagPreservingVecNormalize`;
saved next to the model as ``vecnormalize.pkl``; rewards too with ``norm_reward``); the policy is sb3-contrib's
``MultiInputPolicy`` (the reconfiguration action is a pool-level choice, so no per-worker head).

One step simulates a whole 20 s window of traffic (tens of steps per second on one core once
the capacity profiles of the observation are cached).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, replace
from pathlib import Path

from baselines.envs import make_reconfig_env
from envs.metrics import summarize
from envs.planning.capacity import CapacityTable
from envs.planning.composition import degree_counts
from envs.sim import Calibration, SimConfig
from policies.common.checkpoint import load_model_zip, load_vecnormalize, vecnormalize_path
from policies.common.run_end import TrainingRun
from policies.common.wandb_log import wandb_init
from policies.reconfig.oracle import (
    behaviour_clone,
    collect_demonstrations,
    collect_learner_states,
    load_phase_ttft,
    phase_ttft,
    save_phase_ttft,
    select_targets,
)
from policies.reconfig.train_config import (  # noqa: F401  (re-exported: their historical import path)
    DEFAULT_RECONFIG_EPISODE_WINDOW_S,
    ReconfigTrainConfig,
)


def validation_callback(cfg: ReconfigTrainConfig, out: Path, venv, sim_config, capacity_table, log=print):
    """Validation-based model selection: an SB3 callback (``None`` without ``validation_seeds``)
    that every ``validate_every_steps`` steps (and at the end) runs the current policy on
    deterministic, masked whole-workload episodes of the validation seeds' workloads
    (simulator seed = workload seed, observations normalised with ``venv``'s current
    statistics; with a warm start also once before the first PPO update, so the warm-started
    policy competes). The model and statistics with the lowest mean TTFT over those episodes are
    saved as ``best_model.zip`` / ``best_vecnormalize.pkl``; one row per validation goes to
    ``validation.csv`` (``timesteps, mean_ttft_s, slo_attainment_token_weighted``, means over
    the validation episodes) and the callback's ``rows``. A validation with an episode where no
    request finished has a NaN mean TTFT and is never the best (its log line names the seeds);
    if no validation is finite, :func:`train_reconfig` keeps the last model."""
    if not cfg.validation_seeds:
        return None
    import csv

    from stable_baselines3.common.callbacks import BaseCallback

    from policies.reconfig.evaluate import rollout_reconfig  # lazy: gymnasium (start-up of the CLI)

    workloads = [(s, cfg.workload_source(s).build()) for s in cfg.validation_seeds]

    class _Validation(BaseCallback):
        def __init__(self):
            super().__init__()
            self.best = float("inf")
            self.last = 0
            self.rows = []

        def validate(self):
            self.last = self.num_timesteps
            def act(obs, mask):
                a, _ = self.model.predict(venv.normalize_obs(obs), action_masks=mask, deterministic=True)
                return int(a)
            ttft, slo = [], []
            for seed, wl in workloads:
                res, _ = rollout_reconfig(act, wl, sim_config, seed, cfg.decision_window_s, capacity_table=capacity_table,
                                          **cfg.env_kwargs())
                summ = summarize(res)
                ttft.append(summ["mean_ttft_s"])
                slo.append(summ["slo_attainment_token_weighted"])
            row = {"timesteps": self.num_timesteps, "mean_ttft_s": sum(ttft) / len(ttft),
                   "slo_attainment_token_weighted": sum(slo) / len(slo)}
            self.rows.append(row)
            with open(out / "validation.csv", "w", newline="") as fh:
                w = csv.DictWriter(fh, fieldnames=list(row))
                w.writeheader()
                w.writerows(self.rows)
            better = row["mean_ttft_s"] < self.best
            if better:
                self.best = row["mean_ttft_s"]
                self.model.save(out / "best_model.zip")
                venv.save(str(out / "best_vecnormalize.pkl"))
            nan_seeds = [seed for (seed, _), t in zip(workloads, ttft) if not math.isfinite(t)]
            note = (f" (no request finished in the episode of seed(s) {nan_seeds}: not a candidate for model.zip)"
                    if nan_seeds else "")
            log(f"validation at {self.num_timesteps} steps: mean TTFT {row['mean_ttft_s']:.3f} s, "
                f"SLO {row['slo_attainment_token_weighted']:.3f}{' (best)' if better else ''}{note}")

        def _on_step(self) -> bool:
            if self.num_timesteps - self.last >= cfg.validate_every_steps:
                self.validate()
            return True

        def _on_training_start(self) -> None:
            if cfg.warm_start != "none":  # the warm-started policy competes in model selection
                self.validate()  # at 0 steps: the periodic ones still come every validate_every_steps

        def _on_training_end(self) -> None:
            if self.num_timesteps != self.last:
                self.validate()

    return _Validation()


def checkpoint_callback(cfg: ReconfigTrainConfig, out: Path, venv):
    """An SB3 callback that every ``cfg.checkpoint_every_steps`` environment steps saves the model
    and ``venv``'s observation statistics as ``out/checkpoints/reconfig_STEPS_model.zip`` and
    ``reconfig_STEPS_vecnormalize.pkl`` (the pair ``--init-from`` and
    :func:`read_initial_model` read): before it, a reconfiguration training that failed or was
    interrupted (Ctrl-C) midway kept no model at all unless it validated."""
    from stable_baselines3.common.callbacks import BaseCallback

    class _Checkpoints(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.last = 0

        def _on_step(self) -> bool:
            if self.num_timesteps - self.last >= cfg.checkpoint_every_steps:
                self.last = self.num_timesteps
                d = out / "checkpoints"
                d.mkdir(parents=True, exist_ok=True)
                self.model.save(d / f"reconfig_{self.num_timesteps}_model.zip")
                venv.save(str(d / f"reconfig_{self.num_timesteps}_vecnormalize.pkl"))
            return True

    return _Checkpoints()


def oracle_warm_start(cfg: ReconfigTrainConfig, out: Path, model, venv, sim_config, capacity_table, log=print) -> dict:
    """``--warm-start oracle``: per training seed, the oracle composition of each phase
    (:func:`policies.reconfig.oracle.phase_ttft`, simulator seed = workload seed, or read from
    ``cfg.oracle_phase_ttft``; then :func:`~policies.reconfig.oracle.select_targets` with
    ``cfg.oracle_tolerance`` and ``cfg.oracle_switch_cost_s_per_gpu``), the
    demonstrations of following it (:func:`~policies.reconfig.oracle.collect_demonstrations`, with
    ``cfg.oracle_noisy_rollouts`` disturbed rollouts per seed), the
    VecNormalize observation statistics updated with them, and behaviour cloning of
    ``model``'s policy (:func:`~policies.reconfig.oracle.behaviour_clone`). Writes
    ``oracle_phase_ttft.json`` (:func:`~policies.reconfig.oracle.save_phase_ttft`: reusable with
    ``--oracle-phase-ttft``; it must come from the same simulator configuration),
    ``oracle_targets.json`` (per seed, the compositions) and ``bc.csv`` (loss per epoch); returns
    a summary for ``train_config.json``.

    Raises:
        ValueError: when a training workload is longer than two episode windows (the oracle
            labels whole phased workloads).
    """
    import csv

    import numpy as np

    wls = [cfg.workload_source(s).build() for s in cfg.seeds]
    for s, wl in zip(cfg.seeds, wls):
        if wl.duration_s > 2 * cfg.episode_window_s:
            raise ValueError(f"--warm-start oracle labels whole workloads; seed {s} lasts {wl.duration_s:.0f} s "
                             f"> 2 x --episode-window-s {cfg.episode_window_s:g}")

    def make_env(w):
        return make_reconfig_env(w, sim_config, decision_window_s=cfg.decision_window_s, capacity_table=capacity_table,
                                 **cfg.env_kwargs())

    menu = make_env(wls[:1]).target_compositions
    t0 = time.perf_counter()
    cached = load_phase_ttft(cfg.oracle_phase_ttft, menu) if cfg.oracle_phase_ttft else {}
    tables = {s: cached[s] if s in cached else phase_ttft(wl, replace(sim_config, seed=s), menu)
              for s, wl in zip(cfg.seeds, wls)}
    save_phase_ttft(out / "oracle_phase_ttft.json", tables, menu)
    counts = [degree_counts(c, sim_config.pool) for c in menu]
    initial = degree_counts(sim_config.pool.composition, sim_config.pool)
    targets = [select_targets(*tables[s], counts, initial, cfg.oracle_tolerance, cfg.oracle_switch_cost_s_per_gpu)
               for s in cfg.seeds]
    (out / "oracle_targets.json").write_text(json.dumps(
        {str(s): [menu[k] for k in tg] for s, tg in zip(cfg.seeds, targets)}, indent=2) + "\n")
    obs, actions = collect_demonstrations(make_env, wls, targets, list(cfg.seeds), cfg.oracle_noisy_rollouts,
                                          cfg.oracle_action_noise, cfg.seed)
    for key, rms in venv.obs_rms.items():
        rms.update(obs[key])
    losses = behaviour_clone(model, venv.normalize_obs(obs), actions, cfg.bc_epochs, cfg.batch_size,
                             cfg.bc_learning_rate, cfg.seed)
    dagger = []
    for rnd in range(cfg.oracle_dagger_rounds):
        def act(o):
            return int(np.asarray(model.predict(venv.normalize_obs(o), deterministic=True)[0]).reshape(-1)[0])

        more_obs, more_actions = collect_learner_states(make_env, wls, targets, list(cfg.seeds), act)
        agreement = float((model.predict(venv.normalize_obs(more_obs), deterministic=True)[0] == more_actions).mean())
        obs = {k: np.concatenate([obs[k], more_obs[k]]) for k in obs}
        actions = np.concatenate([actions, more_actions])
        for key, rms in venv.obs_rms.items():
            rms.update(more_obs[key])
        losses += behaviour_clone(model, venv.normalize_obs(obs), actions, cfg.bc_epochs, cfg.batch_size,
                                  cfg.bc_learning_rate, cfg.seed + rnd + 1)
        dagger.append({"round": rnd + 1, "num_learner_states": len(more_actions), "learner_agreement": agreement})
        log(f"DAgger round {rnd + 1}: {len(more_actions)} states of the cloned policy, {agreement:.3f} of its actions "
            f"were the oracle's; cloned again on {len(actions)} steps (loss {losses[-1]:.3f})")
    pred, _ = model.predict(venv.normalize_obs(obs), deterministic=True)
    accuracy = float((pred == actions).mean())
    with open(out / "bc.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["epoch", "loss"])
        w.writerows([(i + 1, f"{x:.6f}") for i, x in enumerate(losses)])
    log(f"warm start: {len(actions)} oracle steps from {len(wls)} workloads, behaviour cloning loss "
        f"{losses[0]:.3f} -> {losses[-1]:.3f}, accuracy {accuracy:.3f} ({time.perf_counter() - t0:.0f} s)")
    summary = {"num_demonstration_steps": len(actions), "bc_loss_first": losses[0], "bc_loss_last": losses[-1],
               "bc_accuracy": accuracy, "wall_s": time.perf_counter() - t0}
    return summary | ({"dagger": dagger} if dagger else {})


def load_initial_model(path: str, model, venv) -> None:
    """``--init-from``: copies the policy weights of the MaskablePPO model at ``path`` into
    ``model`` (whose hyperparameters stay those of this run; the optimiser starts afresh) and the
    VecNormalize statistics saved next to it (``model.zip`` -> ``vecnormalize.pkl``,
    ``X_model.zip`` -> ``X_vecnormalize.pkl``) into ``venv``.

    Raises:
        FileNotFoundError: when the zip or its statistics are missing.
        ValueError: naming the file, when it or its statistics cannot be read
            (:func:`policies.common.checkpoint.load_model_zip`, :func:`~policies.common.checkpoint.load_vecnormalize`)
            or its observation or action space differs from the run's.
    """
    init, saved = read_initial_model(path)
    if init.observation_space != model.observation_space or init.action_space != model.action_space:
        raise ValueError(f"--init-from {path}: its observation/action space differs from this run's (same "
                         "--action-mode, --target-degrees, --capacity-features and pool needed)")
    model.policy.load_state_dict(init.policy.state_dict())
    venv.obs_rms = saved.obs_rms
    venv.ret_rms = saved.ret_rms


def read_initial_model(path: str):
    """``(MaskablePPO model, VecNormalize statistics)`` of an ``--init-from`` zip (``model.zip`` ->
    ``vecnormalize.pkl``, ``X_model.zip`` -> ``X_vecnormalize.pkl``).

    Raises:
        FileNotFoundError: when the zip or its statistics are missing.
        ValueError: naming the file, when it or its statistics cannot be read
            (:func:`policies.common.checkpoint.load_model_zip`, :func:`~policies.common.checkpoint.load_vecnormalize`).
    """
    from sb3_contrib import MaskablePPO

    zp = Path(path)
    stats = vecnormalize_path(zp)
    if not zp.is_file():
        raise FileNotFoundError(f"--init-from {path}: no such file; expected a *model.zip of an earlier "
                                "`cpgym train reconfig` run (its *vecnormalize.pkl next to it)")
    if not zp.name.endswith("model.zip") or not stats.is_file():
        raise FileNotFoundError(f"--init-from {path}: expected a *model.zip with its *vecnormalize.pkl next to it")
    return load_model_zip(MaskablePPO, zp), load_vecnormalize(stats)


def check_init_from(cfg: ReconfigTrainConfig) -> None:
    """Reads ``cfg.init_from`` (if set) and its statistics (:func:`read_initial_model`), so that a
    missing or corrupt file fails before anything is simulated or written.

    Raises:
        FileNotFoundError / ValueError: naming the file, see :func:`read_initial_model`.
    """
    if cfg.init_from is not None:
        read_initial_model(cfg.init_from)


def check_target_menu(cfg: ReconfigTrainConfig, sim_config) -> None:
    """With ``--action-mode target``: the composition menu of ``cfg.target_degrees`` on
    ``sim_config.pool`` (``envs.reconfig_env.target_menu``) exists, checked before anything is
    simulated or written to the output folder.

    Raises:
        ValueError: naming ``--target-degrees`` (a degree the pool does not support, or no
            composition of the pool's GPUs over them).
    """
    if cfg.action_mode != "target":
        return
    from envs.reconfig_env import target_menu  # lazy: gymnasium (start-up of the CLI)

    try:
        target_menu(sim_config.pool, cfg.target_degrees)
    except ValueError as e:
        raise ValueError(f"--target-degrees: {e}") from None


def check_oracle_phase_ttft(cfg: ReconfigTrainConfig, sim_config) -> None:
    """Reads ``cfg.oracle_phase_ttft`` (if set) as :func:`oracle_warm_start` will, against this
    run's composition menu (``envs.reconfig_env.target_menu`` of ``sim_config.pool`` over
    ``cfg.target_degrees``), so that a missing or malformed file fails before anything is
    simulated or written.

    Raises:
        ValueError: naming ``--oracle-phase-ttft``, the file and the field
            (:func:`policies.reconfig.oracle.load_phase_ttft`).
    """
    if cfg.oracle_phase_ttft is None:
        return
    from envs.reconfig_env import target_menu  # lazy: gymnasium (start-up of the CLI)

    path = Path(cfg.oracle_phase_ttft)
    if not path.is_file():
        raise ValueError(f"--oracle-phase-ttft {path}: no such file; expected an oracle_phase_ttft.json of an earlier "
                         "`cpgym train reconfig --warm-start oracle` run")
    menu = target_menu(sim_config.pool, cfg.target_degrees)
    try:
        load_phase_ttft(path, menu)
    except ValueError as e:
        raise ValueError(f"--oracle-phase-ttft {e}") from None


def train_reconfig(cfg: ReconfigTrainConfig, out_dir: str | Path, sim_config=None, argv=None, log=print,
                   progress: str | bool | None = None) -> Path:
    """Trains; writes ``model.zip``, ``vecnormalize.pkl``, ``progress.csv``, ``train_config.json``
    (with ``validation_seeds`` also ``validation.csv``, ``last_model.zip`` and
    ``last_vecnormalize.pkl``; ``model.zip`` / ``vecnormalize.pkl`` are then the best validated)
    and periodic checkpoints (:func:`checkpoint_callback`). A run stopped midway keeps
    ``train_config.json`` (written first), ``progress.csv`` (one row per PPO update), the
    checkpoints so far and, with validation, ``validation.csv`` and ``best_model.zip``.

    Raises:
        ValueError: on a bad ``cfg.oracle_phase_ttft`` file (:func:`check_oracle_phase_ttft`),
            before ``out_dir`` is created.
        policies.common.run_end.TrainingInterrupted: on Ctrl-C (a ``KeyboardInterrupt``), after saving
            the model and statistics at that moment as ``interrupted_model.zip`` /
            ``interrupted_vecnormalize.pkl`` (no ``model.zip``) and marking ``train_config.json``;
            the environments are closed and the wandb run finished after an error too
            (:class:`policies.common.run_end.TrainingRun`).
    """
    import torch as th
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.callbacks import CallbackList
    from stable_baselines3.common.logger import configure
    from stable_baselines3.common.vec_env import DummyVecEnv

    from envs.reconfig_env import observation_flag_columns, observation_profile_config  # lazy: gymnasium (start-up of the CLI)
    from policies.common.callbacks import TrainingProgress, monitored  # lazy: torch (stable-baselines3)
    from policies.reconfig.flag_normalize import FlagPreservingVecNormalize  # lazy: torch (stable-baselines3)

    sc = sim_config or SimConfig()
    check_target_menu(cfg, sc)
    check_oracle_phase_ttft(cfg, sc)
    check_init_from(cfg)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    th.set_num_threads(cfg.torch_threads)
    wins = cfg.episode_windows()
    log(f"train reconfig: {len(wins)} episode windows of {cfg.episode_window_s:g} s from "
        f"{cfg.workload_source(cfg.seeds[0]).label} (workload seeds {list(cfg.seeds)})")
    # One capacity table for every environment of the run (profiles are reused across episodes).
    table = CapacityTable(sc, Calibration.resolve(sc.calibration_path), observation_profile_config())

    def make(i):
        def _m():
            env = make_reconfig_env(wins, sc, decision_window_s=cfg.decision_window_s, capacity_table=table,
                                    **cfg.env_kwargs())
            env.reset(seed=cfg.seed * 1000 + i)
            return monitored(env)
        return _m

    # the 0/1 flags (present, is_active, is_reconfiguring, target flags) are never normalised: a flag
    # constant in training (variance ~1e-8) read as the clip value 10 when it first became 1
    envs = DummyVecEnv([make(i) for i in range(cfg.n_envs)])
    venv = FlagPreservingVecNormalize(envs, observation_flag_columns(envs.observation_space), norm_obs=True,
                                      norm_reward=cfg.norm_reward, gamma=cfg.gamma)
    meta = {"kind": "reconfig", "train_config": asdict(cfg), "sim_config": asdict(sc), "argv": argv}

    def write_meta(m: dict) -> None:
        (out / "train_config.json").write_text(json.dumps(m, indent=2, default=str) + "\n")

    write_meta(meta)
    # Ctrl-C: interrupted_model.zip + interrupted_vecnormalize.pkl; envs and wandb closed on any exit (policies.common.run_end)
    with TrainingRun(out, meta, write_meta, cfg.total_timesteps, venv, vecnormalize=venv) as tr:
        model = tr.model = MaskablePPO("MultiInputPolicy", venv, n_steps=cfg.n_steps, batch_size=cfg.batch_size,
                                       n_epochs=cfg.n_epochs, learning_rate=cfg.learning_rate, gamma=cfg.gamma,
                                       ent_coef=cfg.ent_coef, seed=cfg.seed, verbose=0)
        if cfg.noop_logit_bias:
            with th.no_grad():
                model.policy.action_net.bias[0] += cfg.noop_logit_bias  # action 0 = no-op (PrefillReconfigEnv)
        if cfg.warm_start == "oracle":
            meta["warm_start"] = oracle_warm_start(cfg, out, model, venv, sc, table, log)
        if cfg.init_from is not None:
            load_initial_model(cfg.init_from, model, venv)
            log(f"initial policy and observation statistics from {cfg.init_from}")
        model.set_logger(configure(str(out), ["csv"]))
        if cfg.wandb_mode != "disabled":
            tr.run = wandb_init(out, project="cpgym", mode=cfg.wandb_mode, config=meta, name=out.name,
                                reinit="finish_previous", quiet=progress == "off")
        t0 = time.perf_counter()
        shown = TrainingProgress(cfg.total_timesteps, progress)
        tr.closers.append(shown.close)
        callbacks = [shown, checkpoint_callback(cfg, out, venv)]
        val = validation_callback(cfg, out, venv, sc, table, log=log)
        if val is not None:
            callbacks.append(val)
        model.learn(cfg.total_timesteps, callback=CallbackList(callbacks), log_interval=1)
        _save_final(model, venv, out, val, meta, log)
        meta["train_wall_s"] = time.perf_counter() - t0
        meta["timesteps"] = int(model.num_timesteps)
        write_meta(meta)
        if tr.run is not None:
            tr.run.log({"timesteps": model.num_timesteps, "train_wall_s": meta["train_wall_s"]})
        log(f"trained {model.num_timesteps} steps in {meta['train_wall_s']:.0f} s -> {out / 'model.zip'}")
    return out / "model.zip"


def _save_final(model, venv, out: Path, val, meta: dict, log) -> None:
    """``model.zip`` + ``vecnormalize.pkl`` of a finished run: the final model, or with validation
    the best validated one (the final one as ``last_model.zip`` + ``last_vecnormalize.pkl``); when
    no validation had a finite mean TTFT (none could be the best: no ``best_model.zip``), the final
    one, recorded as ``"model_selection"`` in ``train_config.json`` and logged as a warning."""
    import shutil

    if val is None:
        model.save(out / "model.zip")
        venv.save(str(out / "vecnormalize.pkl"))
        return
    model.save(out / "last_model.zip")
    venv.save(str(out / "last_vecnormalize.pkl"))
    finite = [r for r in val.rows if math.isfinite(r["mean_ttft_s"])]
    if not finite:  # no best_model.zip: model.zip = the last model, said in the log and train_config.json
        meta["best_validation"] = None
        meta["model_selection"] = "last model: no validation had a finite mean TTFT"
        shutil.copyfile(out / "last_model.zip", out / "model.zip")
        shutil.copyfile(out / "last_vecnormalize.pkl", out / "vecnormalize.pkl")
        log(f"warning: none of the {len(val.rows)} validations had a finite mean TTFT (no request finished in an "
            f"episode of some validation seed, e.g. a --horizon-s that ends them first); model.zip = the last model "
            f"(no model selection)")
        return
    shutil.copyfile(out / "best_model.zip", out / "model.zip")
    shutil.copyfile(out / "best_vecnormalize.pkl", out / "vecnormalize.pkl")
    best = min(finite, key=lambda r: r["mean_ttft_s"])
    meta["best_validation"] = best
    log(f"model.zip = the model validated at {best['timesteps']} steps (mean TTFT {best['mean_ttft_s']:.3f} s)")
