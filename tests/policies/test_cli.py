from __future__ import annotations

import json

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

