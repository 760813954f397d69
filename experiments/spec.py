"""Experiment spec files (YAML or TOML), validated into frozen dataclasses before anything runs.

A spec fully determines a set of runs ("cells"): workload, pool and simulator settings,
calibration, policies, seeds, horizon and the sweep axes. Example (YAML)::

    name: rates-demo                    # sweep name: output folder and wandb group
    description: least-work vs prefix-affinity over rates
    workload:
      name: mixed-default               # named synthetic workload (envs.workloads.WORKLOADS) ...
      # trace: "@traces/conversation_trace.jsonl"   # ... or a trace file ("@traces/" = shared traces dir,
      #                                             #     other relative paths are relative to this file)
      seed: 0                           # generator / arrival-spreading seed
      params: {duration_s: 120}         # keyword overrides of the named workload
      window_s: [0, 300]                # keep arrivals in [start, end) s (after rate scaling)
    sim:                                # any SimConfig field, nested or dotted
      pool.composition: cp4x6,cp2x8
      slo: {slo_scale: 3.0}
    calibration: null                   # calibration JSON (default: the shipped one)
    horizon_s: null                     # stop time [s]; unfinished requests are SLO misses
    policies: [least-work, prefix-affinity]
    seeds: [0, 1, 2]                    # run seeds (SimConfig.seed)
    seed_workload: true                 # default: workload seed = workload.seed + run seed
    rates: [10, 20, 30]                 # shorthand for the grid axis workload.target_rps [requests/s]
    sweep:
      grid:                             # cartesian axes: dotted path -> non-empty list of values
        cache_capacity_scale: [0.5, 1.0]
      cells:                            # listed sweep: each entry one set of overrides
        - {slo.slo_scale: 2.0}
        - {slo.slo_scale: 4.0, policy: least-work}

Cells = listed cells x grid x policies x seeds (a listed cell with ``policy`` fixes the policy).
With ``seed_workload: true`` (the default) each run seed also re-draws the workload (generator
seed ``workload.seed + seed``; for traces: the spreading of quantised timestamps), so that the 95%
confidence intervals over seeds of ``cpgym report`` cover workload sampling, not only execution
noise; ``false`` replays one workload under every seed.
Dotted paths address:

* ``workload.<field>`` (``name``, ``trace``, ``seed``, ``target_rps``, ``rate_scale``,
  ``window_s``, ``skip_invalid``) and ``workload.params.<name>`` (named-workload overrides);
* any leaf of :class:`envs.sim.SimConfig` (``pool.composition``, ``slo.slo_scale``,
  ``prediction_error.bias``, ``cache_capacity_scale``, ``engine.max_batch_tokens``,
  ``links.inter_node_bytes_per_s``, ``horizon_s``, ``calibration_path``; not ``seed``, use ``seeds``);
* ``<policy>.<param>`` for a policy parameter, when the policy registry declares parameters
  (``PolicySpec.params``, a mapping of name -> default); otherwise sweep over policy names.

Every error is a :class:`SpecError` naming the file, the key and the expected form, raised by
:func:`load_spec` before any cell runs.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import tomllib
import typing
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any

from envs.sim import SimConfig

SPEC_VERSION = 1  # part of every cell key; bump when the meaning of a resolved cell changes
TRACES_PREFIX = "@traces/"

TOP_LEVEL_KEYS = ("name", "description", "workload", "sim", "calibration", "horizon_s", "policies", "policy_params",
                  "seeds", "seed_workload", "rates", "sweep")
SWEEP_KEYS = ("grid", "cells")
WORKLOAD_KEYS = ("name", "trace", "seed", "params", "target_rps", "rate_scale", "window_s", "skip_invalid")


class SpecError(ValueError):
    """An invalid experiment spec: ``"<file>: <key>: <problem>; expected <form>"``."""

    def __init__(self, file: str | Path, key: str, problem: str, expected: str) -> None:
        self.file, self.key, self.problem, self.expected = str(file), key, problem, expected
        super().__init__(f"{file}: {key}: {problem}; expected {expected}")


# ---------------------------------------------------------------------------------- workload
@dataclass(frozen=True)
class WorkloadSpec:
    """Where a cell's requests come from and how they are transformed.

    Args:
        name: named synthetic workload (a key of ``envs.workloads.WORKLOADS``), or ``None``.
        trace: trace file (absolute after loading; Mooncake JSONL, Azure 2023 CSV, L-Eval CSV).
        seed: seed of the synthetic generator / of spreading quantised trace timestamps.
        params: keyword overrides of the named workload, as ``((name, value), ...)``.
        target_rps: time-scale arrivals to this mean rate [requests/s] (``scale_to_rate``).
        rate_scale: multiply the arrival rate by this factor (``scale_rate``).
        window_s: keep arrivals in ``[start, end)`` [s], applied after rate scaling.
        skip_invalid: skip invalid trace lines instead of failing.

    Raises:
        ValueError: unless exactly one of ``name``/``trace`` is set, or on a non-positive rate,
            both rate knobs set, or an empty window.
    """

    name: str | None = None
    trace: str | None = None
    seed: int = 0
    params: tuple[tuple[str, Any], ...] = ()
    target_rps: float | None = None
    rate_scale: float | None = None
    window_s: tuple[float, float] | None = None
    skip_invalid: bool = False

    def __post_init__(self) -> None:
        if (self.name is None) == (self.trace is None):
            raise ValueError("exactly one of workload.name (named workload) and workload.trace (trace file) must be set")
        if self.target_rps is not None and self.rate_scale is not None:
            raise ValueError("workload.target_rps and workload.rate_scale are exclusive")
        for key in ("target_rps", "rate_scale"):
            v = getattr(self, key)
            if v is not None and not (v > 0 and math.isfinite(v)):
                raise ValueError(f"workload.{key} must be a finite number > 0, got {v!r}")
        if self.window_s is not None and not (self.window_s[1] > self.window_s[0] >= 0):
            raise ValueError(f"workload.window_s must be [start, end) with 0 <= start < end, got {list(self.window_s)}")
        if self.seed < 0:
            raise ValueError(f"workload.seed must be >= 0, got {self.seed}")

    @property
    def label(self) -> str:
        """Short name: the named workload or the trace file's stem."""
        return self.name if self.name is not None else Path(self.trace).name.split(".")[0]

    def build(self):
        """Loads / generates the workload and applies rate scaling and windowing.

        Returns:
            ``envs.sim.Workload``.

        Raises:
            ValueError / FileNotFoundError: from the loaders and transforms.
        """
        from envs import workloads

        if self.trace is not None:
            wl = workloads.load_trace(self.trace, skip_invalid=self.skip_invalid, spread_seed=self.seed)
        else:
            wl = workloads.get_workload(self.name, seed=self.seed, **{k: _materialize_param(v) for k, v in self.params})
        if self.target_rps is not None:
            wl = workloads.scale_to_rate(wl, self.target_rps)
        elif self.rate_scale is not None:
            wl = workloads.scale_rate(wl, self.rate_scale)
        if self.window_s is not None:
            wl = workloads.window(wl, self.window_s[0], self.window_s[1])
        return wl


