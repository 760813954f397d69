"""Fitting the arm-selection router (:mod:`policies.routing.arm_selection`) behind ``cpgym train arms``.

1. **Per-window costs** (:func:`collect_cell`): on the training and validation windows of every
   (workload, load) cell (``policies.routing.protocol``: 10 s windows after 30 s of warm-up, loads as
   fractions of each workload's capacity by bisection), the Vertumnus router runs once per arm of
   the (beta, lambda) grid with that arm fixed; each run gives the window's measured mean TTFT
   and SLO attainment, and the features of :data:`~policies.routing.arm_selection.FEATURE_NAMES` at the
   decision that starts the measured window. Results are cached as JSON per cell and part under
   ``cache_dir`` (keyed by everything that determines them), so refits are free.
2. **Fit** (:func:`fit_model`): per arm, ridge regression of ``log TTFT(w, a) - mean_a log TTFT(w,
   a)`` on the window's features (mean over the arms' runs), on the training windows of all cells.
3. **Model selection** (:func:`select_model`) on the validation windows only: every combination of
   feature set, degree, ridge alpha and row weighting is scored by the per-cell change of the
   validation mean TTFT of the chosen arms against the cell's tuned arm (the grid arm with the
   least training mean TTFT of that cell, ``policies.routing.protocol.tune_vertumnus``'s choice); the
   score is ``selection`` (``"mean"`` or ``"max"``) over cells. This scores each validation
   window with the arm chosen at its start held for the whole window (warm-up included), from the
   cached fixed-arm costs.
4. **Deployed validation** (:func:`deployed_validation`): the selected model runs as the router it
   ships as (:class:`~policies.routing.arm_selection.ArmSelectingRouter`: re-choosing the arm every
   ``decision_window_s``, warm-up included, from the features it observes) on the same validation
   windows, once per hysteresis ``switch_margin`` of ``switch_margins``; each candidate is scored
   like step 3 against the cell's tuned arm on the same windows (its cached fixed-arm costs), with
   the standard error of that score over windows, and the smallest margin whose score is within
   one standard error of the least score becomes the model's ``switch_margin``
   (:func:`one_standard_error_choice`).

The checkpoint folder holds ``arm_model.json`` (the selected model and the router's settings),
``train_config.json`` (kind ``routing``, the config), ``validation.csv`` (every candidate's
per-cell scores), ``deployed_validation.csv`` (every switch margin's per-cell scores),
``deployed_costs.csv`` (its per-window deployed runs) and ``costs.csv.gz`` (per-window costs of
every arm, training and validation).
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from baselines.registry import PolicySpec
from baselines.runner import run_policy
from envs import workloads
from envs.metrics.stats import paired_ci
from envs.metrics.summary import measured_summary
from envs.sim.options import check_out_dir
from envs.sim.options import option as _opt
from envs.workloads import DEFAULT_TRACE_FILE, WorkloadSource, default_traces_dir
from policies.common.checkpoint import FLAT_WORKLOAD_KEYS
from policies.routing.arm_selection import (
    FEATURE_NAMES,
    MODEL_FILE,
    ArmCostModel,
    ArmSelectingRouter,
    constant_model,
    design_matrix,
    write_model,
)
from policies.routing.protocol import TUNE_BETAS, TUNE_LAMBDAS, Scenario, capacity_rps

#: Feature sets tried in model selection (subsets of FEATURE_NAMES).
FEATURE_SETS = {
    "load": ("offered_utilisation", "log_rate_per_gpu"),
    "load+mix": ("offered_utilisation", "log_rate_per_gpu", "mean_log_prompt_tokens", "prefix_reuse_share"),
    "arrivals": FEATURE_NAMES[:5],
    "all": FEATURE_NAMES,
}



@dataclass(frozen=True)
class ArmTrainConfig:
    """Configuration of ``cpgym train arms`` (one field = one flag).

    Raises:
        ValueError: naming the field on an empty list, a load outside (0, 2], a grid value
            outside the paper's bounds (beta >= 1, lambda >= 0), a bad count, a decision window
            longer than the episode window or an unknown option.
    """

    sources: str = _opt(f"{DEFAULT_TRACE_FILE},leval-like,tool-agent",
                        "comma-separated workloads: named synthetic workloads or trace files (a bare file name is looked "
                        "up in the shared trace folder)")
    loads: tuple[float, ...] = _opt((0.7, 0.9), "loads as fractions of each workload's capacity (bisection)")
    betas: tuple[float, ...] = _opt(TUNE_BETAS + (8.0, 12.0), "beta grid of the arms")
    lambdas: tuple[float, ...] = _opt(TUNE_LAMBDAS + (3.0, 4.0), "lambda grid of the arms")
    max_train_windows: int = _opt(48, "training windows per cell (evenly spread, policies.routing.protocol.spread_subset)")
    max_validation_windows: int = _opt(24, "validation windows per cell (evenly spread)")
    episode_window_s: float = _opt(10.0, "episode window length [s]")
    warmup_s: float = _opt(30.0, "warm-up before each window [s]")
    decision_window_s: float = _opt(10.0, "the router re-chooses (beta, lambda) at multiples of this [s]")
    history_s: float = _opt(30.0, "features describe the arrivals of the last history_s [s]")
    prefix_memory_s: float = _opt(60.0, "a KV block counts as seen if an arrival of the last prefix_memory_s held it [s]")
    alphas: tuple[float, ...] = _opt((0.1, 1.0, 10.0, 100.0), "ridge penalties tried in model selection")
    selection: str = _opt("max", "validation score over cells: mean or max of the % change vs the tuned arm",
                          choices=("mean", "max"))
    switch_margins: tuple[float, ...] = _opt((0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5),
                                             "hysteresis margins (relative log mean TTFT) tried on deployed validation runs")
    cache_dir: str = _opt("runs/arm-costs", "cache of per-window costs (JSON per cell and part)")
    seed: int = _opt(0, "workload and simulator seed")

    def __post_init__(self) -> None:
        if not self.source_list():
            raise ValueError("sources: give at least one workload or trace")
        if not self.loads or any(not 0 < x <= 2 for x in self.loads):
            raise ValueError(f"loads must be fractions of capacity in (0, 2], got {self.loads}")
        if not self.betas or any(not (math.isfinite(b) and b >= 1) for b in self.betas):
            raise ValueError(f"betas must be finite and >= 1 (paper §5), got {self.betas}")
        if not self.lambdas or any(not (math.isfinite(x) and x >= 0) for x in self.lambdas):
            raise ValueError(f"lambdas must be finite and >= 0 (paper §5), got {self.lambdas}")
        if self.max_train_windows < 2 or self.max_validation_windows < 1:
            raise ValueError("max_train_windows must be >= 2 and max_validation_windows >= 1")
        for name in ("episode_window_s", "decision_window_s", "history_s", "prefix_memory_s"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) > 0):
                raise ValueError(f"{name} must be finite and > 0, got {getattr(self, name)}")
        if self.decision_window_s > self.episode_window_s:
            raise ValueError(f"decision_window_s ({self.decision_window_s:g} s) must not exceed episode_window_s "
                             f"({self.episode_window_s:g} s): the router would never re-choose inside a window")
        if not (math.isfinite(self.warmup_s) and self.warmup_s >= 0):
            raise ValueError(f"warmup_s must be finite and >= 0, got {self.warmup_s}")
        if not self.alphas or any(not (math.isfinite(a) and a > 0) for a in self.alphas):
            raise ValueError(f"alphas must be finite and > 0, got {self.alphas}")
        if self.selection not in ("mean", "max"):
            raise ValueError(f"selection must be 'mean' or 'max', got {self.selection!r}")
        if not self.switch_margins or any(not (math.isfinite(m) and m >= 0) for m in self.switch_margins):
            raise ValueError(f"switch_margins must be finite and >= 0, got {self.switch_margins}")

    def source_list(self) -> list[str]:
        return [s.strip() for s in self.sources.split(",") if s.strip()]

    @property
    def arms(self) -> tuple[tuple[float, float], ...]:
        """``(beta, lambda)`` pairs, betas outer (the order of ``tune_vertumnus``'s grid)."""
        return tuple((float(b), float(x)) for b in self.betas for x in self.lambdas)

    def router_settings(self) -> dict:
        return {"decision_window_s": self.decision_window_s, "history_s": self.history_s,
                "prefix_memory_s": self.prefix_memory_s}


def episode_source(item: str):
    """The :class:`policies.routing.train.EpisodeSource` of one ``sources`` item (a trace file if it ends
    in ``.jsonl``/``.csv`` or names an existing file, else a named workload)."""
    from policies.routing.episodes import EpisodeSource  # lazy: gymnasium (start-up of the CLI)

    p = Path(item).expanduser()
    if p.suffix in (".jsonl", ".csv") or p.is_file():
        if not p.is_file() and not p.is_absolute() and (default_traces_dir() / p.name).is_file():
            p = default_traces_dir() / p.name
        if not p.is_file():
            raise FileNotFoundError(2, "trace file of --sources not found", str(p))
        return EpisodeSource(WorkloadSource(trace=str(p)))
    return EpisodeSource(WorkloadSource(name=item))


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _source_ident(source) -> dict:
    """``asdict(source)`` (an ``EpisodeSource``) as the cache keys hash it: flat, in the field names
    of when the keys were defined (its workload's fields, the episode window as ``window_s``), so
    the cached costs stay valid."""
    d = asdict(source)
    w = d.pop("workload", None)
    if not isinstance(w, dict):  # not an EpisodeSource
        return d
    flat = {FLAT_WORKLOAD_KEYS[k]: v for k, v in w.items()}
    return {**flat, "window_s": d.pop("episode_window_s"), **d}


def capacity_cache_file(cfg: ArmTrainConfig, source, sim_config) -> Path:
    """Where :func:`cell_scenarios` caches the capacity of ``source`` (an ``EpisodeSource``) on
    the pool of ``sim_config`` (JSON ``{"source", "capacity_rps"}``)."""
    return Path(cfg.cache_dir) / f"capacity-{_digest({'source': _source_ident(source), 'sim': repr(sim_config)})}.json"


def cell_scenarios(cfg: ArmTrainConfig, sim_config, log=None) -> list:
    """The :class:`policies.routing.protocol.Scenario` of every (source, load); capacities by bisection,
    cached in ``cache_dir``."""
    out = []
    for item in cfg.source_list():
        src = episode_source(item)
        f = capacity_cache_file(cfg, src, sim_config)
        if f.is_file():
            cap = json.loads(f.read_text())["capacity_rps"]
        else:
            full = src.workload_obj(cfg.seed)
            cap = capacity_rps(lambda r, full=full: workloads.scale_to_rate(full, r), sim_config, low_rps=0.5,
                               high_rps=256.0).capacity_rps
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(json.dumps({"source": item, "capacity_rps": cap}) + "\n")
        if log:
            log(f"capacity of {src.label}: {cap:.2f} requests/s")
        out += [Scenario(src, x * cap, x, cfg.episode_window_s, cfg.warmup_s) for x in cfg.loads]
    return out


def collect_cell(scenario, part: str, cfg: ArmTrainConfig, sim_config, log=None) -> dict:
    """Per-window costs of every arm on ``part`` windows of one cell (cached; module docstring).

    Returns:
        ``{"key", "part", "rate_rps", "arms", "windows": [...], "features": (n_windows, n_arms,
        n_features) list, "mean_ttft_s": (n_windows, n_arms), "slo_attainment": (n_windows,
        n_arms)}``; a feature row is ``None`` (JSON null) where the measured window started
        without history (the first window of the workload).
    """
    from dataclasses import replace

    max_windows = cfg.max_train_windows if part == "train" else cfg.max_validation_windows
    ident = {"source": _source_ident(scenario.source), "rate_rps": scenario.rate_rps, "part": part, "max_windows": max_windows,
             "arms": cfg.arms, "router": cfg.router_settings(), "window_s": cfg.episode_window_s, "warmup_s": cfg.warmup_s,
             "seed": cfg.seed, "sim": repr(sim_config), "version": 1}
    f = Path(cfg.cache_dir) / f"{scenario.key.replace('/', '_')}-{part}-{_digest(ident)}.json"
    if f.is_file():
        return json.loads(f.read_text())
    wins = scenario.windows(part, seed=cfg.seed, max_windows=max_windows)
    config = replace(sim_config, seed=cfg.seed)
    nf = len(FEATURE_NAMES)
    feats = np.full((len(wins), len(cfg.arms), nf), np.nan)
    ttft = np.full((len(wins), len(cfg.arms)), np.nan)
    slo = np.full((len(wins), len(cfg.arms)), np.nan)
    for a in range(len(cfg.arms)):
        model = constant_model(cfg.arms, a)
        for i, wl in enumerate(wins):
            record: list = []
            spec = PolicySpec("arm", lambda record=record: ArmSelectingRouter(model, record=record, **cfg.router_settings()),
                              "fixed arm", "policies.routing.train_arms")
            summary = measured_summary(run_policy(spec, wl, config), wl.metadata["measure_from_s"])
            ttft[i, a] = summary["mean_ttft_s"]
            slo[i, a] = summary["slo_attainment_token_weighted"]
            start = wl.metadata["measure_from_s"]
            hit = [x for t, x, _ in record if abs(t - start) < 1e-9]
            if hit and hit[0] is not None:
                feats[i, a] = hit[0]
        if log:
            log(f"{scenario.key} {part}: arm {a + 1}/{len(cfg.arms)} (beta {cfg.arms[a][0]:g}, lambda {cfg.arms[a][1]:g}): "
                f"mean TTFT {np.nanmean(ttft[:, a]):.4f} s over {len(wins)} windows")
    out = {"key": scenario.key, "part": part, "rate_rps": scenario.rate_rps, "load_fraction": scenario.load_fraction,
           "arms": [list(x) for x in cfg.arms], "windows": [w.metadata["window_index"] for w in wins],
           "features": np.where(np.isnan(feats), None, feats).tolist(), "mean_ttft_s": ttft.tolist(),
           "slo_attainment": slo.tolist()}
    f.parent.mkdir(parents=True, exist_ok=True)
    tmp = f.with_suffix(".tmp")
    tmp.write_text(json.dumps(out) + "\n")
    tmp.replace(f)
    return out


@dataclass
class CellData:
    """Arrays of one cell and part: ``features (n, n_features)`` (mean over the arms' runs; NaN
    rows without history), ``ttft (n, n_arms)`` [s], ``slo (n, n_arms)``."""

    key: str
    features: np.ndarray
    ttft: np.ndarray
    slo: np.ndarray

    @classmethod
    def from_collected(cls, data: dict) -> CellData:
        f = np.array([[[np.nan if v is None else v for v in row] for row in w] for w in data["features"]], dtype=float)
        mean_f = f.mean(axis=1)  # NaN where an arm's run had no history at the window start
        return cls(data["key"], mean_f, np.asarray(data["mean_ttft_s"], dtype=float),
                   np.asarray(data["slo_attainment"], dtype=float))


def relative_log_cost(ttft: np.ndarray) -> np.ndarray:
    """``log TTFT - mean over arms of log TTFT`` per window, shape ``(n, n_arms)``."""
    lg = np.log(ttft)
    return lg - lg.mean(axis=1, keepdims=True)


def fit_model(cells: list[CellData], arms, feature_names: tuple[str, ...], degree: int, alpha: float,
              weighting: str = "uniform") -> ArmCostModel:
    """Ridge fit of the per-arm relative log cost on the training windows of ``cells``
    (windows without features are left out; the intercept is not penalised).

    Args:
        weighting: ``"uniform"`` (every window counts once) or ``"cost"`` (a window counts with its
            mean TTFT over arms divided by its cell's mean, as a cell's mean TTFT does).

    Raises:
        ValueError: if no window has features or on an unknown weighting.
    """
    if weighting not in ("uniform", "cost"):
        raise ValueError(f"weighting must be 'uniform' or 'cost', got {weighting!r}")
    idx = [FEATURE_NAMES.index(f) for f in feature_names]
    xs, ys, ws = [], [], []
    for c in cells:
        ok = ~np.isnan(c.features).any(axis=1) & np.isfinite(c.ttft).all(axis=1)
        xs.append(c.features[ok][:, idx])
        ys.append(relative_log_cost(c.ttft[ok]))
        m = c.ttft[ok].mean(axis=1)
        ws.append(m / m.mean() if weighting == "cost" else np.ones(len(m)))
    x, y, w = np.concatenate(xs), np.concatenate(ys), np.concatenate(ws)
    if len(x) == 0:
        raise ValueError("fit_model: no training window with features")
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale = np.where(scale > 1e-12, scale, 1.0)

    d = design_matrix((x - mean) / scale, degree)
    sw = np.sqrt(w)[:, None]
    pen = alpha * np.eye(d.shape[1])
    pen[0, 0] = 0.0
    coef = np.linalg.solve((d * sw).T @ (d * sw) + pen, (d * sw).T @ (y * sw))  # (terms, arms)
    # the fallback arm (no history): least mean relative log cost over all training windows
    fallback = int(np.argmin(np.average(y, axis=0, weights=w)))
    return ArmCostModel(tuple(tuple(a) for a in arms), tuple(feature_names), tuple(mean.tolist()), tuple(scale.tolist()),
                        degree, tuple(tuple(r) for r in coef.T.tolist()), fallback)


def tuned_arm(train: CellData) -> int:
    """The arm with the least mean training TTFT of the cell (ties: first; ``tune_vertumnus``)."""
    return int(np.argmin(np.nanmean(train.ttft, axis=0)))


def chosen_arms(model: ArmCostModel, cell: CellData) -> np.ndarray:
    """The arm the model picks for each window of ``cell`` (the fallback where there are no features)."""
    return np.array([model.choose(None if np.isnan(f).any() else f) for f in cell.features], dtype=int)


def change_pct(cell: CellData, arms: np.ndarray, reference_arm: int) -> float:
    """``100 * (mean TTFT of the chosen arms / mean TTFT of the reference arm - 1)`` over the windows."""
    n = np.arange(len(arms))
    return float(100.0 * (cell.ttft[n, arms].mean() / cell.ttft[:, reference_arm].mean() - 1.0))


def headroom(train: list[CellData], arms) -> list[dict]:
    """Per cell, on its training windows (in-sample): the tuned arm, the per-window best arm's
    change vs it (an optimistic upper bound of per-window selection: the minimum over arms of
    noisy window costs), and each other cell's tuned arm used on this cell."""
    tuned = [tuned_arm(c) for c in train]
    rows = []
    for c, t in zip(train, tuned):
        best = np.nanargmin(c.ttft, axis=1)
        row = {"cell": c.key, "num_windows": len(c.ttft), "tuned_beta": arms[t][0], "tuned_lambda": arms[t][1],
               "tuned_mean_ttft_s": float(c.ttft[:, t].mean()), "per_window_best_pct": change_pct(c, best, t)}
        for o, to in zip(train, tuned):
            if o is not c:
                row[f"arm_of_{o.key}_pct"] = change_pct(c, np.full(len(c.ttft), to), t)
        rows.append(row)
    return rows


def select_model(cfg: ArmTrainConfig, train: list[CellData], validation: list[CellData]) -> tuple[ArmCostModel, list[dict]]:
    """Fits every candidate on ``train`` and scores it on ``validation`` (module docstring, 3.).

    Returns:
        ``(best model, rows)`` with one row per candidate: ``features, degree, alpha, weighting,
        score, <cell>_pct`` (ties: first candidate).
    """
    tuned = [tuned_arm(c) for c in train]
    rows, models = [], []
    for fs_name, fs in FEATURE_SETS.items():
        for degree in (1, 2):
            for alpha in cfg.alphas:
                for weighting in ("uniform", "cost"):
                    m = fit_model(train, cfg.arms, fs, degree, alpha, weighting)
                    pct = [change_pct(v, chosen_arms(m, v), t) for v, t in zip(validation, tuned)]
                    score = _score(cfg, pct)
                    row = {"features": fs_name, "degree": degree, "alpha": alpha, "weighting": weighting, "score": score}
                    row.update({f"{v.key}_pct": p for v, p in zip(validation, pct)})
                    rows.append(row)
                    models.append(m)
    best = min(range(len(rows)), key=lambda i: rows[i]["score"])
    return models[best], rows


def _score(cfg: ArmTrainConfig, pct: list[float]) -> float:
    return float(np.mean(pct) if cfg.selection == "mean" else np.max(pct))


def deployed_cell(scenario, model: ArmCostModel, cfg: ArmTrainConfig, sim_config, log=None) -> dict:
    """The router of ``model`` as deployed (:class:`~policies.routing.arm_selection.ArmSelectingRouter`,
    re-choosing every ``decision_window_s`` from the start of each warm-up) on the validation
    windows of one cell (the windows of :func:`collect_cell`); cached under ``cache_dir``, keyed
    by the model and everything else that determines the runs.

    Returns:
        ``{"key", "switch_margin", "windows", "mean_ttft_s", "slo_attainment", "num_arm_switches",
        "arms"}`` (lists over windows; switches: arm changes between consecutive decisions of the
        run, warm-up included; arms: the arm index of every decision of the run, in time order).
    """
    ident = {"source": _source_ident(scenario.source), "rate_rps": scenario.rate_rps, "part": "validation",
             "max_windows": cfg.max_validation_windows, "model": model.to_json(), "router": cfg.router_settings(),
             "window_s": cfg.episode_window_s, "warmup_s": cfg.warmup_s, "seed": cfg.seed, "sim": repr(sim_config),
             "version": 1}
    f = Path(cfg.cache_dir) / f"{scenario.key.replace('/', '_')}-deployed-{_digest(ident)}.json"
    if f.is_file():
        return json.loads(f.read_text())
    config = replace(sim_config, seed=cfg.seed)
    out = {"key": scenario.key, "switch_margin": model.switch_margin, "windows": [], "mean_ttft_s": [],
           "slo_attainment": [], "num_arm_switches": [], "arms": []}
    for wl in scenario.windows("validation", seed=cfg.seed, max_windows=cfg.max_validation_windows):
        record: list = []
        spec = PolicySpec("deployed", lambda record=record: ArmSelectingRouter(model, record=record, **cfg.router_settings()),
                          "deployed arm selection", "policies.routing.train_arms")
        summary = measured_summary(run_policy(spec, wl, config), wl.metadata["measure_from_s"])
        arms = [a for _, _, a in record]
        out["windows"].append(wl.metadata["window_index"])
        out["mean_ttft_s"].append(summary["mean_ttft_s"])
        out["slo_attainment"].append(summary["slo_attainment_token_weighted"])
        out["num_arm_switches"].append(int(sum(a != b for a, b in zip(arms, arms[1:]))))
        out["arms"].append([int(a) for a in arms])
    if log:
        log(f"{scenario.key} deployed, switch margin {model.switch_margin:g}: mean TTFT "
            f"{np.mean(out['mean_ttft_s']):.4f} s over {len(out['windows'])} validation windows")
    f.parent.mkdir(parents=True, exist_ok=True)
    tmp = f.with_suffix(".tmp")
    tmp.write_text(json.dumps(out) + "\n")
    tmp.replace(f)
    return out


def one_standard_error_choice(scores, standard_errors, complexity) -> int:
    """Index of the least complex candidate whose score is at most the least score plus the
    standard error of that least score (the one-standard-error rule: Hastie, Tibshirani and Friedman,
    *The Elements of Statistical Learning*, 2nd ed., §7.10): a more complex candidate is taken only
    when it beats the simpler ones by more than the noise of the estimate. Ties: first index.

    Args:
        scores / standard_errors / complexity: one value per candidate (lower score = better;
            here the complexity is the switch margin: 0 = the fitted model as is).

    Raises:
        ValueError: on empty or unequal-length inputs.
    """
    if not len(scores) or not len(scores) == len(standard_errors) == len(complexity):
        raise ValueError("one_standard_error_choice: need one score, standard error and complexity per candidate")
    best = int(np.argmin(scores))
    bound = scores[best] + (standard_errors[best] if np.isfinite(standard_errors[best]) else 0.0)
    ok = [i for i in range(len(scores)) if scores[i] <= bound]
    return min(ok, key=lambda i: (complexity[i], i))


def _score_standard_error(cfg: ArmTrainConfig, pct: list[float], se: list[float]) -> float:
    """Standard error of :func:`_score` of per-cell changes ``pct`` with standard errors ``se``
    (cells independent): the worst cell's for ``max``, ``sqrt(sum se^2) / num_cells`` for ``mean``."""
    if cfg.selection == "max":
        return float(se[int(np.argmax(pct))])
    return float(np.sqrt(np.sum(np.square(se))) / len(se))


def deployed_validation(cfg: ArmTrainConfig, scenarios: list, train: list[CellData], validation: list[CellData],
                        model: ArmCostModel, sim_config, log=None) -> tuple[ArmCostModel, list[dict], list[dict]]:
    """Step 4 of the module docstring: ``model`` deployed on each cell's validation windows with
    every ``cfg.switch_margins``, scored against the cell's tuned arm (:func:`tuned_arm`) on the
    same windows.

    Args:
        scenarios / train / validation: the cells, in the same order.

    Returns:
        ``(model with the selected switch_margin, rows, per-window rows)``; one row per margin:
        ``switch_margin, <cell>_pct, <cell>_ci_low, <cell>_ci_high, <cell>_arm_switches_per_window,
        score, score_standard_error, selected`` (the ``deployed_validation.csv`` columns; the CI is the paired 95 %
        Student-t interval over windows, ``envs.metrics.stats.paired_ci``), per-window rows: ``cell, window,
        switch_margin,
        mean_ttft_s, slo_attainment, num_arm_switches, decisions, tuned_mean_ttft_s`` (decisions:
        the run's arms in time order as ``beta/lambda`` joined by spaces).

    Raises:
        ValueError: if the cells do not line up or a deployed run's windows differ from the
            collected validation windows.
    """
    if [s.key for s in scenarios] != [c.key for c in train] or [c.key for c in train] != [c.key for c in validation]:
        raise ValueError("deployed_validation: scenarios, train and validation cells must be the same cells in order")
    tuned = [tuned_arm(c) for c in train]
    rows, window_rows = [], []
    for margin in cfg.switch_margins:
        m = replace(model, switch_margin=float(margin))
        row: dict = {"switch_margin": float(margin)}
        pct: list[float] = []
        se: list[float] = []
        for sc, v, t in zip(scenarios, validation, tuned):
            runs = deployed_cell(sc, m, cfg, sim_config, log)
            ttft = np.asarray(runs["mean_ttft_s"], dtype=float)
            if len(ttft) != len(v.ttft):
                raise ValueError(f"deployed_validation: {sc.key}: {len(ttft)} deployed windows, {len(v.ttft)} collected")
            pct.append(float(100.0 * (ttft.mean() / v.ttft[:, t].mean() - 1.0)))
            row[f"{v.key}_pct"] = pct[-1]
            diff = 100.0 * (ttft - v.ttft[:, t]) / v.ttft[:, t].mean()  # mean = pct[-1]
            _, lo, hi = paired_ci(diff)
            row[f"{v.key}_ci_low"], row[f"{v.key}_ci_high"] = lo, hi
            se.append(float(np.std(diff, ddof=1) / np.sqrt(len(diff))) if len(diff) > 1 else math.nan)
            row[f"{v.key}_arm_switches_per_window"] = float(np.mean(runs["num_arm_switches"]))
            for j, w in enumerate(runs["windows"]):
                window_rows.append({"cell": v.key, "window": w, "switch_margin": float(margin),
                                    "mean_ttft_s": runs["mean_ttft_s"][j], "slo_attainment": runs["slo_attainment"][j],
                                    "num_arm_switches": runs["num_arm_switches"][j],
                                    "decisions": " ".join(f"{cfg.arms[a][0]:g}/{cfg.arms[a][1]:g}" for a in runs["arms"][j]),
                                    "tuned_mean_ttft_s": v.ttft[j, t]})
        row["score"] = _score(cfg, pct)
        row["score_standard_error"] = _score_standard_error(cfg, pct, se)
        rows.append(row)
        if log:
            log(f"deployed validation, switch margin {margin:g}: {cfg.selection} change vs tuned {row['score']:+.2f} % "
                f"(standard error {row['score_standard_error']:.2f})")
    best = one_standard_error_choice([r["score"] for r in rows], [r["score_standard_error"] for r in rows],
                                     [r["switch_margin"] for r in rows])
    for i, r in enumerate(rows):
        r["selected"] = i == best
    return replace(model, switch_margin=rows[best]["switch_margin"]), rows, window_rows


def cost_table_rows(data: dict) -> list[dict]:
    """``costs.csv.gz`` rows of one :func:`collect_cell` result: one per (window, arm) with the
    window's mean TTFT [s], SLO attainment and the features of that arm's run (empty = none)."""
    rows = []
    for j, w in enumerate(data["windows"]):
        for a, (b, lam) in enumerate(data["arms"]):
            row = {"cell": data["key"], "part": data["part"], "window": w, "beta": b, "lambda": lam,
                   "mean_ttft_s": data["mean_ttft_s"][j][a], "slo_attainment": data["slo_attainment"][j][a]}
            row.update(zip(FEATURE_NAMES, data["features"][j][a]))
            rows.append(row)
    return rows


def cells_from_costs_csv(path: str | Path) -> tuple[list[CellData], list[CellData]]:
    """``(train, validation)`` cells of a checkpoint's ``costs.csv.gz`` (or a plain CSV; the inverse of
    :func:`cost_table_rows`; cells and windows in file order): a refit needs no simulation.

    Raises:
        ValueError: naming the file and line on a missing column or a non-number.
    """
    import gzip

    parts: dict[str, dict[str, dict]] = {"train": {}, "validation": {}}
    path = Path(path)
    with (gzip.open(path, "rt", newline="", encoding="utf-8") if path.suffix == ".gz" else path.open(newline="")) as fh:
        for line, row in enumerate(csv.DictReader(fh), start=2):
            try:
                cell = parts[row["part"]].setdefault(row["cell"], {"key": row["cell"], "part": row["part"], "windows": [],
                                                                    "arms": [], "features": [], "mean_ttft_s": [],
                                                                    "slo_attainment": []})
                w = int(row["window"])
                if not cell["windows"] or cell["windows"][-1] != w:
                    cell["windows"].append(w)
                    for k in ("features", "mean_ttft_s", "slo_attainment"):
                        cell[k].append([])
                cell["features"][-1].append([float(row[f]) if row[f] != "" else None for f in FEATURE_NAMES])
                cell["mean_ttft_s"][-1].append(float(row["mean_ttft_s"]))
                cell["slo_attainment"][-1].append(float(row["slo_attainment"]))
            except (KeyError, ValueError) as exc:
                raise ValueError(f"{path}:{line}: {exc!r}; expected the columns of "
                                 "policies.routing.train_arms.cost_table_rows") from None
    return ([CellData.from_collected(c) for c in parts["train"].values()],
            [CellData.from_collected(c) for c in parts["validation"].values()])


def _write_csv(path: Path, rows: list[dict]) -> None:
    """CSV of ``rows`` (columns: the union of their keys); gzip-compressed (reproducible bytes,
    no timestamp) when ``path`` ends in ``.gz``."""
    import gzip
    import io

    raw = gzip.GzipFile(path, "wb", mtime=0) if path.suffix == ".gz" else path.open("wb")
    with raw, io.TextIOWrapper(raw, newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(dict.fromkeys(k for r in rows for k in r)), restval="")
        w.writeheader()
        w.writerows(rows)


def train_arms(cfg: ArmTrainConfig, out_dir: str | Path, sim_config, argv: list[str] | None = None, log=None) -> ArmCostModel:
    """Collects (or reads the cached) per-window costs, selects and writes the checkpoint
    (module docstring). Returns the selected model.

    Raises:
        ValueError: if ``out_dir`` already holds a model, or it or ``cfg.cache_dir`` is not a
            usable folder (:func:`experiments.common.check_out_dir`; all checked before any simulation).
    """
    out = Path(out_dir)
    check_out_dir(out, "--out")
    check_out_dir(cfg.cache_dir, "--cache-dir")
    if (out / MODEL_FILE).exists():
        raise ValueError(f"{out / MODEL_FILE} exists; choose a new --out folder")
    train, validation, cost_rows = [], [], []
    scenarios = cell_scenarios(cfg, sim_config, log)
    for sc in scenarios:
        for part, dest in (("train", train), ("validation", validation)):
            data = collect_cell(sc, part, cfg, sim_config, log)
            dest.append(CellData.from_collected(data))
            cost_rows += cost_table_rows(data)
    model, rows = select_model(cfg, train, validation)
    model, deployed_rows, deployed_window_rows = deployed_validation(cfg, scenarios, train, validation, model, sim_config, log)
    write_model(out, model, cfg.router_settings())
    _write_csv(out / "validation.csv", rows)
    _write_csv(out / "deployed_validation.csv", deployed_rows)
    _write_csv(out / "deployed_costs.csv", deployed_window_rows)
    _write_csv(out / "costs.csv.gz", cost_rows)
    _write_csv(out / "headroom.csv", headroom(train, cfg.arms))
    meta = {"kind": "routing", "policy_type": "vertumnus-arms", "train_config": asdict(cfg), "argv": argv,
            "capacities_rps": {sc.key: sc.rate_rps / sc.load_fraction for sc in scenarios},
            "selected": min(rows, key=lambda r: r["score"]),
            "deployed_selected": next(r for r in deployed_rows if r["selected"])}
    (out / "train_config.json").write_text(json.dumps(meta, indent=2, default=list) + "\n")
    if log:
        sel = meta["selected"]
        log(f"selected: features {sel['features']}, degree {sel['degree']}, alpha {sel['alpha']:g}, "
            f"weighting {sel['weighting']}: validation {cfg.selection} change vs tuned {sel['score']:+.2f} % (fixed arm per "
            f"window); switch margin {model.switch_margin:g}: deployed {meta['deployed_selected']['score']:+.2f} %")
    return model


__all__ = ["ArmTrainConfig", "CellData", "FEATURE_SETS", "cell_scenarios", "cells_from_costs_csv", "change_pct",
           "chosen_arms", "collect_cell", "cost_table_rows", "deployed_cell", "deployed_validation", "episode_source",
           "fit_model", "headroom", "one_standard_error_choice", "relative_log_cost", "select_model", "train_arms",
           "tuned_arm"]
