"""Running named policies on a workload: the one code path behind ``cpgym simulate``,
``cpgym compare``, sweeps and evaluations."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from baselines.prediction_error import summarize_prediction_errors
from baselines.registry import PolicySpec, get_policy
from envs.metrics import request_table, summarize
from envs.planning.capacity import CapacityCache, DemandHistory, resolve_history
from envs.provenance import write_provenance
from envs.sim import Calibration, SimConfig, Simulator, Workload
from envs.sim.simulator import SimResult


def policy_pool(spec: PolicySpec, pool):
    """The pool ``spec`` runs on: its own composition (a homogeneous, TP-4 or SGLang CP-4 baseline)
    over ``pool``'s GPUs, else ``pool`` itself.

    Raises:
        ValueError: naming the policy, when its composition does not fit ``pool``'s GPUs, node size
            or supported degrees, or its settings do not fit the pool (``PolicySpec.check_pool``).
    """
    try:
        composition = spec.resolve_composition(pool)
        run_pool = pool if composition is None else replace(pool, composition=composition)
    except ValueError as exc:
        raise ValueError(f"policy {spec.name!r} runs on its own pool, which these pool flags reject: {exc}") from None
    if spec.check_pool is not None:
        try:
            spec.check_pool(run_pool)
        except ValueError as exc:
            raise ValueError(f"policy {spec.name!r}: {exc}") from None
    return run_pool


def build_simulator(policy: str | PolicySpec, workload: Workload, config: SimConfig,
                    calibration: Calibration | None = None, capacity_cache=None,
                    history: DemandHistory | Workload | Callable[[], DemandHistory] | None = None,
                    ) -> tuple[Simulator, PolicySpec]:
    """Creates the simulator for one policy: applies the policy's pool composition (if it needs
    one) or its pool choice (the full Vertumnus system's initial composition) and attaches its
    controllers / cache manager.

    Args:
        capacity_cache: a :class:`envs.planning.capacity.CapacityCache` shared by the runs of an
            experiment (profiles are pure functions of their key, so sharing only skips work);
            default a new one owned by this run. Attachments find it as
            ``sim.attachments["capacity_cache"]``.
        history: the demand history the policy plans from offline
            (:class:`envs.planning.capacity.DemandHistory`: the full Vertumnus system's initial
            composition, a controller's first reference mix and prior prefix hit), a workload
            standing in for it, or a zero-argument function returning it (called only by a policy
            that reads a history); default the run's own workload
            (:func:`envs.planning.capacity.resolve_history`). The benchmark passes its task's
            training episodes. Attachments find it with :func:`envs.planning.capacity.run_history`.
    """
    spec = get_policy(policy) if isinstance(policy, str) else policy
    config = replace(config, pool=policy_pool(spec, config.pool))
    if spec.kv_tiers is not None and not config.kv_tiers.enabled:  # the system's own KV tiers (pull path)
        config = replace(config, kv_tiers=spec.kv_tiers)
    cache = capacity_cache if capacity_cache is not None else CapacityCache()
    pool_info = None
    if spec.choose_pool is not None and workload.num_requests:
        if calibration is None:
            calibration = Calibration.resolve(config.calibration_path)
        history = resolve_history(history, workload)
        pool, pool_info = spec.choose_pool(config.pool, history, config, calibration, cache)
        config = replace(config, pool=pool)
    slo_cost_model = None
    node_calibrations = None
    if spec.calibration_transform is not None:
        if calibration is None:
            calibration = Calibration.resolve(config.calibration_path)
        slo_cost_model = calibration.cost_model()  # SLOs from the untransformed calibration
        if config.node_calibration_paths:  # heterogeneous pool: every node's GPUs get the policy's cost form
            node_calibrations = [spec.calibration_transform(Calibration.load(p) if p else calibration)
                                 for p in config.node_calibration_paths]
        calibration = spec.calibration_transform(calibration)
    sim = Simulator(workload, config, calibration, policy_name=spec.name, slo_cost_model=slo_cost_model,
                    node_calibrations=node_calibrations)
    sim.attachments["capacity_cache"] = cache
    if history is not None:
        sim.attachments["demand_history"] = history
    if pool_info is not None:
        info = {"composition": config.pool.composition, **pool_info}
        sim.extras_providers.append(lambda: {"initial_pool": info})
    for attachment in spec.make_attachments():
        attachment.attach(sim)
    return sim, spec


def run_policy(policy: str | PolicySpec, workload: Workload, config: SimConfig,
               calibration: Calibration | None = None, progress=None, capacity_cache=None,
               history: DemandHistory | Workload | Callable[[], DemandHistory] | None = None) -> SimResult:
    """Runs one policy to the end (or the horizon) and returns its result.

    Args:
        progress: optional callable ``(num_routed)`` called every 1,000 requests routed for the
            first time and once at the end with the rest (a request re-routed by a
            reconfiguration or a fault counts once, so the total never exceeds
            ``workload.num_requests``).
        capacity_cache, history: see :func:`build_simulator`.
    """
    sim, spec = build_simulator(policy, workload, config, calibration, capacity_cache, history)
    if progress is not None:
        state = {"n": 0}
        routed = bytearray(workload.num_requests)

        def _tick(_sim, req, _w) -> None:
            if routed[req.request_id]:
                return
            routed[req.request_id] = 1
            state["n"] += 1
            if state["n"] % 1000 == 0:
                progress(1000)

        sim.dispatch_listeners.append(_tick)
    result = sim.run(spec.make_router())
    if progress is not None and state["n"] % 1000:
        progress(state["n"] % 1000)
    result.extras["policy_description"] = spec.description
    return result


def run_name(workload: str, policy: str, seed: int, when: float | None = None) -> str:
    """CleanRL-style run name ``{workload}__{policy}__{seed}__{unix time}``; characters that are
    awkward in file names (``[ ] : /`` ...) become ``-`` (``tool-agent[0:20]`` -> ``tool-agent-0-20``)."""
    safe = re.sub(r"[^A-Za-z0-9._+-]+", "-", workload).strip("-")
    return f"{safe}__{policy}__{seed}__{int(when if when is not None else time.time())}"


def unique_run_dir(base: str | Path) -> Path:
    """``base``, or ``base-2``, ``base-3``, ... if it exists: never an earlier run's folder that got
    the same :func:`run_name` in the same second (the folder is not created)."""
    base = Path(base)
    d, k = base, 1
    while d.exists():
        k += 1
        d = base.with_name(f"{base.name}-{k}")
    return d


def config_dict(config: SimConfig) -> dict:
    """``asdict(config)`` as written to ``config.json`` / ``cell.json``: the SLO block keeps only the
    fields its ``kind`` uses (``ttft_slo_s`` for ``"fixed"``; ``slo_scale`` and ``min_ttft_slo_s``
    for ``"scaled"``), so a file never shows an SLO number that the run did not apply; default-off
    KV tiers are left out (:meth:`SimConfig.to_dict`)."""
    d = config.to_dict()
    unused = ("slo_scale", "min_ttft_slo_s") if config.slo.kind == "fixed" else ("ttft_slo_s",)
    d["slo"] = {k: v for k, v in d["slo"].items() if k not in unused}
    return d


def write_run(out_dir: str | Path, result: SimResult, summary: dict, extra_config: dict | None = None) -> Path:
    """Writes one run: ``requests.parquet`` (per-request table), ``summary.json``,
    ``config.json`` (the full resolved config, calibration included), ``prediction_errors.csv``
    and ``provenance.json`` (``envs.provenance``; argv from ``extra_config["argv"]`` if
    given) under ``out_dir/<run name>/``. Returns that folder."""
    d = unique_run_dir(Path(out_dir) / run_name(result.workload, result.policy, result.config.seed))
    d.mkdir(parents=True)
    request_table(result).to_parquet(d / "requests.parquet", index=False)
    (d / "summary.json").write_text(json.dumps(summary, indent=2, default=float) + "\n")
    config = {"sim_config": config_dict(result.config), "calibration": result.calibration.to_dict(),
              "policy": result.policy, "workload": result.workload, **(extra_config or {})}
    (d / "config.json").write_text(json.dumps(config, indent=2, default=str) + "\n")

    summarize_prediction_errors(result).to_csv(d / "prediction_errors.csv", index=False)

    write_provenance(d, argv=(extra_config or {}).get("argv"))
    return d


__all__ = ["build_simulator", "run_policy", "run_name", "unique_run_dir", "write_run", "config_dict", "summarize"]
