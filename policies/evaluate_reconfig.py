"""Evaluation of a learned reconfiguration policy (``cpgym evaluate --policy <reconfig checkpoint>``).

Every (policy, workload seed) is one episode over the whole workload (for ``phases``: 600 s,
four phases). All policies route with the Vertumnus router; they differ only in who changes
the worker composition:

* the learned checkpoint: :class:`envs.reconfig_env.PrefillReconfigEnv` stepped with masked,
  deterministic actions (observations normalised with the saved ``VecNormalize`` statistics);
* ``vertumnus-adaptive``: the heuristic split/merge controller (``baselines.controller``);
* ``vertumnus-router``: no reconfiguration (the configured initial composition, default
  ``cp4x6,cp2x8``);
* ``vertumnus``: the full system (initial composition from the capacity profile, controller,
  global prefix-cache manager);
* ``fixed:<composition>`` (e.g. ``fixed:cp2x20``): no reconfiguration on another fixed
  composition of the same GPUs.

The workload seed doubles as the simulator seed (as in :mod:`policies.evaluate`). Metrics are
those of ``envs.metrics.summarize`` plus the number of operations started / committed; the
table gives the mean over seeds with a 95% Student-t confidence interval
(:func:`policies.evaluate.mean_ci95`).
"""

from __future__ import annotations

import json
import pickle
import time
from dataclasses import replace
from pathlib import Path

from policies.checkpoint import load_model_zip, read_json_file

METRICS = ("mean_ttft_s", "p90_ttft_s", "slo_attainment_token_weighted", "num_operations", "num_committed_operations",
           "num_unfinished")


def is_reconfig_checkpoint(path: str) -> bool:
    """True when ``path`` (a folder or its ``model.zip``) has a ``train_config.json`` of kind
    ``"reconfig"``."""
    p = Path(path)
    d = p.parent if p.suffix == ".zip" else p
    f = d / "train_config.json"
    if not f.is_file():
        return False
    try:
        return json.loads(f.read_text()).get("kind") == "reconfig"
    except (json.JSONDecodeError, OSError):
        return False


def training_seeds(path: str) -> list[int]:
    """The workload seeds a reconfiguration checkpoint was trained on (from ``train_config.json``)."""
    p = Path(path)
    d = p.parent if p.suffix == ".zip" else p
    tc = json.loads((d / "train_config.json").read_text()).get("train_config") or {}
    return [int(x) for x in (tc.get("workload_seeds") or [tc.get("workload_seed", 0)])]


class LearnedReconfig:
    """A loaded reconfiguration checkpoint: ``model.zip`` (MaskablePPO), ``vecnormalize.pkl``
    (observation statistics) and ``train_config.json``.

    Raises:
        FileNotFoundError: when ``model.zip`` is missing.
        ValueError: naming the file, when ``train_config.json`` or ``model.zip`` cannot be read.
    """

    def __init__(self, path: str | Path) -> None:
        from sb3_contrib import MaskablePPO

        p = Path(path)
        d = p.parent if p.suffix == ".zip" else p
        model_path = d / "model.zip"
        if not model_path.is_file():
            raise FileNotFoundError(f"no model.zip in {d}")
        self.dir = d
        self.meta = read_json_file(d / "train_config.json")
        self.model = load_model_zip(MaskablePPO, model_path)
        vn = d / "vecnormalize.pkl"
        self.vecnormalize = None
        if vn.is_file():
            with open(vn, "rb") as fh:
                self.vecnormalize = pickle.load(fh)  # saved without its venv: only the statistics
            self.vecnormalize.training = False
        self.window_s = float((self.meta.get("train_config") or {}).get("window_s", 20.0))

    def act(self, obs: dict, mask) -> int:
        """Deterministic masked action for one raw observation."""
        if self.vecnormalize is not None:
            obs = self.vecnormalize.normalize_obs(obs)
        action, _ = self.model.predict(obs, action_masks=mask, deterministic=True)
        return int(action)

    def run(self, workload, config, seed: int):
        """Runs one whole-workload episode; returns ``(SimResult, actions taken)``."""
        from envs.reconfig_env import PrefillReconfigEnv

        env = PrefillReconfigEnv([workload], config, window_s=self.window_s)
        obs, _ = env.reset(seed=seed, options={"window_index": 0, "sim_seed": seed})
        actions = []
        done = False
        while not done:
            a = self.act(obs, env.action_masks())
            actions.append(a)
            obs, _, term, trunc, _ = env.step(a)
            done = term or trunc
        result = env.sim.result()
        result.policy = "learned"
        return result, actions


