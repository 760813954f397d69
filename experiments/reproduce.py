"""``cpgym reproduce``: the paper's evaluation re-run in cpgym, one row per (experiment,
workload, model, metric) with the paper's figure beside cpgym's and a 95 % confidence interval.

Row schema (:class:`Row`, ``--format json``): ``{experiment, workload, model, metric,
paper_value, cpgym_value, ci_low, ci_high, load_fraction, strongest_baseline}``. Experiments are
plain functions in :data:`EXPERIMENTS` (name -> function returning :class:`ExperimentResult`):
``end-to-end`` (below), ``dynamic`` and ``reconfiguration`` (:func:`dynamic`,
:func:`reconfiguration`: one set of ``run_dynamic_phases`` runs per seed, shared) and ``cache``
(:func:`cache`); the rows of the last three are built by
:mod:`experiments.paper_experiments.paper_rows` (metrics and paper values documented there).

End-to-end (``experiment = "end-to-end"``, paper §9 "End-to-End Serving Performance"): for each
model (calibration) and workload — L-Eval-like documents, Tool-Agent sessions, and the Mooncake
conversation trace standing in for the paper's non-public production trace — the sustainable
rate (:mod:`baselines.capacity`) of every static baseline of the paper suite is measured on
the first window (seed 0); the strongest (highest capacity) sets the loads: load fraction ``f``
runs the window rate-scaled by ``f x`` the strongest baseline's capacity factor (arrival times
divided by it; the realised rate is reported, ``rate_rps``), and a run is *overloaded* when its
factor exceeds the policy's own capacity factor. Every policy of the suite (the full
``vertumnus`` system and the §9 baselines) runs at every load and seed. At the highest load, the strongest baseline is
the baseline with the lowest mean TTFT (averaged over seeds; the rule of ``cpgym compare``), and
the metrics are paired per seed:

* ``mean_ttft_pct`` / ``p90_ttft_pct``: ``100 x (vertumnus - baseline) / baseline`` (negative =
  Vertumnus is faster);
* ``slo_token_pp``: ``100 x (vertumnus - baseline)`` token-weighted SLO attainment
  (percentage points, positive = higher attainment);

``cpgym_value`` is the mean over seeds and ``[ci_low, ci_high]`` its Student-t 95 % interval
(:func:`envs.metrics.stats.mean_ci95`). Paper values: Qwen3-30B-A3B at its highest tested load
(paper §9; ``/work/shared/paper`` notes): mean TTFT −13.9 / −21.0 / −28.1 %, P90 −17.8 / −55.0 /
−29.5 %, SLO +0.9 / +13.3 / +1.1 pp on L-Eval / Tool-Agent / Production. The paper gives no
per-workload DeepSeek figures in the notes available, so those rows carry ``paper_value`` null.
"""

from __future__ import annotations

import math
import time
import types
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from baselines.capacity import (
    CapacityDefinition,
    CapacityResult,
    RatedWorkload,
    find_capacity,
    is_overloaded,
    rates_for_loads,
    static_baselines,
)
from baselines.runner import run_policy
from envs import workloads
from envs.metrics import summarize
from envs.metrics.stats import mean_ci95
from envs.planning.capacity import CapacityCache
from envs.planning.composition import deployment_pool
from envs.sim import Calibration, SimConfig
from envs.sim.options import error_text
from experiments.paper_experiments.cache_ablation import tool_agent_capacity
from experiments.paper_experiments.dynamic_phases import (
    OPERATION_FIELDS,
    DynamicPhasesConfig,
    check_compositions,
    run_dynamic_phases,
)
from experiments.paper_experiments.paper_rows import (
    DYNAMIC_SCENARIOS,
    PAPER_DYNAMIC,
    cache_rows,
    dynamic_rows,
    operation_times_s,
    reconfiguration_rows,
    run_cache_pairs,
)
from experiments.spec.paths import SpecDeprecationWarning
from policies.common.policy_args import check_distinct

#: Paper §9, Qwen3-30B-A3B, highest tested load, Vertumnus vs the strongest baseline.
PAPER_END_TO_END: dict[tuple[str, str], float] = {
    ("leval-like", "mean_ttft_pct"): -13.9, ("leval-like", "p90_ttft_pct"): -17.8, ("leval-like", "slo_token_pp"): 0.9,
    ("tool-agent", "mean_ttft_pct"): -21.0, ("tool-agent", "p90_ttft_pct"): -55.0, ("tool-agent", "slo_token_pp"): 13.3,
    ("production", "mean_ttft_pct"): -28.1, ("production", "p90_ttft_pct"): -29.5, ("production", "slo_token_pp"): 1.1,
}
#: Models the paper figures above belong to (matched case-insensitively against the calibration's ``model``).
PAPER_MODELS = ("qwen3-30b-a3b",)
METRICS = ("mean_ttft_pct", "p90_ttft_pct", "slo_token_pp")
#: The full system and the paper's §9 baselines (``cpgym compare --suite paper``).
PAPER_POLICIES = ("vertumnus", "homogeneous-cp2", "homogeneous-cp4", "static-threshold", "vllm-tp4", "sglang-cache-aware")
#: Seeds of the cache experiment: held out from the manager-settings sweep, which chose the
#: ``CacheManagerConfig`` defaults on seeds 0-2 (``results/cache-ablation/manager-sweep``).
CACHE_HELD_OUT_SEEDS = (3, 4, 5)


