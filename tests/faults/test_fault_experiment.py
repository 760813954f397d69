"""The fault experiment (experiments/faults.py, ``cpgym faults``) on a tiny spec."""

import json

import numpy as np
import pandas as pd
import pytest

from experiments.cli import main
from experiments.faults import load_spec
from tests.interrupt import patch_everywhere

SPEC = """name: tiny-faults
trace: "@traces/conversation_trace.jsonl"
arrival_window_s: [0, 40]
capacity_search_rps: [4, 64]
capacity_iterations: 2
policies: [least-work, vertumnus-router]
scenarios:
  gpu: gpu.yaml
plot_before_s: 20
plot_after_s: 20
"""


def _write(tmp_path, spec=SPEC):
    (tmp_path / "gpu.yaml").write_text("detection_delay_s: 5\nrebuild_s: 5\n"
                                       "events:\n  - {kind: gpu_failure, time_s: 15, gpu: 1}\n")
    p = tmp_path / "spec.yaml"
    p.write_text(spec)
    return p


def test_cpgym_faults_writes_table_plots_and_provenance(tmp_path, capsys):
    spec = _write(tmp_path)
    out = tmp_path / "out"
    assert main(["faults", str(spec), "--out", str(out)]) == 0
    df = pd.read_csv(out / "table.csv")
    assert sorted(set(df["scenario"])) == ["gpu", "none"] and sorted(set(df["policy"])) == ["least-work", "vertumnus-router"]
    assert (df["num_requests"] == df["num_finished"] + df["num_unfinished"]).all()
    gpu = df[df["scenario"] == "gpu"]
    assert (gpu["num_fault_affected_requests"] > 0).all() and (gpu["recovery_time_s"] == 10.0).all()
    assert (df[df["scenario"] == "none"]["num_fault_affected_requests"] == 0).all()
    assert (out / "ttft_over_time_gpu.png").stat().st_size > 0
    cap = json.loads((out / "capacity.json").read_text())
    assert len(cap["probes"]) == 2
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["command"].startswith("cpgym faults") and prov["git_commit"]


def test_cpgym_faults_without_out_writes_under_runs_not_results(tmp_path, capsys, monkeypatch):
    """The default --out was results/faults: a run without --out overwrote the shipped results
    (provenance.json at once, table.csv after the first run), part-way if it stopped."""
    from experiments import faults

    spec = _write(tmp_path)
    monkeypatch.chdir(tmp_path)
    patch_everywhere(monkeypatch, faults, "run_fault_experiment", lambda *a, **k: pytest.fail("stop after the provenance"))
    with pytest.raises(pytest.fail.Exception):
        main(["faults", str(spec)])
    assert (tmp_path / "runs" / "faults" / "tiny-faults" / "provenance.json").is_file()
    assert not (tmp_path / "results").exists()


def test_cpgym_faults_stopped_midway_keeps_its_finished_runs(tmp_path, capsys, monkeypatch):
    """table.csv and provenance.json were written at the end only: a run that failed in its last
    scenario lost the others."""
    import baselines.runner as runner
    from tests.interrupt import fail_on_call

    spec = _write(tmp_path)
    out = tmp_path / "out"
    from experiments import faults

    patch_everywhere(monkeypatch, faults, "estimate_capacity_rps", lambda spec, config, log: (20.0, []))
    patch_everywhere(monkeypatch, runner, "run_policy", fail_on_call(runner.run_policy, 3))
    with pytest.raises(RuntimeError, match="killed"):
        main(["--traceback", "faults", str(spec), "--out", str(out)])
    assert json.loads((out / "provenance.json").read_text())["command"].startswith("cpgym faults")
    df = pd.read_csv(out / "table.csv")
    assert list(zip(df["scenario"], df["policy"])) == [("none", "least-work"), ("none", "vertumnus-router")]


@pytest.mark.parametrize("edit, match", [
    (lambda s: s + "colour: red\n", r"unknown key\(s\) \['colour'\]"),
    (lambda s: s + "name: again\n", r"spec.yaml:\d+:1: key 'name' given twice in one mapping"),
    (lambda s: s.replace("gpu: gpu.yaml", "gpu: missing.yaml"), r"scenarios.gpu: file .*missing.yaml does not exist"),
    # the unknown policy named neither the file nor the key
    (lambda s: s.replace("least-work, vertumnus-router", "least-work, nonsense"),
     r"spec.yaml: policies\[1\]: unknown policy 'nonsense'"),
    (lambda s: s.replace("arrival_window_s: [0, 40]", "arrival_window_s: [40, 0]"),
     r"arrival_window_s: expected \[start, end\]"),
])
def test_spec_errors_name_the_key(tmp_path, edit, match):
    p = _write(tmp_path, edit(SPEC))
    with pytest.raises(ValueError, match=match):
        load_spec(p)


