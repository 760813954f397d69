"""``cpgym simulate --faults``: fault metrics in the JSON output; a run without faults unchanged."""

import json

import pytest

from experiments.cli import main

ARGS = ["simulate", "--workload", "mixed-default", "--arrival-window-s", "0", "30", "--policy", "least-work,vertumnus",
        "--format", "json"]
FAULT_KEYS = ("num_fault_affected_requests", "recompute_gpu_time_s", "recovery_time_s")


def _rows(capsys, extra):
    assert main(ARGS + extra) == 0
    rows = json.loads(capsys.readouterr().out)
    for r in rows:
        r.pop("wall_time_s")
    return rows


@pytest.mark.slow
def test_simulate_faults_adds_metrics_and_empty_schedule_changes_nothing(tmp_path, capsys):
    empty = tmp_path / "empty.yaml"
    empty.write_text("events: []\n")
    one = tmp_path / "one.yaml"
    # detected at 15 s, before the controller's first decision at 20 s: the full system decides on a
    # degraded pool (GPU 1 out of service)
    one.write_text("detection_delay_s: 5\nrebuild_s: 10\nevents:\n  - {kind: gpu_failure, time_s: 10, gpu: 1}\n")
    plain = _rows(capsys, [])
    assert not any(k in plain[0] for k in FAULT_KEYS)
    with_empty = _rows(capsys, ["--faults", str(empty)])
    for a, b in zip(plain, with_empty):
        assert {k: v for k, v in b.items() if k not in FAULT_KEYS + ("num_faults", "num_unrecovered_faults")} == a
        assert (b["num_fault_affected_requests"], b["recompute_gpu_time_s"]) == (0, 0.0)
    faulty = _rows(capsys, ["--faults", str(one)])
    for r in faulty:
        assert r["num_faults"] == 1 and r["num_fault_affected_requests"] > 0
        assert r["recompute_gpu_time_s"] > 0  # GPU 1 is in a busy CP-4 worker at 10 s
        assert r["recovery_time_s"] == pytest.approx(15.0)  # detection 5 s + rebuild 10 s
        assert r["num_unfinished"] == 0

