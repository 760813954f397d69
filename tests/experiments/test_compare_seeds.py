"""`cpgym compare` over several seeds: one row per nominal rate point averaged over the seeds, and
flags compare does not take are errors."""

from __future__ import annotations

import json

import pytest

from experiments.cli import main


@pytest.mark.parametrize("rate_flags", [[], ["--rate-scales", "0.5,1"]])
def test_seeds_average_into_one_row_per_nominal_rate(rate_flags, capsys):
    """Each seed redraws the workload, so its measured rate differs; rows still group by the
    requested point (native rate / rate scale), and num_seeds counts the seeds in the row."""
    argv = ["compare", "--suite", "random", "--workload", "tool-agent", "--workload-param", "duration_s=20",
            "--arrival-window-s", "0", "10", "--seeds", "0,1", "--format", "json", *rate_flags]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)
    if isinstance(rows, dict):
        rows = rows.get("rows") or rows.get("summary")
    assert len(rows) == (2 if rate_flags else 1)  # the native rate, or the two rate scales
    assert all(r["num_seeds"] == 2 for r in rows)
    assert len({r["rate_rps"] for r in rows}) == len(rows)


def test_one_seed_counts_one(capsys):
    assert main(["compare", "--suite", "random", "--workload", "tool-agent", "--workload-param", "duration_s=20",
                 "--arrival-window-s", "0", "10", "--seeds", "3", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    if isinstance(rows, dict):
        rows = rows.get("rows") or rows.get("summary")
    assert [r["num_seeds"] for r in rows] == [1]


def test_seed_is_not_a_compare_flag(capsys):
    with pytest.raises(SystemExit) as e:
        main(["compare", "--seed", "3"])
    assert e.value.code == 2
    assert capsys.readouterr().err.rstrip().endswith("cpgym compare: error: unrecognized arguments: --seed 3")