@dataclass(frozen=True)
class Row:
    """One line of the reproduction table (module docstring)."""

    experiment: str
    workload: str
    model: str
    metric: str
    paper_value: float | None
    cpgym_value: float
    ci_low: float
    ci_high: float
    load_fraction: float | None
    strongest_baseline: str | None


@dataclass(frozen=True)
class WorkloadCase:
    """One workload of the evaluation.

    Args:
        key: row label (``leval-like``, ``tool-agent``, ``production``).
        trace: trace file (the production stand-in), or ``None`` for a synthetic workload.
        name: synthetic workload name (``envs.workloads``), when ``trace`` is ``None``.
        params: synthetic workload parameters.
    """

    key: str
    trace: str | None = None
    name: str | None = None
    params: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ReproduceConfig:
    """What ``cpgym reproduce`` runs.

    Args:
        workloads: the workload cases.
        models: ``(label, calibration path or None, composition or None)``; a ``None``
            calibration is the default one; a composition (e.g. ``cp8x3,cp4x4`` for DeepSeek's
            CP degrees {4, 8}, paper §9) replaces the pool's, and its degrees become the
            supported degrees; ``None`` keeps ``sim.pool``.
        seeds: run seeds (and synthetic-workload / trace-spreading seeds); >= 1.
        loads: load fractions of the strongest static baseline's capacity, increasing; the last
            is the paper's "highest tested load".
        arrival_window_length_s: length of the arrival window ``[0, length)`` of every run and
            of the capacity search [s].
        policies: the full system first, then the baselines.
        sim: simulator settings (pool, SLO, ...); the calibration comes from ``models``.
        capacity_definition: :class:`baselines.capacity.CapacityDefinition`.
        cache_dir: capacity cache folder, or ``None``.

    Raises:
        ValueError: on empty lists, a negative or repeated seed (``--seeds``, ``--cache-seeds``), loads
            not increasing in (0, 2], a bad window, or a model
            entry whose calibration cannot be read, whose composition is not one of the pool or
            whose pool's CP degrees do not hold its weight shard group,
            or whose label (``default``: the calibration's model name) another entry has too
            (their rows would be pooled as one model); each names ``--models`` and the entry.
    """

    workloads: tuple[WorkloadCase, ...]
    models: tuple[tuple[str, str | None, str | None], ...] = (("default", None, None),)
    seeds: tuple[int, ...] = (0, 1, 2)
    loads: tuple[float, ...] = (0.5, 0.7, 0.85, 0.95)
    arrival_window_length_s: float = 600.0
    policies: tuple[str, ...] = PAPER_POLICIES
    sim: SimConfig = field(default_factory=SimConfig)
    capacity_definition: object = None
    cache_dir: str | None = None
    cache_seeds: tuple[int, ...] = CACHE_HELD_OUT_SEEDS
    cache_duration_s: float = 600.0
    dynamic_params: tuple[tuple[str, object], ...] = ()

    def __post_init__(self) -> None:
        if not self.workloads or not self.models or not self.seeds or not self.policies:
            raise ValueError("reproduce needs at least one workload, model, seed and policy")

        for flag, seeds in (("--seeds", self.seeds), ("--cache-seeds", self.cache_seeds)):
            if not seeds or any(int(x) != x or x < 0 for x in seeds):
                raise ValueError(f"{flag} must be integers >= 0, got {list(seeds)}")
            # a repeated seed is the same runs again: counted twice, a narrower, fake confidence interval
            check_distinct(list(seeds), flag, expected="distinct seeds (each is one paired sample)")
        if not (self.cache_duration_s > 0 and math.isfinite(self.cache_duration_s)):
            raise ValueError(f"cache_duration_s must be > 0, got {self.cache_duration_s}")
        from dataclasses import fields

        known = {f.name for f in fields(DynamicPhasesConfig)} - {"workload_seed"}
        object.__setattr__(self, "dynamic_params", _renamed_dynamic_params(self.dynamic_params))
        bad = [k for k, _ in self.dynamic_params if k not in known]
        if bad:
            raise ValueError(f"dynamic_params: unknown DynamicPhasesConfig field(s) {bad}; known: {sorted(known)} "
                             "(the workload seed is the run seed)")
        object.__setattr__(self, "dynamic_params", _typed_dynamic_params(self.dynamic_params))

        # its own checks and its compositions against the pool, before any run
        check_compositions(DynamicPhasesConfig(**dict(self.dynamic_params)), self.sim.pool)
        if not self.loads or any(not 0 < x <= 2 for x in self.loads) or list(self.loads) != sorted(set(self.loads)):
            raise ValueError(f"--loads must be increasing fractions in (0, 2], got {list(self.loads)}")
        if not (self.arrival_window_length_s > 0 and math.isfinite(self.arrival_window_length_s)):
            raise ValueError(f"--arrival-window-length-s must be > 0, got {self.arrival_window_length_s}")
        if self.policies[0] != "vertumnus":
            raise ValueError("the first policy of a reproduction must be the full system 'vertumnus'")
        self._check_models()

    def _check_models(self) -> None:
        labels: dict[str, str] = {}
        for label, path, comp in self.models:
            try:
                calibration = Calibration.resolve(path)
                model = _model_label(label, calibration)
                # the composition (validated against the pool) and the weight shard group against its degrees
                _model_sim(self.sim, path, comp, 0).pool.check_weight_shard(calibration.weight_shard_gpus)
            except (OSError, ValueError) as exc:
                raise ValueError(f"--models entry {label!r}: {error_text(exc)}") from None
            if model in labels:
                raise ValueError(f"--models: entries {labels[model]!r} and {label!r} are both labelled {model!r}; "
                                 f"give each model its own label")
            labels[model] = label


