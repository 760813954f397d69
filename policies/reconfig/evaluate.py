"""Running a learned reconfiguration checkpoint: :class:`LearnedReconfig` (``model.zip``,
``vecnormalize.pkl``, ``train_config.json``) steps :class:`envs.reconfig_env.PrefillReconfigEnv`
(Vertumnus inner router) with masked, deterministic actions on normalised observations
(:func:`rollout_reconfig`); the environment arguments that shape its spaces come from its
``train_config.json`` (:func:`env_kwargs_of`).

Evaluation is the benchmark protocol's (``benchmark.protocol``; ``cpgym benchmark run --policy
shipped --tasks reconfig/matched-phases-v1``, ``cpgym evaluate``), which runs a checkpoint through
``experiments.benchmark_specs``.
"""

from __future__ import annotations

import json
from pathlib import Path

from baselines.envs import make_reconfig_env
from envs.planning.capacity import CapacityCache, CapacityTable
from envs.planning.defaults import DECISION_WINDOW_S
from envs.sim import Calibration
from policies.common.checkpoint import (
    checkpoint_path,
    current_meta,
    learned_label,
    load_model_zip,
    load_vecnormalize,
    missing_model_error,
    read_json_file,
    vecnormalize_path,
)


def is_reconfig_checkpoint(path: str) -> bool:
    """True when ``path`` (a folder or its ``model.zip``) has a ``train_config.json`` of kind
    ``"reconfig"``."""
    f = train_config_file(path)
    if not f.is_file():
        return False
    try:
        return json.loads(f.read_text()).get("kind") == "reconfig"
    except (json.JSONDecodeError, OSError):
        return False


def train_config_file(path: str) -> Path:
    """The ``train_config.json`` of a checkpoint (a ``--policy`` value: a shipped alias, a folder
    or a model zip in it)."""
    p = checkpoint_path(path)
    return (p.parent if p.suffix == ".zip" else p) / "train_config.json"


def checkpoint_train_config(path: str) -> dict:
    """The ``train_config`` entry of a checkpoint's ``train_config.json`` (a folder or its
    ``model.zip``; ``{}`` without that entry): the one reader of the workload and seeds it was
    trained on.

    Raises:
        OSError: when the checkpoint has no ``train_config.json``.
    """
    return current_meta(json.loads(train_config_file(path).read_text())).get("train_config") or {}


def env_kwargs_of(train_config: dict) -> dict:
    """The :class:`envs.reconfig_env.PrefillReconfigEnv` arguments that shape a checkpoint's
    observation and action space, from its ``train_config`` (``capacity_features``, ``history_features``,
    ``action_mode``, ``target_degrees``, ``max_operation_gpus_per_window``; checkpoints older than
    a field get the environment's former behaviour: no capacity features, per-operation actions).

    Raises:
        ValueError: naming the field, when ``capacity_features`` or ``history_features`` is not a
            bool (``"false"`` would have turned the observation on).
    """
    import numpy as np

    for name in ("capacity_features", "history_features"):
        value = train_config.get(name, False)
        if not isinstance(value, (bool, np.bool_)):
            raise ValueError(f"train_config {name} must be a bool, got {value!r}")
    out = {"capacity_features": bool(train_config.get("capacity_features", False))}
    if train_config.get("history_features", False):
        out["history_features"] = True
    if train_config.get("action_mode", "operation") == "target":
        out.update(action_mode="target", target_degrees=tuple(train_config["target_degrees"]),
                   max_operation_gpus_per_window=train_config.get("max_operation_gpus_per_window"))
    return out


def rollout_reconfig(act, workload, config, seed: int, decision_window_s: float, capacity_features: bool = False,
                     capacity_table=None, make_router=None, check_env=None, **env_kwargs):
    """One whole-workload episode of :class:`envs.reconfig_env.PrefillReconfigEnv` (simulator
    seed ``seed``; further environment arguments in ``env_kwargs``, e.g. ``action_mode``) driven
    by ``act(raw observation, action mask) -> action``; ``check_env(env)`` (optional) may refuse the
    built environment before its episode; returns ``(SimResult, actions taken)``."""

    env = make_reconfig_env([workload], config, decision_window_s=decision_window_s, capacity_features=capacity_features,
                             capacity_table=capacity_table, make_router=make_router, **env_kwargs)
    if check_env is not None:
        check_env(env)
    obs, _ = env.reset(seed=seed, options={"window_index": 0, "sim_seed": seed})
    actions = []
    done = False
    while not done:
        a = act(obs, env.action_masks())
        actions.append(a)
        obs, _, term, trunc, _ = env.step(a)
        done = term or trunc
    return env.sim.result(), actions


