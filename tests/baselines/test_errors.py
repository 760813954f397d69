"""The baselines' command-line errors (`cpgym compare`'s suites, rates and Vertumnus β/λ sweeps),
one table: each row is a command line, the flag or name its one error line must name, a short
phrase it must hold, and exit status 2 (tests/error_table.py)."""

from __future__ import annotations

import pytest

from tests.error_table import CliError, check, param

COMPARE = ("compare", "--workload", "tool-agent")

ROWS = [
    CliError("rates-not-numbers", (*COMPARE, "--rates", "10,x"), "--rates",
             "must be a comma-separated list of numbers, got '10,x'"),
    CliError("unknown-suite", (*COMPARE, "--suite", "bogus"), "'bogus'", "unknown suite or policy"),
    CliError("beta-below-one", (*COMPARE, "--beta", "0.5"), "--beta",
             "values must be finite numbers >= 1 (paper §5), got '0.5'"),
    # was 'vertumnus beta ...' / 'vertumnus lambda_' (the router's field), and a repeated value ran once
    CliError("beta-nan", (*COMPARE, "--suite", "round-robin", "--beta", "nan"), "--beta",
             "values must be finite numbers >= 1 (paper §5), got 'nan'"),
    CliError("lambda-inf", (*COMPARE, "--suite", "round-robin", "--lambda", "inf"), "--lambda",
             "values must be finite numbers >= 0 (paper §5), got 'inf'"),
    CliError("beta-repeated", (*COMPARE, "--suite", "round-robin", "--beta", "1,1"), "--beta",
             "lists 1.0 twice: '1,1'; expected distinct values (each is one sweep variant)"),
]


@pytest.mark.parametrize("row", [param(r) for r in ROWS])
def test_baselines_cli_error(row, tmp_path, monkeypatch, capsys):
    check(row, tmp_path, monkeypatch, capsys)