# DynamicPhasesConfig field names of earlier releases, still read by --dynamic-param (one release)
DEPRECATED_DYNAMIC_PARAMS = {"window_s": "arrival_window_s", "controller_window_s": "decision_window_s"}


def _renamed_dynamic_params(params) -> tuple[tuple[str, object], ...]:
    """``params`` as ``((name, value), ...)`` with each earlier field name
    (:data:`DEPRECATED_DYNAMIC_PARAMS`) replaced by its new one and a one-line
    :class:`~experiments.spec.paths.SpecDeprecationWarning`."""
    out = []
    for k, v in dict(params).items():
        new = DEPRECATED_DYNAMIC_PARAMS.get(str(k))
        if new is not None:
            warnings.warn(f"--dynamic-param {k} is deprecated and will be removed in the next release; use {new}",
                          SpecDeprecationWarning, stacklevel=4)
        out.append((new or str(k), v))
    return tuple(out)


def _typed_dynamic_params(params: tuple[tuple[str, object], ...]) -> tuple[tuple[str, object], ...]:
    """``dynamic_params`` checked against the types of their ``DynamicPhasesConfig`` fields (an
    int is a float; a number given for a text field is kept as text; ``arrival_window_s`` is ``START,END``).

    Raises:
        ValueError: naming ``--dynamic-param NAME`` and the expected type.
    """
    import typing

    hints = typing.get_type_hints(DynamicPhasesConfig)
    out = []
    for name, value in params:
        tp, optional = hints[name], False
        if typing.get_origin(tp) in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            tp, optional = (args[0] if len(args) == 1 else tp), len(args) < len(typing.get_args(tp))
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if value is None and optional:
            pass
        elif tp is float and number:
            value = float(value)
        elif tp is str and number:
            value = str(value)
        elif typing.get_origin(tp) is tuple and isinstance(value, str):  # arrival_window_s=0,300
            try:
                value = tuple(float(x) for x in value.split(","))
            except ValueError:
                raise ValueError(f"--dynamic-param {name}={value!r}: expected START,END in seconds") from None
        elif not (tp in (int, str, bool) and type(value) is tp) and \
                not (typing.get_origin(tp) is tuple and isinstance(value, (tuple, list))):
            what = {int: "an integer", float: "a number", bool: "true or false", str: "text"}.get(tp, "START,END in seconds")
            raise ValueError(f"--dynamic-param {name}={value!r}: expected {what}")
        out.append((name, value))
    return tuple(out)


@dataclass
class ExperimentResult:
    """Rows plus the per-run table (one dict per model, workload, load, seed and policy) and
    the capacities used (per model, workload and policy)."""

    rows: list[Row]
    runs: list[dict]
    capacities: list[dict]


#: ``on_partial`` of an experiment: called with an :class:`ExperimentResult` of the runs and
#: capacities finished so far (no rows: those aggregate the finished experiment) after each
#: finished task, so a caller can save them (``cpgym reproduce`` rewrites ``KIND-runs.csv`` /
#: ``KIND-capacities.csv``: an experiment stopped midway keeps its finished runs).
OnPartial = Callable[[ExperimentResult], None]


def _partial(on_partial: OnPartial | None, runs: list[dict], capacities: list[dict]) -> None:
    if on_partial is not None:
        on_partial(ExperimentResult([], list(runs), list(capacities)))


def _rated(case: WorkloadCase, window_length_s: float, seed: int):
    if case.trace is not None:
        return RatedWorkload(arrival_window_length_s=window_length_s, base=workloads.load_trace(case.trace, spread_seed=seed))
    return RatedWorkload(arrival_window_length_s=window_length_s, name=case.name, seed=seed, params=dict(case.params))


