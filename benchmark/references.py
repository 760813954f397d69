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
* **The oracles as leaderboard entries** (:func:`oracle_contender`, SPECs ``oracle:best-fixed``,
  ``oracle:per-phase`` and ``oracle:phase-schedule``, :data:`ORACLES`): an episode runner that simulates every candidate
  composition of :func:`fixed_candidates` on the episode (``vertumnus-router``, no
  reconfiguration) and returns, as one result, the requests of the composition with the lowest
  mean TTFT of the episode's measured requests (``best-fixed``, ties: the earlier candidate), or
  each phase's requests from the composition with the lowest mean TTFT of that phase
  (``per-phase``; ``per_phase_oracle_ttft``'s choice), or the run that follows the best, as
  simulated, of several hindsight schedules, run from the episode's best fixed composition
  (``phase-schedule``; ``baselines.fixed_compositions.schedule_oracle``: it pays every move's
  drain and switch, so it is what a controller that knew the phase boundaries could reach, where
  ``per-phase`` is an upper bound no controller reaches). The protocol then scores it like any
  policy (mean / P90 / P99 TTFT, SLO attainment of the chosen requests), so ``cpgym benchmark run
  --policy oracle:per-phase --split test --entries`` writes an entry that ``cpgym benchmark
  validate`` re-runs. They choose knowing each episode's outcome: **not attainable** (the
  leaderboard marks them). The result holds only the record columns the metrics read
  (:data:`ORACLE_RECORD_KEYS`); the oracles of an episode come from one set of simulations
  (memoised in the process, :data:`ORACLE_MEMO_SIZE` episodes), ``phase-schedule`` adding its
  schedules' runs.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from baselines.capacity import workload_digest
from baselines.fixed_compositions import (
    best_fixed_composition,
    check_decision_window_s,
    fixed_and_oracle_rows,
    per_phase_oracle_ttft,
    schedule_oracle,
)
from baselines.runner import run_policy
from benchmark.capacity import task_episodes
from benchmark.tasks import Task
from benchmark.tuned import load_tuned, tuned_file
from envs.metrics.summary import measured_summary
from envs.planning.composition import enumerate_compositions
from envs.sim.config import SimConfig
from envs.sim.request import Workload
from envs.sim.simulator import SimResult

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


# ------------------------------------------------------------------------------------------
# the hindsight oracles as episode runners (leaderboard entries)

#: Prefix of an oracle SPEC (``oracle:best-fixed``, ``oracle:per-phase``, ``oracle:phase-schedule``).
ORACLE_PREFIX = "oracle:"
#: The oracles: name -> what it is (the leaderboard's note).
ORACLES = {
    "best-fixed": "the best fixed composition of each episode in hindsight (the lowest mean TTFT of the episode's "
                  "measured requests among the 36 compositions over CP {2, 4, 8}, vertumnus-router, no "
                  "reconfiguration)",
    "per-phase": "per phase, the requests of the fixed composition that was fastest for that phase (mean TTFT of "
                 "the phase's requests; moving between compositions costs nothing)",
    "phase-schedule": "a schedule of compositions chosen in hindsight from the per-phase table (a switching cost per "
                      "GPU moved, the best as simulated of six costs and the best fixed composition held) and followed "
                      "in the simulator from that composition at the task's decision windows: every split and merge, "
                      "the first included, drains and switches",
}
#: The record columns of an oracle's result (what ``benchmark.protocol.episode_metrics`` reads).
ORACLE_RECORD_KEYS = ("arrival_s", "ttft_s", "ttft_slo_s", "num_prompt_tokens")
#: Episodes whose oracle results are kept in the process (so the other oracles of an episode reuse
#: the first one's fixed-pool simulations; each result holds only :data:`ORACLE_RECORD_KEYS`).
ORACLE_MEMO_SIZE = 16


@dataclass
class _EpisodeOracles:
    """One memoised episode of :func:`oracle_results`: the free oracles' results, the per-phase
    table ``(K, P)`` [s] and requests per phase they came from, the best fixed composition's index,
    and the ``phase-schedule`` result per decision window [s] (filled on demand)."""

    results: dict[str, SimResult]
    table: np.ndarray
    num_requests: np.ndarray
    best: int
    schedules: dict[float, SimResult] = field(default_factory=dict)


_MEMO: OrderedDict[tuple, _EpisodeOracles] = OrderedDict()


def is_oracle_spec(text: str) -> bool:
    """Whether ``text`` is an ``oracle:`` SPEC (valid or not)."""
    return text.startswith(ORACLE_PREFIX)


