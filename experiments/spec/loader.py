"""Reading and validating a spec file into an :class:`~experiments.spec.model.ExperimentSpec`.

Every error is a :class:`~experiments.spec.model.SpecError` naming the file, the key and the
expected form, raised before any cell runs. See :mod:`experiments.spec` for the file format.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import is_dataclass, replace
from pathlib import Path
from typing import Any

from baselines.registry import POLICIES
from baselines.runner import policy_pool
from envs import workloads
from envs.sim import SimConfig
from envs.sim.cost_model import Calibration
from envs.sim.options import type_name
from envs.sim.yaml_keys import compose, duplicate_key, load
from envs.workloads import TraceWarning, default_traces_dir, get_workload, load_trace
from experiments.spec.cells import resolve_cells
from experiments.spec.model import TRACES_PREFIX, ExperimentSpec, SpecError, WorkloadSpec, make_workload, materialize_param
from experiments.spec.paths import ALIASES, SIM_PATHS, WORKLOAD_PATHS, apply_sims, coerce, flatten, normalize_path

TOP_LEVEL_KEYS = ("name", "description", "workload", "sim", "calibration", "horizon_s", "policies", "policy_params",
                  "seeds", "seed_workload", "rates", "sweep")
SWEEP_KEYS = ("grid", "cells")
WORKLOAD_KEYS = ("name", "trace", "seed", "params", "target_rps", "rate_scale", "arrival_window_s",
                 "skip_invalid")


def _read(path: Path) -> dict:
    suffix = path.suffix.lower()
    text = path.read_text()
    if suffix in (".yaml", ".yml"):
        import yaml

        try:
            data = load(text)  # 1e9 is a number (PyYAML's safe_load read it as the string '1e9')
            dup = duplicate_key(compose(text))
        except yaml.YAMLError as exc:
            raise _syntax_error(path, "YAML", exc) from None
        if dup is not None:  # PyYAML keeps the last of two equal keys silently
            key, first, again = dup
            raise SpecError(f"{path}:{again.start_mark.line + 1}:{again.start_mark.column + 1}", None,
                            f"key {key!r} given twice in one mapping (first on line {first.start_mark.line + 1})",
                            "each key once")
    elif suffix == ".toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise _syntax_error(path, "TOML", exc) from None
    else:
        raise SpecError(path, None, f"unknown spec format {suffix!r}", "a .yaml, .yml or .toml file")
    if not isinstance(data, dict):
        raise SpecError(path, None, f"top level is {type_name(data)}",
                        "a mapping of the keys " + ", ".join(TOP_LEVEL_KEYS))
    return data


def _syntax_error(path: Path, fmt: str, exc: Exception) -> SpecError:
    """``FILE:LINE:COLUMN: not valid YAML|TOML: PROBLEM`` (1-based line and column) of a parser
    error: PyYAML's ``problem_mark`` / ``problem``, or the ``(at line L, column C)`` that
    ``tomllib`` puts in its message."""
    import re

    mark = getattr(exc, "problem_mark", None)
    if mark is not None:
        where, problem = f"{path}:{mark.line + 1}:{mark.column + 1}", getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        if context:
            problem = f"{problem} ({context})"
    else:
        m = re.search(r"\s*\(at line (\d+), column (\d+)\)$", str(exc))
        where = f"{path}:{m.group(1)}:{m.group(2)}" if m else str(path)
        problem = str(exc)[:m.start()] if m else str(exc)
    expected = "a YAML mapping" if fmt == "YAML" else "a TOML table"
    return SpecError(where, None, f"not valid {fmt}: {' '.join(problem.split())}", expected)


ARRIVAL_FORMS = {"poisson_rps": ("poisson_rps",), "gamma_rps": ("gamma_rps", "cv")}


def check_arrivals(value: Mapping, err) -> tuple[tuple[str, float], ...]:
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


class _Loader:
    """Validates one spec file; every error names the file and key."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.base_dir = path.resolve().parent

        self.policies = POLICIES
        # policy-parameter values invalid with the policy's other parameters at their defaults,
        # kept until the cells are known: (key, policy, param, value, error)
        self.pending_params: list[tuple[str, str, str, Any, str]] = []

    def err(self, key: str):
        def make(problem: str, expected: str = "a valid value") -> SpecError:
            return SpecError(self.path, key, problem, expected)

        return make

    def resolve_file(self, key: str, value: Any, must_exist: bool = True) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str) or not value:
            raise self.err(key)(f"got {type_name(value)} {value!r}", "a file path (string)")
        if value.startswith(TRACES_PREFIX):
            p = Path(default_traces_dir()) / value[len(TRACES_PREFIX):]
        else:
            p = Path(value).expanduser()
            if not p.is_absolute():
                p = self.base_dir / p
        if must_exist and not p.is_file():
            raise self.err(key)(f"file {str(p)!r} {'is a folder' if p.is_dir() else 'does not exist'}",
                                f"an existing file (relative paths are relative to {self.base_dir}; "
                                f"'{TRACES_PREFIX}...' is the shared traces folder)")
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
                Calibration.load(path)
            else:
                import warnings

                with warnings.catch_warnings():  # invalid lines: _check_cells, by each cell's skip_invalid
                    warnings.simplefilter("ignore", TraceWarning)
                    load_trace(path, skip_invalid=True)  # format errors
        except (ValueError, OSError) as exc:
            raise self.err(key)(str(exc), f"a valid {kind} file") from None
        checked.add((kind, path))

    # --- path kinds
    def normalize(self, path: str) -> str:
        """``path`` in today's spelling (:func:`experiments.spec.paths.normalize_path`)."""
        return normalize_path(self.path, path, self.policies)

    def classify(self, key: str, path: str, allow_policy: bool) -> tuple[str, Any]:
        """Returns (kind, detail): ('sim', annotation), ('workload', annotation), ('workload_param', name),
        ('policy', None) or ('policy_param', (policy, param))."""
        path = self.normalize(path)
        if path == "policy":
            if not allow_policy:
                raise self.err(key)("'policy' cannot be a grid axis",
                                    "the top-level 'policies' list (or 'policy' inside a listed cell)")
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
                raise self.err(key)(f"policy {head!r} declares no parameters "
                                    "(baselines/registry.py PolicySpec has no 'params')",
                                    "a sweep over policy names instead")
            if param not in params:
                raise self.err(key)(f"policy {head!r} has no parameter {param!r}", f"one of {sorted(params)}")
            return "policy_param", (head, param)
        close = [p for p in list(SIM_PATHS) + list(WORKLOAD_PATHS) if p.split(".")[-1] == path.split(".")[-1]]
        hint = f"e.g. {', '.join(close)}" if close else ("e.g. pool.composition, slo.slo_scale, prediction_error.bias, "
                                                          "cache_capacity_scale, workload.target_rps, <policy>.<param>")
        raise self.err(key)(f"unknown config path {path!r}",
                            f"a dotted path into SimConfig / workload / a policy's parameters ({hint})")

    def check_value(self, key: str, path: str, value: Any, allow_policy: bool) -> tuple[str, Any, Any]:
        """Validates one override; returns (kind, detail, canonical value)."""
        kind, detail = self.classify(key, path, allow_policy)
        e = self.err(key)
        if kind == "policy":
            if not isinstance(value, str) or value not in self.policies:
                raise e(f"unknown policy {value!r}", f"one of {', '.join(self.policies)}")
            return kind, detail, value
        if kind in ("sim", "workload"):
            v = coerce(value, detail, e)
            norm = self.normalize(path)
            if norm == "calibration_path":
                v = self.resolve_file(key, v)
                self.check_content(key, v, "calibration")
            elif norm == "workload.trace":
                v = self.resolve_file(key, v)
                self.check_content(key, v, "trace")
            if kind == "workload":
                self._check_workload_field(key, norm.split(".", 1)[1], v)
            return kind, detail, v
        if kind == "workload_param":
            if isinstance(value, Mapping):
                return kind, detail, check_arrivals(value, e)
            if isinstance(value, list):
                value = tuple(value)
            return kind, detail, value
        pol, param = detail  # policy_param: the policy's own validation, without running it
        default = self.policies[pol].params.get(param)
        if is_dataclass(default) and not isinstance(default, type):
            raise e(f"{pol}.{param} is a nested settings object ({type(default).__name__}) that a spec cannot set",
                    f"one of {pol}'s scalar or list parameters")
        if isinstance(value, Mapping):
            raise e(f"got a mapping {value!r}", f"a scalar or a list value of {pol}.{param}")
        if isinstance(value, list):  # e.g. target_horizons_s: [20, 40]; a tuple, so that cells stay hashable
            value = tuple(value)
        try:
            self.policies[pol].with_params(**{param: value})
        except ValueError as exc:
            # may be a cross-parameter rule (e.g. a reclaim threshold below the intra-degree threshold)
            # that the cell's other swept values satisfy: decided by _check_pending_params
            self.pending_params.append((key, pol, param, value, str(exc)))
        except TypeError as exc:
            raise e(str(exc), f"a valid value of {pol}.{param}") from None
        return kind, detail, value

    def _check_params_of_unused_policies(self, spec: ExperimentSpec, cells) -> None:
        """A parameter of a policy that no cell runs would change nothing: a grid axis over it was
        silently a single cell, so it is an error at its key."""
        used = {c.policy for c in cells}
        keys = [(f"policy_params.{pol}", pol) for pol, _ in spec.policy_params]
        keys += [(f"sweep.grid.{path}", path.partition(".")[0]) for path, _ in spec.grid]
        keys += [(f"sweep.cells[{i}].{path}", path.partition(".")[0]) for i, listed in enumerate(spec.cells)
                 for path, _ in listed]
        for key, pol in keys:
            if pol in self.policies and pol not in used:
                raise SpecError(self.path, key, f"policy {pol!r} is not run by any cell (policies: "
                                f"{', '.join(spec.policies)})", "a parameter of a policy the sweep runs "
                                "(add it to 'policies', or give 'policy' in a listed cell)")

    def _check_pending_params(self, cells) -> None:
        """A policy-parameter value that failed alone is an error at its key unless some cell
        using it builds (then the rule it broke involves another swept parameter, and every cell
        is still checked by :meth:`_check_cells`)."""
        for key, pol, param, value, problem in self.pending_params:
            using = {c.policy_params for c in cells if c.policy == pol and (param, value) in c.policy_params}
            ok = False
            for params in using:
                try:
                    self.policies[pol].with_params(**dict(params))
                    ok = True
                    break
                except (ValueError, TypeError):
                    continue
            if not ok:
                raise self.err(key)(problem, f"a valid value of {pol}.{param}")

    def _check_trace_lines(self, path: str, key: str) -> None:
        """A trace that a cell reads without ``skip_invalid`` has no invalid line (it would fail
        every such cell at run time)."""
        try:
            load_trace(path, skip_invalid=False)
        except ValueError as exc:
            raise self.err(key)(str(exc), "a trace without invalid lines, or workload.skip_invalid: true") from None

    def _check_workload_field(self, key: str, field_name: str, value: Any) -> None:
        """Validates one workload field alone (``WorkloadSpec.__post_init__``), so that a bad value
        is reported at the key that gives it (``rates[0]``), not at the cell that uses it."""
        if value is None or field_name in ("name", "trace"):
            return
        make_workload(self.path, {"name": "-", field_name: value}, key)

    def values_list(self, key: str, value: Any) -> list:
        if not isinstance(value, list):
            raise self.err(key)(f"got {type_name(value)} {value!r}", "a non-empty list of values")
        if not value:
            raise self.err(key)("empty list", "a non-empty list of values")
        return value


    def load(self) -> ExperimentSpec:
        """The validated spec with its resolved cells (sections validated in file order)."""
        data = _read(self.path)
        unknown = [k for k in data if k not in TOP_LEVEL_KEYS]
        if unknown:
            raise SpecError(self.path, unknown[0], "unknown key", "one of " + ", ".join(TOP_LEVEL_KEYS))
        name, description = self._load_header(data)
        base_wl = self._load_workload(data.get("workload"))
        config = self._load_sim(data)
        policies = self._load_policies(data.get("policies"))
        policy_params = self._load_policy_params(data.get("policy_params", {}) or {})
        seeds = self._load_seeds(data.get("seeds", [0]))
        seed_workload = data.get("seed_workload", True)
        if not isinstance(seed_workload, bool):
            raise SpecError(self.path, "seed_workload", f"got {type_name(seed_workload)} {seed_workload!r}", "true or false")
        sweep = data.get("sweep", {}) or {}
        if not isinstance(sweep, Mapping):
            raise SpecError(self.path, "sweep", f"got {type_name(sweep)}", "a mapping with 'grid' and/or 'cells'")
        for k in sweep:
            if k not in SWEEP_KEYS:
                raise SpecError(self.path, f"sweep.{k}", "unknown key", "one of " + ", ".join(SWEEP_KEYS))
        grid = self._load_grid(data, sweep.get("grid", {}))
        listed = self._load_listed_cells(sweep.get("cells"), {p for p, _ in grid})
        spec = ExperimentSpec(name=name, path=str(self.path), description=description, workload=base_wl, config=config,
                              policies=policies, policy_params=policy_params, seeds=seeds, seed_workload=seed_workload,
                              grid=grid, cells=listed)
        cells = resolve_cells(self.path, spec, self.policies, self._check_workload_name)
        self._check_pending_params(cells)  # a bad value first, at its own key
        self._check_params_of_unused_policies(spec, cells)
        self._check_cells(cells, base_wl)
        return replace(spec, _resolved=tuple(cells))

    def _check_cells(self, cells, base_wl: WorkloadSpec) -> None:
        """Validates what only a whole cell determines, without simulating: each distinct named
        workload with parameter overrides is generated once (its generator validates them), and
        each distinct policy with parameters is built (``PolicySpec.with_params``) and checked
        against the cell's pool (``baselines.runner.policy_pool``)."""
        seen_workloads: set = set()
        seen_policies: set = set()
        for cell in cells:
            wl = cell.workload
            if wl.trace is not None and not wl.skip_invalid and wl.trace not in seen_workloads:
                seen_workloads.add(wl.trace)
                self._check_trace_lines(wl.trace, "workload.trace" if wl.trace == base_wl.trace else
                                        f"sweep (cell {dict(a for a in cell.axes if a[0] != 'seed')})")
            if wl.name is not None and wl.params and (wl.name, wl.params) not in seen_workloads:
                seen_workloads.add((wl.name, wl.params))
                key = "workload.params" if wl.params == base_wl.params else \
                    f"sweep (cell {dict(a for a in cell.axes if a[0] != 'seed')})"
                try:
                    get_workload(wl.name, seed=0, **{k: materialize_param(v) for k, v in wl.params})
                except (ValueError, TypeError) as exc:
                    named = [k for k, _ in wl.params if str(exc).startswith(f"{k} ")]
                    key = f"workload.params.{named[0]}" if named and key == "workload.params" else key
                    raise SpecError(self.path, key, str(exc), f"valid parameters of workload {wl.name!r}") from None
            if (cell.policy, cell.policy_params, cell.config.pool) not in seen_policies:
                seen_policies.add((cell.policy, cell.policy_params, cell.config.pool))
                where = f"sweep (cell {dict(a for a in cell.axes if a[0] != 'seed')})"
                try:
                    spec = self.policies[cell.policy].with_params(**dict(cell.policy_params))
                except (ValueError, TypeError) as exc:
                    raise SpecError(self.path, where, str(exc), f"valid parameters of policy {cell.policy!r}") from None
                try:  # its own composition and settings against the cell's pool (e.g. a controller's target_degrees)
                    policy_pool(spec, cell.config.pool)
                except ValueError as exc:
                    raise SpecError(self.path, where, str(exc), f"a policy setting the cell's pool "
                                    f"({cell.config.pool.num_gpus} GPUs, CP degrees "
                                    f"{','.join(map(str, cell.config.pool.supported_degrees))}) can run") from None

    # --- sections
    def _load_header(self, data: dict) -> tuple[str, str]:
        name = data.get("name", self.path.stem)
        if not isinstance(name, str) or not name or any(c in name for c in "/\\") or name.startswith("."):
            raise SpecError(self.path, "name", f"got {name!r}", "a non-empty name without '/' that does not start with '.'")
        description = data.get("description", "")
        if not isinstance(description, str):
            raise SpecError(self.path, "description", f"got {type_name(description)}", "a string")
        return name, description

    def _load_workload(self, wl_raw: Any) -> WorkloadSpec:
        if not isinstance(wl_raw, Mapping):
            raise SpecError(self.path, "workload", f"got {type_name(wl_raw)}",
                            "a mapping with 'name' (named workload) or 'trace' (file)")
        wl_kwargs: dict[str, Any] = {}
        for k, v in wl_raw.items():
            key = f"workload.{k}"
            k = self.normalize(key).split(".", 1)[1]  # an earlier spelling (workload.window_s) warns, renamed
            if key != f"workload.{k}" and k in wl_raw:
                raise SpecError(self.path, key, f"given with its new spelling workload.{k}", "one of the two")
            if k not in WORKLOAD_KEYS:
                raise SpecError(self.path, key, "unknown key", "one of " + ", ".join(WORKLOAD_KEYS))
            if k == "params":
                if not isinstance(v, Mapping):
                    raise SpecError(self.path, key, f"got {type_name(v)}", "a mapping of named-workload parameters")
                wl_kwargs["params"] = tuple(sorted(
                    (str(pk), self.check_value(f"{key}.{pk}", f"workload.params.{pk}", pv, False)[2]) for pk, pv in v.items()))
            else:
                wl_kwargs[k] = self.check_value(key, key, v, False)[2]
        base_wl = make_workload(self.path, wl_kwargs, "workload")
        self._check_workload_name(base_wl, "workload.name")
        return base_wl

    def _load_sim(self, data: dict) -> SimConfig:
        sim_raw = data.get("sim", {}) or {}
        if not isinstance(sim_raw, Mapping):
            raise SpecError(self.path, "sim", f"got {type_name(sim_raw)}", "a mapping of SimConfig fields (nested or dotted)")
        sim_over = {f"sim.{k}": v for k, v in flatten(sim_raw).items()}
        for top in ("calibration", "horizon_s"):
            if top in data:
                sim_over[top] = data[top]
        items = []
        for key, value in sim_over.items():
            path = key[4:] if key.startswith("sim.") else key
            kind, _, v = self.check_value(key, path, value, False)
            if kind != "sim":
                raise SpecError(self.path, key, f"{path!r} is not a simulator setting",
                                "a SimConfig field (workload settings go under 'workload')")
            items.append((ALIASES.get(path, path), v, key))
        return apply_sims(self.path, SimConfig(), items)  # at once: pool.num_gpus with pool.composition

    def _load_policies(self, raw: Any) -> tuple[str, ...]:
        policies = self.values_list("policies", raw)
        for i, p in enumerate(policies):
            if not isinstance(p, str) or p not in self.policies:
                raise SpecError(self.path, f"policies[{i}]", f"unknown policy {p!r}", "one of " + ", ".join(self.policies))
        if len(set(policies)) != len(policies):
            raise SpecError(self.path, "policies", "duplicate policy names", "distinct names")
        return tuple(policies)

    def _load_policy_params(self, raw: Any) -> tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]:
        if not isinstance(raw, Mapping):
            raise SpecError(self.path, "policy_params", f"got {type_name(raw)}", "a mapping policy -> {param: value}")
        policy_params: dict[str, dict[str, Any]] = {}
        for pol, params in raw.items():
            if not isinstance(params, Mapping):
                raise SpecError(self.path, f"policy_params.{pol}", f"got {type_name(params)}", "a mapping param -> value")
            for pk, pv in params.items():
                # the checked value: a list (target_degrees: [2, 4]) becomes a tuple, so that cells stay hashable
                _, _, value = self.check_value(f"policy_params.{pol}.{pk}", f"{pol}.{pk}", pv, False)
                policy_params.setdefault(pol, {})[self.normalize(f"{pol}.{pk}").split(".", 1)[1]] = value
        return tuple((p, tuple(sorted(d.items()))) for p, d in sorted(policy_params.items()))

    def _load_seeds(self, raw: Any) -> tuple[int, ...]:
        seeds = self.values_list("seeds", raw)
        for i, s in enumerate(seeds):
            if isinstance(s, bool) or not isinstance(s, int) or s < 0:
                raise SpecError(self.path, f"seeds[{i}]", f"got {type_name(s)} {s!r}", "an integer >= 0")
        if len(set(seeds)) != len(seeds):
            raise SpecError(self.path, "seeds", "duplicate seeds", "distinct integers")
        return tuple(seeds)

    def _load_grid(self, data: dict, grid_raw: Any) -> tuple[tuple[str, tuple[Any, ...]], ...]:
        """Cartesian axes: ``rates`` (the axis ``workload.target_rps``) then ``sweep.grid``."""
        grid: list[tuple[str, tuple[Any, ...]]] = []
        if "rates" in data:
            rates = self.values_list("rates", data["rates"])
            canon = tuple(self.check_value(f"rates[{i}]", "workload.target_rps", r, False)[2] for i, r in enumerate(rates))
            self._check_distinct_values("rates", canon)
            grid.append(("workload.target_rps", canon))
        if not isinstance(grid_raw, Mapping):
            raise SpecError(self.path, "sweep.grid", f"got {type_name(grid_raw)}", "a mapping dotted.path -> [values]")
        for path, values in grid_raw.items():
            key = f"sweep.grid.{path}"
            self.classify(key, path, False)  # a bad path is reported before its values
            values = self.values_list(key, values)
            canon = tuple(self.check_value(f"{key}[{i}]", path, v, False)[2] for i, v in enumerate(values))
            self._check_distinct_values(key, canon)
            norm = self.normalize(path)
            if any(p == norm for p, _ in grid):
                raise SpecError(self.path, key, f"axis {norm!r} given twice ('rates' is the axis workload.target_rps)",
                                "each axis once")
            grid.append((norm, canon))
        return tuple(grid)

    def _load_listed_cells(self, cells_raw: Any, grid_paths: set[str]) -> tuple[tuple[tuple[str, Any], ...], ...]:
        """Listed overrides of ``sweep.cells``; ``((),)`` (one empty override) when absent."""
        if cells_raw is None:
            return ((),)
        listed: list[tuple[tuple[str, Any], ...]] = []
        for i, c in enumerate(self.values_list("sweep.cells", cells_raw)):
            key = f"sweep.cells[{i}]"
            if not isinstance(c, Mapping) or not c:
                raise SpecError(self.path, key, f"got {type_name(c)} {c!r}", "a non-empty mapping dotted.path -> value")
            items = []
            for path, v in c.items():
                norm = self.normalize(path)
                if norm in grid_paths:
                    raise SpecError(self.path, f"{key}.{path}", "also a grid axis", "a path that is not swept by the grid")
                items.append((norm, self.check_value(f"{key}.{path}", path, v, True)[2]))
            if tuple(items) in listed:  # the same cell twice was merged into one without a word
                raise SpecError(self.path, key, f"the same overrides as sweep.cells[{listed.index(tuple(items))}]",
                                "distinct cells")
            listed.append(tuple(items))
        return tuple(listed)

    def _check_distinct_values(self, key: str, values: tuple[Any, ...]) -> None:
        """A value given twice on one axis was merged into one cell without a word (repeated seeds
        and policies are errors too)."""
        for i, v in enumerate(values):
            if v in values[:i]:
                raise SpecError(self.path, f"{key}[{i}]", f"{v!r} given twice (first at [{values.index(v)}])",
                                "distinct values on one axis")

    # --- building

    def _check_workload_name(self, wl: WorkloadSpec, key: str) -> None:
        if wl.name is None:
            return

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
                raise SpecError(self.path, pkey, f"unknown parameter {name!r} of workload {wl.name!r}",
                                "one of " + ", ".join(accepted))
            default = params[name].default
            value = materialize_param(value)
            if isinstance(default, (int, float)) and not isinstance(default, bool):
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise SpecError(self.path, pkey, f"got {type_name(value)} {value!r}", f"a number (default {default!r})")