def _model_sim(sim: SimConfig, cal_path: str | None, composition: str | None, seed: int) -> SimConfig:
    """The run settings of one model: its calibration, and its pool when it brings a composition."""
    if composition is not None:
        sim = replace(sim, pool=deployment_pool(replace(sim.pool, composition=composition,
                                                        supported_degrees=sim.pool.supported_degrees + (1, 2, 4, 8))))
    return replace(sim, calibration_path=cal_path, seed=seed)


def _model_label(label: str, calibration: Calibration) -> str:
    return calibration.model if label == "default" else label


def paper_value(model: str, workload: str, metric: str) -> float | None:
    """The paper's figure for a row, or ``None`` if the paper gives none for that model."""
    if model.lower() not in PAPER_MODELS:
        return None
    return PAPER_END_TO_END.get((workload, metric))


def paired_changes(runs: list[dict], load: float, baselines: list[str]) -> tuple[str | None, dict[str, list[float]]]:
    """At one load: the strongest baseline (lowest mean TTFT averaged over seeds) and the
    per-seed paired changes of ``vertumnus`` against it for each metric of :data:`METRICS`."""
    at = [r for r in runs if r["load_fraction"] == load]
    means = {}
    for b in baselines:
        vals = [r["mean_ttft_s"] for r in at if r["policy"] == b and r["mean_ttft_s"] == r["mean_ttft_s"]]
        if vals:
            means[b] = sum(vals) / len(vals)
    if not means:
        return None, {m: [] for m in METRICS}
    best = min(means, key=lambda b: (means[b], b))
    out: dict[str, list[float]] = {m: [] for m in METRICS}
    for seed in sorted({r["seed"] for r in at}):
        v = next((r for r in at if r["policy"] == "vertumnus" and r["seed"] == seed), None)
        b = next((r for r in at if r["policy"] == best and r["seed"] == seed), None)
        if v is None or b is None:
            continue
        out["mean_ttft_pct"].append(100.0 * (v["mean_ttft_s"] - b["mean_ttft_s"]) / b["mean_ttft_s"])
        out["p90_ttft_pct"].append(100.0 * (v["p90_ttft_s"] - b["p90_ttft_s"]) / b["p90_ttft_s"])
        out["slo_token_pp"].append(100.0 * (v["slo_attainment_token_weighted"] - b["slo_attainment_token_weighted"]))
    return best, out


def _capacity_task(task: tuple) -> dict:
    """One policy's capacity on one workload (a process-pool task; returns a plain dict)."""
    model, cal_path, comp, case, policy, cfg = task
    t0 = time.perf_counter()
    calibration = Calibration.resolve(cal_path)
    sim = _model_sim(cfg.sim, cal_path, comp, cfg.seeds[0])
    rated = _rated(case, cfg.arrival_window_length_s, cfg.seeds[0])
    res = find_capacity(policy, rated, sim, calibration, cfg.capacity_definition, cfg.cache_dir)
    return {"model": model, "workload": case.key, "policy": policy, "capacity_rps": res.capacity_rps,
            "capacity_rate_scale": res.rate_scale, "native_rate_rps": res.native_rate_rps,
            "num_simulations": len(res.probes), "cached": res.cached,
            "wall_s": time.perf_counter() - t0}


def _runs_task(task: tuple) -> list[dict]:
    """Every load and policy of one (model, workload, seed) (a process-pool task): one summary
    row per run. Runs share one profile cache (profiles are pure functions of their key)."""
    model, cal_path, comp, case, seed, scales, caps, strongest_static, cfg = task
    calibration = Calibration.resolve(cal_path)
    sim = _model_sim(cfg.sim, cal_path, comp, seed)
    rated = _rated(case, cfg.arrival_window_length_s, seed)
    profile_cache = CapacityCache()
    out = []
    for load, scale in zip(cfg.loads, scales):
        wl = rated.at_scale(scale)
        for p in cfg.policies:
            t0 = time.perf_counter()
            s = summarize(run_policy(p, wl, sim, calibration, capacity_cache=profile_cache))
            out.append({"model": model, "workload": case.key, "policy": p, "seed": seed, "load_fraction": load,
                        "rate_rps": wl.mean_rate_rps, "rate_scale": scale, "capacity_rps": caps[p]["capacity_rps"],
                        "capacity_rate_scale": caps[p]["capacity_rate_scale"],
                        "overloaded": is_overloaded(scale, caps[p]["capacity_rate_scale"]),
                        "strongest_static_baseline": strongest_static,
                        **{k: s[k] for k in ("num_requests", "mean_ttft_s", "p90_ttft_s", "p99_ttft_s",
                                             "slo_attainment_token_weighted", "prefix_hit_rate", "num_unfinished")},
                        "wall_s": time.perf_counter() - t0})
    return out


def _map(fn, tasks: list, jobs: int):
    """``fn`` over ``tasks`` in order, in a process pool of ``jobs`` workers (1: in-process)."""
    if jobs <= 1 or len(tasks) <= 1:
        yield from map(fn, tasks)
        return
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=min(jobs, len(tasks))) as pool:
        yield from pool.map(fn, tasks)


