"""The benchmark commands' errors (`cpgym benchmark run|leaderboard|validate`, and `cpgym evaluate
--against`, a view of the same protocol), one table: each row is a command line, the flag, key or
file its one error line must name, a short phrase it must hold, and exit status 2
(tests/error_table.py). ``forbid``: the check comes before any episode runs; ``after``: nothing
was written (no ledger line, entry or leaderboard)."""

from __future__ import annotations

import pytest

from tests.error_table import CliError, assert_distinct_ids, check, param

BENCH = (("benchmark.protocol", "run_benchmark"),)
TASK = "routing/conversation-0.9-v1"


def _only(*names):
    """After the error, ``tmp_path`` holds only ``{file}`` and ``names`` (the row's own files): no
    ledger, entries or leaderboard written."""
    def after(tmp_path, _names):
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(("file", *names))
    return after


def _entries_and_notes(tmp_path, monkeypatch):
    """An entries folder (one entry) and a ledger path holding a line that is not a ledger record."""
    from benchmark.leaderboard import write_entry
    from tests.benchmark.test_cli import _entry

    write_entry(tmp_path / "entries", _entry("reconfig/matched-phases-v1", "x", 1.0, 0.0))
    (tmp_path / "notes.jsonl").write_text("hello\n")
    return {"entries": str(tmp_path / "entries"), "notes": str(tmp_path / "notes.jsonl")}


def _benchmark_rows():
    run = ("benchmark", "run", "--tasks", TASK, "--quiet", "--ledger", "{tmp}/ledger.jsonl")
    return [
        # a 4-episode smoke run was written as a leaderboard entry, shown unmarked and counted in the summary
        CliError("benchmark-quick-entries", (*run, "--policy", "least-work", "--split", "test", "--quick",
                                             "--entries", "{tmp}/entries"),
                 "--quick", "a smoke run is not a leaderboard entry", forbid=BENCH, after=_only()),
        # fixed: on a routing task changed the task's pool
        CliError("benchmark-fixed-on-routing", (*run, "--policy", "fixed:cp4x10"),
                 "--policy fixed:cp4x10", f"task {TASK} is a routing task", forbid=BENCH, after=_only()),
        # `could not convert string to float: 'abc'`, no parameter named
        CliError("benchmark-word-for-a-number", (*run, "--policy", "vertumnus-router:beta=abc"),
                 "--policy vertumnus-router:beta=abc", "beta: expected a number, got 'abc'", forbid=BENCH),
        # `unknown policy 'nonexistent'` without the flag
        CliError("benchmark-tuned-unknown", (*run, "--policy", "tuned:nonexistent"),
                 "--policy tuned:nonexistent", "unknown policy 'nonexistent'", forbid=BENCH),
        # a test run appended its line to a file that is not a ledger
        CliError("benchmark-foreign-ledger", ("benchmark", "run", "--tasks", TASK, "--quiet", "--policy", "least-work",
                                              "--split", "test", "--ledger", "{notes}"),
                 "--ledger {notes}:1", "not a ledger record", setup=_entries_and_notes, forbid=BENCH,
                 after=_only("entries", "notes.jsonl")),
        # rc 0 with every test-evaluation count 0
        CliError("leaderboard-missing-ledger", ("benchmark", "leaderboard", "--entries", "{entries}", "--ledger",
                                                "{tmp}/missing.jsonl", "--out", "{tmp}/LB.md"),
                 "--ledger {tmp}/missing.jsonl", "no such file", setup=_entries_and_notes,
                 after=_only("entries", "notes.jsonl")),
        CliError("validate-missing-file", ("benchmark", "validate", "{tmp}/missing.json.gz"),
                 "{tmp}/missing.json.gz", "does not exist", forbid=BENCH, after=_only()),
        # `unknown policy 'lambda=2'`: the comma of a NAME:key=value SPEC split it in two
        CliError("evaluate-against-params-then-unknown", ("evaluate", "--policy", "least-work", "--against",
                                                          "vertumnus-router:beta=4,lambda=2,no-such-policy", "--quick",
                                                          "--quiet"),
                 "'no-such-policy'", "unknown policy", absent=("lambda=2'",), forbid=BENCH),
    ]


ROWS = _benchmark_rows()


def test_row_ids_are_distinct():
    assert_distinct_ids(ROWS)


@pytest.mark.parametrize("row", [param(r) for r in ROWS])
def test_benchmark_cli_error(row, tmp_path, monkeypatch, capsys):
    check(row, tmp_path, monkeypatch, capsys)
