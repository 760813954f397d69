"""Typed dotted paths into (nested) frozen config dataclasses.

A generic toolkit — :func:`leaf_types` lists every leaf of a dataclass as ``{dotted path:
annotation}``, :func:`coerce` checks a value read from a file against such an annotation and
returns it in canonical form, :func:`set_path` replaces one leaf (nested ``dataclasses.replace``) and
:func:`apply_sims` several at once (one ``replace`` per nested config),
:func:`flatten` turns nested mappings into dotted keys — and the path tables of experiment specs
(:data:`SIM_PATHS`, :data:`WORKLOAD_PATHS`, :data:`ALIASES`).
"""

from __future__ import annotations

import types
import typing
import warnings
from collections.abc import Callable, Mapping
from dataclasses import fields, is_dataclass, replace
from pathlib import Path
from typing import Any

from envs.sim import SimConfig
from envs.sim.options import is_int, is_number, type_name
from experiments.spec.model import SpecError, WorkloadSpec

# err(problem, expected) -> the exception to raise (a SpecError naming file and key)
ErrorFactory = Callable[..., Exception]


# scalar annotation -> (check, canonical form, expected form). bool is not an int or a number here.
_SCALARS: dict[Any, tuple[Callable[[Any], bool], Callable[[Any], Any], str]] = {
    bool: (lambda v: isinstance(v, bool), lambda v: v, "true or false"),
    int: (is_int, lambda v: v, "an integer"),
    float: (is_number, float, "a number"),
    str: (lambda v: isinstance(v, str), lambda v: v, "a string"),
}


def _coerce_tuple(value: Any, tp: Any, args: tuple, err: ErrorFactory) -> tuple:
    if not isinstance(value, (list, tuple)):
        raise err(f"got {type_name(value)} {value!r}", f"a list ({tp})")
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(coerce(v, args[0], err) for v in value)
    if len(value) != len(args):
        raise err(f"got {len(value)} items {list(value)!r}", f"a list of {len(args)} items ({tp})")
    return tuple(coerce(v, a, err) for v, a in zip(value, args))


def coerce(value: Any, tp: Any, err: ErrorFactory) -> Any:
    """Checks ``value`` against the annotation ``tp`` and returns it in canonical form.

    Supported annotations: ``int``, ``float``, ``str``, ``bool``, ``Any``, ``X | None`` and
    ``tuple[...]`` (fixed length or ``tuple[X, ...]``). Canonical form: lists become tuples, ints
    become floats where a float is expected; ``bool`` is neither an int nor a number.

    Raises:
        the exception built by ``err(problem, expected)`` on a mismatch or an unsupported annotation.
    """
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        non_none = [a for a in args if a is not type(None)]
        if len(non_none) == 1:
            return coerce(value, non_none[0], err)
        raise err(f"unsupported type {tp}")
    if tp is Any:
        return value
    if tp in _SCALARS:
        check, canonical, expected = _SCALARS[tp]
        if not check(value):
            raise err(f"got {type_name(value)} {value!r}", expected)
        return canonical(value)
    if origin is tuple:
        return _coerce_tuple(value, tp, args, err)
    raise err(f"unsupported type {tp}", "a supported scalar")


def leaf_types(cls) -> dict[str, Any]:
    """``{dotted path: annotation}`` of every non-dataclass leaf of a (nested) config dataclass."""
    out: dict[str, Any] = {}
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        tp = hints[f.name]
        if isinstance(tp, type) and is_dataclass(tp):
            for sub, sub_tp in leaf_types(tp).items():
                out[f"{f.name}.{sub}"] = sub_tp
        else:
            out[f.name] = tp
    return out


def set_path(obj, parts: list[str], value):
    """Returns a copy of dataclass ``obj`` with the leaf at ``parts`` replaced (nested replace)."""
    if len(parts) == 1:
        return replace(obj, **{parts[0]: value})
    return replace(obj, **{parts[0]: set_path(getattr(obj, parts[0]), parts[1:], value)})