def end_to_end(cfg: ReproduceConfig, log: Callable[[str], None] | None = None, jobs: int = 1,
               memo: dict | None = None, on_partial: OnPartial | None = None) -> ExperimentResult:
    """The end-to-end experiment (module docstring). ``log`` gets progress lines; ``jobs``
    processes run the capacity searches and the runs (results do not depend on it); ``memo`` is
    unused (the experiments' common signature); ``on_partial``: :data:`OnPartial`, after each
    capacity search and each (model, workload, seed) task."""
    say = log or (lambda _line: None)
    if cfg.capacity_definition is None:
        cfg = replace(cfg, capacity_definition=CapacityDefinition())
    baselines = static_baselines(list(cfg.policies))
    models = [(_model_label(label, Calibration.resolve(path)), path, comp) for label, path, comp in cfg.models]
    # 1. capacities: the static baselines set the loads; the others label overloaded runs
    tasks = [(model, path, comp, case, p, cfg) for model, path, comp in models for case in cfg.workloads for p in cfg.policies]
    caps_out = []
    for row in _map(_capacity_task, tasks, jobs):
        caps_out.append(row)
        _partial(on_partial, [], caps_out)
        took = "cached" if row["cached"] else f"{row['wall_s']:.0f} s"
        say(f"[{row['model']} {row['workload']}] capacity {row['policy']}: {row['capacity_rps']:.3f} req/s ({took})")
    # 2. runs at the load fractions, every seed
    run_tasks = []
    for model, path, comp in models:
        for case in cfg.workloads:
            mine = {r["policy"]: r for r in caps_out if r["model"] == model and r["workload"] == case.key}
            res = {p: CapacityResult(p, case.key, r["capacity_rps"], r["capacity_rate_scale"], r["native_rate_rps"], [], {})
                   for p, r in mine.items()}
            _, strongest, cap = rates_for_loads(list(cfg.loads), res, baselines)
            # loads scale the window's arrival times: load f runs the strongest baseline's capacity factor x f
            # (a rate-scaled window's request count is not proportional to the factor for session workloads)
            scales = [f * res[strongest].rate_scale for f in cfg.loads]
            say(f"[{model} {case.key}] strongest static baseline {strongest}: {cap:.3f} req/s (rate factor "
                f"{res[strongest].rate_scale:.4g}); factors " + ", ".join(f"{x:.4g}" for x in scales))
            run_tasks += [(model, path, comp, case, seed, scales, mine, strongest, cfg) for seed in cfg.seeds]
    runs: list[dict] = []
    for rows in _map(_runs_task, run_tasks, jobs):
        runs += rows
        _partial(on_partial, runs, caps_out)
        say(f"[{rows[0]['model']} {rows[0]['workload']}] seed {rows[0]['seed']}: {len(rows)} runs done")
    # 3. rows: Vertumnus vs the strongest baseline at the highest load, paired by seed
    rows_out: list[Row] = []
    for model, _, _ in models:
        for case in cfg.workloads:
            mine = [r for r in runs if r["model"] == model and r["workload"] == case.key]
            best, changes = paired_changes(mine, cfg.loads[-1], baselines)
            for metric in METRICS:
                mean, half = mean_ci95(changes[metric])
                lo, hi = (mean - half, mean + half) if half == half else (math.nan, math.nan)
                rows_out.append(Row("end-to-end", case.key, model, metric, paper_value(model, case.key, metric), mean, lo, hi,
                                    cfg.loads[-1], best))
    return ExperimentResult(rows_out, runs, caps_out)


def _paper_models(cfg: ReproduceConfig, kind: str, say: Callable[[str], None]) -> list[tuple[str, str | None]]:
    """``(model label, calibration path)`` of the models the dynamic / cache experiments run: those
    on the configured pool (the paper's dynamic and cache results are Qwen3-30B-A3B on CP {2, 4};
    a model that brings its own composition is skipped with a log line)."""
    out = []
    for label, path, comp in cfg.models:
        model = _model_label(label, Calibration.resolve(path))
        if comp is not None:
            say(f"[{model}] {kind}: skipped (the model brings its own composition {comp}; the paper's {kind} result "
                "is on the configured pool)")
            continue
        out.append((model, path))
    return out


def _dynamic_task(task: tuple) -> dict:
    """One seed of the dynamic-phases experiment (a process-pool task): its JSON-ready summary."""
    path, seed, cfg = task
    t0 = time.perf_counter()
    dcfg = DynamicPhasesConfig(**{**dict(cfg.dynamic_params), "workload_seed": seed})
    summary = run_dynamic_phases(dcfg, _model_sim(cfg.sim, path, None, seed)).summary
    return {**summary, "wall_s": time.perf_counter() - t0}


