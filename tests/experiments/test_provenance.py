"""``provenance.json``: one helper, written by every command that writes a results folder."""

from __future__ import annotations

import json
import subprocess

import pytest

from envs.provenance import git_commit, provenance, write_provenance
from experiments.cli import main

KEYS = {"python", "cpgym", "numpy", "simpy", "torch"}


def test_provenance_records_commit_versions_and_argv(tmp_path):
    path = write_provenance(tmp_path / "new", argv=["cpgym", "compare", "--rates", "10"])
    rec = json.loads(path.read_text())
    assert path.name == "provenance.json"
    assert rec["argv"] == ["cpgym", "compare", "--rates", "10"]
    assert KEYS <= set(rec["versions"]) and rec["versions"]["cpgym"] and rec["versions"]["numpy"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert rec["git_commit"] == (head or None)


def test_git_commit_falls_back_to_none_outside_a_repository(tmp_path):
    assert git_commit(tmp_path) == (None, None)
    assert provenance(argv=[])["argv"] == []


def test_cache_ablation_writes_provenance(tmp_path, capsys):
    out = tmp_path / "ablation"
    assert main(["cache-ablation", "--rates", "4", "--duration-s", "20", "--pool-gpus", "8",
                 "--pool-composition", "cp4x1,cp2x2", "--format", "json", "--out", str(out)]) == 0
    assert (out / "results.csv").is_file()
    assert json.loads((out / "provenance.json").read_text())["versions"]["simpy"]


def test_cache_ablation_stopped_midway_keeps_its_finished_runs(tmp_path, capsys, monkeypatch):
    """results.csv was written at the end only: a run that failed at its last rate lost the others."""
    import pandas as pd

    import experiments.paper_experiments.cache_ablation as ablation
    from tests.interrupt import fail_on_call

    monkeypatch.setattr(ablation, "run_one", fail_on_call(ablation.run_one, 3))
    out = tmp_path / "ablation"
    with pytest.raises(RuntimeError, match="killed"):
        main(["--traceback", "cache-ablation", "--rates", "4,6", "--duration-s", "20", "--pool-gpus", "8",
              "--pool-composition", "cp4x1,cp2x2", "--format", "json", "--out", str(out)])
    assert json.loads((out / "provenance.json").read_text())["argv"]
    assert list(pd.read_csv(out / "results.csv")["rate_rps"]) == [4.0, 4.0]  # both policies at the first rate


def test_compare_interrupted_midway_keeps_its_finished_runs(tmp_path, capsys, monkeypatch):
    """results.csv is rewritten after each run: Ctrl-C at the second rate leaves the first rate's
    runs, in the format of the complete run's results.csv."""
    import pandas as pd

    import experiments.paper_experiments.end_to_end as end_to_end
    from tests.interrupt import fail_on_call

    argv = ["compare", "--workload", "tool-agent", "--workload-param", "duration_s=20", "--rates", "4,6", "--suite",
            "least-work,round-robin", "--pool-gpus", "8", "--pool-composition", "cp4x1,cp2x2", "--format", "json"]
    full = tmp_path / "full"
    assert main([*argv, "--out", str(full)]) == 0
    monkeypatch.setattr(end_to_end, "_run_task", fail_on_call(end_to_end._run_task, 3, exception=KeyboardInterrupt))
    out = tmp_path / "compare"
    assert main([*argv, "--out", str(out)]) == 130
    assert json.loads((out / "provenance.json").read_text())["argv"][:2] == ["cpgym", "compare"]
    df = pd.read_csv(out / "results.csv")
    assert list(zip(df["policy"], df["rate_rps"])) == [("least-work", 4.0), ("round-robin", 4.0)]
    assert list(df.columns) == list(pd.read_csv(full / "results.csv").columns)
    assert not (out / "summary.csv").exists()


def test_compare_writes_provenance(tmp_path, capsys):
    out = tmp_path / "compare"
    assert main(["compare", "--workload", "tool-agent", "--workload-param", "duration_s=20", "--rates", "5",
                 "--suite", "least-work", "--pool-gpus", "8", "--pool-composition", "cp4x1,cp2x2", "--format", "json",
                 "--out", str(out)]) == 0
    rec = json.loads((out / "provenance.json").read_text())
    assert rec["argv"][:3] == ["cpgym", "compare", "--workload"] and "duration_s=20" in rec["argv"]