def flatten(d: Mapping, prefix: str = "") -> dict[str, Any]:
    """Nested mappings -> ``{dotted key: leaf value}`` (``{"a": {"b": 1}}`` -> ``{"a.b": 1}``)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


SIM_PATHS: dict[str, Any] = {k: v for k, v in leaf_types(SimConfig).items() if k not in ("seed", "record_events")}
WORKLOAD_PATHS: dict[str, Any] = {"workload." + k: v for k, v in typing.get_type_hints(WorkloadSpec).items() if k != "params"}
# the file form of arrival_window_s is a 2-list; params has its own sub-paths
WORKLOAD_PATHS["workload.arrival_window_s"] = tuple[float, float] | None
# spellings of earlier releases still read, each with a one-line SpecDeprecationWarning (removed in the next release)
DEPRECATED_PATHS = {"workload.window_s": "workload.arrival_window_s"}
# policy parameters renamed since (``<policy>.<old>`` -> ``<policy>.<new>``): the controller's window
DEPRECATED_POLICY_PARAMS = {"window_s": "decision_window_s"}
# the names cell keys hash them under (their names when the keys were defined), so that finished cells keep their keys
HASHED_POLICY_PARAMS = {new: old for old, new in DEPRECATED_POLICY_PARAMS.items()}
ALIASES = {"calibration": "calibration_path", **DEPRECATED_PATHS}


class SpecDeprecationWarning(UserWarning):
    """A spec uses a key spelling of an earlier release (:data:`DEPRECATED_PATHS`); it still loads."""


def normalize_path(file: str | Path, path: str, policy_names) -> str:
    """The dotted ``path`` of spec ``file`` in today's spelling: :data:`ALIASES`; a deprecated
    spelling (:data:`DEPRECATED_PATHS`, ``<policy>.<param>`` of :data:`DEPRECATED_POLICY_PARAMS`
    for a policy of ``policy_names``) with a one-line :class:`SpecDeprecationWarning`."""
    head, _, param = path.partition(".")
    new = f"{head}.{DEPRECATED_POLICY_PARAMS[param]}" if head in policy_names and param in DEPRECATED_POLICY_PARAMS \
        else DEPRECATED_PATHS.get(path)
    if new is None:
        return ALIASES.get(path, path)
    warnings.warn(f"{file}: {path} is deprecated and will be removed in the next release; use {new}",
                  SpecDeprecationWarning, stacklevel=4)
    return new


class _LevelError(Exception):
    """A validation error of one nested config, with the (path, key) of the leaves set on it."""

    def __init__(self, exc: Exception, leaves: list[tuple[str, str]]) -> None:
        super().__init__(str(exc))
        self.leaves = leaves


def _set_paths(obj, items: list[tuple[list[str], Any, str, str]]):
    """``obj`` with every ``(parts, value, path, key)`` leaf set: each nested dataclass is rebuilt
    by one ``replace`` carrying all of its new leaves."""
    changes: dict[str, Any] = {}
    nested: dict[str, list] = {}
    for parts, value, path, key in items:
        if len(parts) == 1:
            changes[parts[0]] = value
        else:
            nested.setdefault(parts[0], []).append((parts[1:], value, path, key))
    for name, sub in nested.items():
        changes[name] = _set_paths(getattr(obj, name), sub)
    try:
        return replace(obj, **changes)
    except (ValueError, TypeError) as exc:
        raise _LevelError(exc, [(path, key) for _, _, path, key in items]) from None


def apply_sims(file: str | Path, config: SimConfig, items: list[tuple[str, Any, str]]) -> SimConfig:
    """``config`` with every ``(dotted path, value, key)`` leaf set at once, so that settings that
    are only valid together (``pool.num_gpus`` with ``pool.composition``) are validated together:
    each nested config is rebuilt once with all its new leaves (a later item of the same path
    wins).

    Raises:
        SpecError: the validation error of the nested config that rejected its leaves, at the
            key(s) set on it.
    """
    last = {path: (value, key) for path, value, key in items}
    try:
        return _set_paths(config, [(path.split("."), value, path, key) for path, (value, key) in last.items()])
    except _LevelError as exc:
        paths = ", ".join(path for path, _ in exc.leaves)
        raise SpecError(file, " + ".join(key for _, key in exc.leaves), str(exc), f"a valid value for {paths}") from None