def dynamic_summaries(cfg: ReproduceConfig, log: Callable[[str], None] | None = None, jobs: int = 1,
                      memo: dict | None = None,
                      on_summary: Callable[[str, dict], None] | None = None) -> dict[str, list[dict]]:
    """Model label -> per-seed ``run_dynamic_phases`` summaries (workload seed = run seed =
    each of ``cfg.seeds``; ``DynamicPhasesConfig`` defaults apart from ``cfg.dynamic_params``).
    Computed once per ``memo`` (shared by the dynamic and reconfiguration experiments);
    ``on_summary(model, summary)`` is called after each seed's runs (not when ``memo`` has them)."""
    if memo is not None and "dynamic" in memo:
        return memo["dynamic"]
    say = log or (lambda _line: None)
    models = _paper_models(cfg, "dynamic", say)
    tasks = [(path, seed, cfg) for _, path in models for seed in cfg.seeds]
    out: dict[str, list[dict]] = {m: [] for m, _ in models}
    for (model, _), summary in zip(((m, s) for m, _ in models for s in cfg.seeds), _map(_dynamic_task, tasks, jobs)):
        out[model].append(summary)
        if on_summary is not None:
            on_summary(model, summary)
        say(f"[{model} phases] seed {summary['seed']}: {len(summary['policies'])} runs, "
            f"{len(summary['operations'])} reconfiguration operations ({summary['wall_s']:.0f} s)")
    if memo is not None:
        memo["dynamic"] = out
    return out


def _dynamic_runs(model: str, s: dict) -> list[dict]:
    """The ``dynamic`` runs rows of one seed's summary ``s``: one per policy."""
    return [{"model": model, "seed": s["seed"], "initial_composition": s["initial_composition"],
             **{k: v for k, v in r.items() if k != "phase_mean_ttft_s"},
             **{f"phase{i}_{kind['kind']}_mean_ttft_s": x
                for i, (kind, x) in enumerate(zip(s["phases"], r["phase_mean_ttft_s"]))}}
            for r in s["policies"]]


def dynamic(cfg: ReproduceConfig, log: Callable[[str], None] | None = None, jobs: int = 1,
            memo: dict | None = None, on_partial: OnPartial | None = None) -> ExperimentResult:
    """The dynamic experiment (paper §9 "Worker Reconfiguration"): per scenario of
    :data:`~experiments.paper_experiments.paper_rows.DYNAMIC_SCENARIOS`, the adaptive system's
    mean TTFT vs the best fixed composition, the homogeneous CP-2 / CP-4 pools and its own initial
    composition (:func:`~experiments.paper_experiments.paper_rows.dynamic_rows`), over ``cfg.seeds``.
    ``runs``: one row per seed and policy (fixed compositions and the adaptive run);
    ``on_partial`` (:data:`OnPartial`) after each seed."""
    done: list[dict] = []

    def seed_done(model: str, s: dict) -> None:
        done.extend(_dynamic_runs(model, s))
        _partial(on_partial, done, [])

    rows: list[Row] = []
    runs: list[dict] = []
    for model, summaries in dynamic_summaries(cfg, log, jobs, memo, seed_done).items():
        pool = summaries[0]["pool"]
        degrees = (min(pool["supported_degrees"]), max(pool["supported_degrees"]))
        for scenario, phase_kind in DYNAMIC_SCENARIOS.items():
            rows += [Row(**r) for r in dynamic_rows(scenario, summaries, model, int(pool["num_gpus"]), degrees,
                                                    PAPER_DYNAMIC.get(scenario), phase_kind)]
        for s in summaries:
            runs += _dynamic_runs(model, s)
    return ExperimentResult(rows, runs, [])


def _operation_runs(model: str, s: dict) -> list[dict]:
    """The ``reconfiguration`` runs rows of one seed's summary ``s``: one per operation."""
    return [{"model": model, "seed": s["seed"], **{k: o[k] for k in OPERATION_FIELDS if k in o}} for o in s["operations"]]


def reconfiguration(cfg: ReproduceConfig, log: Callable[[str], None] | None = None, jobs: int = 1,
                    memo: dict | None = None, on_partial: OnPartial | None = None) -> ExperimentResult:
    """The reconfiguration experiment (paper §9: each split or merge took 1.1-5.1 s): p10 / p90
    of drain + switch + confirm over the committed operations of each seed's adaptive run of the
    dynamic experiment (the same runs: shared through ``memo``); a seed without a committed
    operation is left out (logged), a model without any gets no rows. ``runs``: one row per operation;
    ``on_partial`` (:data:`OnPartial`) after each seed (when the dynamic experiment has not run them)."""
    done: list[dict] = []

    def seed_done(model: str, s: dict) -> None:
        done.extend(_operation_runs(model, s))
        _partial(on_partial, done, [])

    say = log or (lambda _line: None)
    rows: list[Row] = []
    runs: list[dict] = []
    for model, summaries in dynamic_summaries(cfg, log, jobs, memo, seed_done).items():
        times = [operation_times_s(s) for s in summaries]
        for s, t in zip(summaries, times):
            if not t:
                say(f"[{model} phases] seed {s['seed']}: no committed reconfiguration operation (no p10 / p90 from it)")
        if any(times):
            rows += [Row(**r) for r in reconfiguration_rows([t for t in times if t], model)]
        runs += [r for s in summaries for r in _operation_runs(model, s)]
    return ExperimentResult(rows, runs, [])


