"""The generated flags of envs/sim/options.py for nested configs and flags in other units or
forms: ``nested``, ``scale``, ``parse``, ``unset``, ``negatable``, dotted ``exclude`` /
``defaults`` / ``notes`` / ``hidden``."""

import argparse
from dataclasses import dataclass, field

import pytest

from envs.sim.options import add_config_arguments, build_config, flag_defaults, nested, option


def _pair(text: str, flag: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"{flag} must be integers, got {text!r}") from None


@dataclass(frozen=True)
class _Inner:
    size_bytes: float = option(2e9, "size [GB]", flag="--size-gb", scale=1e9)
    delay_s: float = option(0.0005, "delay [ms]", flag="--delay-ms", scale=1e-3)
    items: tuple[int, ...] = option((1, 2), "items", parse=_pair)
    name: str = option("a", "name", unset=True)
    fast: bool = option(False, "go fast", negatable=False)
    hidden_knob: int = field(default=7, metadata={"cli": False})


@dataclass(frozen=True)
class _Outer:
    inner: _Inner = nested(_Inner, group="inner things")
    off: _Inner = nested(_Inner, cli=False)
    seed: int = option(0, "seed")

    def __post_init__(self) -> None:
        if self.inner.size_bytes <= 0:
            raise ValueError(f"inner.size_bytes must be > 0, got {self.inner.size_bytes}")


def _parser(**kw) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    add_config_arguments(p, _Outer, title="outer", **kw)
    return p


def test_defaults_round_trip_to_the_dataclass():
    p = _parser()
    assert build_config(_Outer, p.parse_args([])) == _Outer()
    assert flag_defaults(_Outer) == {"size_gb": 2.0, "delay_ms": 0.5, "items": "1,2", "name": None, "fast": False,
                                     "seed": 0}


def test_flags_convert_to_the_fields():
    args = _parser().parse_args(["--size-gb", "3", "--delay-ms", "2", "--items", "4,5", "--name", "b", "--fast",
                                 "--seed", "9"])
    assert args.items == "4,5"  # the namespace keeps the text
    cfg = build_config(_Outer, args)
    assert cfg.inner == _Inner(size_bytes=3e9, delay_s=2 / 1000, items=(4, 5), name="b", fast=True)
    assert cfg.seed == 9 and cfg.off == _Inner()


def test_parse_error_names_the_flag_and_dataclass_errors_pass_through():
    with pytest.raises(ValueError, match=r"^--items must be integers, got 'x'$"):
        build_config(_Outer, _parser().parse_args(["--items", "x"]))
    with pytest.raises(ValueError, match=r"^inner.size_bytes must be > 0"):
        build_config(_Outer, _parser().parse_args(["--size-gb", "-1"]))


def test_help_shows_defaults_in_the_flag_units_with_notes_and_hides():
    p = _parser(defaults={"inner.items": (3,)}, notes={"inner.items": "the paper's"}, hidden=("seed",))
    text = " ".join(p.format_help().split())
    assert "size [GB] (default: 2)" in text and "delay [ms] (default: 0.5)" in text
    assert "items (default: 3; the paper's)" in text and p.get_default("items") == "3"
    assert "name (default: a)" in text and p.get_default("name") is None  # unset: None = not given
    assert "go fast (default" not in text and "--no-fast" not in text
    assert "inner things:" in text and "--seed" not in text and "--hidden-knob" not in text
    assert p.parse_args(["--seed", "4"]).seed == 4  # hidden, still parsed


def test_dotted_exclude_leaves_the_field_to_the_caller():
    p = _parser(exclude=("inner.name", "seed"))
    assert "--name" not in p.format_help() and "--seed" not in p.format_help()
    cfg = build_config(_Outer, p.parse_args([]), exclude=("inner.name", "seed"), seed=5)
    assert cfg.seed == 5 and cfg.inner.name == "a"
