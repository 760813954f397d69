"""The typed dotted-path toolkit of experiment specs (experiments/spec/paths.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

import experiments.spec as spec_pkg
from experiments.spec.paths import coerce, flatten, leaf_types, set_path


@dataclass(frozen=True)
class _Inner:
    rate_rps: float = 1.0
    window_s: tuple[float, float] | None = None


@dataclass(frozen=True)
class _Outer:
    name: str = "x"
    count: int = 0
    enabled: bool = False
    inner: _Inner = field(default_factory=_Inner)


class _Bad(ValueError):
    pass


def _err(problem, expected="a valid value"):
    return _Bad(f"{problem}; expected {expected}")


def test_leaf_types_and_set_path_reach_nested_fields():
    assert set(leaf_types(_Outer)) == {"name", "count", "enabled", "inner.rate_rps", "inner.window_s"}
    out = set_path(_Outer(), ["inner", "rate_rps"], 3.0)
    assert out.inner.rate_rps == 3.0 and out.count == 0 and _Outer().inner.rate_rps == 1.0


def test_flatten_nested_mappings():
    assert flatten({"a": {"b": 1, "c": {"d": 2}}, "e": 3}) == {"a.b": 1, "a.c.d": 2, "e": 3}


@pytest.mark.parametrize("value, tp, canonical", [
    (2, float, 2.0), ([0, 5], tuple[float, float] | None, (0.0, 5.0)), (None, int | None, None), (True, bool, True),
    ([1, 2, 3], tuple[int, ...], (1, 2, 3)),
])
def test_coerce_canonical_forms(value, tp, canonical):
    got = coerce(value, tp, _err)
    assert got == canonical and type(got) is type(canonical)


@pytest.mark.parametrize("value, tp, expected", [
    (True, int, "an integer"), (True, float, "a number"), ("3", int, "an integer"), (1, bool, "true or false"),
    (3, str, "a string"), ([1, 2, 3], tuple[float, float], "a list of 2 items"), ("ab", tuple[float, float], "a list"),
])
def test_coerce_rejects_with_the_expected_form(value, tp, expected):
    with pytest.raises(_Bad, match=f"expected {expected}"):
        coerce(value, tp, _err)


def test_package_reexports_every_public_name():
    for name in spec_pkg.__all__:
        assert getattr(spec_pkg, name) is not None
    from experiments.spec import Cell, ExperimentSpec, SpecError, WorkloadSpec, cell_key, load_spec  # noqa: F401
