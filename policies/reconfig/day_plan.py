"""A learned day plan: the pool's composition for each phase of a daily cycle, fit on a
reconfiguration task's training days (issue #41, "Learned reconfiguration"; ``cpgym train
day-plan``).

A task such as ``reconfig/production-day-v1`` replays one day whose shape (a diurnal rate, a
long-request share and a prefix reuse that move with the hour) is the same every day, up to noise.
An operator provisions such a service by the hour; the day plan learns that provisioning from
data and is followed by the clock alone:

1. **Tables** (training split): per training day (``train_episodes`` spread over the split), the
   mean TTFT of each phase's requests on every candidate fixed composition
   (``baselines.fixed_compositions.phase_ttft``: one whole-day run per composition, the
   ``vertumnus-router``; the candidates are the benchmark's, ``benchmark.references.fixed_candidates``).
2. **Pooled table**: per composition and phase, the request-weighted mean over the training days.
3. **Candidate plans**: ``select_targets`` on the pooled table for each switching cost of
   ``switch_costs`` [request-s per GPU moved] (0: the per-phase best; larger: fewer moves), from
   the pooled best fixed composition, and that composition held all day.
4. **Model selection** (validation split): each distinct candidate runs every validation day,
   started on its first phase's composition and followed with
   ``baselines.fixed_compositions.follow_schedule_run`` at the task's decision window (every move
   drains and switches as a controller's); the lowest mean over days of the day's mean TTFT wins
   (ties: the earlier candidate). The test split is never read.

The plan reads only the clock (its own ``phase_boundaries_s``, those of the training days), never
the evaluated workload's metadata or outcome. It is not reinforcement learning: it is the
supervised, open-loop reference a closed-loop learned controller has to beat on a daily task.

Checkpoint folder (:func:`fit_day_plan`): ``day_plan.json`` (:class:`DayPlan`),
``train_tables.json`` (the training tables, ``policies.reconfig.oracle.save_phase_ttft``; a run
stopped midway resumes from it), ``validation.csv`` (per candidate and validation day),
``train_config.json`` (``kind`` ``reconfig``, ``policy_type`` ``day-plan``, the config, argv and
the selection) and ``provenance.json`` (written by the CLI).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from baselines.fixed_compositions import (
    SCHEDULE_SWITCH_COSTS_S_PER_GPU,
    check_decision_window_s,
    check_phase_boundaries_s,
    follow_schedule_run,
    phase_ttft,
    select_targets,
)
from envs.metrics.summary import measured_summary
from envs.planning.composition import degree_counts
from envs.sim.options import option as _opt
from policies.common.checkpoint import DAY_PLAN_FILE  # the file of a day-plan checkpoint (its "model file")
from policies.reconfig.oracle import load_phase_ttft, save_phase_ttft

#: ``format`` field of :data:`DAY_PLAN_FILE`.
DAY_PLAN_FORMAT = "cpgym-day-plan/1"
#: The router of every run of a plan (the benchmark's fixed compositions use it too).
DAY_PLAN_ROUTER = "vertumnus-router"
#: The task a day plan is fit on by default: the benchmark's daily reconfiguration task.
DEFAULT_DAY_PLAN_TASK = "reconfig/production-day-v1"


@dataclass(frozen=True)
class DayPlanConfig:
    """Configuration of ``cpgym train day-plan`` (one field = one flag).

    Raises:
        ValueError: naming the field, on a non-reconfiguration or unknown task, fewer than one
            training day, a bad validation count, no switching cost or a cost that is negative or
            not finite, or ``jobs`` < 1.
    """

    task: str = _opt(DEFAULT_DAY_PLAN_TASK, "the reconfiguration task (`cpgym benchmark list`) whose training days the "
                                            "plan is fit on and whose validation days select it")
    train_episodes: int = _opt(16, "training days, evenly spread over the task's training split (each costs ~100 "
                                   "CPU-s on production-day: 36 whole-day runs)")
    validation_episodes: int = _opt(0, "validation days that select the plan, evenly spread (0: the whole split)")
    switch_costs: tuple[float, ...] = _opt(SCHEDULE_SWITCH_COSTS_S_PER_GPU,
                                           "switching costs [request-s per GPU moved] of the candidate plans "
                                           "(select_targets on the pooled training table)")
    jobs: int = _opt(1, "processes running the simulations (results do not depend on it)")

    def __post_init__(self) -> None:
        from benchmark.tasks import get_task

        if get_task(self.task).kind != "reconfig":  # unknown id: ValueError listing the known ones
            raise ValueError(f"task: {self.task} is a routing task; a day plan reconfigures (a reconfig/... task)")
        for name, low in (("train_episodes", 1), ("validation_episodes", 0), ("jobs", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")
        if not self.switch_costs or any(isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c)
                                        or c < 0 for c in self.switch_costs):
            raise ValueError(f"switch_costs must be one or more finite costs >= 0, got {self.switch_costs!r}")


@dataclass(frozen=True)
class DayPlan:
    """A composition per phase of the day, followed by the clock.

    Args:
        task: the task id it was fit on (the benchmark refuses it on another task).
        phase_boundaries_s: ``P + 1`` times [s] from 0, strictly increasing (the training days'
            phases; after the last boundary the last phase holds).
        schedule: ``P`` compositions (``"cp8x2,cp4x3,cp2x6"``), one per phase.
        decision_window_s: time between decisions [s] (the task's).
        switch_cost_s_per_gpu: the selected candidate's switching cost [request-s per GPU];
            ``None`` for the pooled best fixed composition held all day.
        fit: what the fit recorded (training seeds, validation scores); not used to act.

    Raises:
        ValueError: naming the field, on bad boundaries, a schedule whose length is not the
            number of phases or holds a non-composition, or a bad window.
    """

    task: str
    phase_boundaries_s: tuple[float, ...]
    schedule: tuple[str, ...]
    decision_window_s: float
    switch_cost_s_per_gpu: float | None = None
    fit: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "phase_boundaries_s", tuple(check_phase_boundaries_s(self.phase_boundaries_s)))
        if isinstance(self.schedule, str) or not all(isinstance(c, str) and c.startswith("cp") for c in self.schedule):
            raise ValueError(f"schedule must be a list of compositions such as 'cp8x2,cp4x3,cp2x6', got {self.schedule!r:.80}")
        object.__setattr__(self, "schedule", tuple(self.schedule))
        if len(self.schedule) != len(self.phase_boundaries_s) - 1:
            raise ValueError(f"schedule has {len(self.schedule)} compositions for {len(self.phase_boundaries_s) - 1} "
                             "phases (phase_boundaries_s)")
        object.__setattr__(self, "decision_window_s", check_decision_window_s(self.decision_window_s))
        c = self.switch_cost_s_per_gpu
        if c is not None and (isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) or c < 0):
            raise ValueError(f"switch_cost_s_per_gpu must be a finite cost >= 0 or null, got {c!r}")

    @property
    def start_composition(self) -> str:
        """The composition the pool starts on (the first phase's)."""
        return self.schedule[0]

    def run(self, workload, sim_config):
        """One run of ``workload`` on ``sim_config``'s GPUs, started on :attr:`start_composition`
        and following the plan (:func:`~baselines.fixed_compositions.follow_schedule_run`).

        Raises:
            ValueError: when a composition does not cover ``sim_config``'s pool.
        """
        menu = list(dict.fromkeys(self.schedule))
        return follow_schedule_run(workload, sim_config, menu, [menu.index(c) for c in self.schedule],
                                   self.decision_window_s, DAY_PLAN_ROUTER, phase_boundaries_s=self.phase_boundaries_s)

    def to_dict(self) -> dict:
        return {"format": DAY_PLAN_FORMAT, **asdict(self), "phase_boundaries_s": list(self.phase_boundaries_s),
                "schedule": list(self.schedule)}

    def save(self, path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n")


def is_day_plan_checkpoint(path) -> bool:
    """Whether ``path`` is a day-plan checkpoint folder (holds :data:`DAY_PLAN_FILE`) or that file."""
    p = Path(path)
    return (p / DAY_PLAN_FILE).is_file() if p.is_dir() else p.name == DAY_PLAN_FILE and p.is_file()


def load_day_plan(path) -> DayPlan:
    """The :class:`DayPlan` of a checkpoint folder or of its :data:`DAY_PLAN_FILE`.

    Raises:
        FileNotFoundError: naming the path.
        ValueError: one line naming the file and the field: not JSON, another format, a missing
            or bad field.
    """
    p = Path(path)
    f = p / DAY_PLAN_FILE if p.is_dir() else p
    if not f.is_file():
        raise FileNotFoundError(2, f"no {DAY_PLAN_FILE}; expected a day-plan checkpoint of `cpgym train day-plan`", str(f))
    try:
        data = json.loads(f.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{f}: not JSON ({e}); expected a day plan of `cpgym train day-plan`") from None
    if not isinstance(data, dict) or data.get("format") != DAY_PLAN_FORMAT:
        raise ValueError(f"{f}: field 'format' must be {DAY_PLAN_FORMAT!r}; expected a day plan of `cpgym train day-plan`")
    keys = ("task", "phase_boundaries_s", "schedule", "decision_window_s")
    missing = [k for k in keys if k not in data]
    if missing:
        raise ValueError(f"{f}: field {missing[0]!r} is missing")
    try:
        return DayPlan(str(data["task"]), data["phase_boundaries_s"], data["schedule"], data["decision_window_s"],
                       data.get("switch_cost_s_per_gpu"), data.get("fit") or {})
    except (TypeError, ValueError) as e:
        raise ValueError(f"{f}: {e}") from None


def _save_tables(path: Path, tables: dict, compositions: list[str], task_id: str) -> None:
    """``save_phase_ttft`` plus the task the tables belong to (a resumed run checks it)."""
    save_phase_ttft(path, tables, compositions)
    data = json.loads(path.read_text())
    path.write_text(json.dumps({"task": task_id, **data}) + "\n")


def _load_tables(path: Path, compositions: list[str], task_id: str) -> dict:
    """The tables of an earlier run into the same folder (``load_phase_ttft``).

    Raises:
        ValueError: naming the file, when it holds another task's tables or is malformed.
    """
    try:
        owner = json.loads(path.read_text()).get("task")
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        owner = None
    if owner != task_id:
        raise ValueError(f"{path}: field 'task' is {owner!r}, not {task_id!r}: it holds another run's tables; choose a "
                         "new --out")
    return load_phase_ttft(path, compositions)


def _apply(fn, *args):
    return fn(*args)


def _table(workload, sim_config, compositions):
    return phase_ttft(workload, sim_config, compositions, DAY_PLAN_ROUTER)


def _measured_mean_ttft_s(result, workload) -> float:
    mean = measured_summary(result, float(workload.metadata.get("measure_from_s", 0.0)))["mean_ttft_s"]
    return float(mean) if np.isfinite(mean) else math.inf


def _follow(plan: DayPlan, workload, sim_config) -> float:
    return _measured_mean_ttft_s(plan.run(workload, sim_config), workload)


def pooled_table(tables: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The request-weighted mean over days of per-phase tables.

    Args:
        tables: per day, ``(ttft_s (K, P) [s], num_requests (P,))`` of ``phase_ttft``.

    Returns:
        ``(ttft_s (K, P), num_requests (P,))``: per composition and phase, ``Σ_d n_dp t_dkp /
        Σ_d n_dp`` (inf where some day has no finished request of that phase on that composition;
        0 where no day has requests in the phase), and the summed requests.

    Raises:
        ValueError: on no table or tables of different shapes.
    """
    if not tables:
        raise ValueError("pooled_table needs at least one day's table")
    t = np.array([np.asarray(x, float) for x, _ in tables])
    n = np.array([np.asarray(y, float) for _, y in tables])
    if t.ndim != 3 or n.shape != (t.shape[0], t.shape[2]):
        raise ValueError(f"every table must be (K, P) with P requests counts; got {t.shape} and {n.shape}")
    total = n.sum(axis=0)
    with np.errstate(invalid="ignore"):
        weighted = np.where(n[:, None, :] > 0, t * n[:, None, :], 0.0).sum(axis=0)
    return np.where(total > 0, weighted / np.where(total > 0, total, 1.0), 0.0), total


def candidate_plans(task_id: str, ttft_s, num_requests, compositions: list[str], pool, boundaries, window_s: float,
                    costs) -> list[DayPlan]:
    """The distinct candidate plans of a pooled table (module docstring, step 3): the pooled best
    fixed composition held all day first, then one plan per switching cost (in ``costs`` order,
    repeats dropped)."""
    ttft_s, num = np.asarray(ttft_s, float), np.asarray(num_requests, float)
    used = num > 0
    with np.errstate(invalid="ignore"):
        means = (ttft_s[:, used] * num[used]).sum(axis=1) / max(num[used].sum(), 1.0)
    fixed = int(np.argmin(np.where(np.isfinite(means), means, np.inf)))
    counts = [degree_counts(c, pool) for c in compositions]
    P = ttft_s.shape[1]
    plans = [DayPlan(task_id, boundaries, [compositions[fixed]] * P, window_s, None)]
    seen = {plans[0].schedule}
    for cost in costs:
        schedule = tuple(compositions[k] for k in select_targets(ttft_s, num, counts, counts[fixed], 0.0, float(cost)))
        if schedule not in seen:
            seen.add(schedule)
            plans.append(DayPlan(task_id, boundaries, schedule, window_s, float(cost)))
    return plans


def fit_day_plan(cfg: DayPlanConfig, out_dir, argv: list[str] | None = None, log=None) -> DayPlan:
    """Fits, selects and writes the day plan of ``cfg.task`` (module docstring) into ``out_dir``:
    :func:`fit_from_days` on the task's training and validation days, with its simulator
    configuration, the benchmark's candidate compositions and its decision window.

    Raises:
        ValueError: as :func:`fit_from_days`.
    """
    from benchmark.capacity import task_episodes
    from benchmark.references import fixed_candidates
    from benchmark.tasks import get_task

    task = get_task(cfg.task)
    out = Path(out_dir)
    if (out / DAY_PLAN_FILE).exists():  # before the days are built
        raise ValueError(f"{out / DAY_PLAN_FILE} exists; choose a new --out folder")
    train = task_episodes(task, "train", max_episodes=cfg.train_episodes)
    validation = task_episodes(task, "validation", max_episodes=cfg.validation_episodes or None)
    plan = fit_from_days(task.id, train, validation, task.sim_config(), fixed_candidates(task), task.decision_window_s,
                         out, costs=cfg.switch_costs, jobs=cfg.jobs, log=log)
    meta = {"kind": "reconfig", "policy_type": "day-plan", "train_config": asdict(cfg), "argv": argv,
            "selected": {"candidate": plan.fit["selected"], "switch_cost_s_per_gpu": plan.switch_cost_s_per_gpu,
                         "validation_mean_ttft_s": plan.fit["candidates"][plan.fit["selected"]]["validation_mean_ttft_s"]}}
    (out / "train_config.json").write_text(json.dumps(meta, indent=2, default=list) + "\n")
    return plan


def fit_from_days(task_id: str, train, validation, sim_config, compositions: list[str], decision_window_s: float,
                  out_dir, *, costs=SCHEDULE_SWITCH_COSTS_S_PER_GPU, jobs: int = 1, log=None) -> DayPlan:
    """Steps 1-4 of the module docstring on given days; writes ``train_tables.json``,
    ``validation.csv`` and ``day_plan.json`` into ``out_dir``.

    Args:
        task_id: recorded in the plan.
        train, validation: phased workloads (``metadata["seed"]``, ``metadata["phase_boundaries_s"]``,
            the same phases on every training day; ``metadata["measure_from_s"]`` optional).
        sim_config: every run's simulator configuration (its pool's GPUs; the composition is each
            candidate's).
        compositions: the candidate fixed compositions.
        decision_window_s: the plan's decision window [s].

    A ``train_tables.json`` already in ``out_dir`` (an earlier run of the same task stopped
    midway) is reused for the days it holds; each new day's table is added to it as soon as it
    is computed.

    Raises:
        ValueError: when ``out_dir`` already holds a ``day_plan.json``, on no training or
            validation day, training days without the same phases, or a ``train_tables.json`` of
            another task or composition menu.
    """
    from benchmark.dispatch import Dispatcher

    say = log or (lambda _s: None)
    out = Path(out_dir)
    if (out / DAY_PLAN_FILE).exists():
        raise ValueError(f"{out / DAY_PLAN_FILE} exists; choose a new --out folder")
    train, validation = list(train), list(validation)
    if not train or not validation:
        raise ValueError(f"a day plan needs training and validation days, got {len(train)} and {len(validation)}")
    bounds = train[0].metadata.get("phase_boundaries_s")
    if not bounds or any(list(w.metadata.get("phase_boundaries_s") or ()) != list(bounds) for w in train):
        raise ValueError(f"task {task_id}: a day plan needs training days with the same phases "
                         "(metadata['phase_boundaries_s'])")
    window_s = check_decision_window_s(decision_window_s)
    out.mkdir(parents=True, exist_ok=True)
    tables_path = out / "train_tables.json"
    tables = _load_tables(tables_path, compositions, task_id) if tables_path.is_file() else {}
    todo = [w for w in train if w.metadata["seed"] not in tables]
    say(f"day plan for {task_id}: {len(train)} training days ({len(train) - len(todo)} already in {tables_path}), "
        f"{len(compositions)} compositions each, {len(validation)} validation days")
    with Dispatcher(_apply, jobs=jobs) as pool:
        for w, table in zip(todo, pool.imap([(_table, w, sim_config, compositions) for w in todo])):
            tables[w.metadata["seed"]] = table
            _save_tables(tables_path, tables, compositions, task_id)
            say(f"  training day seed {w.metadata['seed']}: table done ({len(tables)}/{len(train)})")
        seeds = [w.metadata["seed"] for w in train]
        ttft_s, num = pooled_table([tables[s] for s in seeds])
        plans = candidate_plans(task_id, ttft_s, num, compositions, sim_config.pool, bounds, window_s, costs)
        scores = pool([(_follow, p, w, sim_config) for p in plans for w in validation])
    rows, means = [], []
    for i, plan in enumerate(plans):
        day_scores = scores[i * len(validation):(i + 1) * len(validation)]
        means.append(float(np.mean(day_scores)))
        rows += [{"candidate": i, "switch_cost_s_per_gpu": plan.switch_cost_s_per_gpu,
                  "seed": w.metadata["seed"], "mean_ttft_s": s} for w, s in zip(validation, day_scores)]
        say(f"  candidate {i} ({_describe(plan)}): validation mean TTFT {means[-1]:.4f} s")
    best = int(np.argmin(means))
    fit = {"train_seeds": seeds, "validation_seeds": [w.metadata["seed"] for w in validation],
           "candidates": [{"switch_cost_s_per_gpu": p.switch_cost_s_per_gpu,
                           "validation_mean_ttft_s": m,
                           "num_distinct_compositions": len(set(p.schedule))} for p, m in zip(plans, means)],
           "selected": best}
    plan = replace(plans[best], fit=fit)
    with open(out / "validation.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    plan.save(out / DAY_PLAN_FILE)
    say(f"selected candidate {best} ({_describe(plan)}): validation mean TTFT {means[best]:.4f} s; wrote {out}")
    return plan


def _describe(plan: DayPlan) -> str:
    if plan.switch_cost_s_per_gpu is None:
        return f"{plan.start_composition} held"
    return f"switching cost {plan.switch_cost_s_per_gpu:g}, {len(set(plan.schedule))} compositions"


__all__ = ["DayPlan", "DayPlanConfig", "DAY_PLAN_FILE", "fit_day_plan", "fit_from_days", "load_day_plan",
           "is_day_plan_checkpoint", "pooled_table", "candidate_plans"]
