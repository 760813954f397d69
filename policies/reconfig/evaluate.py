"""Evaluation of a learned reconfiguration policy (``cpgym evaluate --policy <reconfig checkpoint>``).

Every (policy, workload seed) is one episode over the whole workload (for ``phases``: 600 s,
four phases). All policies route with the Vertumnus router; they differ only in who changes
the worker composition:

* the learned checkpoint: :class:`envs.reconfig_env.PrefillReconfigEnv` stepped with masked,
  deterministic actions (observations normalised with the saved ``VecNormalize`` statistics);
* ``vertumnus-adaptive``: the heuristic split/merge controller (``baselines.controller``);
* ``vertumnus-adaptive-tuned``: the same with the parameters selected on training seeds
  (``--tuned FILE``, :mod:`experiments.tune_controller`);
* ``vertumnus-router``: no reconfiguration (the configured initial composition, default
  ``cp4x6,cp2x8``);
* ``vertumnus``: the full system (initial composition from the capacity profile, controller,
  global prefix-cache manager);
* ``fixed:<composition>`` (e.g. ``fixed:cp2x20``; ``+`` for ``,`` in a mixed one:
  ``fixed:cp8x2+cp4x6``): no reconfiguration on another fixed composition of the same GPUs.

* ``joint:<routing checkpoint>`` (e.g. ``joint:shipped``): the learned controller with the
  routing checkpoint as its inner router (:mod:`policies.joint`, two timescales);
* ``best-fixed-in-hindsight`` (added whenever two or more fixed compositions — ``vertumnus-router``
  and the ``fixed:`` ones — are evaluated): per seed, the evaluated fixed composition with the
  lowest mean TTFT on that seed (an oracle: it knows the outcome).

The workload seed doubles as the simulator seed (as in :mod:`policies.routing.evaluate`). Metrics are
those of ``envs.metrics.summarize`` plus the number of operations started / committed; the
table gives the mean over seeds with a 95% Student-t confidence interval
(:func:`policies.routing.evaluate.mean_ci95`), and deltas to a reference policy paired by seed.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from baselines.capacity import saturated
from baselines.envs import make_reconfig_env
from baselines.runner import policy_pool, run_policy
from baselines.tuned_controller import TUNED_LABEL, tuned_controller_spec
from envs import workloads
from envs.metrics import summarize
from envs.metrics.stats import mean_ci95
from envs.metrics.table import metric_names
from envs.planning.capacity import CapacityCache, CapacityTable
from envs.planning.defaults import DECISION_WINDOW_S
from envs.sim import Calibration
from envs.sim.options import error_text
from policies.common.checkpoint import (
    checkpoint_path,
    current_meta,
    learned_label,
    load_model_zip,
    load_vecnormalize,
    missing_model_error,
    read_json_file,
    resolve_checkpoint,
    vecnormalize_path,
)
from policies.common.policy_args import check_distinct
from policies.reconfig.defaults import LEGACY_WORKLOAD

#: The metrics of a reconfiguration episode row (names of :mod:`envs.metrics.table`).
METRICS = metric_names("mean_ttft_s", "p90_ttft_s", "slo_attainment_token_weighted", "num_operations",
                       "num_committed_operations", "num_unfinished")


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


def checkpoint_pool_composition(path: str) -> str | None:
    """The worker composition a reconfiguration checkpoint's training episodes started from (its
    ``train_config.json`` ``sim_config.pool.composition``; ``None`` when not recorded): where
    ``cpgym evaluate --kind reconfig`` starts every controller's episodes unless
    ``--pool-composition`` is given, since a policy trained from one composition was otherwise
    evaluated, silently, from the default one.

    Raises:
        OSError: when the checkpoint has no ``train_config.json``.
        ValueError: naming the file and field, when it is not JSON, ``sim_config`` or its ``pool`` is
            not an object, or the recorded composition is not a string.
    """
    f = train_config_file(path)
    doc = read_json_file(f)
    comp = None
    for field in ("sim_config", "pool", "composition"):
        comp = doc.get(field)
        if comp is None:
            return None
        if field != "composition" and not isinstance(comp, dict):
            raise ValueError(f"{f}: {'sim_config.pool' if field == 'pool' else field} must be an object, got {comp!r}")
        doc = comp
    if not isinstance(comp, str):
        raise ValueError(f"{f}: sim_config.pool.composition must be a string such as 'cp4x6,cp2x8', got {comp!r}")
    return comp


def training_seeds(path: str) -> list[int]:
    """The workload seeds a reconfiguration checkpoint was trained on (from ``train_config.json``)."""
    tc = checkpoint_train_config(path)
    return [int(x) for x in (tc.get("workload_seeds") or [(tc.get("workload") or {}).get("seed", 0)])]


def check_held_out_seeds(checkpoint: str | None, seeds, workload: str) -> list[int]:
    """Evaluation seeds against the data a reconfiguration checkpoint saw (its ``train_config.json``),
    when ``workload`` is the one it was trained on (another workload's seed is other data).

    Returns:
        the evaluation seeds that are the checkpoint's validation seeds (model selection data: its
        numbers are not a held-out result; the caller warns), sorted.

    Raises:
        ValueError: naming ``--seeds``, when a seed is one of its training seeds (the project's rule:
            evaluation never touches training data), before any run.
    """
    if not checkpoint or checkpoint in ("none", "-"):
        return []
    tc = checkpoint_train_config(checkpoint)

    if ((tc.get("workload") or {}).get("name") or LEGACY_WORKLOAD) != workload:
        return []
    train = sorted(set(seeds) & set(training_seeds(checkpoint)))
    if train:
        shown = _seed_ranges(training_seeds(checkpoint))
        raise ValueError(f"--seeds {','.join(map(str, seeds))}: seed(s) {_seed_ranges(train)} of {workload} are training "
                         f"seeds of {checkpoint} (trained on seeds {shown}); evaluate on held-out seeds (e.g. >= 1000)")
    return sorted(set(seeds) & {int(x) for x in tc.get("validation_seeds") or ()})


def _seed_ranges(seeds) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``."""
    out: list[str] = []
    for s in sorted(set(seeds)):
        if out and out[-1].split("-")[-1] == str(s - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{s}"
        else:
            out.append(str(s))
    return ",".join(out)


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


def evaluate_reconfig(checkpoint: str | None, against: list[str], workload: str, seeds: list[int], sim_config,
                      target_rps: float | None = None, log=None, tuned: str | None = None,
                      workload_fields: dict | None = None, on_row=None, joint_router_factory=None) -> list[dict]:
    """One row per (policy, seed): ``policy, seed, wall_s`` plus :data:`METRICS` (the
    checkpoint's rows are labelled ``learned:<folder name>``, as routing checkpoints are, or
    ``shipped-reconfig`` for that alias: :attr:`LearnedReconfig.name`), then
    the ``best-fixed-in-hindsight`` rows (see the module docstring; ``composition`` names the
    winner).

    Args:
        checkpoint: reconfiguration checkpoint folder (or ``None`` for heuristics only).
        against: ``vertumnus-adaptive``, ``vertumnus-adaptive-tuned`` (needs ``tuned``),
            ``vertumnus-router`` (no reconfiguration), ``vertumnus`` (full system),
            ``fixed:<composition>`` and/or ``joint:<routing checkpoint>`` (needs ``checkpoint``).
        workload: named synthetic workload (generator seed = each seed).
        seeds: workload and simulator seeds; none of the checkpoint's training seeds when ``workload``
            is its training workload (:func:`check_held_out_seeds`).
        tuned: tuned-controller JSON of ``vertumnus-adaptive-tuned`` (``experiments.tune_controller``).
        workload_fields: further :class:`envs.workloads.WorkloadSource` fields of every seed's
            workload (``rate_scale``, ``arrival_window_s``, ``params``; the checkpoint's training source,
            :func:`policies.evaluate.reconfig_workload_fields`).
        on_row: optional ``callable(rows)`` called with the (policy, seed) rows so far after each
            run (e.g. to save them: a run stopped midway keeps its finished runs).
        joint_router_factory: ``path -> (() -> Router)``, the inner router of each
            ``joint:<routing checkpoint>`` comparison (``policies.joint.joint_router_factory``, given
            by the dispatcher :func:`policies.evaluate.run_evaluation`: reconfiguration evaluation
            imports no routing policy).

    Raises:
        ValueError: before any run: on an unknown policy, ``vertumnus-adaptive-tuned`` without (or
            with a bad) ``tuned`` file, a ``fixed:`` composition the pool rejects or that another label
            runs too, a ``joint:`` checkpoint that is not a routing one, a repeated seed or a training seed.
    """
    check_distinct(list(seeds), "seeds")
    check_held_out_seeds(checkpoint, list(seeds), workload)

    tuned_spec = _check_comparisons(against, checkpoint, tuned)
    _check_against_pool(against, tuned_spec, tuned, sim_config.pool)

    capacity_cache = CapacityCache()  # the heuristics' capacity profiles, shared by every run (same results, less work)
    learned = LearnedReconfig(checkpoint) if checkpoint else None
    if learned is not None:
        learned.check_pool(sim_config.pool)
    joints = [label for label in against if label.startswith("joint:")]
    if joints and joint_router_factory is None:
        raise ValueError(f"{joints[0]}: a joint comparison needs joint_router_factory (policies.joint)")
    # every joint: router loaded once, before the first run (a bad checkpoint fails before any simulation)
    routers = {label: joint_router_factory(label.split(":", 1)[1]) for label in against if label.startswith("joint:")}
    rows = []
    for seed in seeds:
        wl = workloads.build_workload(name=workload, seed=seed, target_rps=target_rps or None, **(workload_fields or {}))
        cfg = replace(sim_config, seed=seed)
        labels = ([learned.name] if learned else []) + list(against)
        for label in labels:
            t0 = time.perf_counter()
            if learned is not None and label == learned.name:
                result, _ = learned.run(wl, cfg, seed)
            elif label.startswith("joint:"):
                result, _ = learned.run(wl, cfg, seed, make_router=routers[label])
            elif label.startswith("fixed:"):
                comp = fixed_composition(label)
                c = replace(cfg, pool=replace(cfg.pool, composition=comp))
                result = run_policy("vertumnus-router", wl, c)
            elif label in ("vertumnus", "vertumnus-router", "vertumnus-adaptive"):
                result = run_policy(label, wl, cfg, capacity_cache=capacity_cache)
            elif label == TUNED_LABEL:
                result = run_policy(tuned_spec, wl, cfg, capacity_cache=capacity_cache)
            else:  # pragma: no cover - rejected above
                raise ValueError(f"unknown reconfiguration comparison {label!r}")
            s = summarize(result)
            n_ops, n_commit = operation_counts(result)
            row = {"policy": label, "seed": seed, "wall_s": time.perf_counter() - t0,
                   "mean_ttft_s": s["mean_ttft_s"], "p90_ttft_s": s["p90_ttft_s"],
                   "slo_attainment_token_weighted": s["slo_attainment_token_weighted"],
                   "num_operations": n_ops, "num_committed_operations": n_commit,
                   "num_unfinished": s.get("num_unfinished", 0), "saturated": saturated(result, s)[0]}
            rows.append(row)
            if on_row is not None:
                on_row(list(rows))
            if log:
                log(f"{row['policy']:>22} seed {seed}: mean TTFT {row['mean_ttft_s']:.3f} s, P90 {row['p90_ttft_s']:.3f} s, "
                    f"SLO {row['slo_attainment_token_weighted']:.3f}, ops {n_ops} ({row['wall_s']:.0f} s)")
    return rows + best_fixed_in_hindsight(rows)


def _check_comparisons(against: list[str], checkpoint: str | None, tuned: str | None):
    """Validates the ``against`` labels of :func:`evaluate_reconfig` before any run; returns the
    ``vertumnus-adaptive-tuned`` policy spec when it is compared, else ``None``.

    Raises:
        ValueError: on an unknown label, ``joint:`` without ``checkpoint`` or with a routing
            checkpoint that does not exist, or the tuned label without (or with a bad) ``tuned`` file.
    """
    for label in against:
        if not (label in ("vertumnus", "vertumnus-router", "vertumnus-adaptive", TUNED_LABEL)
                or any(label.startswith(p) and len(label) > len(p) for p in ("fixed:", "joint:"))):
            raise ValueError(f"unknown reconfiguration comparison {label!r}: use vertumnus, vertumnus-router, "
                             f"vertumnus-adaptive, {TUNED_LABEL}, fixed:<composition> or joint:<routing checkpoint>")
        if label.startswith("joint:") and not checkpoint:
            raise ValueError(f"{label!r} combines a routing checkpoint with the evaluated reconfiguration checkpoint; "
                             "give --policy")
        if label.startswith("joint:"):  # a missing routing checkpoint fails now, not after the learned runs

            try:
                _, meta = resolve_checkpoint(label.split(":", 1)[1])
            except (OSError, ValueError) as exc:
                raise ValueError(f"--against {label}: {error_text(exc)}") from None
            if meta.get("kind", "routing") != "routing":  # a reconfiguration checkpoint failed as a torch traceback
                raise ValueError(f"--against {label}: {label.split(':', 1)[1]} is a {meta['kind']} checkpoint "
                                 f"(train_config.json kind {meta['kind']!r}); joint: takes a routing checkpoint "
                                 "(e.g. joint:shipped), the controller is --policy")
    if TUNED_LABEL not in against:
        return None
    if not tuned:
        raise ValueError(f"{TUNED_LABEL} needs --tuned FILE: the controller settings selected on training seeds "
                         "(`cpgym sweep experiments/specs/controller-matched-phases-tuning.yaml`, then "
                         "`python -m experiments.tune_controller SWEEP_DIR --out FILE`)")
    return tuned_controller_spec(tuned)


def _check_against_pool(against: list[str], tuned_spec, tuned: str | None, pool) -> None:
    """The comparisons' settings against ``pool`` before any run: the tuned controller's (e.g.
    ``target_degrees``) and each ``fixed:`` composition (they failed only when their turn came,
    after the runs before them).

    Raises:
        ValueError: naming the tuned file or the ``--against`` label; also when two labels run one
            composition (``fixed:cp4x9+cp2x2`` and ``fixed:cp2x2+cp4x9``, or ``vertumnus-router`` and the
            ``fixed:`` of its initial composition).
    """
    if tuned_spec is not None:
        try:
            policy_pool(tuned_spec, pool)
        except ValueError as exc:
            raise ValueError(f"{tuned}: params: {exc}") from None
    # a composition run under two labels (two fixed: spellings, or fixed: of the initial composition
    # next to vertumnus-router) was run twice and made a best-fixed-in-hindsight row out of one composition
    seen = {tuple(pool.placements()): "vertumnus-router"} if "vertumnus-router" in against else {}
    for label in against:
        if label.startswith("fixed:"):
            try:
                placements = tuple(replace(pool, composition=fixed_composition(label)).placements())
            except ValueError as exc:
                raise ValueError(f"--against {label}: {exc}") from None
            if placements in seen:
                what = (f"is the initial composition {pool.composition} (--pool-composition), which vertumnus-router runs"
                        if seen[placements] == "vertumnus-router" else f"is the same composition as {seen[placements]}")
                raise ValueError(f"--against {label} {what}; expected each composition once (it would run twice and be "
                                 "compared with itself in best-fixed-in-hindsight)")
            seen[placements] = label


def overload_warnings(rows: list[dict]) -> list[str]:
    """One ``warning: POLICY: overloaded on seed(s) ...`` line per policy with a ``saturated`` row
    (both tests of ``baselines.capacity.saturated``, as ``cpgym simulate`` warns): its TTFTs then
    measure the episode's backlog, not the controller (the ``phases`` workload's default rates are
    past the default pool's capacity, so every policy there reads 100+ s without this line)."""
    seeds: dict[str, list] = {}
    for r in rows:
        if r.get("saturated") and r["policy"] != "best-fixed-in-hindsight":
            seeds.setdefault(r["policy"], []).append(r["seed"])
    return [f"warning: {policy}: overloaded on seed(s) {', '.join(map(str, ss))}: the last third's mean TTFT slowdown is "
            "> 1.2x the first third's (the backlog grows) and token-weighted SLO attainment < 0.9; its TTFTs measure "
            "the episode's backlog (sustainable rates: cpgym capacity)" for policy, ss in seeds.items()]


def fixed_composition(label: str) -> str:
    """The pool composition of a ``fixed:<composition>`` label; ``+`` stands for ``,`` so that a
    mixed composition fits in the comma-separated ``--against`` list (``fixed:cp8x2+cp4x6`` ->
    ``cp8x2,cp4x6``)."""
    return label.split(":", 1)[1].replace("+", ",")


def best_fixed_in_hindsight(rows: list[dict]) -> list[dict]:
    """Per seed, a copy of the row of the fixed composition (``vertumnus-router``: the initial
    one, or ``fixed:*``) with the lowest mean TTFT, relabelled ``best-fixed-in-hindsight`` with
    ``composition`` set; none when fewer than two fixed compositions were evaluated."""
    fixed = [r for r in rows if r["policy"] == "vertumnus-router" or str(r["policy"]).startswith("fixed:")]
    if len({r["policy"] for r in fixed}) < 2:
        return []
    out = []
    for seed in dict.fromkeys(r["seed"] for r in fixed):
        best = min((r for r in fixed if r["seed"] == seed), key=lambda r: r["mean_ttft_s"])
        comp = best["policy"].split(":", 1)[1] if best["policy"].startswith("fixed:") else "initial composition"
        out.append({**best, "policy": "best-fixed-in-hindsight", "composition": comp})
    return out


def choose_reconfig_reference(rows: list[dict], reference: str | None = None) -> str | None:
    """The reference of the paired deltas: ``reference`` if evaluated, else
    ``vertumnus-adaptive`` if evaluated, else ``None``.

    Raises:
        ValueError: when ``reference`` names a policy that was not evaluated.
    """
    labels = list(dict.fromkeys(r["policy"] for r in rows))
    if reference is not None:
        if reference not in labels:
            raise ValueError(f"--reference {reference!r} was not evaluated; evaluated: {', '.join(labels)}")
        return reference
    return "vertumnus-adaptive" if "vertumnus-adaptive" in labels else None


def aggregate_reconfig(rows: list[dict], workload: str | None = None, reference: str | None = None) -> list[dict]:
    """Per policy: mean and 95% CI half-width (``<metric>_ci95``) of :data:`METRICS` over seeds,
    and the fields of the learned-routing evaluation rows: ``policy, workload, load_fraction``
    (None: the scenarios' loads vary per phase), ``num_windows`` (episodes), ``mean_ttft_s,
    p90_ttft_s, slo_attainment_token_weighted``, ``delta_mean_ttft_pct_vs_ref`` (mean over seeds
    of ``100 (x - ref) / ref``, paired by seed) with its 95% Student-t CI ``ci_low, ci_high``,
    ``delta_slo_attainment`` (paired, absolute) with ``delta_slo_attainment_ci95``, and
    ``reference`` (:func:`choose_reconfig_reference`; deltas are NaN without one)."""
    import math

    ref_label = choose_reconfig_reference(rows, reference)
    ref = {r["seed"]: r for r in rows if r["policy"] == ref_label}
    out = []
    for label in dict.fromkeys(r["policy"] for r in rows):
        rs = [r for r in rows if r["policy"] == label]
        agg = {"policy": label, "workload": workload, "load_fraction": None, "num_windows": len(rs),
               "num_episodes": len(rs)}
        for m in METRICS:
            agg[m], agg[m + "_ci95"] = mean_ci95([r[m] for r in rs])
        paired = [(r, ref[r["seed"]]) for r in rs if r["seed"] in ref]
        d_pct, ci = mean_ci95([100.0 * (r["mean_ttft_s"] - b["mean_ttft_s"]) / b["mean_ttft_s"] for r, b in paired])
        agg["delta_mean_ttft_pct_vs_ref"] = d_pct
        agg["ci_low"], agg["ci_high"] = (d_pct - ci, d_pct + ci) if ci == ci else (math.nan, math.nan)
        agg["delta_slo_attainment"], agg["delta_slo_attainment_ci95"] = mean_ci95(
            [r["slo_attainment_token_weighted"] - b["slo_attainment_token_weighted"] for r, b in paired])
        agg["reference"] = ref_label
        if label == "best-fixed-in-hindsight":
            agg["compositions"] = sorted({r["composition"] for r in rs})
        out.append(agg)
    return out
