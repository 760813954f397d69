"""Names a researcher should not have to look up in the code (issue #43 item 11): ``simulate
--policy`` and ``compare --suite`` typos get a "did you mean" (``evaluate`` had one), the ``--help``
of simulate / compare / sweep lists the workload (and suite) names, and a bad workload value in a
spec names the expected values (was "see experiments/spec/model.py")."""

from __future__ import annotations

import re

import pytest

from experiments.cli import build_parser, main
from tests.experiments.conftest import write_spec


def _help(command: str) -> str:
    sub = next(a for a in build_parser()._subparsers._group_actions if a.dest == "command")
    return " ".join(sub.choices[command].format_help().split())


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("argv, suggestion", [
    (["simulate", "--policy", "vertumnus-routr", "--quiet"], "did you mean 'vertumnus-router'"),
    (["simulate", "--policy", "least-work,round-robn", "--quiet"], "did you mean 'round-robin'"),
    (["compare", "--suite", "papr", "--rates", "10", "--quiet"], "did you mean 'paper'"),
])
def test_misspelt_policy_or_suite_gets_a_suggestion(argv, suggestion, capsys):
    assert main(argv) == 2
    assert suggestion in _one_line_error(capsys)


@pytest.mark.parametrize("command", ["simulate", "compare", "sweep"])
def test_help_lists_the_workload_names(command):
    from envs.workloads.registry import WORKLOADS

    # argparse wraps at hyphens: compare the text with the line breaks joined back
    text = re.sub(r"- (?=[a-z])", "-", _help(command))
    assert all(name in text for name in WORKLOADS), (sorted(WORKLOADS), text)


def test_compare_help_lists_the_suites():
    from baselines.registry import SUITES

    text = re.sub(r"- (?=[a-z])", "-", _help("compare"))
    assert all(f"{name}: " in text for name in SUITES) and "all (every policy" in text


@pytest.mark.parametrize("workload, expected", [
    ("{name: mixed-default, target_rps: -1}", "expected a finite number > 0"),
    ("{name: mixed-default, arrival_window_s: [5, 1]}", "expected [start, end] [s] with 0 <= start < end"),
    ("{name: mixed-default, rate_scale: 2, target_rps: 3}", "expected one of workload.target_rps and workload.rate_scale"),
])
def test_spec_with_a_bad_workload_value_names_the_expected_values(workload, expected, tmp_path, capsys):
    spec = write_spec(tmp_path, f"name: v\nworkload: {workload}\npolicies: [least-work]\n")
    assert main(["sweep", str(spec), "--dry-run"]) == 2
    err = _one_line_error(capsys)
    assert expected in err and "model.py" not in err, err