def _ops(result) -> tuple[int, int]:
    ops = result.extras.get("reconfig_operations") or []
    return len(ops), int(result.extras.get("num_reconfigurations", 0))


def evaluate_reconfig(checkpoint: str | None, against: list[str], workload: str, seeds: list[int], sim_config,
                      target_rps: float | None = None, log=None) -> list[dict]:
    """One row per (policy, seed): ``policy, seed, wall_s`` plus :data:`METRICS`.

    Args:
        checkpoint: reconfiguration checkpoint folder (or ``None`` for heuristics only).
        against: ``vertumnus-adaptive``, ``vertumnus-router`` (no reconfiguration), ``vertumnus``
            (full system) and/or
            ``fixed:<composition>``.
        workload: named synthetic workload (generator seed = each seed).
        seeds: workload and simulator seeds (hold out those used in training).

    Raises:
        ValueError: on an unknown policy or a composition the pool rejects.
    """
    from envs import workloads
    from envs.metrics import summarize
    from experiments.runner import run_policy

    for label in against:
        if not (label in ("vertumnus", "vertumnus-router", "vertumnus-adaptive") or (label.startswith("fixed:") and len(label) > 6)):
            raise ValueError(f"unknown reconfiguration comparison {label!r}: use vertumnus, vertumnus-router, vertumnus-adaptive or fixed:<composition>")
    learned = LearnedReconfig(checkpoint) if checkpoint else None
    rows = []
    for seed in seeds:
        wl = workloads.build_workload(name=workload, seed=seed, target_rps=target_rps or None)
        cfg = replace(sim_config, seed=seed)
        labels = (["learned"] if learned else []) + list(against)
        for label in labels:
            t0 = time.perf_counter()
            if label == "learned":
                result, _ = learned.run(wl, cfg, seed)
            elif label.startswith("fixed:"):
                comp = label.split(":", 1)[1]
                c = replace(cfg, pool=replace(cfg.pool, composition=comp))
                result = run_policy("vertumnus-router", wl, c)
            elif label in ("vertumnus", "vertumnus-router", "vertumnus-adaptive"):
                result = run_policy(label, wl, cfg)
            else:
                raise ValueError(f"unknown reconfiguration comparison {label!r}: use vertumnus, vertumnus-router, vertumnus-adaptive or fixed:<composition>")
            s = summarize(result)
            n_ops, n_commit = _ops(result)
            row = {"policy": label, "seed": seed, "wall_s": time.perf_counter() - t0,
                   "mean_ttft_s": s["mean_ttft_s"], "p90_ttft_s": s["p90_ttft_s"],
                   "slo_attainment_token_weighted": s["slo_attainment_token_weighted"],
                   "num_operations": n_ops, "num_committed_operations": n_commit,
                   "num_unfinished": s.get("num_unfinished", 0)}
            rows.append(row)
            if log:
                log(f"{label:>22} seed {seed}: mean TTFT {row['mean_ttft_s']:.3f} s, P90 {row['p90_ttft_s']:.3f} s, "
                    f"SLO {row['slo_attainment_token_weighted']:.3f}, ops {n_ops} ({row['wall_s']:.0f} s)")
    return rows


def aggregate_reconfig(rows: list[dict]) -> list[dict]:
    """Per policy: mean and 95% CI half-width (``<metric>_ci95``) of :data:`METRICS` over seeds."""
    from policies.evaluate import mean_ci95

    out = []
    for label in dict.fromkeys(r["policy"] for r in rows):
        rs = [r for r in rows if r["policy"] == label]
        agg = {"policy": label, "num_episodes": len(rs)}
        for m in METRICS:
            agg[m], agg[m + "_ci95"] = mean_ci95([r[m] for r in rs])
        out.append(agg)
    return out