# ---------------------------------------------------------------------------------- spec / cell
@dataclass(frozen=True)
class Cell:
    """One run of a sweep: everything needed to reproduce it, plus its labels.

    Args:
        key: deterministic cell key (16 hex digits of the SHA-256 of the resolved config).
        sweep: sweep (spec) name.
        workload: resolved workload spec.
        config: resolved simulator config (``config.seed`` is the run seed).
        policy: registered policy name.
        policy_params: ``((name, value), ...)`` passed to the policy (empty: registry defaults).
        axes: ``((dotted path, value), ...)`` of the swept values that define this cell
            (grid, listed overrides, ``policy``, ``seed``) — the report's grouping columns.
    """

    key: str
    sweep: str
    workload: WorkloadSpec
    config: SimConfig
    policy: str
    policy_params: tuple[tuple[str, Any], ...]
    axes: tuple[tuple[str, Any], ...]

    def to_dict(self) -> dict:
        """JSON-able description (``cell.json``)."""
        wl = asdict(self.workload)
        wl["params"] = dict(self.workload.params)
        return {"key": self.key, "sweep": self.sweep, "policy": self.policy, "seed": self.config.seed,
                "policy_params": dict(self.policy_params), "axes": dict(self.axes), "workload": wl,
                "sim_config": self.config.to_dict(), "spec_version": SPEC_VERSION}


