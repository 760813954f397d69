"""Cells of an experiment spec: the cartesian expansion (listed x grid x policies x seeds) and the
deterministic cell key."""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable, Collection
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from envs.sim import SimConfig
from envs.sim.cost_model import DEFAULT_CALIBRATION
from experiments.spec.model import SPEC_VERSION, Cell, ExperimentSpec, SpecError, WorkloadSpec, make_workload
from experiments.spec.paths import HASHED_POLICY_PARAMS, SIM_PATHS, WORKLOAD_PATHS, apply_sims


def _file_sha256(path: str, cache: dict[str, str]) -> str:
    if path not in cache:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        cache[path] = h.hexdigest()
    return cache[path]


def _default_calibration_path() -> str:
    """The shipped calibration file that ``calibration_path=None`` means (envs.sim.cost_model)."""
    from importlib import resources

    return str(resources.files("envs.sim").joinpath("calibrations", DEFAULT_CALIBRATION))


def cell_key(workload: WorkloadSpec, config: SimConfig, policy: str, policy_params: tuple, hashes: dict[str, str],
             legacy: bool = False) -> str:
    """Deterministic key of a resolved cell: SHA-256 (16 hex digits) of its canonical JSON —
    workload spec, full SimConfig, policy and parameters, and the contents (SHA-256) of the trace
    and calibration files (the shipped default calibration when ``calibration_path`` is None), so
    an edited input file is a new cell. The sweep name is not part of it; neither is the code:
    after changing the simulator or a policy, sweep into a new output folder (a resume warns about
    cells of other code: ``experiments.sweep.manifest.outdated_cells``).

    Where the files live is not part of it either: the trace and calibration paths (absolute after
    loading) are left out of the hashed document, their contents name them, so one spec keys its
    cells alike from any checkout, working directory or traces folder. ``legacy`` gives the key as
    it was before (with the absolute paths, :attr:`~experiments.spec.model.Cell.legacy_key`), which
    a resume at the same location still recognises; a cell with neither a trace nor a calibration
    path has one key either way."""
    wl = asdict(workload)
    wl["window_s"] = wl.pop("arrival_window_s")  # hashed under its earlier name: the keys of finished cells stay
    sim = config.to_dict()
    doc = {"v": SPEC_VERSION, "workload": wl, "sim_config": sim, "policy": policy,
           # parameters under the names of earlier releases (HASHED_POLICY_PARAMS): the keys of finished cells stay
           "policy_params": [list(kv) for kv in sorted((HASHED_POLICY_PARAMS.get(k, k), v) for k, v in policy_params)]}
    if workload.trace is not None:
        doc["trace_sha256"] = _file_sha256(workload.trace, hashes)
    doc["calibration_sha256"] = _file_sha256(config.calibration_path or _default_calibration_path(), hashes)
    if not legacy:  # the contents above name the files; their paths depend on where the repo and traces are
        wl["trace"] = None
        sim["calibration_path"] = None
    text = json.dumps(doc, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _legacy_key(workload: WorkloadSpec, config: SimConfig, policy: str, policy_params: tuple,
                hashes: dict[str, str]) -> str | None:
    """The key that earlier versions gave a cell with a trace or calibration path (absolute paths
    hashed), or ``None`` where it is the key itself."""
    if workload.trace is None and config.calibration_path is None:
        return None
    return cell_key(workload, config, policy, policy_params, hashes, legacy=True)



# setting one of these workload fields clears the fields it excludes
_WORKLOAD_EXCLUSIVE = {"target_rps": ("rate_scale",), "rate_scale": ("target_rps",), "trace": ("name", "params"),
                       "name": ("trace",)}


def _apply_overrides(file: str | Path, spec: ExperimentSpec, overrides: list[tuple[str, Any]], key_where: str,
                     ) -> tuple[dict[str, Any], SimConfig, dict[str, dict[str, Any]]]:
    """One cell's overrides applied to the spec's base: (workload kwargs, config, per-policy params)."""
    wl_kwargs = asdict(spec.workload)
    wl_kwargs["params"] = dict(spec.workload.params)
    config = spec.config
    pparams: dict[str, dict[str, Any]] = {}
    sim_items = []
    for path, v in overrides:
        if path == "policy":
            continue
        if path in SIM_PATHS:
            sim_items.append((path, v, f"{key_where}.{path}"))
        elif path in WORKLOAD_PATHS:
            field_name = path.split(".", 1)[1]
            wl_kwargs[field_name] = v
            for cleared in _WORKLOAD_EXCLUSIVE.get(field_name, ()):
                wl_kwargs[cleared] = {} if cleared == "params" else None
        elif path.startswith("workload.params."):
            wl_kwargs["params"][path.split(".")[2]] = v
        else:
            pol, _, param = path.partition(".")
            pparams.setdefault(pol, {})[param] = v
    wl_kwargs["params"] = tuple(sorted(wl_kwargs["params"].items()))
    config = apply_sims(file, config, sim_items) if sim_items else config  # at once: pool.num_gpus with pool.composition
    return wl_kwargs, config, pparams


def resolve_cells(file: str | Path, spec: ExperimentSpec, policy_names: Collection[str],
                  check_workload: Callable[[WorkloadSpec, str], None]) -> list[Cell]:
    """All cells of ``spec`` in a deterministic order (listed x grid x policies x seeds).

    Args:
        file: the spec file (for error messages).
        spec: the validated spec (``_resolved`` not yet set).
        policy_names: registered policy names (a path ``<policy>.<param>`` is a policy parameter).
        check_workload: ``check_workload(workload, key)`` validates a cell's workload (named
            workload and its parameters) and raises a :class:`SpecError` at ``key``.

    Raises:
        SpecError: an invalid cell, or two cells that resolve to the same config.
    """
    out: list[Cell] = []
    hashes: dict[str, str] = {}
    seen: dict[str, tuple] = {}
    grid_paths = [p for p, _ in spec.grid]
    static_params = {p: dict(kv) for p, kv in spec.policy_params}
    for li, listed in enumerate(spec.cells):
        key_where = f"sweep.cells[{li}]" if listed else "sweep.grid"
        for combo in itertools.product(*(v for _, v in spec.grid)):
            overrides = list(listed) + list(zip(grid_paths, combo))
            wl_kwargs, config, pparams = _apply_overrides(file, spec, overrides, key_where)
            workload = make_workload(file, wl_kwargs, key_where)
            check_workload(workload, f"{key_where}.workload.name")
            policy_fixed = next((v for p, v in overrides if p == "policy"), None)
            swept = tuple((p, v) for p, v in overrides if p != "policy" and p.split(".")[0] not in policy_names)
            for pol in [policy_fixed] if policy_fixed else list(spec.policies):
                params = tuple(sorted({**static_params.get(pol, {}), **pparams.get(pol, {})}.items()))
                pol_axes = swept + tuple((f"{pol}.{k}", v) for k, v in pparams.get(pol, {}).items()) + (("policy", pol),)
                for seed in spec.seeds:
                    cfg = replace(config, seed=seed)
                    wl = replace(workload, seed=workload.seed + seed) if spec.seed_workload else workload
                    key = cell_key(wl, cfg, pol, params, hashes)
                    axes = pol_axes + (("seed", seed),)
                    if key in seen and seen[key] == axes:
                        continue  # an axis of another policy's parameter: same run, listed once
                    if key in seen:
                        raise SpecError(file, key_where, f"two cells resolve to the same config ({dict(seen[key])} and "
                                        f"{dict(axes)})", "distinct cells (remove the duplicate)")
                    seen[key] = axes
                    out.append(Cell(key=key, sweep=spec.name, workload=wl, config=cfg, policy=pol,
                                    policy_params=params, axes=axes,
                                    legacy_key=_legacy_key(wl, cfg, pol, params, hashes)))
    return out
