"""Command-line flags generated from frozen config dataclasses (the CleanRL ``Args`` / Vidur
``config.py`` pattern: one field = one flag, its help text in the field's metadata).

A field becomes ``--field-name`` with the field's type and default. Field metadata keys:

* ``help`` (required): the flag's help text (the default is appended);
* ``flag``: another flag name (e.g. ``"--timesteps"`` for ``total_timesteps``);
* ``choices``: allowed values;
* ``metavar``: the value's placeholder in ``--help``;
* ``required``: ``True`` for a flag that must be given (its default is not shown);
* ``cli``: ``False`` to leave the field out of the CLI (set from other flags, or API only);
* ``scale``: the flag is in other units: field value = flag value x ``scale`` (a power of ten,
  e.g. ``1e9`` for a ``[GB]`` flag of a bytes field, ``1e-3`` for ``[ms]`` of seconds); the
  default shown and used is the field default / ``scale``;
* ``parse``: ``parse(text, flag) -> value``: the flag is text (the parsed namespace keeps it) and
  ``parse`` turns it into the field value when the config is built (e.g. ``"hbm,dram"`` -> a
  tuple); its default is the text of the field default (``",".join`` of a tuple);
* ``unset``: ``True`` for a flag whose parser default is ``None`` ("not given": the field keeps
  its dataclass default, and a command can tell that the flag was left out);
* ``negatable``: ``False`` for a ``bool`` flag that is ``--flag`` alone (``store_true``);
* ``nested`` (set by :func:`nested`): the field is a config dataclass whose own CLI fields
  become flags too (in the argument group ``group``, if given).

Supported types: ``int``, ``float``, ``str``, ``bool`` (``--flag/--no-flag``), ``X | None`` of
those, ``tuple[int, ...]`` / ``tuple[float, ...]`` (comma-separated) and ``tuple[float, float]``
(two values, ``--flag START END``). Validation stays in the
dataclass's ``__post_init__``, so the CLI and the Python API reject the same values.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import types
import typing
from typing import Any

__all__ = ["add_config_arguments", "build_config", "check_out_dir", "check_out_file", "config_from_args", "config_flags",
           "error_text", "flag_defaults", "is_int", "is_number", "nested", "option", "split_number_list", "type_name"]


def option(default: Any, help: str, **meta: Any) -> Any:
    """A config dataclass field with its command-line help (``metadata["help"]``, plus any extra
    metadata such as ``choices`` or ``metavar``), from which this module builds the flag.

    Raises:
        TypeError: on a mutable default (list, dict, set): use a tuple or a string.
    """
    if isinstance(default, (list, dict, set)):
        raise TypeError("mutable default")
    return dataclasses.field(default=default, metadata={"help": help, **meta})


def nested(cls: type, group: str | None = None, cli: bool = True) -> Any:
    """A config dataclass field holding another config dataclass (default ``cls()``) whose CLI fields
    become flags as well (in the argument group titled ``group``, else the parent's group);
    ``cli=False`` leaves them all out."""
    return dataclasses.field(default_factory=cls, metadata={"nested": True, "group": group, "cli": cli})


def _flag(f: dataclasses.Field) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def _dest(f: dataclasses.Field) -> str:
    return _flag(f).lstrip("-").replace("-", "_")


def _cli_fields(cls: type, exclude: tuple[str, ...], prefix: str = "") -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if f.metadata.get("cli", True) and prefix + f.name not in exclude]


def _unwrap_optional(tp: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _comma_items(text: str, prefix: str, one: str, many: str) -> list[str]:
    """The stripped items of a comma-separated ``text``; ValueError (starting with ``prefix``) on an
    empty list or an empty item (doubled, leading or trailing comma: never silently dropped)."""
    items = [x.strip() for x in text.split(",")]
    if items == [""]:
        raise ValueError(f"{prefix}needs at least one {one}, got {text!r}")
    if "" in items:
        raise ValueError(f"{prefix}must be a comma-separated list of {many}, got {text!r} "
                         "(an empty item: doubled, leading or trailing comma)")
    return items


def split_number_list(text: str, kind: type = float) -> list:
    """Parses ``"1,2,3"`` into a list of ``kind`` (``int`` or ``float``); items may carry spaces.

    The one parser of comma-separated number lists: the generated ``tuple[int, ...]`` /
    ``tuple[float, ...]`` flags use it, and so does :func:`experiments.common.parse_list`.

    Raises:
        ValueError: without a flag name (callers prefix it): on an empty list, on an empty item
            (``"1,,2"``, a leading or trailing comma: never silently dropped), or on an item that
            is not a number of ``kind``.
    """
    what = "integers" if kind is int else "numbers"
    items = _comma_items(text, "", "value", what)
    try:
        return [kind(x) for x in items]
    except ValueError:
        raise ValueError(f"must be a comma-separated list of {what}, got {text!r}") from None


def split_name_list(text: str, flag: str, allow_duplicates: bool = False) -> list[str]:
    """Parses a comma-separated list of names (policies, workloads, experiment kinds) given with
    ``flag``; items may carry spaces. The names counterpart of :func:`split_number_list`.

    Raises:
        ValueError: naming ``flag``, on an empty list, an empty item (``"a,,b"``, a leading or
            trailing comma: never silently dropped) or, unless ``allow_duplicates``, a name given
            twice (it would run, and be averaged, twice).
    """
    items = _comma_items(text, f"{flag} ", "name", "names")
    twice = next((x for i, x in enumerate(items) if x in items[:i]), None)
    if twice is not None and not allow_duplicates:
        raise ValueError(f"{flag} lists {twice!r} twice: {text!r}")
    return items


class _CommaList:
    """argparse ``type`` parsing ``"1,2,3"`` into a tuple of ``kind`` (:func:`split_number_list`);
    a bad value is argparse's error line ``argument --flag: must be ..., got '...'``."""

    def __init__(self, kind: type) -> None:
        self.kind = kind
        self.__name__ = f"comma-separated {kind.__name__} list"

    def __call__(self, text: str) -> tuple:
        try:
            return tuple(split_number_list(text, self.kind))
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None


def _type_kwargs(cls: type, f: dataclasses.Field, tp: Any) -> dict[str, Any]:
    tp = _unwrap_optional(tp)
    if "parse" in f.metadata:
        return {"type": str}
    if "scale" in f.metadata:
        if tp is not float:
            raise TypeError(f"{cls.__name__}.{f.name}: 'scale' needs a float field, got {tp!r}")
        return {"type": float}
    if tp is bool:
        return {"action": "store_true" if f.metadata.get("negatable", True) is False else argparse.BooleanOptionalAction}
    if tp in (int, float, str):
        return {"type": tp}
    if typing.get_origin(tp) is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis and args[0] in (int, float):
            return {"type": _CommaList(args[0]), "metavar": "A,B,..."}
        if len(args) == 2 and args[0] is args[1] and args[0] in (int, float):  # a pair: START END
            return {"type": args[0], "nargs": 2, "metavar": ("START", "END")}
    raise TypeError(f"{cls.__name__}.{f.name}: type {tp!r} has no command-line form (mark it cli=False)")


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _to_field(v: float, scale: float) -> float:
    """A flag value in the flag's units -> the field's (``v * scale``; ``v / 1000`` for 1e-3, so
    that the result is the one a division by the power of ten gives)."""
    return v * scale if scale >= 1 else v / round(1 / scale)


def _to_flag(v: float, scale: float) -> float:
    return v / scale if scale >= 1 else v * round(1 / scale)


def _text(v: Any) -> str | None:
    """The flag text of a field value (the default of a ``parse`` flag)."""
    if v is None:
        return None
    return ",".join(str(x) for x in v) if isinstance(v, tuple) else str(v)


def _parser_default(f: dataclasses.Field, default: Any) -> Any:
    """The parser default of the flag of ``f`` whose field default is ``default`` (``None`` for
    an ``unset`` flag)."""
    return None if f.metadata.get("unset") else _flag_form(f, default)


def _flag_form(f: dataclasses.Field, default: Any) -> Any:
    """The field value ``default`` as the flag of ``f`` reads it (its text, its units)."""
    if "parse" in f.metadata:
        return _text(default)
    if "scale" in f.metadata and default is not None:
        return _to_flag(default, f.metadata["scale"])
    return default


def _show(v: Any) -> str:
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:  # 25.0 GB/s reads as 25
        return str(int(v))
    if isinstance(v, tuple):
        return ",".join(str(x) for x in v) or "none"
    return "none" if v is None else str(v)


def add_config_arguments(parser: argparse.ArgumentParser, cls: type, title: str | None = None,
                         exclude: tuple[str, ...] = (), defaults: dict[str, Any] | None = None,
                         notes: dict[str, str] | None = None, hidden: tuple[str, ...] = ()) -> None:
    """Adds one flag per CLI field of the dataclass ``cls`` (see the module docstring), and those
    of its :func:`nested` config fields, in field order.

    Args:
        parser: parser (or sub-parser) to extend.
        cls: the config dataclass.
        title: argument-group title in ``--help`` (``None``: no group).
        exclude: fields to leave out (the caller fills them in :func:`config_from_args`); a field
            of a nested config by its dotted path (``"pool.composition"``).
        defaults: field (dotted path) -> default shown and used instead of the dataclass default.
        notes: field (dotted path) -> a note appended to the default in the help text
            (``(default: 2,4; the paper's degrees)``).
        hidden: fields (dotted paths) whose flags are parsed but left out of ``--help``.

    Raises:
        TypeError: when a CLI field has no ``help`` metadata or an unsupported type.
    """
    target = parser.add_argument_group(title) if title else parser
    _add_fields(parser, target, cls, "", exclude, defaults or {}, notes or {}, hidden)


def _add_fields(parser: argparse.ArgumentParser, target, cls: type, prefix: str, exclude: tuple[str, ...],
                defaults: dict[str, Any], notes: dict[str, str], hidden: tuple[str, ...]) -> None:
    hints = typing.get_type_hints(cls)
    for f in _cli_fields(cls, exclude, prefix):
        path = prefix + f.name
        if f.metadata.get("nested"):
            group = parser.add_argument_group(f.metadata["group"]) if f.metadata.get("group") else target
            _add_fields(parser, group, hints[f.name], path + ".", exclude, defaults, notes, hidden)
            continue
        if "help" not in f.metadata:
            raise TypeError(f"{cls.__name__}.{f.name} has no help text (field metadata 'help')")
        kw = _type_kwargs(cls, f, hints[f.name])
        field_default = defaults.get(path, _default(f))
        default = _parser_default(f, field_default)
        for key in ("choices", "metavar"):
            if key in f.metadata:
                kw[key] = f.metadata[key]
        note = f"; {notes[path]}" if path in notes else ""
        if f.metadata.get("required"):
            kw["required"] = True
            help_text = f.metadata["help"]
        elif _STATES_DEFAULT.search(f.metadata["help"]) or kw.get("action") == "store_true":
            help_text = f.metadata["help"]  # "(default: LookaheadConfig's)": not again as "(default: none)"; off unless given
        else:
            help_text = f"{f.metadata['help']} (default: {_show(_flag_form(f, field_default))}{note})"
        if kw.get("action") == "store_true":
            default = bool(default)
        target.add_argument(_flag(f), dest=_dest(f), default=default,
                            help=argparse.SUPPRESS if path in hidden else help_text.replace("%", "%%"), **kw)


#: A help text that already says what its default means: ``(default ...`` or ``; default ...``.
_STATES_DEFAULT = re.compile(r"\(default\b|;\s*default\b")


def config_from_args(cls: type, args: argparse.Namespace, exclude: tuple[str, ...] = (), **values: Any):
    """Builds ``cls`` from the flags :func:`add_config_arguments` added, plus ``values`` for the
    excluded / non-CLI fields (:func:`build_config`).

    Raises:
        ValueError: what ``cls.__post_init__`` raises, with the flags of the fields it names
            appended (``... episode_window_s must be > 0, got 0 (--episode-window-s)``).
    """
    try:
        return build_config(cls, args, exclude, **values)
    except ValueError as exc:
        named = with_flags(cls, exc, exclude)
        if named is exc:
            raise
        raise named from None


def build_config(cls: type, args: argparse.Namespace, exclude: tuple[str, ...] = (), **values: Any):
    """``cls`` built from the flags :func:`add_config_arguments` added (converted: ``scale``,
    ``parse``; an ``unset`` flag left out keeps the field default; a :func:`nested` config is
    built from its own flags), plus ``values`` for the excluded / non-CLI fields or in place of a
    nested config. The flags of a nested config's excluded fields (dotted paths) must come in
    ``values`` as the whole nested config.

    Raises:
        ValueError: what a ``parse`` function or a ``__post_init__`` raises, as it is.
    """
    return cls(**_values(cls, args, exclude, "", values))


def _values(cls: type, args: argparse.Namespace, exclude: tuple[str, ...], prefix: str,
            values: dict[str, Any]) -> dict[str, Any]:
    hints = typing.get_type_hints(cls) if any(f.metadata.get("nested") for f in dataclasses.fields(cls)) else {}
    kwargs: dict[str, Any] = {}
    for f in _cli_fields(cls, exclude, prefix):
        if f.name in values:
            continue
        if f.metadata.get("nested"):
            sub = hints[f.name]
            kwargs[f.name] = sub(**_values(sub, args, exclude, prefix + f.name + ".", {}))
            continue
        v = getattr(args, _dest(f))
        if v is None and f.metadata.get("unset"):
            continue  # not given: the dataclass default
        if v is not None and "parse" in f.metadata:
            v = f.metadata["parse"](v, _flag(f))
        elif v is not None and "scale" in f.metadata:
            v = _to_field(v, f.metadata["scale"])
        kwargs[f.name] = tuple(v) if isinstance(v, list) else v  # nargs=2 -> tuple
    kwargs.update(values)
    return kwargs


def flag_defaults(cls: type, exclude: tuple[str, ...] = (), _prefix: str = "") -> dict[str, Any]:
    """Flag dest -> parser default of every flag :func:`add_config_arguments` adds for ``cls``
    (nested configs included; ``exclude`` as there), in the flags' own units and forms."""
    hints = typing.get_type_hints(cls)
    out: dict[str, Any] = {}
    for f in _cli_fields(cls, exclude, _prefix):
        if f.metadata.get("nested"):
            out.update(flag_defaults(hints[f.name], exclude, _prefix + f.name + "."))
        else:
            out[_dest(f)] = _parser_default(f, _default(f))
    return out


def with_flags(cls: type, exc: ValueError, exclude: tuple[str, ...] = ()) -> ValueError:
    """``exc`` with the flags of the fields of ``cls`` that its message names appended (as
    :func:`config_from_args` does), for checks of a built config that run later (e.g. against
    the pool); ``exc`` itself when it names none."""
    flags = _flags_named_in(str(exc), [f for f in _cli_fields(cls, exclude) if not f.metadata.get("nested")])
    return ValueError(f"{exc} ({', '.join(flags)})") if flags else exc


def _flags_named_in(message: str, cli_fields: list[dataclasses.Field]) -> list[str]:
    """The flags of the fields whose names appear (as whole words) in ``message``, in order of
    appearance: a ``__post_init__`` error names the field, the user typed the flag."""
    hits = []
    for f in cli_fields:
        m = re.search(rf"(?<![\w-]){re.escape(f.name)}(?![\w-])", message)
        if m and _flag(f) not in message:
            hits.append((m.start(), _flag(f)))
    return [flag for _, flag in sorted(hits)]


def config_flags(cls: type, exclude: tuple[str, ...] = ()) -> dict[str, str]:
    """Field name -> flag of every CLI field (for docs and tests); nested configs are left out."""
    return {f.name: _flag(f) for f in _cli_fields(cls, exclude) if not f.metadata.get("nested")}


def check_out_dir(path: str | os.PathLike | None, flag: str = "--out") -> None:
    """Fails early (before any simulation or any file is written) unless ``path`` is a writable
    folder or can be created: it must not be (or lie under) a file, an existing folder must be
    writable, and a missing one is created and removed again (with the parents it needed).

    The one check of every output-folder flag (``--out``, ``--cache-dir``, ...).

    Raises:
        ValueError: naming ``flag`` and ``path``, with the reason (the blocking file, the error).
    """
    from pathlib import Path

    if path is None:
        return
    if not str(path).strip():  # Path("") is the working folder, and `if args.out:` skipped the writing
        raise ValueError(f"{flag} is empty; expected a folder path")
    out = Path(path)
    blocker = _first_file(out, *out.parents)
    if blocker == out:
        raise ValueError(f"{flag} {path} exists and is not a folder; expected a folder (new or existing)")
    if blocker is not None:
        raise ValueError(f"{flag} {path} cannot be created: {blocker} is not a folder")
    if out.exists():
        if not os.access(out, os.W_OK | os.X_OK):
            raise ValueError(f"{flag} {path} is not writable; expected a folder this user can write into")
        return
    missing = [out, *(p for p in out.parents if not p.exists())]
    try:
        out.mkdir(parents=True)
    except OSError as exc:
        raise ValueError(f"{flag} {path} cannot be created: {exc.strerror or exc}") from None
    for p in missing:  # innermost first
        p.rmdir()


def error_text(exc: BaseException) -> str:
    """The one-line text of an input error: ``FILE: reason`` for an ``OSError`` that names a file
    (``[Errno 2] No such file or directory: 'x'`` reads as ``x: No such file or directory``),
    else ``str(exc)``. ``cpgym``'s error line and the checks that re-raise an error naming their
    flag use it."""
    if isinstance(exc, OSError) and getattr(exc, "filename", None) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}"
    return str(exc)