class LearnedReconfig:
    """A loaded reconfiguration checkpoint: ``model.zip`` (MaskablePPO), ``vecnormalize.pkl``
    (observation statistics) and ``train_config.json``.

    ``path``: the checkpoint folder, or a model zip in it (``model.zip``, ``last_model.zip``,
    ``best_model.zip``: that zip is loaded, with its statistics, :func:`policies.common.checkpoint.vecnormalize_path`).
    ``name``: its label in tables and ``SimResult.policy`` (default ``shipped-reconfig`` for that
    alias, else ``learned:<folder name>`` as for routing, :func:`policies.common.checkpoint.learned_label`).

    Raises:
        FileNotFoundError: when the model zip is missing.
        ValueError: naming the file, when ``train_config.json``, the model zip or the statistics
            cannot be read (:func:`policies.common.checkpoint.load_model_zip`,
            :func:`~policies.common.checkpoint.load_vecnormalize`).
    """

    def __init__(self, path: str | Path, name: str | None = None) -> None:
        from sb3_contrib import MaskablePPO

        p = checkpoint_path(path)
        d = p.parent if p.suffix == ".zip" else p
        model_path = p if p.suffix == ".zip" else d / "model.zip"  # a named zip (e.g. last_model.zip) is the one loaded
        if not model_path.is_file():
            if model_path.parent == p:  # a folder without model.zip (an interrupted run: names the zips to use)
                raise missing_model_error(p)
            raise FileNotFoundError(f"no such file: {model_path}")
        self.dir = d
        self.name = name or (str(path) if str(path) == "shipped-reconfig" else learned_label(model_path))
        self.meta = current_meta(read_json_file(d / "train_config.json"))
        self.model = load_model_zip(MaskablePPO, model_path)
        vn = vecnormalize_path(model_path)
        self.vecnormalize = None
        if vn.is_file():
            self.vecnormalize = load_vecnormalize(vn)  # saved without its venv: only the statistics
            self.vecnormalize.training = False
        tc = self.meta.get("train_config") or {}
        self.decision_window_s = float(tc.get("decision_window_s", DECISION_WINDOW_S))
        try:
            self.env_kwargs = env_kwargs_of(tc)
        except ValueError as exc:
            raise ValueError(f"{d / 'train_config.json'}: {exc}") from None
        self.capacity_features = self.env_kwargs["capacity_features"]
        # Profiles (pure functions of their key) are shared by every episode this object runs; each
        # episode gets its own table, because a table's reference mixes follow the order in which
        # it met them, so a shared table made a seed's result depend on the seeds run before it.
        self.capacity_cache = None

    def check_pool(self, pool) -> None:
        """A target-menu checkpoint's ``target_degrees`` against ``pool`` before any run.

        Raises:
            ValueError: naming the checkpoint and its degrees, when the pool cannot make its menu.
        """
        if self.env_kwargs.get("action_mode") != "target":
            return
        from envs.reconfig_env import target_menu  # lazy: gymnasium (start-up of the CLI)

        try:
            target_menu(pool, self.env_kwargs["target_degrees"])
        except ValueError as exc:
            raise ValueError(f"{self.dir}: the checkpoint's target menu does not fit this pool: {exc}") from None

    def check_env(self, env) -> None:
        """Refuses an environment whose observation shapes or number of actions differ from the
        checkpoint's (a pool of another size or other CP degrees: the per-worker slots or the
        target menu change); it failed as a numpy broadcasting traceback at the first action.

        Raises:
            ValueError: naming the checkpoint, both shapes and the pool.
        """
        def shapes(obs_space, action_space) -> str:
            spaces = getattr(obs_space, "spaces", {"obs": obs_space})
            return ", ".join(f"{k} {tuple(s.shape)}" for k, s in spaces.items()) + f"; {action_space.n} actions"

        mine = shapes(self.model.observation_space, self.model.action_space)
        theirs = shapes(env.observation_space, env.action_space)
        if mine != theirs:
            pool = env.config.pool if hasattr(env, "config") else None
            where = f" ({pool.num_gpus} GPUs, CP degrees {','.join(map(str, pool.supported_degrees))})" if pool else ""
            raise ValueError(f"{self.dir}: the checkpoint observes {mine}, this pool{where} gives {theirs}; "
                             "evaluate it on a pool like the one it was trained on (its train_config.json)")

    def act(self, obs: dict, mask) -> int:
        """Deterministic masked action for one raw observation."""
        if self.vecnormalize is not None:
            obs = self.vecnormalize.normalize_obs(obs)
        action, _ = self.model.predict(obs, action_masks=mask, deterministic=True)
        return int(action)

    def run(self, workload, config, seed: int, make_router=None):
        """Runs one whole-workload episode (inner router: ``make_router()``, default Vertumnus);
        returns ``(SimResult, actions taken)``."""
        table = None
        if self.capacity_features:
            from envs.reconfig_env import observation_profile_config  # lazy: gymnasium (start-up of the CLI)

            if self.capacity_cache is None:
                self.capacity_cache = CapacityCache()
            table = CapacityTable(config, config_calibration(config), observation_profile_config(), cache=self.capacity_cache)
        kw = {k: v for k, v in self.env_kwargs.items() if k != "capacity_features"}
        result, actions = rollout_reconfig(self.act, workload, config, seed, self.decision_window_s, self.capacity_features,
                                           table, make_router, check_env=self.check_env, **kw)
        result.policy = self.name
        return result, actions


def config_calibration(config):
    """The calibration a ``SimConfig`` resolves to (its ``calibration_path`` or the shipped one)."""
    return Calibration.resolve(config.calibration_path)


def operation_counts(result) -> tuple[int, int]:
    """``(started, committed)`` reconfiguration operations of a simulation result (the
    ``num_operations`` / ``num_committed_operations`` of an evaluation row)."""
    ops = result.extras.get("reconfig_operations") or []
    return len(ops), int(result.extras.get("num_reconfigurations", 0))