def oracle_results(workload: Workload, sim_config: SimConfig, compositions: list[str],
                   router: str = FIXED_ROUTER, decision_window_s: float | None = None) -> dict[str, SimResult]:
    """The oracles' results (module docstring) of one episode: ``{"best-fixed": result,
    "per-phase": result}``, with ``"phase-schedule"`` too when ``decision_window_s`` [s] (the
    task's decision window) is given; each with the records :data:`ORACLE_RECORD_KEYS` only and
    the chosen composition(s) in ``extras["oracle_compositions"]`` (one, or one per phase).

    Raises:
        ValueError: on a workload without phase metadata, no composition, or a bad
            ``decision_window_s`` (``baselines.fixed_compositions.check_decision_window_s``).
    """
    meta = workload.metadata or {}
    if meta.get("phase_of_request") is None:
        raise ValueError(f"workload {workload.name!r} has no metadata['phase_of_request']: the hindsight oracles need "
                         "a phased reconfiguration workload")
    if not compositions:
        raise ValueError("oracle_results needs at least one composition")
    if decision_window_s is not None:
        decision_window_s = check_decision_window_s(decision_window_s)
    # the workload's contents, not its name: two workloads of one name and seed may differ
    key = (workload_digest(workload), tuple(meta["phase_boundaries_s"]), meta.get("measure_from_s", 0.0), sim_config,
           tuple(compositions), router)
    if key in _MEMO:
        _MEMO.move_to_end(key)
        return _with_schedule(_MEMO[key], workload, sim_config, compositions, router, decision_window_s,
                              meta.get("measure_from_s", 0.0))
    phase = np.asarray(meta["phase_of_request"])
    num_phases = len(meta["phase_boundaries_s"]) - 1
    measure_from_s = meta.get("measure_from_s", 0.0)
    runs, table, means = [], np.full((len(compositions), num_phases), np.inf), []
    for k, comp in enumerate(compositions):
        res = run_policy(router, workload, replace(sim_config, pool=replace(sim_config.pool, composition=comp)))
        rec = {c: res.records[c] for c in ORACLE_RECORD_KEYS}
        runs.append(replace(res, records=rec, extras={}))
        for p in range(num_phases):  # as baselines.fixed_compositions.phase_ttft
            sel = rec["ttft_s"][phase == p]
            if len(sel) and not np.isnan(sel).all():
                table[k, p] = np.nanmean(sel)
        m = measured_summary(runs[-1], measure_from_s)["mean_ttft_s"]
        means.append(m if np.isfinite(m) else np.inf)
    best = int(np.argmin(means))
    _, schedule = per_phase_oracle_ttft(table, np.bincount(phase, minlength=num_phases))
    chosen = np.asarray(schedule)[phase]  # composition index per request
    rows = np.arange(len(phase))
    stitched = {c: np.stack([r.records[c] for r in runs])[chosen, rows] for c in ORACLE_RECORD_KEYS}
    out = {"best-fixed": replace(runs[best], policy=ORACLE_PREFIX + "best-fixed",
                                 extras={"oracle_compositions": [compositions[best]]}),
           "per-phase": replace(runs[best], policy=ORACLE_PREFIX + "per-phase", records=stitched,
                                extras={"oracle_compositions": [compositions[k] for k in schedule]})}
    entry = _EpisodeOracles(out, table, np.bincount(phase, minlength=num_phases), best)
    _MEMO[key] = entry
    while len(_MEMO) > ORACLE_MEMO_SIZE:
        _MEMO.popitem(last=False)
    return _with_schedule(entry, workload, sim_config, compositions, router, decision_window_s, measure_from_s)


def _with_schedule(entry: _EpisodeOracles, workload: Workload, sim_config: SimConfig, compositions: list[str],
                   router: str, decision_window_s: float | None, measure_from_s: float) -> dict[str, SimResult]:
    """The free oracles' results of a memoised episode, with ``"phase-schedule"`` (computed once
    per decision window and kept in the entry) when ``decision_window_s`` is given."""
    if decision_window_s is None:
        return dict(entry.results)
    if decision_window_s not in entry.schedules:
        res, schedule = schedule_oracle(workload, sim_config, compositions, entry.table, entry.num_requests,
                                        entry.best, entry.results["best-fixed"], decision_window_s, measure_from_s,
                                        router)
        entry.schedules[decision_window_s] = replace(
            res, policy=ORACLE_PREFIX + "phase-schedule", records={c: res.records[c] for c in ORACLE_RECORD_KEYS},
            extras={"oracle_compositions": [compositions[k] for k in schedule],
                    "num_schedule_operations": res.extras.get("num_schedule_operations", 0)})
    return {**entry.results, "phase-schedule": entry.schedules[decision_window_s]}


def oracle_runner(task: Task, name: str):
    """``run(workload, sim_config) -> SimResult`` of oracle ``name`` (:data:`ORACLES`) on ``task``'s
    candidate compositions.

    Raises:
        ValueError: one line naming the SPEC, for an unknown oracle or a routing task.
    """
    spec = ORACLE_PREFIX + name
    if name not in ORACLES:
        raise ValueError(f"--policy {spec}: unknown oracle {name!r}; oracles: "
                         f"{', '.join(ORACLE_PREFIX + k for k in ORACLES)}")
    if task.kind != "reconfig":
        raise ValueError(f"--policy {spec}: the hindsight oracles are reference points of the reconfiguration tasks, "
                         f"not of {task.id}")
    compositions = fixed_candidates(task)

    window_s = task.decision_window_s if name == "phase-schedule" else None

    def run(workload: Workload, sim_config: SimConfig) -> SimResult:
        return oracle_results(workload, sim_config, compositions, decision_window_s=window_s)[name]

    return run