def _cache_capacity_task(task: tuple) -> dict:
    """Capacity of local caches only on the cache experiment's tool-agent workload, one seed."""
    model, path, seed, cfg = task
    t0 = time.perf_counter()
    res = tool_agent_capacity(_model_sim(cfg.sim, path, None, seed), cfg.cache_duration_s, seed,
                              definition=cfg.capacity_definition, cache_dir=cfg.cache_dir)
    return {"model": model, "workload": "tool-agent", "policy": "vertumnus-router", "seed": seed,
            "capacity_rps": res.capacity_rps, "capacity_rate_scale": res.rate_scale, "native_rate_rps": res.native_rate_rps,
            "num_simulations": len(res.probes), "cached": res.cached, "wall_s": time.perf_counter() - t0}


def _cache_pair_task(task: tuple) -> list[dict]:
    """Local caches only and the global manager at one rate, one seed (``run_cache_pairs``)."""
    model, path, seed, rate, cfg = task
    t0 = time.perf_counter()
    (local, managed), = run_cache_pairs(rate, (seed,), _model_sim(cfg.sim, path, None, seed), cfg.cache_duration_s)
    keys = ("num_requests", "mean_ttft_s", "p90_ttft_s", "p99_ttft_s", "slo_attainment_token_weighted", "prefix_hit_rate",
            "num_unfinished", "kv_transfer_bytes", "num_replications")
    wall = (time.perf_counter() - t0) / 2
    named = (("local caches only", local), ("global manager", managed))
    return [{"model": model, "workload": "tool-agent", "policy": name, "seed": seed, "rate_rps": rate,
             **{k: s[k] for k in keys}, "wall_s": wall} for name, s in named]


def cache(cfg: ReproduceConfig, log: Callable[[str], None] | None = None, jobs: int = 1,
          memo: dict | None = None, on_partial: OnPartial | None = None) -> ExperimentResult:
    """The cache experiment (paper §9 "Prefix-Cache Ablation"): Vertumnus with the global
    prefix-cache manager (``CacheManagerConfig`` defaults) vs local caches only on the tool-agent
    workload of ``cpgym cache-ablation`` (``cfg.cache_duration_s`` s of sessions), paired per seed
    of ``cfg.cache_seeds`` (held out from the sweep that chose the manager defaults).

    Load: the capacity of local caches only (``vertumnus-router``) is measured on each seed by
    bisection (:func:`~experiments.paper_experiments.cache_ablation.tool_agent_capacity`, the
    ``cpgym capacity`` definition); the run rate is ``cfg.loads[-1]`` (the highest tested load) x
    the lowest of them, so no seed runs above its capacity; ``load_fraction`` = that fraction.
    ``runs``: one row per seed and policy; ``capacities``: one row per seed; ``on_partial``
    (:data:`OnPartial`) after each capacity search and each seed's pair of runs."""
    say = log or (lambda _line: None)
    if cfg.capacity_definition is None:
        cfg = replace(cfg, capacity_definition=CapacityDefinition())
    models = _paper_models(cfg, "cache", say)
    caps: list[dict] = []
    for c in _map(_cache_capacity_task, [(m, p, seed, cfg) for m, p in models for seed in cfg.cache_seeds], jobs):
        caps.append(c)
        _partial(on_partial, [], caps)
        took = "cached" if c["cached"] else f"{c['wall_s']:.0f} s"
        say(f"[{c['model']} tool-agent] seed {c['seed']}: capacity with local caches {c['capacity_rps']:.2f} req/s ({took})")
    load = cfg.loads[-1]
    rates = {m: load * min(c["capacity_rps"] for c in caps if c["model"] == m) for m, _ in models}
    for m, r in rates.items():
        say(f"[{m} tool-agent] cache runs at {r:.2f} req/s = {load:g} x the lowest capacity")
    pair_tasks = [(m, p, seed, rates[m], cfg) for m, p in models for seed in cfg.cache_seeds]
    runs: list[dict] = []
    for rows in _map(_cache_pair_task, pair_tasks, jobs):
        runs += rows
        _partial(on_partial, runs, caps)
    out: list[Row] = []
    for m, _ in models:
        mine = [r for r in runs if r["model"] == m]
        pairs = [(loc, g) for loc, g in zip(mine[0::2], mine[1::2])]
        out += [Row(**r) for r in cache_rows(pairs, m, "tool-agent", load_fraction=load)]
    return ExperimentResult(out, runs, caps)


