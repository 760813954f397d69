"""The benchmark's one evaluation protocol (issue #39, "One protocol").

A policy runs on every episode of a task's split (``benchmark.capacity.task_episodes``: the
task's stored rate, its sealed blocks or seeds), each episode with the task's simulator
configuration ``task.sim_config()`` (run seed 0; generator tasks differ per episode by their
workload seed). Only the requests arriving from ``metadata["measure_from_s"]`` on (after the
warm-up) are measured; every request runs to completion.

What can be evaluated (:class:`Contender` wraps it with its label):

* a heuristic :class:`~baselines.registry.PolicySpec` (a router, or a full system with its
  controller for a reconfiguration task): ``baselines.runner.run_policy`` on the episode;
* anything with SB3's ``predict(obs, state, episode_start, deterministic)`` (``action_masks=`` is
  passed where ``predict`` takes it), or a plain callable ``obs -> action``: driven through the
  task's Gymnasium environment (``benchmark.env.task_env``: the routing environment, or the
  reconfiguration environment with the Vertumnus router inside), one decision per step;
* an :class:`EpisodeRunner`: ``run(workload, sim_config) -> SimResult`` (e.g. a learned
  reconfiguration checkpoint with its observation statistics, ``experiments.benchmark_specs``).

Rows. One per episode (:data:`EPISODE_FIELDS`): the measured mean / P90 / P99 TTFT [s] and
token-weighted SLO attainment, and ``overloaded`` (the task's rate is past its measured capacity,
``benchmark.capacity.is_overloaded_task``). One summary per (task, policy) (:data:`SUMMARY_FIELDS`):
means over episodes of the per-episode metrics and, against the task's reference
(:func:`reference_contender`: ``tuned:vertumnus-router`` on a routing task, ``tuned:vertumnus``
(the full system, its controller tuned on the training split) on a reconfiguration task; the
untuned policy, labelled ``vertumnus-router (untuned)`` / ``vertumnus (untuned)``, while no tuned
entry is stored), the paired difference of per-episode mean TTFT in % of the
reference's mean over the same episodes (negative: faster), with its 95 % Student-t interval
over episodes (``envs.metrics.stats.paired_ci``).

``num_invalid_actions``: per episode, the actions the environment refused as ineligible (its
``info["num_invalid_actions"]``: a routing action to a worker outside the mask, a reconfiguration
operation the pool cannot take); in the summary, their sum over episodes. A policy driven through
the environment is scored on what the environment did instead, so a non-zero count says its
numbers are not its own choices. A ``PolicySpec`` and an :class:`EpisodeRunner` report 0: a
heuristic routes through the simulator's own eligibility, and an episode runner's actions are not
seen by the protocol (the shipped learned controller acts under the action mask).
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from baselines.registry import PolicySpec
from baselines.runner import run_policy
from benchmark.capacity import is_overloaded_task, task_capacity, task_episodes
from benchmark.dispatch import Dispatcher
from benchmark.ledger import DEFAULT_LEDGER, read_ledger, record_test_runs
from benchmark.specs import Contender, EpisodeRunner, reference_contender
from benchmark.splits import check_split_name
from benchmark.tasks import Task, episodes, get_task, rate_scale
from envs.metrics.stats import paired_ci
from envs.metrics.summary import measured_summary
from envs.planning.capacity import CapacityCache, DemandHistory
from envs.sim.request import Workload

#: Keys of a per-episode row (``seed`` for generator tasks, ``block_offset_s`` for trace tasks).
EPISODE_FIELDS = ("task", "policy", "split", "episode_index", "seed|block_offset_s", "num_requests", "mean_ttft_s",
                  "p90_ttft_s", "p99_ttft_s", "slo_attainment_token_weighted", "overloaded", "num_invalid_actions")
#: Keys of a summary row, in order (``cpgym benchmark run --format json``).
SUMMARY_FIELDS = ("task", "policy", "split", "num_episodes", "mean_ttft_s", "p90_ttft_s", "p99_ttft_s",
                  "slo_attainment_token_weighted", "reference", "delta_mean_ttft_pct", "ci_low", "ci_high", "overloaded",
                  "num_invalid_actions")
#: The per-episode metrics averaged into the summary.
METRICS = ("mean_ttft_s", "p90_ttft_s", "p99_ttft_s", "slo_attainment_token_weighted")


def episode_metrics(result, measure_from_s: float) -> dict:
    """``envs.metrics.summary.measured_summary`` of the requests arriving at or after
    ``measure_from_s`` [s], plus their P99 TTFT [s] (NaN when none finished)."""
    out = measured_summary(result, measure_from_s)
    r = result.records
    ttft = r["ttft_s"][r["arrival_s"] >= measure_from_s - 1e-9]
    ttft = ttft[~np.isnan(ttft)]
    out["p99_ttft_s"] = float(np.percentile(ttft, 99)) if len(ttft) else math.nan
    return out


def _act(policy, obs, masks, state, episode_start: bool):
    predict = getattr(policy, "predict", None)
    if predict is None:
        return policy(obs), state
    kwargs = {"state": state, "episode_start": np.array([episode_start]), "deterministic": True}
    try:
        takes_masks = "action_masks" in inspect.signature(predict).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        takes_masks = False
    if takes_masks:
        kwargs["action_masks"] = masks
    return predict(obs, **kwargs)


def run_through_env(policy, task: Task, episode: Workload):
    """One episode of ``task``'s Gymnasium environment (``benchmark.env.task_env``) over
    ``episode`` (simulator seed 0, as ``task.sim_config()``) driven by ``policy``'s ``predict`` or
    ``policy(obs)``; returns ``(SimResult, number of invalid actions)`` (the environment's last
    ``info["num_invalid_actions"]``)."""
    from benchmark.env import task_env  # lazy: gymnasium (benchmark's heuristic runs do not need it)

    env = task_env(task, [episode])
    obs, _ = env.reset(seed=0, options={"window_index": 0, "sim_seed": task.sim_config().seed})
    state, start = None, True
    while True:
        action, state = _act(policy, obs, env.action_masks(), state, start)
        start = False
        obs, _, terminated, truncated, info = env.step(int(np.asarray(action).reshape(-1)[0]))
        if terminated or truncated:
            return env.sim.result(), int(info.get("num_invalid_actions", 0))


#: Training episodes (evenly spread, first and last kept) in a task's demand history: as many as
#: the fixed-composition search scores (``benchmark/tuned/reconfig__*.json`` "num_train_episodes").
NUM_HISTORY_EPISODES = 3


@functools.lru_cache(maxsize=16)
def task_history(task_id: str) -> DemandHistory:
    """The demand history a heuristic plans from offline on a task
    (:class:`envs.planning.capacity.DemandHistory`: the full Vertumnus system's initial
    composition, a controller's first reference mix and prior prefix hit):
    :data:`NUM_HISTORY_EPISODES` of the task's training episodes at its stored rate, pooled. No
    validation or test request is in it, so an evaluated episode is read only as it arrives.
    Memoised per task and process; :func:`run_contender` passes it lazily (only a policy that
    reads a history builds it)."""
    task = get_task(task_id)
    eps = task_episodes(task, "train", max_episodes=NUM_HISTORY_EPISODES)
    where = ", ".join(str(e.metadata.get("seed", e.metadata.get("block_offset_s"))) for e in eps)
    return DemandHistory.of(eps, f"{task_id} training episodes {where}")


@functools.lru_cache(maxsize=16)
def task_capacity_cache(task_id: str) -> CapacityCache:
    """The capacity-profile memo (``envs.planning.capacity.CapacityCache``) of this process's runs
    on one task: the heuristics that read a capacity table (the Vertumnus controllers, the initial
    composition) run the same episodes under several policies, and a controller search under
    hundreds of trials. A profile is a pure function of its key (settings, mix, degree), so the
    memo skips profiling simulations and changes no result."""
    return CapacityCache()


def run_contender(contender: Contender, task: Task, episode: Workload) -> dict:
    """:func:`episode_metrics` of one episode under ``contender``, with its
    ``num_invalid_actions`` (module docstring)."""
    p, num_invalid = contender.policy, 0
    if isinstance(p, PolicySpec):
        result = run_policy(p, episode, task.sim_config(), capacity_cache=task_capacity_cache(task.id),
                            history=functools.partial(task_history, task.id))
    elif isinstance(p, EpisodeRunner):
        result = p.run(episode, task.sim_config())
    else:
        result, num_invalid = run_through_env(p, task, episode)
    return {**episode_metrics(result, episode.metadata["measure_from_s"]), "num_invalid_actions": num_invalid}


def episode_row(contender: Contender, task: Task, split: str, episode: Workload, metrics: dict,
                overloaded: bool) -> dict:
    """The row (:data:`EPISODE_FIELDS`) of one episode's :func:`run_contender` ``metrics``."""
    meta = episode.metadata
    where = {"seed": meta["seed"]} if "seed" in meta else {"block_offset_s": meta["block_offset_s"]}
    return {"task": task.id, "policy": contender.label, "split": split, "episode_index": meta["episode_index"],
            **where, "num_requests": metrics["num_requests"], **{k: metrics[k] for k in METRICS},
            "overloaded": overloaded, "num_invalid_actions": metrics["num_invalid_actions"]}


def _log_row(log, row: dict) -> None:
    if log:
        log(f"{row['task']} {row['split']} {row['policy']}: episode {row['episode_index']}: mean TTFT "
            f"{row['mean_ttft_s']:.4f} s")


def episode_rows(contender: Contender, task: Task, split: str, episodes: Sequence[Workload], overloaded: bool,
                 log=None) -> list[dict]:
    """One row per episode (:data:`EPISODE_FIELDS`) of ``contender`` on ``episodes``, run in this
    process; ``overloaded``: the task's rate is past its measured capacity
    (``benchmark.capacity.is_overloaded_task``)."""
    rows = []
    for ep in episodes:
        rows.append(episode_row(contender, task, split, ep, run_contender(contender, task, ep), overloaded))
        _log_row(log, rows[-1])
    return rows


def summary_row(task: Task, split: str, label: str, rows: Sequence[dict], reference: str,
                reference_rows: Sequence[dict], is_reference: bool = False) -> dict:
    """The summary of ``rows`` (:data:`SUMMARY_FIELDS`; module docstring) against
    ``reference_rows`` (paired by ``episode_index``); the reference itself (``is_reference``, or
    ``label == reference``): delta 0, no interval (NaN).

    Raises:
        ValueError: if an episode of ``rows`` has no reference row.
    """
    out = {"task": task.id, "policy": label, "split": split, "num_episodes": len(rows)}
    for m in METRICS:
        vals = [r[m] for r in rows if not math.isnan(r[m])]
        out[m] = float(np.mean(vals)) if vals else math.nan
    ref = {r["episode_index"]: r["mean_ttft_s"] for r in reference_rows}
    missing = [r["episode_index"] for r in rows if r["episode_index"] not in ref]
    if missing:
        raise ValueError(f"{task.id}: episodes {missing} have no reference ({reference}) row")
    pairs = [(r["mean_ttft_s"], ref[r["episode_index"]]) for r in rows]
    ref_mean = float(np.mean([b for _, b in pairs])) if pairs else math.nan
    if is_reference or label == reference:
        delta = (0.0, math.nan, math.nan)
    elif pairs and ref_mean > 0:
        delta = paired_ci([100.0 * (a - b) / ref_mean for a, b in pairs])
    else:
        delta = (math.nan, math.nan, math.nan)
    out.update(reference=reference, delta_mean_ttft_pct=delta[0], ci_low=delta[1], ci_high=delta[2],
               overloaded=any(r["overloaded"] for r in rows),
               num_invalid_actions=sum(r.get("num_invalid_actions", 0) for r in rows))
    return out


def as_contender(policy, label: str | None = None) -> Contender:
    """``policy`` as a :class:`Contender` (a Contender is returned as it is; a ``PolicySpec`` is
    labelled by its name, anything else by ``label``, its ``name`` or ``__name__`` attribute, or its
    type's name)."""
    if isinstance(policy, Contender):
        return policy
    if label is None:
        label = policy.name if isinstance(policy, (PolicySpec, EpisodeRunner)) else \
            getattr(policy, "name", None) or getattr(policy, "__name__", None) or type(policy).__name__
    return Contender(str(label), policy)


def run_benchmark(contenders: Sequence[Contender], tasks: Sequence[Task], split: str = "validation", *,
                  max_episodes: int | None = None, log=None, backend: str = "local", jobs: int = 1) -> list[dict]:
    """Runs every contender on every task's ``split`` (at most ``max_episodes`` episodes per task,
    evenly spread) and the task's reference on the same episodes (once per task; a contender
    whose label or SPEC is the reference's reuses its rows).

    Args:
        backend, jobs: where the (contender, episode) runs of a task go
            (:class:`benchmark.dispatch.Dispatcher`: ``"local"`` with ``jobs`` processes, or
            ``"ray"``); the rows do not depend on them. Progress lines follow the episode order.

    Returns:
        Per (task, contender), in that order: ``{"summary": summary row, "episodes": rows,
        "contender": Contender}``.

    Raises:
        ValueError: on an unknown split, backend, ``jobs`` < 1, or a task without stored capacity
            or reference.
    """
    check_split_name(split)
    out = []
    with Dispatcher(run_contender, backend, jobs) as dispatcher:
        for task in tasks:
            entry = task_capacity(task)  # checked once: a check builds the training workload
            eps = episodes(task, split, rate_scale(task, entry["capacity_rps"], entry["native_rps"]),
                           max_episodes=max_episodes)
            overloaded = is_overloaded_task(task, entry=entry)
            ref = reference_contender(task)
            same = [c.label == ref.label or (c.spec is not None and c.spec == ref.spec) for c in contenders]
            runs = [ref] + [c for c, s in zip(contenders, same) if not s]
            rows: list[list[dict]] = [[] for _ in runs]
            items = [(c, task, ep) for c in runs for ep in eps]
            for i, metrics in enumerate(dispatcher.imap(items)):
                k, ep = divmod(i, len(eps))
                rows[k].append(episode_row(runs[k], task, split, eps[ep], metrics, overloaded))
                _log_row(log, rows[k][-1])
            ref_rows, own = rows[0], iter(rows[1:])
            for c, s in zip(contenders, same):
                c_rows = [{**r, "policy": c.label} for r in ref_rows] if s else next(own)
                out.append({"summary": summary_row(task, split, c.label, c_rows, ref.label, ref_rows, s),
                            "episodes": c_rows, "contender": c})
    return out


def evaluate(policy, task: Task | str, split: str = "validation", *, max_episodes: int | None = None,
             label: str | None = None, ledger: Path | str = DEFAULT_LEDGER) -> dict:
    """Benchmarks one policy on one task from Python (the docs' "your own policy").

    Args:
        policy: a ``PolicySpec``, an object with SB3's ``predict(obs, state, episode_start,
            deterministic)`` (``action_masks=`` passed where it takes it), a callable ``obs ->
            action``, an :class:`EpisodeRunner` or a :class:`Contender`.
        task: a :class:`~benchmark.tasks.Task` or its id.
        split: ``"train"``, ``"validation"`` (default; the test split is for final numbers, see
            ``cpgym benchmark run --split test``) or ``"test"`` (the run is appended to ``ledger``).
        max_episodes: at most this many episodes, evenly spread over the split (default all).
        label: the ``policy`` field of the rows (default: see :func:`as_contender`).
        ledger: the test-split ledger a ``split="test"`` run is appended to, as ``cpgym benchmark
            run --split test`` does (``benchmark.ledger.record_test_runs``; default the CLI's
            ``benchmark.ledger.DEFAULT_LEDGER``, relative to the working directory).

    Returns:
        ``{"summary": row (SUMMARY_FIELDS), "episodes": [row (EPISODE_FIELDS), ...]}``.

    Raises:
        ValueError: on an unknown task or split, or (test split) a ``ledger`` file that is not a
            ledger (checked before the run).
    """
    t = get_task(task) if isinstance(task, str) else task
    if split == "test":
        read_ledger(ledger)  # not a ledger: refused before the run, as the CLI does
    res = run_benchmark([as_contender(policy, label)], [t], split, max_episodes=max_episodes)[0]
    if split == "test":
        record_test_runs(ledger, [res])
    return {"summary": res["summary"], "episodes": res["episodes"]}
