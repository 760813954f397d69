from __future__ import annotations

import json

import pytest

from experiments.cli import main

TASK = "routing/conversation-0.9-v1"


def test_evaluate_is_a_view_of_the_benchmark_protocol(capsys, tmp_path):
    """`cpgym evaluate` prints exactly the rows of `cpgym benchmark run` with the same policies and
    the task's reference, so the README's evaluate command and the leaderboard agree."""
    from benchmark.protocol import SUMMARY_FIELDS

    assert main(["evaluate", "--policy", "shipped", "--against", "least-work", "--quick", "--format", "json",
                 "--quiet"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in rows] == ["shipped", "least-work", "vertumnus-router"]
    assert all(list(r) == list(SUMMARY_FIELDS) and r["task"] == TASK and r["num_episodes"] == 4 for r in rows)
    assert rows[2]["delta_mean_ttft_pct"] == 0.0 and rows[0]["reference"] == "vertumnus-router (untuned)"
    assert main(["benchmark", "run", "--policy", "shipped", "--policy", "least-work", "--policy", "vertumnus-router",
                 "--tasks", TASK, "--quick", "--format", "json", "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out) == rows


def test_evaluate_warns_about_the_removed_modes_flags(capsys):
    assert main(["evaluate", "--policy", "least-work", "--against", "round-robin", "--windows", "0", "--seeds", "1",
                 "--pool-gpus", "8", "--max-windows", "1", "--format", "json", "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert [r["num_episodes"] for r in json.loads(out)] == [1, 1, 1]  # --max-windows: the old spelling of --max-episodes
    warned = [line.split()[3] for line in err.splitlines() if "is deprecated and ignored" in line]
    assert warned == ["--windows", "--seeds", "--pool-gpus"]
    assert "--max-windows is deprecated; use --max-episodes" in err


def test_evaluate_rejects_bad_input(capsys):
    assert main(["evaluate", "--policy", "least-work", "--against", "no-such-policy", "--quick"]) == 2
    assert "unknown policy" in capsys.readouterr().err
    assert main(["evaluate", "--policy", "least-work", "--task", "routing/nope-v1"]) == 2
    assert capsys.readouterr().err.startswith("cpgym evaluate: error: --task: unknown task 'routing/nope-v1'")
    with pytest.raises(SystemExit) as exc:  # a malformed number is an argparse usage error
        main(["evaluate", "--policy", "least-work", "--max-episodes", "one"])
    assert exc.value.code == 2 and "--max-episodes" in capsys.readouterr().err


def test_train_rejects_bad_config(tmp_path, capsys):
    assert main(["train", "routing", "--timesteps", "0", "--out", str(tmp_path), "--wandb", "disabled"]) == 2
    assert "total_timesteps" in capsys.readouterr().err
