from __future__ import annotations

import json

import pytest

from experiments.cli import main

REQUIRED = {"policy", "mean_ttft_s", "p90_ttft_s", "slo_attainment_token_weighted", "num_episodes"}


def test_evaluate_shipped_checkpoint_json(capsys):
    """The shipped checkpoint evaluates out of the box on its own held-out windows."""
    rc = main(["evaluate", "--policy", "shipped", "--against", "least-work,vertumnus", "--windows", "0", "--seeds", "1",
               "--format", "json", "--quiet"])
    assert rc == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in rows] == ["learned:routing_vertumnus_arms", "least-work", "vertumnus"]
    for r in rows:
        assert REQUIRED <= set(r) and r["num_episodes"] == 1
        assert 0.0 <= r["slo_attainment_token_weighted"] <= 1.0 and r["mean_ttft_s"] > 0
    assert rows[2]["delta_mean_ttft_s"] == 0.0  # paired difference against the reference itself


def test_evaluate_rejects_bad_input(capsys):
    assert main(["evaluate", "--policy", "least-work", "--against", "no-such-policy", "--windows", "0", "--seeds", "1"]) == 2
    assert "unknown policy" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:  # a malformed list is an argparse usage error
        main(["evaluate", "--policy", "least-work", "--seeds", "one"])
    assert exc.value.code == 2 and "--seeds" in capsys.readouterr().err


def test_train_rejects_bad_config(tmp_path, capsys):
    assert main(["train", "routing", "--timesteps", "0", "--out", str(tmp_path), "--wandb", "disabled"]) == 2
    assert "total_timesteps" in capsys.readouterr().err
