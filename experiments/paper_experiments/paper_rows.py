"""Reproduction rows of the paper's dynamic, cache and reconfiguration results (paper §9 "Worker
Reconfiguration" and "Prefix-Cache Ablation"), in the schema of ``cpgym reproduce``:
``{experiment, workload, model, metric, paper_value, cpgym_value, ci_low, ci_high, load_fraction,
strongest_baseline}``.

Each builder takes per-seed results (one independent replication per seed: workload seed = run
seed) and returns the rows; ``cpgym_value`` is the mean over seeds, ``[ci_low, ci_high]`` its
Student-t 95 % interval (:func:`envs.metrics.stats.mean_ci95`; both NaN-free only for >= 2 seeds).

* ``experiment = "dynamic"`` (:func:`dynamic_rows`, from :func:`run_dynamic_phases` results):
  per scenario (``workload``), ``mean_ttft_pct_vs_best_fixed`` (vs the fixed composition with the
  lowest mean TTFT of that seed, chosen in hindsight), ``..._vs_homogeneous_cp2`` / ``_cp4``
  (vs the all-CP-2 / all-CP-4 pool), ``..._vs_initial`` (vs the adaptive run's own initial
  composition kept fixed); % of mean TTFT, negative = adaptive is faster. ``strongest_baseline``
  names the best fixed composition of every seed (:func:`best_fixed_label`: one name when the
  seeds agree, else each with its number of seeds).
* ``experiment = "cache"`` (:func:`cache_rows`): ``mean_ttft_pct``, ``p90_ttft_pct`` (global
  manager vs local caches only, %) and ``hit_rate_pp`` (token-weighted prefix hit rate,
  percentage points), paired per seed.
* ``experiment = "reconfiguration"`` (:func:`reconfiguration_rows`): ``reconfig_time_s_p10`` /
  ``_p90`` of drain + switch + confirm over one seed's committed operations [s].

Paper values (``/work/shared/paper`` notes): rising rates −19.6 % mean TTFT, later long-heavy
phases −5.5 % and −14.5 %, all "against fixed configurations" (the notes do not say which fixed
composition; the rows put them beside the homogeneous and initial-composition comparisons);
cache manager at the highest load −10.3 % mean and −18.7 % P90 TTFT with a "modest" hit-rate gain
(no figure: ``paper_value`` null); each split or merge 1.1-5.1 s, read here as the p10 and p90 of
the operation times (the notes give only the range).
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from baselines.cache_manager import CACHE_MANAGER_SETTINGS
from baselines.cache_manager.manager import SWEEPABLE_FIELDS
from envs.metrics.stats import mean_ci95
from envs.sim import Calibration, SimConfig
from envs.sim.options import is_number
from experiments.common import dumps_json
from experiments.paper_experiments.cache_ablation import CacheAblationConfig, policies, run_one
from experiments.paper_experiments.dynamic_phases import PAPER_SUPPORTED_DEGREES

PAPER_DYNAMIC = {"rising-rates": -19.6, "long-heavy": -14.5}
#: Scenario -> phases of the ``phases`` run it covers: the short-heavy phases (rates rising inside
#: each phase: the paper's "rising request rates"), the long-heavy ones (the paper's later
#: long-request-heavy demand: −5.5 % and −14.5 %; the row carries the larger), and the whole run.
DYNAMIC_SCENARIOS = {"rising-rates": "short", "long-heavy": "long", "phases-all": None}
PAPER_CACHE = {"mean_ttft_pct": -10.3, "p90_ttft_pct": -18.7, "hit_rate_pp": None}
PAPER_RECONFIG = {"reconfig_time_s_p10": 1.1, "reconfig_time_s_p90": 5.1}
DYNAMIC_METRICS = ("mean_ttft_pct_vs_best_fixed", "mean_ttft_pct_vs_homogeneous_cp2", "mean_ttft_pct_vs_homogeneous_cp4",
                   "mean_ttft_pct_vs_initial")


def _row(experiment: str, workload: str, model: str, metric: str, paper_value, values, load_fraction=None,
         strongest_baseline=None) -> dict:
    mean, half = mean_ci95(list(values))
    lo, hi = (mean - half, mean + half) if not math.isnan(half) else (math.nan, math.nan)
    return {"experiment": experiment, "workload": workload, "model": model, "metric": metric, "paper_value": paper_value,
            "cpgym_value": mean, "ci_low": lo, "ci_high": hi, "load_fraction": load_fraction,
            "strongest_baseline": strongest_baseline}


def _pct(new: float, old: float) -> float:
    return 100.0 * (new / old - 1.0)


def _mean_ttft(row: dict, phases: list[int] | None) -> float:
    if phases is None:
        return row["mean_ttft_s"]
    return float(np.mean([row["phase_mean_ttft_s"][i] for i in phases]))


def dynamic_comparisons(summary: dict, num_gpus: int, degrees: tuple[int, int],
                        phase_kind: str | None = None) -> dict:
    """The four ``mean_ttft_pct_vs_*`` values of one ``run_dynamic_phases`` summary, and the
    ``best_fixed_composition`` they compare with.

    Args:
        summary: :attr:`DynamicPhasesResult.summary`; its ``policies`` must include the fixed
            homogeneous pools and the adaptive run's initial composition.
        num_gpus: pool size (the homogeneous pools are ``cp{C}x{num_gpus // C}``).
        degrees: the smallest and largest supported CP degree.
        phase_kind: ``None`` for the whole run; ``"short"`` / ``"long"`` to compare the
            unweighted mean of the per-phase mean TTFTs of the phases of that kind
            (``summary["phases"][i]["kind"]``); the best fixed composition is then the best on
            those phases.

    Raises:
        ValueError: if a needed fixed composition was not run (names it), or no phase has
            ``phase_kind``.
    """
    phases = None
    if phase_kind is not None:
        phases = [i for i, ph in enumerate(summary["phases"]) if ph["kind"] == phase_kind]
        if not phases:
            raise ValueError(f"no phase of kind {phase_kind!r} (kinds: {[ph['kind'] for ph in summary['phases']]})")
    rows = {r["policy"]: _mean_ttft(r, phases) for r in summary["policies"]}
    adaptive = rows["vertumnus-adaptive"]
    fixed = {k[len("fixed "):]: v for k, v in rows.items() if k.startswith("fixed ")}

    def need(comp: str) -> float:
        if comp not in fixed:
            raise ValueError(f"dynamic rows need the fixed composition {comp!r}; run with it (compositions 'all')")
        return fixed[comp]

    lo, hi = degrees
    return {"best_fixed_composition": min(fixed, key=fixed.get),
            "mean_ttft_pct_vs_best_fixed": _pct(adaptive, min(fixed.values())),
            "mean_ttft_pct_vs_homogeneous_cp2": _pct(adaptive, need(f"cp{lo}x{num_gpus // lo}")),
            "mean_ttft_pct_vs_homogeneous_cp4": _pct(adaptive, need(f"cp{hi}x{num_gpus // hi}")),
            "mean_ttft_pct_vs_initial": _pct(adaptive, need(summary["initial_composition"]))}


def dynamic_rows(scenario: str, summaries: list[dict], model: str, num_gpus: int = 40,
                 degrees: tuple[int, int] = (min(PAPER_SUPPORTED_DEGREES), max(PAPER_SUPPORTED_DEGREES)),
                 paper_value: float | None = None,
                 phase_kind: str | None = None) -> list[dict]:
    """Rows of one dynamic scenario from per-seed ``run_dynamic_phases`` summaries (the whole run,
    or only its phases of ``phase_kind``: see :func:`dynamic_comparisons`).

    ``paper_value`` goes on the homogeneous and initial-composition rows (the paper compares
    against fixed configurations); the best-fixed row has none (the paper does not report it).

    ``load_fraction``: :func:`dynamic_load_fraction` (``None`` for absolute phase rates).

    Raises:
        ValueError: on no summaries, a missing fixed composition, or a malformed measured
            capacity or mean phase rate (:func:`dynamic_load_fraction`).
    """
    if not summaries:
        raise ValueError("dynamic_rows needs at least one seed's summary")
    per_seed = [dynamic_comparisons(s, num_gpus, degrees, phase_kind) for s in summaries]
    best = best_fixed_label([c["best_fixed_composition"] for c in per_seed])
    load = dynamic_load_fraction(summaries, phase_kind)
    return [_row("dynamic", scenario, model, m, None if m == "mean_ttft_pct_vs_best_fixed" else paper_value,
                 [c[m] for c in per_seed], load, strongest_baseline=best) for m in DYNAMIC_METRICS]


def best_fixed_label(per_seed: list[str]) -> str:
    """``strongest_baseline`` of a dynamic row: the best fixed composition of each seed.

    One name when every seed has the same best composition (``"cp4x10"``); otherwise each
    composition with the number of seeds it was best on, most seeds first, ties by name
    (``"cp4x10 (2/3 seeds); cp2x20 (1/3 seeds)"``): the ``vs_best_fixed`` value compares each
    seed with its own best, so naming one seed's would misstate the reference.

    Raises:
        ValueError: on an empty list.
    """
    if not per_seed:
        raise ValueError("best_fixed_label needs at least one seed's best fixed composition")
    counts = Counter(per_seed)
    if len(counts) == 1:
        return per_seed[0]
    n = len(per_seed)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return "; ".join(f"{comp} ({k}/{n} seeds)" for comp, k in ranked)


def dynamic_load_fraction(summaries: list[dict], phase_kind: str | None = None) -> float | None:
    """Mean over seeds of a phase kind's mean arrival rate over its measured capacity
    (``summary["phase_mean_rates_rps"][kind] / summary["phase_capacities"][kind]["capacity_rps"]``:
    the strongest homogeneous pool's ``cpgym capacity`` rate of the mix); for the whole run
    (``phase_kind=None``) the higher of the loads of the kinds in ``summary["phases"]``.

    ``None`` when a seed's run has no measured capacity for a kind needed: ``cpgym dynamic``
    measures one only for the kinds given as a load (``--short-load`` / ``--long-load``); a kind
    at an absolute rate has no known load, so the whole run's load is unknown too.

    Raises:
        ValueError: naming the seed (position in ``summaries``) and the field, on a
            ``phase_kind`` that no phase of the run has, a measured capacity that is not a finite
            number > 0 [req/s], or a mean rate that is missing or not a finite number >= 0 [req/s].
    """
    loads = []
    for i, s in enumerate(summaries):
        caps = s.get("phase_capacities") or {}
        run_kinds = sorted({ph["kind"] for ph in s.get("phases") or []}) or sorted(caps)
        if phase_kind is not None and s.get("phases") and phase_kind not in run_kinds:
            raise ValueError(f"summary {i}: no phase of kind {phase_kind!r} (kinds: {run_kinds})")
        kinds = [phase_kind] if phase_kind is not None else run_kinds
        if not kinds or any(k not in caps for k in kinds):
            return None  # a kind at an absolute rate: its load is unknown
        rates = s.get("phase_mean_rates_rps") or {}
        seed_loads = []
        for k in kinds:
            cap = caps[k].get("capacity_rps") if isinstance(caps[k], dict) else None
            if not _finite_number(cap) or cap <= 0:
                raise ValueError(f"summary {i}: phase_capacities[{k!r}]['capacity_rps'] must be a finite number > 0 "
                                 f"[req/s], got {cap!r}")
            rate = rates.get(k)
            if not _finite_number(rate) or rate < 0:
                raise ValueError(f"summary {i}: phase_mean_rates_rps[{k!r}] must be a finite number >= 0 [req/s], "
                                 f"got {rate!r}")
            seed_loads.append(rate / cap)
        loads.append(max(seed_loads))
    return float(np.mean(loads))


def _finite_number(x) -> bool:
    return is_number(x) and math.isfinite(x)


def cache_rows(pairs: list[tuple[dict, dict]], model: str, workload: str = "tool-agent",
               load_fraction: float | None = None) -> list[dict]:
    """Cache rows from per-seed ``(local caches, global manager)`` summaries (``envs.metrics.summarize``
    keys ``mean_ttft_s``, ``p90_ttft_s``, ``prefix_hit_rate``).

    Raises:
        ValueError: on no pairs.
    """
    if not pairs:
        raise ValueError("cache_rows needs at least one seed's (local, manager) pair")
    vals = {"mean_ttft_pct": [_pct(g["mean_ttft_s"], loc["mean_ttft_s"]) for loc, g in pairs],
            "p90_ttft_pct": [_pct(g["p90_ttft_s"], loc["p90_ttft_s"]) for loc, g in pairs],
            "hit_rate_pp": [100.0 * (g["prefix_hit_rate"] - loc["prefix_hit_rate"]) for loc, g in pairs]}
    return [_row("cache", workload, model, m, PAPER_CACHE[m], v, load_fraction, "local caches only") for m, v in vals.items()]


def reconfiguration_rows(operation_times_s: list[list[float]], model: str, workload: str = "phases") -> list[dict]:
    """Reconfiguration rows from per-seed lists of committed operations' drain + switch + confirm [s].

    Raises:
        ValueError: if a seed has no committed operation.
    """
    if not operation_times_s or any(len(t) == 0 for t in operation_times_s):
        raise ValueError("reconfiguration_rows needs at least one committed operation per seed")
    p10 = [float(np.percentile(t, 10)) for t in operation_times_s]
    p90 = [float(np.percentile(t, 90)) for t in operation_times_s]
    return [_row("reconfiguration", workload, model, "reconfig_time_s_p10", PAPER_RECONFIG["reconfig_time_s_p10"], p10),
            _row("reconfiguration", workload, model, "reconfig_time_s_p90", PAPER_RECONFIG["reconfig_time_s_p90"], p90)]


def operation_times_s(summary: dict) -> list[float]:
    """drain + switch + confirm [s] of the committed operations of one ``run_dynamic_phases`` summary."""
    return [float(o["total_s"]) for o in summary["operations"] if o["commit_s"] == o["commit_s"]]


def run_cache_pairs(rate_rps: float, seeds: tuple[int, ...], config, duration_s: float = 300.0,
                    base_policy: str = "vertumnus-router", manager_params: dict | None = None) -> list[tuple[dict, dict]]:
    """Runs local caches only and the global manager on the tool-agent workload at ``rate_rps``
    for each seed (workload seed = run seed, as ``cpgym cache-ablation --seed s --workload-seed s``).

    Args:
        rate_rps: request rate [requests/s].
        seeds: seeds (>= 1).
        config: ``envs.sim.SimConfig`` (pool, SLO); its seed is replaced per run.
        duration_s: simulated seconds of sessions.
        base_policy: the local-caches policy.
        manager_params: ``cache_<field>`` overrides of the manager (``with_global_cache`` parameters).

    Returns:
        ``[(local summary, manager summary)]`` per seed (``run_one`` summaries).

    Raises:
        ValueError: on no seeds, an unknown policy or an invalid manager parameter.
    """
    from dataclasses import replace

    if not seeds:
        raise ValueError("run_cache_pairs needs at least one seed")
    out = []
    for seed in seeds:
        cfg = CacheAblationConfig(rates_rps=(rate_rps,), duration_s=duration_s, workload_seed=seed, base_policy=base_policy)
        local, managed = policies(cfg)
        if manager_params:
            managed = managed.with_params(**manager_params)
        wl = cfg.workload_source(rate_rps).build()
        sim_cfg = replace(config, seed=seed)
        out.append((run_one(local, wl, sim_cfg), run_one(managed, wl, sim_cfg)))
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m experiments.paper_experiments.paper_rows KIND ...``: prints rows as JSON.

    * ``cache RATE SEEDS [SETTING]``: runs :func:`run_cache_pairs` (tool-agent, 300 s; SEEDS like
      ``0,1,2``; SETTING a key of ``CACHE_MANAGER_SETTINGS``, default ``default``);
    * ``reconfiguration DYNAMIC_JSON...`` / ``dynamic DYNAMIC_JSON...``: rows from the
      ``dynamic.json`` files ``cpgym dynamic --out-dir`` wrote, one per seed (dynamic: one set
      of rows per scenario of :data:`DYNAMIC_SCENARIOS`).
    """
    import json
    import sys
    from dataclasses import asdict

    argv = sys.argv[1:] if argv is None else argv
    usage = ("usage: python -m experiments.paper_experiments.paper_rows cache RATE SEEDS [SETTING] | "
             "reconfiguration DYNAMIC_JSON... | dynamic DYNAMIC_JSON...")
    if len(argv) < 2:
        print(usage, file=sys.stderr)
        return 2
    kind, rest = argv[0], argv[1:]
    if kind == "cache":
        setting = CACHE_MANAGER_SETTINGS[rest[2] if len(rest) > 2 else "default"]
        params = {f"cache_{k}": v for k, v in asdict(setting).items() if k not in ("beta", "lambda_")}
        params = {k: v for k, v in params.items() if k[len("cache_"):] in _sweepable()}
        seeds = tuple(int(s) for s in rest[1].split(","))
        rows = cache_rows(run_cache_pairs(float(rest[0]), seeds, SimConfig(), manager_params=params), _model())
    elif kind in ("reconfiguration", "dynamic"):
        summaries = [json.loads(open(p).read()) for p in rest]
        try:
            model = summaries_model(summaries, rest)
            if kind == "reconfiguration":
                rows = reconfiguration_rows([operation_times_s(s) for s in summaries], model)
            else:
                pool = summaries[0]["pool"]
                degrees = (min(pool["supported_degrees"]), max(pool["supported_degrees"]))
                rows = []
                for scenario, phase_kind in DYNAMIC_SCENARIOS.items():
                    rows += dynamic_rows(scenario, summaries, model, int(pool["num_gpus"]), degrees,
                                         PAPER_DYNAMIC.get(scenario), phase_kind)
        except ValueError as e:
            print(f"paper_rows {kind}: {e}", file=sys.stderr)
            return 2
    else:
        print(usage, file=sys.stderr)
        return 2
    print(dumps_json(rows))
    return 0


def summaries_model(summaries: list[dict], paths: list[str]) -> str:
    """The model label of ``run_dynamic_phases`` summaries: their ``calibration.model``.

    A ``dynamic.json`` written before the summary recorded its calibration has no
    ``calibration`` key; such a file counts as the shipped default calibration's model (every
    run in ``results/`` without the key used a Qwen3-30B-A3B calibration).

    Raises:
        ValueError: if the files were run on different models (names each file's model).
    """
    models = [s.get("calibration", {}).get("model") or _model() for s in summaries]
    if len(set(models)) > 1:
        raise ValueError("the dynamic.json files were run on different models: "
                         + ", ".join(f"{p}: {m}" for p, m in zip(paths, models)) + "; give one model's files")
    return models[0]


def _sweepable() -> tuple[str, ...]:
    return SWEEPABLE_FIELDS


def _model() -> str:
    cal = Calibration.resolve(None)
    return str(getattr(cal, "model", "default"))


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
