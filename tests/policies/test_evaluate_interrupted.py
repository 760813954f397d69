"""``cpgym evaluate --out CSV`` stopped midway (an error or Ctrl-C) keeps the episodes it finished:
the CSV was written only at the end, so a failure or Ctrl-C lost every episode already run
(routing windows, ``--kind reconfig`` runs, ``--loads`` / ``--protocol`` cells)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from experiments.cli import main
from tests.factories import tiny_trace
from tests.interrupt import fail_on_call, patch_everywhere

POOL = ["--pool-gpus", "8", "--pool-composition", "cp4x1,cp2x2"]


def test_routing_evaluation_stopped_midway_keeps_its_finished_episodes(tmp_path, capsys, monkeypatch):
    import baselines.runner as runner
    trace = tiny_trace(tmp_path / "tiny.jsonl")
    patch_everywhere(monkeypatch, runner, "run_policy", fail_on_call(runner.run_policy, 3))  # seed 2's first episode
    out = tmp_path / "eval" / "rows.csv"
    with pytest.raises(RuntimeError, match="killed"):
        main(["--traceback", "evaluate", "--policy", "least-work", "--against", "round-robin", "--trace", str(trace),
              "--episode-window-s", "5", "--windows", "0", "--seeds", "1,2", "--quiet", *POOL, "--out", str(out)])
    df = pd.read_csv(out)
    assert list(zip(df["policy"], df["seed"], df["window"])) == [("least-work", 1, 0), ("round-robin", 1, 0)]
    provenance = json.loads((out.parent / "rows.csv.provenance.json").read_text())
    assert provenance["argv"][:3] == ["cpgym", "--traceback", "evaluate"]
    assert not list(out.parent.glob(".*.tmp"))  # no temporary file left behind
    capsys.readouterr()
    assert main(["evaluate", "--from-csv", str(out), "--format", "json"]) == 0  # the readers of a complete run read it
    table = {r["policy"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(table) == {"least-work", "round-robin"} and all(r["num_episodes"] == 1 for r in table.values())


@pytest.mark.slow
def test_reconfig_evaluation_interrupted_midway_keeps_its_finished_runs(tmp_path, capsys, monkeypatch):
    """Ctrl-C in the second seed: the first seed's runs are in the CSV (no best-fixed-in-hindsight
    rows: those come with a finished run) and --from-csv aggregates them."""
    import baselines.runner as runner
    from envs.workloads import window

    real = runner.run_policy

    def short(policy, wl, config, *a, **k):  # 20 s of the workload: a quick whole-workload episode
        return real(policy, window(wl, 0.0, 20.0), config, *a, **k)

    patch_everywhere(monkeypatch, runner, "run_policy", fail_on_call(short, 3, exception=KeyboardInterrupt))
    out = tmp_path / "reconfig.csv"
    assert main(["evaluate", "--kind", "reconfig", "--policy", "none", "--against", "vertumnus-router,fixed:cp2x4",
                 "--workload", "tool-agent", "--target-rps", "2", "--seeds", "1000,1001", "--pool-gpus", "8",
                 "--pool-composition", "cp4x2", "--supported-degrees", "2,4", "--quiet", "--out", str(out)]) == 130
    assert capsys.readouterr().err == "cpgym evaluate: interrupted\n"
    df = pd.read_csv(out)
    assert list(zip(df["policy"], df["seed"])) == [("vertumnus-router", 1000), ("fixed:cp2x4", 1000)]
    assert main(["evaluate", "--from-csv", str(out), "--format", "json"]) == 0
    table = {r["policy"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(table) == {"vertumnus-router", "fixed:cp2x4"} and all(r["num_episodes"] == 1 for r in table.values())


def test_protocol_evaluation_stopped_midway_keeps_its_finished_windows(tmp_path, capsys, monkeypatch):
    import policies.routing.protocol as protocol
    trace = tiny_trace(tmp_path / "tiny.jsonl")
    argv = ["evaluate", "--policy", "least-work", "--against", "vertumnus-router", "--trace", str(trace),
            "--target-rps", "6", "--protocol", "--episode-window-s", "4", "--pool-gpus", "8", "--pool-composition",
            "cp2x2,cp1x4", "--supported-degrees", "1,2", "--quiet", "--format", "json"]
    full = tmp_path / "full.csv"
    assert main([*argv, "--out", str(full)]) == 0
    patch_everywhere(monkeypatch, protocol, "run_heuristic_window", fail_on_call(protocol.run_heuristic_window, 3))
    out = tmp_path / "partial.csv"
    with pytest.raises(RuntimeError, match="killed"):
        main(["--traceback", *argv, "--out", str(out)])
    # the first window of both policies, as the complete run wrote them
    assert out.read_text() == "".join(full.read_text().splitlines(keepends=True)[:3])
