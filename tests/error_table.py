"""One row of a command-line error table and the check every row gets.

Each layer's error tests are one parametrised table (``tests/*/test_*errors.py``): a row is the
command line, the flag or key the error line must name and a short phrase it must hold, so a
reworded sentence changes no test while a missing flag name or a wrong exit status still fails.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from experiments.cli import main
from tests.interrupt import patch_everywhere

#: ``(tmp_path, monkeypatch) -> placeholders`` (a ``dict`` of names for :attr:`CliError.argv`, or ``None``).
Setup = Callable[[Path, pytest.MonkeyPatch], "dict[str, str] | None"]
#: ``(tmp_path, placeholders) -> None``: further checks once the command has failed.
After = Callable[[Path, "dict[str, str]"], None]


@dataclass(frozen=True)
class CliError:
    """A command line that must exit 2 with one error line naming ``key`` and holding ``phrase``.

    ``argv``, ``key`` and ``phrase`` are formatted with ``{tmp}`` (the test's ``tmp_path``),
    ``{file}`` (a one-byte file in it: a path that is not a folder) and whatever ``setup`` returns.
    ``forbid`` lists ``(module, function)`` pairs that must not be called before the error
    (the check comes before anything runs); ``one_line`` is False where warnings may come first;
    ``also`` are further phrases the line must hold and ``absent`` phrases it must not; ``after``
    checks what the command left behind. Every row also checks that ``{file}`` is untouched.
    """

    id: str
    argv: tuple[str, ...]
    key: str
    phrase: str
    setup: Setup | None = None
    forbid: tuple[tuple[str, str], ...] = ()
    one_line: bool = True
    also: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()
    after: After | None = None


def assert_distinct_ids(rows) -> None:
    """Every row of an error table has its own id (a repeated id hides a row in pytest's report)."""
    ids = [r.id for r in rows]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})


def param(row: CliError):
    return pytest.param(row, id=row.id)


def check(row: CliError, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> tuple[dict[str, str], str]:
    """Runs ``row`` through ``cpgym`` and asserts on it; returns the placeholders and stderr."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    names = {"tmp": str(tmp_path), "file": str(blocker)}
    if row.setup is not None:
        names.update(row.setup(tmp_path, monkeypatch) or {})
    for module, function in row.forbid:
        def ran(*a, _what=f"{module}.{function}", **k):
            raise AssertionError(f"{_what} ran before the input was checked")

        patch_everywhere(monkeypatch, importlib.import_module(module), function, ran)
    argv = [a.format(**names) for a in row.argv]
    capsys.readouterr()  # whatever a setup printed
    usage = False
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse's own errors: the usage, then the error line
        status, usage = exc.code, True
    assert status == 2, argv
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert lines and (len(lines) == 1 or not row.one_line or usage), err
    line = lines[-1]
    assert ": error: " in line, err
    assert row.key.format(**names) in line, f"the error line does not name {row.key.format(**names)!r}: {line}"
    assert row.phrase.format(**names) in line, f"the error line does not say {row.phrase.format(**names)!r}: {line}"
    assert all(a.format(**names) in line for a in row.also), line
    assert not any(a in line for a in row.absent), line
    assert blocker.read_text() == "x"
    if row.after is not None:
        row.after(tmp_path, names)
    return names, err
