"""Reference points of the reconfiguration tasks (issue #39, "Reference points per task"):
the best fixed composition chosen on the training split (``tuned:fixed``), and the hindsight
oracles on an evaluated split, which are not attainable and shown as such.

* **Best fixed composition** (:func:`choose_fixed`): every candidate composition of the task's
  GPUs over CP degrees {2, 4, 8} (the learned controller's menu, 36 for the paper pool) runs the
  task's first ``num_episodes`` training episodes with ``vertumnus-router`` and no
  reconfiguration; the lowest mean over episodes of the per-episode mean TTFT wins
  (``baselines.fixed_compositions.best_fixed_composition``). It is stored with the tuned
  heuristics (``benchmark/tuned/<task>.json``, policy ``fixed``: ``{"params": {"composition":
  ...}}``), so ``--policy tuned:fixed`` runs it.
* **Hindsight oracles** (:func:`oracle_rows`): per evaluated episode, the best fixed composition
  *of that episode* and the per-phase oracle (each phase's requests on the composition best for
  that phase, ignoring the cost of moving between them;
  ``baselines.fixed_compositions.per_phase_oracle_ttft``).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from baselines.fixed_compositions import best_fixed_composition, fixed_and_oracle_rows
from benchmark.capacity import task_episodes
from benchmark.tasks import Task
from benchmark.tuned import load_tuned, tuned_file
from envs.planning.composition import enumerate_compositions

#: The CP degrees of the candidate fixed compositions (the reconfiguration menu's degrees).
FIXED_DEGREES = (2, 4, 8)
#: Training episodes the best fixed composition is chosen on (each is a whole scenario).
FIXED_TRAIN_EPISODES = 3
#: The router of every fixed composition.
FIXED_ROUTER = "vertumnus-router"


def fixed_candidates(task: Task) -> list[str]:
    """Every composition of the task's GPUs over :data:`FIXED_DEGREES` that the pool can place."""
    pool = replace(task.sim_config().pool, supported_degrees=FIXED_DEGREES)
    return enumerate_compositions(pool)


def choose_fixed(task: Task, num_episodes: int = FIXED_TRAIN_EPISODES, log=None) -> dict:
    """The best fixed composition on the task's first ``num_episodes`` training episodes.

    Returns:
        ``{"params": {"composition"}, "train_mean_ttft_s", "num_train_episodes", "candidates":
        {composition: mean TTFT [s]}}``.

    Raises:
        ValueError: for a routing task (its pool is fixed by the task).
    """
    if task.kind != "reconfig":
        raise ValueError(f"task {task.id}: the best fixed composition is a reconfiguration task's reference")
    episodes = task_episodes(task, "train")[:num_episodes]
    candidates = fixed_candidates(task)
    best, scores = best_fixed_composition(episodes, task.sim_config(), candidates, router=FIXED_ROUTER)
    if log:
        log(f"{task.id}: best fixed composition {best} ({min(scores):.4f} s over {len(episodes)} training episodes)")
    return {"params": {"composition": best}, "train_mean_ttft_s": float(min(scores)),
            "num_train_episodes": len(episodes),
            "candidates": {c: round(float(s), 6) for c, s in zip(candidates, scores)}}


def store_tuned_entry(task: Task, name: str, entry: dict, folder: Path | None = None) -> Path:
    """Writes ``entry`` as ``policies[name]`` of the task's tuned file (other entries kept; sorted
    keys, stable bytes)."""
    path = tuned_file(task, folder)
    doc = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"task": task.id, "policies": {}}
    doc["policies"][name] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def oracle_rows(task: Task, split: str, max_episodes: int | None = None) -> list[dict]:
    """Per episode of ``split``: the mean TTFT [s] of the stored best fixed composition, of the
    best fixed composition in hindsight and of the per-phase oracle
    (``baselines.fixed_compositions.fixed_and_oracle_rows``; hours are the production day's
    phases, the generator's phases otherwise)."""
    fixed = load_tuned(task, "fixed")
    if fixed is None:
        raise ValueError(f"task {task.id}: no stored best fixed composition; "
                         f"run `cpgym benchmark tune fixed --tasks {task.id}`")
    episodes = task_episodes(task, split, max_episodes=max_episodes)
    return fixed_and_oracle_rows(episodes, task.sim_config(), fixed_candidates(task), fixed["composition"],
                                 router=FIXED_ROUTER)
