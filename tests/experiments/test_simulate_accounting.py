"""``cpgym simulate --format json`` and ``summary.json`` account for every request: finished,
unfinished (cut by the horizon) and rejected (no worker can hold it) (issue #43 item 7: the JSON
had no ``num_rejected``, so the rejected requests could not be told from the horizon's)."""

from __future__ import annotations

import json

import pandas as pd

from experiments.cli import main
from tests.factories import write_trace


def test_simulate_json_and_summary_json_account_for_rejected_requests(tmp_path, capsys):
    too_long = {"timestamp": 0, "input_length": 200_000, "output_length": 1, "hash_ids": list(range(391))}
    ok = [{"timestamp": 1000 * i, "input_length": 600, "output_length": 1, "hash_ids": [10**6 * i, 10**6 * i + 1]}
          for i in range(1, 4)]
    # arrives after the horizon: unfinished, not rejected
    late = {"timestamp": 60_000, "input_length": 600, "output_length": 1, "hash_ids": [9 * 10**6, 9 * 10**6 + 1]}
    trace = write_trace(tmp_path / "t.jsonl", [too_long, *ok, late])
    out = tmp_path / "out"
    assert main(["simulate", "--trace", str(trace), "--policy", "least-work", "--horizon-s", "30", "--format", "json",
                 "--quiet", "--out", str(out)]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    (run,) = out.iterdir()
    summary = json.loads((run / "summary.json").read_text())
    num_finished = int(pd.read_parquet(run / "requests.parquet")["ttft_s"].notna().sum())
    for r in (row, summary):
        assert (r["num_requests"], r["num_unfinished"], r["num_rejected"]) == (5, 2, 1), r
        assert r["num_requests"] == num_finished + r["num_unfinished"] and num_finished == 3
        # the unfinished requests that were not rejected: the one after the horizon
        assert r["num_unfinished"] - r["num_rejected"] == 1