@dataclass(frozen=True)
class ExperimentSpec:
    """A validated experiment spec (see the module docstring for the file format).

    Args:
        name: sweep name (output folder name, wandb group).
        path: the spec file.
        description: free text.
        workload: base workload.
        config: base simulator config (``sim``, ``calibration``, ``horizon_s`` applied).
        policies: policy names (cartesian axis).
        policy_params: static parameters per policy, ``((policy, ((param, value), ...)), ...)``.
        seeds: run seeds (cartesian axis).
        seed_workload: each run seed also offsets the workload seed (see the module docstring).
        grid: cartesian axes ``((dotted path, (value, ...)), ...)`` (``rates`` included).
        cells: listed overrides ``(((dotted path, value), ...), ...)``; ``((),)`` when none.
    """

    name: str
    path: str
    description: str
    workload: WorkloadSpec
    config: SimConfig
    policies: tuple[str, ...]
    policy_params: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]
    seeds: tuple[int, ...]
    seed_workload: bool
    grid: tuple[tuple[str, tuple[Any, ...]], ...]
    cells: tuple[tuple[tuple[str, Any], ...], ...]
    _resolved: tuple[Cell, ...] = field(default=(), repr=False, compare=False)

    def resolve(self) -> list[Cell]:
        """All cells, in a deterministic order (listed x grid x policies x seeds)."""
        return list(self._resolved)

    @property
    def num_cells(self) -> int:
        return len(self._resolved)


# ---------------------------------------------------------------------------------- parsing helpers
def _type_name(v: Any) -> str:
    return "null" if v is None else type(v).__name__