@pytest.mark.parametrize("line, match", [
    ("learned: /no/such/checkpoint", r"spec.yaml: learned: /no/such/checkpoint: checkpoint path does not exist"),
    ("learned: .", r"spec.yaml: learned: .*: checkpoint folder has no model.zip"),
    ("plot_bin_s: -10", r"spec.yaml: plot_bin_s: expected a bin width in seconds, a finite number > 0, got -10"),
    ("plot_bin_s: 0", r"plot_bin_s: expected a bin width"),
    ("plot_bin_s: ten", r"spec.yaml: plot_bin_s: expected a number, got 'ten'"),
    ("plot_after_s: -1", r"spec.yaml: plot_after_s: expected seconds, a finite number >= 0, got -1"),
    ("seed: -1", r"spec.yaml: seed: expected an integer >= 0, got -1"),
    ("capacity_iterations: 2.5", r"spec.yaml: capacity_iterations: expected an integer >= 1, got 2.5"),
    ("capacity_iterations: 0", r"spec.yaml: capacity_iterations: expected an integer >= 1, got 0"),
    # NaN passed `<= 0`: the whole experiment ran with every capacity probe 'overloaded'
    ("capacity_drain_s: .nan", r"spec.yaml: capacity_drain_s: expected seconds, a finite number > 0, got nan"),
    ("capacity_drain_s: -1", r"spec.yaml: capacity_drain_s: expected seconds, a finite number > 0, got -1"),
    # an infinite bound failed in the search as "target_rps must be finite, got inf", naming no file or key
    ("capacity_search_rps: [4, .inf]", r"spec.yaml: capacity_search_rps: expected \[low, high\] \[requests/s\] with "
                                       r"0 < low < high, both finite, got \[4.0, inf\]"),
    ("capacity_policy: nonsense", r"spec.yaml: capacity_policy: unknown policy 'nonsense'"),
])
def test_spec_fields_used_late_are_checked_at_load_time(tmp_path, line, match, capsys, monkeypatch):
    """``learned`` (used after the capacity search) and ``plot_bin_s`` (used after every run: NumPy's
    "'minlength' must not be negative", naming no field, and a partial table.csv) fail when the
    spec loads, naming the field, before anything runs or is written."""
    import experiments.faults as faults

    def no_run(*a, **k):
        raise AssertionError("ran before checking the spec")

    patch_everywhere(monkeypatch, faults, "run_fault_experiment", no_run)
    key = line.split(":")[0]  # the field replaces the spec's own (a repeated key is an error)
    p = _write(tmp_path, "".join(x for x in SPEC.splitlines(True) if not x.startswith(key + ":")) + line + "\n")
    with pytest.raises(ValueError, match=match):
        load_spec(p)
    out = tmp_path / "out"
    assert main(["faults", str(p), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cpgym faults: error: ") and err.count("\n") == 1 and not out.exists()


def test_spec_reads_exponent_numbers(tmp_path):
    """`capacity_drain_s: 3e1` was the string '3e1' to PyYAML and failed as "expected a number"."""
    spec = load_spec(_write(tmp_path, SPEC.replace("capacity_iterations: 2", "capacity_iterations: 2\ncapacity_drain_s: 3e1")))
    assert spec.capacity_drain_s == 30.0


def test_shipped_spec_loads():
    spec = load_spec("experiments/specs/faults/conversation.yaml")
    assert [s for s, _ in spec.scenarios] == ["gpu-failure", "straggler", "node-failure"]
    assert spec.load_fraction == 0.8 and spec.learned == "shipped-residual" and spec.capacity_policy == "vertumnus-router"


def test_run_learned_arm_checkpoint_is_a_plain_run():
    """The fault experiment's learned row with the arm-selection checkpoint (``shipped``): the
    checkpoint's router over the run's pool, every request finished on a light load."""
    from envs.sim import SimConfig
    from envs.workloads import get_workload
    from experiments.faults import _run_learned

    wl = get_workload("matched-phases", seed=0, duration_s=5.0, load_fraction_range=(0.1, 0.2))
    res = _run_learned("shipped", wl, SimConfig())
    assert np.isfinite(res.records["ttft_s"]).all() and len(res.records["ttft_s"]) == wl.num_requests