def type_name(v: Any) -> str:
    """The file-level name of ``v``'s type (``null`` for None) for error messages."""
    return "null" if v is None else type(v).__name__


def is_int(v: Any) -> bool:
    """An integer read from a file (JSON / YAML), not a bool."""
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    """An int or float read from a file (JSON / YAML), not a bool."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _first_file(*paths):
    """The first of ``paths`` that exists and is not a folder (it blocks a folder there), else ``None``."""
    return next((p for p in paths if p.exists() and not p.is_dir()), None)


def check_out_file(path: str | None, flag: str = "--out") -> None:
    """Fails early (before any simulation) if the output file ``path`` is an existing folder or
    its folder exists as a file or cannot be created (:func:`check_out_dir`); the writer then
    creates that folder.

    Raises:
        ValueError: naming ``flag`` and ``path``, with the reason.
    """
    from pathlib import Path

    if path is None:
        return
    if not str(path).strip():  # was "--plot  is a folder" (Path("") is the working folder)
        raise ValueError(f"{flag} is empty; expected a file path")
    out = Path(path)
    if out.is_dir():
        raise ValueError(f"{flag} {path} is a folder; expected a file path")
    blocker = _first_file(*out.parents)
    if blocker is not None:  # named with the file's path (check_out_dir would name its folder)
        raise ValueError(f"{flag} {path} cannot be created: {blocker} is not a folder")
    check_out_dir(str(out.parent), flag)