def load_spec(path: str | Path) -> ExperimentSpec:
    """Reads and validates a spec file (``.yaml``/``.yml``/``.toml``) and resolves its cells.

    Raises:
        FileNotFoundError: the file does not exist.
        SpecError: (a ValueError) on any invalid key or value, naming file, key and expected form.
    """
    p = Path(path)
    if p.is_dir():  # "does not exist" was wrong for a folder
        raise FileNotFoundError(f"spec file {str(p)!r} is a folder; expected a .yaml/.yml/.toml spec file")
    if not p.is_file():
        raise FileNotFoundError(f"spec file {str(p)!r} does not exist")
    try:
        return _Loader(p).load()
    except SpecError as exc:
        line = _yaml_line(p, exc.key) if exc.file == str(p) and exc.key else None
        if line is None:
            raise
        raise SpecError(f"{p}:{line}", exc.key, exc.problem, exc.expected) from None


def _yaml_line(path: Path, key: str) -> int | None:
    """The 1-based line of ``key`` (``rates[1]``, ``sweep.grid.slo.slo_scale[0]``, ``workload.colour``)
    in a YAML spec: the deepest node the key reaches, matching dotted mapping keys (a grid path such
    as ``slo.slo_scale`` is one key) and ``[i]`` list items. ``None`` for TOML, or a key that names no
    node of the file (a cell: ``sweep (cell {...})``)."""
    import re

    if path.suffix.lower() not in (".yaml", ".yml"):
        return None

    try:
        node = compose(path.read_text())
    except Exception:  # noqa: BLE001 - the file loaded a moment ago; no line rather than another error
        return None
    parts = [p for p in re.split(r"\.|(\[\d+\])", key) if p]
    found = None
    while parts and node is not None:
        if parts[0].startswith("[") and hasattr(node, "value") and isinstance(node.value, list) and node.tag.endswith("seq"):
            i = int(parts.pop(0)[1:-1])
            node = node.value[i] if i < len(node.value) else None
            found = node or found
            continue
        if not node.tag.endswith("map"):
            break
        match = None
        for n in range(len(parts), 0, -1):  # the longest dotted prefix that is one key of this mapping
            if any(p.startswith("[") for p in parts[:n]):
                continue
            name = ".".join(parts[:n])
            match = next(((k, v) for k, v in node.value if getattr(k, "value", None) == name), None)
            if match is not None:
                del parts[:n]
                break
        if match is None:
            break
        found, node = match[0] if not parts else match[1], match[1]
    return None if found is None else found.start_mark.line + 1