#: Experiment kinds of ``cpgym reproduce``: name -> function(config, log, jobs, memo, on_partial) -> ExperimentResult.
EXPERIMENTS: dict[str, Callable[..., ExperimentResult]] = {"end-to-end": end_to_end, "dynamic": dynamic, "cache": cache,
                                                           "reconfiguration": reconfiguration}


def run_experiments(kinds: list[str], cfg: ReproduceConfig, log: Callable[[str], None] | None = None,
                    jobs: int = 1, on_partial: Callable[[str, ExperimentResult], None] | None = None
                    ) -> Iterator[tuple[str, ExperimentResult]]:
    """Runs the named experiments of :data:`EXPERIMENTS` in order, yielding ``(kind, result)``
    as each finishes (so a caller can write it before the next starts); ``dynamic`` and
    ``reconfiguration`` share one set of dynamic runs. ``on_partial(kind, result)``: the
    experiment's finished runs and capacities so far, after each task (:data:`OnPartial`).

    Raises:
        ValueError: on an unknown experiment (names the known ones), before anything runs.
    """
    for k in kinds:
        if k not in EXPERIMENTS:
            raise ValueError(f"--experiments: unknown kind {k!r}; known: {', '.join(EXPERIMENTS)}")
    memo: dict = {}
    for k in kinds:
        part = None if on_partial is None else (lambda res, k=k: on_partial(k, res))
        yield k, EXPERIMENTS[k](cfg, log, jobs, memo, part)


def rows_as_dicts(rows: list[Row]) -> list[dict]:
    """Rows as plain dicts in the schema's key order."""
    return [asdict(r) for r in rows]


def plot_end_to_end(runs: list[dict], path: str | Path,
                    loads_label: str = "load (fraction of the strongest static baseline's capacity)") -> Path:
    """PNG: mean TTFT, P90 TTFT and token-weighted SLO attainment (rows) vs load, one panel per
    workload (columns), one line per policy (mean over seeds); overloaded points (rate above the
    policy's own capacity) are drawn as open markers and the legend says so. Shapes: ``runs`` as
    :attr:`ExperimentResult.runs`. Returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    df = pd.DataFrame(runs)
    models = list(dict.fromkeys(df["model"]))
    workloads = list(dict.fromkeys(df["workload"]))
    policies = list(dict.fromkeys(df["policy"]))
    colors = {p: ("black" if p == "vertumnus" else f"C{i % 10}") for i, p in enumerate(policies)}
    panels = (("mean_ttft_s", "mean TTFT [s]", 1.0, True), ("p90_ttft_s", "P90 TTFT [s]", 1.0, True),
              ("slo_attainment_token_weighted", "SLO attainment (token-weighted) [%]", 100.0, False))
    fig, axes = plt.subplots(len(panels), len(workloads) * len(models), figsize=(4.6 * len(workloads) * len(models), 10),
                             squeeze=False)
    for j, (model, wl) in enumerate((m, w) for m in models for w in workloads):
        sub = df[(df["model"] == model) & (df["workload"] == wl)]
        if sub.empty:
            continue
        agg = sub.groupby(["policy", "load_fraction"], sort=False).agg(
            mean_ttft_s=("mean_ttft_s", "mean"), p90_ttft_s=("p90_ttft_s", "mean"),
            slo_attainment_token_weighted=("slo_attainment_token_weighted", "mean"),
            overloaded=("overloaded", "max")).reset_index()
        for i, (key, ylabel, scale, logy) in enumerate(panels):
            ax = axes[i][j]
            for p in policies:
                g = agg[agg["policy"] == p].sort_values("load_fraction")
                if g.empty:
                    continue
                ax.plot(g["load_fraction"], g[key] * scale, color=colors[p], lw=2.4 if p == "vertumnus" else 1.2, label=p)
                ok, over = g[~g["overloaded"]], g[g["overloaded"]]
                ax.scatter(ok["load_fraction"], ok[key] * scale, color=colors[p], s=22, zorder=3)
                ax.scatter(over["load_fraction"], over[key] * scale, facecolors="none", edgecolors=colors[p], s=46, zorder=3)
            if logy:
                ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
            if j == 0:
                ax.set_ylabel(ylabel)
            if i == 0:
                ax.set_title(f"{wl} ({model})", fontsize=10)
            if i == len(panels) - 1:
                ax.set_xlabel(loads_label, fontsize=8)
    handles, labels = axes[0][0].get_legend_handles_labels()
    from matplotlib.lines import Line2D

    handles.append(Line2D([], [], marker="o", ls="", markerfacecolor="none", markeredgecolor="gray"))
    labels.append("open marker: overloaded (rate above the policy's capacity)")
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


__all__ = ["Row", "WorkloadCase", "ReproduceConfig", "ExperimentResult", "EXPERIMENTS", "PAPER_END_TO_END", "METRICS",
           "PAPER_POLICIES", "CACHE_HELD_OUT_SEEDS", "end_to_end", "dynamic", "reconfiguration", "cache",
           "dynamic_summaries", "run_experiments", "paired_changes", "paper_value", "plot_end_to_end", "rows_as_dicts"]
