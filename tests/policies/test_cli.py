from __future__ import annotations

import json

from experiments.cli import main

REQUIRED = {"policy", "mean_ttft_s", "p90_ttft_s", "slo_attainment_token_weighted", "num_episodes"}


def test_evaluate_shipped_checkpoint_json(capsys):
    """The shipped checkpoint evaluates out of the box on its task's validation episodes, against
    the named policies and the task's reference (always added, last)."""
    rc = main(["evaluate", "--policy", "shipped", "--against", "least-work,vertumnus", "--quick", "--format", "json",
               "--quiet"])
    assert rc == 0
    rows = json.loads(capsys.readouterr().out)
    from benchmark.specs import reference_contender
    from benchmark.tasks import get_task

    reference = reference_contender(get_task("routing/conversation-0.9-v1")).label  # tuned:vertumnus-router once stored
    assert [r["policy"] for r in rows] == ["shipped", "least-work", "vertumnus", reference]
    for r in rows:
        assert REQUIRED <= set(r) and r["num_episodes"] == 4 and r["task"] == "routing/conversation-0.9-v1"
        assert 0.0 <= r["slo_attainment_token_weighted"] <= 1.0 and r["mean_ttft_s"] > 0
    assert rows[3]["delta_mean_ttft_pct"] == 0.0  # paired difference against the reference itself