def _coerce(value: Any, tp: Any, err) -> Any:
    """Checks ``value`` against the annotation ``tp`` (int, float, str, bool, X | None, tuple[...])
    and returns it in canonical form (lists -> tuples, ints -> floats where a float is expected)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        if value is None and type(None) in args:
            return None
        non_none = [a for a in args if a is not type(None)]
        if len(non_none) == 1:
            return _coerce(value, non_none[0], err)
        raise err(f"unsupported type {tp}")
    if tp is Any:
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise err(f"got {_type_name(value)} {value!r}", "true or false")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise err(f"got {_type_name(value)} {value!r}", "an integer")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise err(f"got {_type_name(value)} {value!r}", "a number")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise err(f"got {_type_name(value)} {value!r}", "a string")
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise err(f"got {_type_name(value)} {value!r}", f"a list ({tp})")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(v, args[0], err) for v in value)
        if len(value) != len(args):
            raise err(f"got {len(value)} items {list(value)!r}", f"a list of {len(args)} items ({tp})")
        return tuple(_coerce(v, a, err) for v, a in zip(value, args))
    raise err(f"unsupported type {tp}", "a supported scalar")


def _leaf_types(cls) -> dict[str, Any]:
    """``{dotted path: annotation}`` of every non-dataclass leaf of a (nested) config dataclass."""
    out: dict[str, Any] = {}
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        tp = hints[f.name]
        if isinstance(tp, type) and is_dataclass(tp):
            for sub, sub_tp in _leaf_types(tp).items():
                out[f"{f.name}.{sub}"] = sub_tp
        else:
            out[f.name] = tp
    return out


SIM_PATHS: dict[str, Any] = {k: v for k, v in _leaf_types(SimConfig).items() if k not in ("seed", "record_events")}
WORKLOAD_PATHS: dict[str, Any] = {"workload." + k: v for k, v in typing.get_type_hints(WorkloadSpec).items() if k != "params"}
# the file form of window_s is a 2-list; params has its own sub-paths
WORKLOAD_PATHS["workload.window_s"] = tuple[float, float] | None
ALIASES = {"calibration": "calibration_path"}


def _set_path(obj, parts: list[str], value):
    """Returns a copy of dataclass ``obj`` with the leaf at ``parts`` replaced (nested replace)."""
    if len(parts) == 1:
        return replace(obj, **{parts[0]: value})
    return replace(obj, **{parts[0]: _set_path(getattr(obj, parts[0]), parts[1:], value)})


def _flatten(d: Mapping, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _read(path: Path) -> dict:
    suffix = path.suffix.lower()
    text = path.read_text()
    if suffix in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise SpecError(path, "<file>", f"not valid YAML ({exc})".replace("\n", " "), "a YAML mapping") from None
    elif suffix == ".toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise SpecError(path, "<file>", f"not valid TOML ({exc})", "a TOML table") from None
    else:
        raise SpecError(path, "<file>", f"unknown spec format {suffix!r}", "a .yaml, .yml or .toml file")
    if not isinstance(data, dict):
        raise SpecError(path, "<file>", f"top level is {_type_name(data)}", "a mapping of the keys " + ", ".join(TOP_LEVEL_KEYS))
    return data


ARRIVAL_FORMS = {"poisson_rps": ("poisson_rps",), "gamma_rps": ("gamma_rps", "cv")}


def _check_arrivals(value: Mapping, err) -> tuple[tuple[str, float], ...]:
    """A named-workload parameter given as an arrival process: ``{poisson_rps: X}`` (Poisson,
    ``envs.workloads.PoissonArrivals(X)``) or ``{gamma_rps: X, cv: Y}`` (``GammaArrivals(X, cv=Y)``),
    rates in requests (or sessions / documents) per second."""
    keys = tuple(sorted(value))
    forms = {tuple(sorted(v)): k for k, v in ARRIVAL_FORMS.items()}
    expected = "an arrival process {poisson_rps: X} or {gamma_rps: X, cv: Y} with numbers > 0"
    if keys not in forms:
        raise err(f"got mapping with keys {list(keys)}", expected)
    for k in keys:
        v = value[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise err(f"{k} = {v!r}", expected)
    return tuple((k, float(value[k])) for k in keys)


def _materialize_param(value: Any) -> Any:
    """Turns an arrival-process parameter (see :func:`_check_arrivals`) into its object."""
    if isinstance(value, tuple) and value and all(isinstance(x, tuple) and len(x) == 2 for x in value):
        d = dict(value)
        from envs.workloads import arrivals

        if set(d) == {"poisson_rps"}:
            return arrivals.PoissonArrivals(d["poisson_rps"])
        if set(d) == {"gamma_rps", "cv"}:
            return arrivals.GammaArrivals(d["gamma_rps"], cv=d["cv"])
    return value


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

    from envs.sim.cost_model import DEFAULT_CALIBRATION

    return str(resources.files("envs.sim").joinpath("calibrations", DEFAULT_CALIBRATION))


def cell_key(workload: WorkloadSpec, config: SimConfig, policy: str, policy_params: tuple, hashes: dict[str, str]) -> str:
    """Deterministic key of a resolved cell: SHA-256 (16 hex digits) of its canonical JSON —
    workload spec, full SimConfig, policy and parameters, and the contents (SHA-256) of the trace
    and calibration files (the shipped default calibration when ``calibration_path`` is None), so
    an edited input file is a new cell. The sweep name is not part of it; neither is the code:
    after changing the simulator or a policy, sweep into a new output folder."""
    doc = {"v": SPEC_VERSION, "workload": asdict(workload), "sim_config": config.to_dict(), "policy": policy,
           "policy_params": [list(p) for p in policy_params]}
    if workload.trace is not None:
        doc["trace_sha256"] = _file_sha256(workload.trace, hashes)
    doc["calibration_sha256"] = _file_sha256(config.calibration_path or _default_calibration_path(), hashes)
    text = json.dumps(doc, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------- loading
class _Loader:
    """Validates one spec file; every error names the file and key."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.base_dir = path.resolve().parent
        from baselines.registry import POLICIES

        self.policies = POLICIES

    def err(self, key: str):
        def make(problem: str, expected: str = "a valid value") -> SpecError:
            return SpecError(self.path, key, problem, expected)

        return make

    def resolve_file(self, key: str, value: Any, must_exist: bool = True) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str) or not value:
            raise self.err(key)(f"got {_type_name(value)} {value!r}", "a file path (string)")
        if value.startswith(TRACES_PREFIX):
            from envs.workloads import default_traces_dir

            p = Path(default_traces_dir()) / value[len(TRACES_PREFIX):]
        else:
            p = Path(value).expanduser()
            if not p.is_absolute():
                p = self.base_dir / p
        if must_exist and not p.is_file():
            raise self.err(key)(f"file {str(p)!r} does not exist", f"an existing file (relative paths are relative to {self.base_dir}; '{TRACES_PREFIX}...' is the shared traces folder)")
        return str(p.resolve())

    def check_content(self, key: str, path: str | None, kind: str) -> None:
        """Reads a calibration or trace file once (cached) so a bad file fails at load time."""
        if path is None:
            return
        checked = self.__dict__.setdefault("_checked_files", set())
        if (kind, path) in checked:
            return
        try:
            if kind == "calibration":
                from envs.sim.cost_model import Calibration

                Calibration.load(path)
            else:
                from envs.workloads import load_trace

                load_trace(path, skip_invalid=True)  # format errors; invalid lines are a run-time option
        except (ValueError, OSError) as exc:
            raise self.err(key)(str(exc), f"a valid {kind} file") from None
        checked.add((kind, path))

    # --- path kinds
    def classify(self, key: str, path: str, allow_policy: bool) -> tuple[str, Any]:
        """Returns (kind, detail): ('sim', annotation), ('workload', annotation), ('workload_param', name),
        ('policy', None) or ('policy_param', (policy, param))."""
        path = ALIASES.get(path, path)
        if path == "policy":
            if not allow_policy:
                raise self.err(key)("'policy' cannot be a grid axis", "the top-level 'policies' list (or 'policy' inside a listed cell)")
            return "policy", None
        if path == "seed":
            raise self.err(key)("the run seed is not a sweep axis", "the top-level 'seeds' list")
        if path in SIM_PATHS:
            return "sim", SIM_PATHS[path]
        if path in WORKLOAD_PATHS:
            return "workload", WORKLOAD_PATHS[path]
        if path.startswith("workload.params.") and len(path.split(".")) == 3:
            return "workload_param", path.split(".")[2]
        head, _, param = path.partition(".")
        if head in self.policies and param:
            spec = self.policies[head]
            params = getattr(spec, "params", None)
            if not isinstance(params, Mapping):
                raise self.err(key)(f"policy {head!r} declares no parameters (baselines/registry.py PolicySpec has no 'params')",
                                    "a sweep over policy names instead")
            if param not in params:
                raise self.err(key)(f"policy {head!r} has no parameter {param!r}", f"one of {sorted(params)}")
            return "policy_param", (head, param)
        close = [p for p in list(SIM_PATHS) + list(WORKLOAD_PATHS) if p.split(".")[-1] == path.split(".")[-1]]
        hint = f"e.g. {', '.join(close)}" if close else "e.g. pool.composition, slo.slo_scale, prediction_error.bias, cache_capacity_scale, workload.target_rps, <policy>.<param>"
        raise self.err(key)(f"unknown config path {path!r}", f"a dotted path into SimConfig / workload / a policy's parameters ({hint})")

    def check_value(self, key: str, path: str, value: Any, allow_policy: bool) -> tuple[str, Any, Any]:
        """Validates one override; returns (kind, detail, canonical value)."""
        kind, detail = self.classify(key, path, allow_policy)
        e = self.err(key)
        if kind == "policy":
            if not isinstance(value, str) or value not in self.policies:
                raise e(f"unknown policy {value!r}", f"one of {', '.join(self.policies)}")
            return kind, detail, value
        if kind in ("sim", "workload"):
            v = _coerce(value, detail, e)
            norm = ALIASES.get(path, path)
            if norm == "calibration_path":
                v = self.resolve_file(key, v)
                self.check_content(key, v, "calibration")
            elif norm == "workload.trace":
                v = self.resolve_file(key, v)
                self.check_content(key, v, "trace")
            return kind, detail, v
        if kind == "workload_param":
            if isinstance(value, Mapping):
                return kind, detail, _check_arrivals(value, e)
            if isinstance(value, list):
                value = tuple(value)
            return kind, detail, value
        return kind, detail, value  # policy_param: checked by the policy at run time

    def values_list(self, key: str, value: Any) -> list:
        if not isinstance(value, list):
            raise self.err(key)(f"got {_type_name(value)} {value!r}", "a non-empty list of values")
        if not value:
            raise self.err(key)("empty list", "a non-empty list of values")
        return value

    def load(self) -> ExperimentSpec:
        data = _read(self.path)
        unknown = [k for k in data if k not in TOP_LEVEL_KEYS]
        if unknown:
            raise SpecError(self.path, unknown[0], "unknown key", "one of " + ", ".join(TOP_LEVEL_KEYS))
        name = data.get("name", self.path.stem)
        if not isinstance(name, str) or not name or any(c in name for c in "/\\") or name.startswith("."):
            raise SpecError(self.path, "name", f"got {name!r}", "a non-empty name without '/' that does not start with '.'")
        description = data.get("description", "")
        if not isinstance(description, str):
            raise SpecError(self.path, "description", f"got {_type_name(description)}", "a string")

        # workload
        wl_raw = data.get("workload")
        if not isinstance(wl_raw, Mapping):
            raise SpecError(self.path, "workload", f"got {_type_name(wl_raw)}", "a mapping with 'name' (named workload) or 'trace' (file)")
        wl_kwargs: dict[str, Any] = {}
        for k, v in wl_raw.items():
            key = f"workload.{k}"
            if k not in WORKLOAD_KEYS:
                raise SpecError(self.path, key, "unknown key", "one of " + ", ".join(WORKLOAD_KEYS))
            if k == "params":
                if not isinstance(v, Mapping):
                    raise SpecError(self.path, key, f"got {_type_name(v)}", "a mapping of named-workload parameters")
                wl_kwargs["params"] = tuple(sorted((str(pk), self.check_value(f"{key}.{pk}", f"workload.params.{pk}", pv, False)[2])
                                                   for pk, pv in v.items()))
            else:
                wl_kwargs[k] = self.check_value(key, key, v, False)[2]
        base_wl = self._make_workload(WorkloadSpec, wl_kwargs, "workload")
        self._check_workload_name(base_wl, "workload.name")

        # simulator config
        sim_raw = data.get("sim", {}) or {}
        if not isinstance(sim_raw, Mapping):
            raise SpecError(self.path, "sim", f"got {_type_name(sim_raw)}", "a mapping of SimConfig fields (nested or dotted)")
        sim_over = {f"sim.{k}": v for k, v in _flatten(sim_raw).items()}
        for top in ("calibration", "horizon_s"):
            if top in data:
                sim_over[top] = data[top]
        config = SimConfig()
        for key, value in sim_over.items():
            path = key[4:] if key.startswith("sim.") else key
            kind, _, v = self.check_value(key, path, value, False)
            if kind != "sim":
                raise SpecError(self.path, key, f"{path!r} is not a simulator setting", "a SimConfig field (workload settings go under 'workload')")
            config = self._apply_sim(config, ALIASES.get(path, path), v, key)

        # policies, params, seeds
        policies_raw = self.values_list("policies", data.get("policies"))
        for i, p in enumerate(policies_raw):
            if not isinstance(p, str) or p not in self.policies:
                raise SpecError(self.path, f"policies[{i}]", f"unknown policy {p!r}", "one of " + ", ".join(self.policies))
        if len(set(policies_raw)) != len(policies_raw):
            raise SpecError(self.path, "policies", "duplicate policy names", "distinct names")
        pp_raw = data.get("policy_params", {}) or {}
        if not isinstance(pp_raw, Mapping):
            raise SpecError(self.path, "policy_params", f"got {_type_name(pp_raw)}", "a mapping policy -> {param: value}")
        policy_params: dict[str, dict[str, Any]] = {}
        for pol, params in pp_raw.items():
            if not isinstance(params, Mapping):
                raise SpecError(self.path, f"policy_params.{pol}", f"got {_type_name(params)}", "a mapping param -> value")
            for pk, pv in params.items():
                self.check_value(f"policy_params.{pol}.{pk}", f"{pol}.{pk}", pv, False)
                policy_params.setdefault(pol, {})[pk] = pv
        seeds = data.get("seeds", [0])
        seeds = self.values_list("seeds", seeds)
        for i, s in enumerate(seeds):
            if isinstance(s, bool) or not isinstance(s, int) or s < 0:
                raise SpecError(self.path, f"seeds[{i}]", f"got {_type_name(s)} {s!r}", "an integer >= 0")
        if len(set(seeds)) != len(seeds):
            raise SpecError(self.path, "seeds", "duplicate seeds", "distinct integers")
        seed_workload = data.get("seed_workload", True)
        if not isinstance(seed_workload, bool):
            raise SpecError(self.path, "seed_workload", f"got {_type_name(seed_workload)} {seed_workload!r}", "true or false")

        # sweep axes
        grid: list[tuple[str, tuple[Any, ...]]] = []
        if "rates" in data:
            rates = self.values_list("rates", data["rates"])
            grid.append(("workload.target_rps", tuple(self.check_value(f"rates[{i}]", "workload.target_rps", r, False)[2]
                                                      for i, r in enumerate(rates))))
        sweep = data.get("sweep", {}) or {}
        if not isinstance(sweep, Mapping):
            raise SpecError(self.path, "sweep", f"got {_type_name(sweep)}", "a mapping with 'grid' and/or 'cells'")
        for k in sweep:
            if k not in SWEEP_KEYS:
                raise SpecError(self.path, f"sweep.{k}", "unknown key", "one of " + ", ".join(SWEEP_KEYS))
        grid_raw = sweep.get("grid", {})
        if not isinstance(grid_raw, Mapping):
            raise SpecError(self.path, "sweep.grid", f"got {_type_name(grid_raw)}", "a mapping dotted.path -> [values]")
        for path, values in grid_raw.items():
            key = f"sweep.grid.{path}"
            self.classify(key, path, False)  # a bad path is reported before its values
            values = self.values_list(key, values)
            canon = tuple(self.check_value(f"{key}[{i}]", path, v, False)[2] for i, v in enumerate(values))
            norm = ALIASES.get(path, path)
            if any(p == norm for p, _ in grid):
                raise SpecError(self.path, key, f"axis {norm!r} given twice ('rates' is the axis workload.target_rps)", "each axis once")
            grid.append((norm, canon))
        cells_raw = sweep.get("cells")
        listed: list[tuple[tuple[str, Any], ...]] = []
        if cells_raw is None:
            listed = [()]
        else:
            cells_raw = self.values_list("sweep.cells", cells_raw)
            grid_paths = {p for p, _ in grid}
            for i, c in enumerate(cells_raw):
                key = f"sweep.cells[{i}]"
                if not isinstance(c, Mapping) or not c:
                    raise SpecError(self.path, key, f"got {_type_name(c)} {c!r}", "a non-empty mapping dotted.path -> value")
                items = []
                for path, v in c.items():
                    norm = ALIASES.get(path, path)
                    if norm in grid_paths:
                        raise SpecError(self.path, f"{key}.{path}", "also a grid axis", "a path that is not swept by the grid")
                    items.append((norm, self.check_value(f"{key}.{path}", path, v, True)[2]))
                listed.append(tuple(items))

        spec = ExperimentSpec(name=name, path=str(self.path), description=description, workload=base_wl, config=config,
                              policies=tuple(policies_raw),
                              policy_params=tuple((p, tuple(sorted(d.items()))) for p, d in sorted(policy_params.items())),
                              seeds=tuple(seeds), seed_workload=seed_workload, grid=tuple(grid), cells=tuple(listed))
        cells = self._resolve(spec)
        return replace(spec, _resolved=tuple(cells))

    # --- building
    def _make_workload(self, cls, kwargs: dict, key: str) -> WorkloadSpec:
        try:
            return cls(**kwargs)
        except (ValueError, TypeError) as exc:
            raise SpecError(self.path, key, str(exc), "a valid workload (see experiments/spec.py)") from None

    def _check_workload_name(self, wl: WorkloadSpec, key: str) -> None:
        if wl.name is None:
            return
        from envs import workloads

        known = getattr(workloads, "WORKLOADS", None)
        if known is not None and wl.name not in known:
            raise SpecError(self.path, key, f"unknown workload {wl.name!r}", "one of " + ", ".join(sorted(known)))
        generator = getattr(known[wl.name], "generator", None) if known is not None else None
        if generator is None:
            return
        import inspect

        params = inspect.signature(generator).parameters
        accepted = sorted(k for k in params if k not in ("seed", "name"))
        for name, value in wl.params:
            pkey = f"{key[:-len('.name')] if key.endswith('.name') else key}.params.{name}"
            if name not in accepted:
                raise SpecError(self.path, pkey, f"unknown parameter {name!r} of workload {wl.name!r}", "one of " + ", ".join(accepted))
            default = params[name].default
            value = _materialize_param(value)
            if isinstance(default, (int, float)) and not isinstance(default, bool):
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise SpecError(self.path, pkey, f"got {_type_name(value)} {value!r}", f"a number (default {default!r})")

    def _apply_sim(self, config: SimConfig, path: str, value: Any, key: str) -> SimConfig:
        try:
            return _set_path(config, path.split("."), value)
        except (ValueError, TypeError) as exc:
            raise SpecError(self.path, key, str(exc), f"a valid value for {path}") from None

    def _resolve(self, spec: ExperimentSpec) -> list[Cell]:
        out: list[Cell] = []
        hashes: dict[str, str] = {}
        seen: dict[str, tuple] = {}
        grid_paths = [p for p, _ in spec.grid]
        grid_values = [v for _, v in spec.grid]
        static_params = {p: dict(kv) for p, kv in spec.policy_params}
        for li, listed in enumerate(spec.cells):
            for combo in itertools.product(*grid_values):
                overrides = list(listed) + list(zip(grid_paths, combo))
                policy_fixed = next((v for p, v in overrides if p == "policy"), None)
                key_where = f"sweep.cells[{li}]" if listed else "sweep.grid"
                wl_kwargs = asdict(spec.workload)
                wl_kwargs["params"] = dict(spec.workload.params)
                config = spec.config
                pparams: dict[str, dict[str, Any]] = {}
                for path, v in overrides:
                    if path == "policy":
                        continue
                    if path in SIM_PATHS:
                        config = self._apply_sim(config, path, v, f"{key_where}.{path}")
                    elif path in WORKLOAD_PATHS:
                        field_name = path.split(".", 1)[1]
                        wl_kwargs[field_name] = v
                        if field_name == "target_rps":
                            wl_kwargs["rate_scale"] = None
                        elif field_name == "rate_scale":
                            wl_kwargs["target_rps"] = None
                        elif field_name == "trace":
                            wl_kwargs["name"], wl_kwargs["params"] = None, {}
                        elif field_name == "name":
                            wl_kwargs["trace"] = None
                    elif path.startswith("workload.params."):
                        wl_kwargs["params"][path.split(".")[2]] = v
                    else:
                        pol, _, param = path.partition(".")
                        pparams.setdefault(pol, {})[param] = v
                wl_kwargs["params"] = tuple(sorted(wl_kwargs["params"].items()))
                workload = self._make_workload(WorkloadSpec, wl_kwargs, key_where)
                self._check_workload_name(workload, f"{key_where}.workload.name")
                policies = [policy_fixed] if policy_fixed else list(spec.policies)
                for pol in policies:
                    params = tuple(sorted({**static_params.get(pol, {}), **pparams.get(pol, {})}.items()))
                    for seed in spec.seeds:
                        cfg = replace(config, seed=seed)
                        wl = replace(workload, seed=workload.seed + seed) if spec.seed_workload else workload
                        key = cell_key(wl, cfg, pol, params, hashes)
                        axes = tuple((p, v) for p, v in overrides if p != "policy" and p.split(".")[0] not in self.policies) + \
                            tuple((f"{pol}.{k}", v) for k, v in pparams.get(pol, {}).items()) + (("policy", pol), ("seed", seed))
                        if key in seen and seen[key] == axes:
                            continue  # an axis of another policy's parameter: same run, listed once
                        if key in seen:
                            raise SpecError(self.path, key_where, f"two cells resolve to the same config ({dict(seen[key])} and {dict(axes)})",
                                            "distinct cells (remove the duplicate)")
                        seen[key] = axes
                        out.append(Cell(key=key, sweep=spec.name, workload=wl, config=cfg, policy=pol,
                                        policy_params=params, axes=axes))
        return out


def load_spec(path: str | Path) -> ExperimentSpec:
    """Reads and validates a spec file (``.yaml``/``.yml``/``.toml``) and resolves its cells.

    Raises:
        FileNotFoundError: the file does not exist.
        SpecError: (a ValueError) on any invalid key or value, naming file, key and expected form.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"spec file {str(p)!r} does not exist")
    return _Loader(p).load()


__all__ = ["SpecError", "WorkloadSpec", "Cell", "ExperimentSpec", "load_spec", "cell_key", "SIM_PATHS", "WORKLOAD_PATHS"]
