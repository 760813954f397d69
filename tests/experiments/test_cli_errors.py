"""The experiments layer's command-line errors, one table: each row is a command line, the flag or
key its one error line must name, a short phrase it must hold, and exit status 2 (tests/error_table.py).
Where a row has ``forbid``, the check must come before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.cli import main
from tests.error_table import CliError, assert_distinct_ids, check, param
from tests.experiments.conftest import TINY, write_spec
from tests.factories import write_trace
from tests.interrupt import patch_everywhere

SIM = ("simulate", "--workload", "tool-agent", "--arrival-window-s", "0", "2", "--policy", "least-work", "--quiet")
SIM5 = ("simulate", "--workload", "tool-agent", "--arrival-window-s", "0", "5", "--quiet")
RUN = (("baselines.runner", "run_policy"),)
RUN_OR_BUILD = RUN + (("baselines.runner", "build_simulator"),)
TRAIN = (("policies.reconfig.train", "train_reconfig"), ("policies.routing.train", "train_routing"))
#: evaluate's run (the benchmark protocol) and tune's windows
EVALUATE = (("benchmark.protocol", "run_benchmark"), ("policies.routing.protocol", "scenarios"))
CAPACITIES = (("baselines.capacity", "capacities"),)
REPRODUCE = (("experiments.reproduce", "run_experiments"),)
EMPTY_ITEM = "(an empty item: doubled, leading or trailing comma)"


def _simulated_runs(tmp_path, monkeypatch):
    """A folder of one `cpgym simulate --out` run (for `cpgym report --out`)."""
    assert main([*SIM, "--out", str(tmp_path / "runs")]) == 0
    return {"runs": str(tmp_path / "runs")}


def _unwritable(tmp_path, monkeypatch):
    """An existing folder that os.access says is not writable (root may write anywhere: faked)."""
    import experiments.common as common

    patch_everywhere(monkeypatch, common.os, "access", lambda path, mode: False)
    (tmp_path / "w").mkdir()
    return {"w": str(tmp_path / "w")}


def _faults_file(text):
    def setup(tmp_path, monkeypatch):
        (tmp_path / "faults.json").write_text(text)
        return {"faults": str(tmp_path / "faults.json")}
    return setup


def _same_instant_trace(tmp_path, monkeypatch):
    write_trace(tmp_path / "same.jsonl", ({"timestamp": 0, "input_length": 1000, "output_length": 5,
                                          "hash_ids": [i, 10 + i]} for i in range(3)))
    return {"trace": str(tmp_path / "same.jsonl")}


def _sweep_spec(tmp_path, monkeypatch):
    """A one-policy sweep of a one-request trace."""
    write_trace(tmp_path / "t.jsonl", [{"timestamp": 0, "input_length": 100, "output_length": 10, "hash_ids": [1]}])
    (tmp_path / "spec.yaml").write_text("name: t\nworkload: {trace: t.jsonl}\npolicies: [least-work]\n")
    return {"spec": str(tmp_path / "spec.yaml")}


def _faults_spec(tmp_path, monkeypatch):
    """A fault experiment of one GPU-failure scenario (tests/faults/test_fault_experiment.py's SPEC)."""
    (tmp_path / "gpu.yaml").write_text("detection_delay_s: 5\nrebuild_s: 5\n"
                                       "events:\n  - {kind: gpu_failure, time_s: 15, gpu: 1}\n")
    (tmp_path / "spec.yaml").write_text('name: tiny-faults\ntrace: "@traces/conversation_trace.jsonl"\n'
                                        "arrival_window_s: [0, 40]\ncapacity_search_rps: [4, 64]\ncapacity_iterations: 2\n"
                                        "policies: [least-work, vertumnus-router]\nscenarios:\n  gpu: gpu.yaml\n"
                                        "plot_before_s: 20\nplot_after_s: 20\n")
    return {"spec": str(tmp_path / "spec.yaml")}


def _spec(text):
    def setup(tmp_path, monkeypatch):
        return {"spec": str(write_spec(tmp_path, text))}
    return setup


def _left_empty(name):
    def after(tmp_path, names):
        assert list((tmp_path / name).iterdir()) == []
    return after


def _not_written(name):
    def after(tmp_path, names):
        assert not (tmp_path / name).exists()
    return after


def _list_rows():
    rows = []
    # --- generated (config-dataclass) list flags: one line `cpgym CMD: error: FLAG: ...`
    for i, text in enumerate(["0.1,,0.2", ",0.1", "0.1,", " , "]):
        rows.append(CliError(f"train-arms-switch-margins-empty-{i}",
                             ("train", "arms", "--switch-margins", text, "--out", "unused"), "error: --switch-margins: ",
                             f"must be a comma-separated list of numbers, got {text!r} {EMPTY_ITEM}"))
    for argv, flag in [(("train", "reconfig", "--workload-seeds", "1,,2"), "--workload-seeds"),
                       (("train", "arms", "--betas", "x,1"), "--betas")]:
        rows.append(CliError(f"generated-list-{flag}", (*argv, "--out", "unused"), f"error: {flag}: ",
                             "must be a comma-separated list of"))
    return rows


def _report_and_out_rows():
    rows = []
    # --- report
    rows += [
        CliError("report-of-a-file", ("report", "{file}"), "run folder '{file}'",
                 "is not a folder; give a sweep's --out folder or a folder of `cpgym simulate --out` runs"),
        CliError("report-of-a-missing-folder", ("report", "{tmp}/missing"), "{tmp}/missing", "does not exist"),
        CliError("report-out-a-file", ("report", "{runs}", "--out", "{file}"), "--out {file}",
                 "exists and is not a folder; expected a folder (new or existing)", setup=_simulated_runs),
    ]
    # --- --out folders and files, checked before anything runs
    rows.append(CliError("simulate-out-under-a-file", (*SIM5, "--policy", "least-work", "--out", "{file}/out"), "--out",
                         "cannot be created", forbid=RUN))
    for kind in ("reconfig", "routing"):
        rows += [CliError(f"train-{kind}-out-a-file", ("train", kind, "--out", "{file}"), "--out {file}",
                          "exists and is not a folder; expected a folder (new or existing)", forbid=TRAIN),
                 CliError(f"train-{kind}-out-under-a-file", ("train", kind, "--out", "{file}/sub"), "--out {file}/sub",
                          "cannot be created: {file} is not a folder", forbid=TRAIN)]
    rows.append(CliError("train-out-not-writable", ("train", "reconfig", "--out", "{w}"), "--out {w}",
                         "is not writable; expected a folder this user can write into", setup=_unwritable, forbid=TRAIN,
                         after=_left_empty("w")))
    for i, command in enumerate([
            ("evaluate", "--policy", "least-work", "--against", "round-robin", "--quick"),
            ("tune", "vertumnus", "--workload", "tool-agent", "--target-rps", "6")]):
        rows.append(CliError(f"{command[0]}-out-file-under-a-file-{i}", (*command, "--quiet", "--out", "{file}/rows.csv"),
                             "--out {file}/rows.csv", "cannot be created: {file} is not a folder", forbid=EVALUATE))
    for command in [("capacity", "--workload", "tool-agent", "--policy", "least-work", "--quiet"),
                    ("compare", "--workload", "tool-agent", "--suite", "least-work", "--loads", "0.5"),
                    ("reproduce", "--quick", "--experiments", "end-to-end", "--quiet", "--out", "{tmp}/out")]:
        rows.append(CliError(f"{command[0]}-cache-dir-a-file", (*command, "--cache-dir", "{file}"), "--cache-dir {file}",
                             "exists and is not a folder; expected a folder (new or existing)",
                             forbid=CAPACITIES + REPRODUCE))
    rows += [
        CliError("compare-out-before-capacity", ("compare", "--workload", "tool-agent", "--suite", "least-work", "--loads",
                                                 "0.5", "--out", "{file}"),
                 "--out {file}", "exists and is not a folder; expected a folder (new or existing)", forbid=CAPACITIES),
        CliError("capacity-cache-dir-with-no-cache", ("capacity", "--workload", "tool-agent", "--policy", "least-work",
                                                      "--no-cache", "--cache-dir", "{file}"),
                 "--cache-dir {file}", "is not used with --no-cache"),
    ]
    return rows


def _workload_rows():
    rows = []
    # --- workloads and traces
    rows += [
        CliError("workload-param-type", ("simulate", "--workload", "tool-agent", "--workload-param", "duration_s=abc",
                                         "--quiet"),
                 "workload 'tool-agent': parameter duration_s", "must be a number, got 'abc'"),
        CliError("skip-invalid-default-workload", ("simulate", "--arrival-window-s", "0", "2", "--policy", "least-work",
                                                   "--quiet", "--skip-invalid"),
                 "--skip-invalid", "does not apply to the named workload 'mixed-default'"),
        CliError("skip-invalid-named-workload", (*SIM, "--skip-invalid"), "--skip-invalid",
                 "does not apply to the named workload 'tool-agent'"),
        CliError("capacity-of-one-instant", ("capacity", "--trace", "{trace}", "--policy", "round-robin", "--no-cache",
                                             "--quiet"),
                 "workload 'same'", "has no defined arrival rate (3 request(s), all arriving at 0 s); a capacity needs "
                 ">= 2 requests with distinct arrival times", setup=_same_instant_trace, one_line=False),
    ]
    capacity = ("capacity", "--workload", "leval-like", "--arrival-window-s", "0", "40", "--policy", "homogeneous-cp4",
                "--pool-gpus", "8", "--pool-composition", "cp4x1,cp2x2", "--supported-degrees", "2,4", "--rel-tol", "0.2",
                "--no-cache", "--format", "json", "--quiet")
    rows += [
        CliError("capacity-unknown-workload-param", (*capacity, "--workload-param", "foo=1"), "['foo']",
                 "unknown parameter(s)", one_line=False),
        CliError("capacity-workload-param-duration", (*capacity, "--workload-param", "duration_s=60"),
                 "--workload-param duration_s", "does not apply here: the capacity window (--arrival-window-s START END, "
                 "default 0 600) sets the generated span", one_line=False),
        CliError("capacity-workload-param-of-a-trace", ("capacity", "--trace", "/nonexistent/trace.jsonl",
                                                         "--workload-param", "x=1", "--policy", "round-robin"),
                 "--workload-param", "does not apply to a trace", one_line=False),
    ]
    for command in ("capacity", "compare"):
        extra = ("--policy", "least-work") if command == "capacity" else ("--suite", "least-work", "--loads", "0.5")
        rows.append(CliError(f"{command}-of-phases", (command, "--workload", "phases", *extra, "--no-cache", "--quiet"),
                             "workload 'phases'", "has no steady rate to measure a capacity of", one_line=False,
                             absent=("unknown parameter",)))
    return rows


def _simulator_rows():
    rows = []
    # --- simulator flags: the flag as typed, in its units, before any run
    for argv, key, phrase in [
            (("--slo", "5", "--slo-scale", "2"), "--slo-scale", "applies to --slo scaled only"),
            (("--dram-gb-per-node", "5"), "--dram-gb-per-node",
             "has no effect with --kv-tiers hbm; it needs --kv-tiers with dram"),
            (("--kv-tiers", "hbm,dram", "--store-gb", "5"), "--store-gb", "has no effect with --kv-tiers hbm,dram"),
            (("--kv-layerwise",), "--kv-layerwise", "has no effect with --kv-tiers hbm"),
            (("--kv-eviction", "next-use"), "--kv-eviction", "has no effect with --kv-tiers hbm"),
            # read only in queue-head / layer-wise mode: they were accepted and ignored
            (("--kv-tiers", "hbm,dram", "--kv-prefetch-depth", "3"), "--kv-prefetch-depth",
             "has no effect without --kv-prefetch queue-head"),
            (("--kv-tiers", "hbm,dram", "--kv-buffer-layers", "8"), "--kv-buffer-layers",
             "has no effect without --kv-layerwise"),
            (("--kv-tiers", "hbm,dram", "--kv-num-layers", "8"), "--kv-num-layers", "has no effect without --kv-layerwise"),
            # these named TierConfig's byte fields (kv_tiers.dram_capacity_bytes_per_node ... got -1000000000.0)
            (("--kv-tiers", "hbm,dram", "--dram-gb-per-node", "-1"), "--dram-gb-per-node",
             "must be a finite number > 0, got -1.0"),
            (("--kv-tiers", "hbm,dram", "--dram-gbps-per-gpu", "0"), "--dram-gbps-per-gpu",
             "must be a finite number > 0, got 0.0"),
            (("--kv-tiers", "hbm,dram,store", "--store-gb", "inf"), "--store-gb", "must be a finite number > 0, got inf"),
            (("--kv-tiers", "hbm,dram,store", "--store-lookup-ms", "-0.5"), "--store-lookup-ms",
             "must be a finite number >= 0"),
            (("--kv-tiers", "hbm,dram,store", "--store-gbps-per-node", "0"), "--store-gbps-per-node",
             "must be a finite number > 0"),
            (("--kv-tiers", "hbm,dram", "--kv-prefetch", "queue-head", "--kv-prefetch-depth", "0"), "--kv-prefetch-depth",
             "must be an integer >= 1, got 0"),
            (("--kv-tiers", "hbm,dram", "--kv-layerwise", "--kv-buffer-layers", "0"), "--kv-buffer-layers",
             "must be an integer >= 1, got 0"),
            (("--kv-tiers", "hbm,dram", "--kv-layerwise", "--kv-num-layers", "-8"), "--kv-num-layers",
             "must be an integer >= 1, got -8")]:
        rows.append(CliError(f"simulate{''.join(argv)}", (*SIM5, *argv), key, phrase))
    # inf used to pass the `> 0` / `>= 0` checks: a traceback (cache scale), TTFTs of inf, or an SLO every request meets
    for flag, phrase in [("--cache-capacity-scale", "must be a finite number >= 0, got inf"),
                         ("--first-decode-step-s", "must be a finite number >= 0, got inf"),
                         ("--kv-handoff-gbps", "must be a finite number > 0, got inf"),
                         ("--slo", "must be a finite number of seconds > 0 or 'scaled', got inf"),
                         ("--slo-scale", "must be a finite number > 0, got inf")]:
        rows.append(CliError(f"simulate{flag}-inf", (*SIM, flag, "inf"), flag, phrase))
    for argv, phrase in [
            # each named the SimConfig field and the converted value (bytes/s, 0.0, the number of entries)
            (("--kv-handoff-gbps", "-1"), "must be a finite number > 0, got -1"),
            (("--horizon-s", "0"), "must be a finite number > 0, got 0 (leave --horizon-s out to run until every request "
                                   "finished)"),
            (("--horizon-s", "inf"), "must be a finite number > 0, got inf"),
            (("--horizon-s", "nan"), "must be a finite number > 0, got nan"),
            (("--max-batch-tokens", "0"), "must be an integer >= 1, got 0"),
            (("--pool-gpus", "0"), "must be an integer >= 1, got 0"),
            (("--prediction-noise", "-1"), "must be a finite number >= 0, got -1"),
            (("--slo", "-1"), "must be a finite number of seconds > 0 or 'scaled', got -1"),
            (("--node-calibrations", "/no/such.json"), "needs one calibration per node ('' = --calibration): 5 node(s) of "
                                                       "--gpus-per-node 8 in --pool-gpus 40, got 1 in '/no/such.json'"),
            (("--node-calibrations", "/no/such.json,,,,"), "/no/such.json does not exist; expected a calibration JSON file"),
            (("--node-calibrations", "/,,,,"), "/ is a folder; expected a calibration JSON file")]:
        rows.append(CliError(f"simulate{argv[0]}={argv[1]}", (*SIM, *argv), argv[0], phrase, forbid=RUN))
    for degrees in ["3", "2,6", "0", "-2"]:  # was 'pool.supported_degrees must be powers of two >= 1, got (3,)'
        rows.append(CliError(f"supported-degrees={degrees}", (*SIM5, "--supported-degrees", degrees), "--supported-degrees",
                             f"must be powers of two >= 1 (CP degrees), got {degrees!r}"))
    for i, text in enumerate(["{}", "rebuild_s: 5\n"]):  # was a run without faults
        rows.append(CliError(f"faults-file-without-events-{i}", (*SIM, "--faults", "{faults}"), "{faults}:1: events",
                             "missing, and no random fault process is set; expected a mapping with 'events'",
                             setup=_faults_file(text)))
    rows.append(CliError("faults-file-gpu-outside-the-pool",
                         ("simulate", "--workload", "mixed-default", "--arrival-window-s", "0", "30", "--policy",
                          "least-work,vertumnus", "--format", "json", "--faults", "{faults}"),
                         "gpu 99", "is outside the pool of 40 GPUs",
                         setup=_faults_file("events:\n  - {kind: gpu_failure, time_s: 5, gpu: 99}\n")))
    rows.append(CliError("config-field-names-its-flag", ("train", "routing", "--episode-window-s", "-1", "--out", "{tmp}/run",
                                                         "--quiet", "--wandb", "disabled"),
                         "(--episode-window-s)", "episode_window_s must be > 0, got -1.0", forbid=TRAIN))
    return rows


def _policy_rows():
    rows = []
    # --- policies and suites
    for name in ["shipped", "shipped-residual", "policies/checkpoints/routing_conversation_residual"]:
        rows.append(CliError(f"simulate-checkpoint-{name}", (*SIM[:-3], "--quiet", "--policy", f"least-work,{name}"),
                             f"--policy {name}", f"learned checkpoints run under `cpgym evaluate --policy {name}`"))
    for command in [(*SIM[:-3], "--quiet", "--policy", "least-work,homogeneous-cp4"),
                    ("compare", "--workload", "tool-agent", "--arrival-window-s", "0", "2", "--rates", "10", "--suite",
                     "least-work,homogeneous-cp4")]:
        rows.append(CliError(f"{command[0]}-baseline-pool-does-not-fit", (*command, "--supported-degrees", "2",
                                                                          "--pool-composition", "cp2x20"),
                             "policy 'homogeneous-cp4'", "runs on its own pool, which these pool flags reject: composition "
                             "item 'cp4x10': CP degree 4 is not supported; supported degrees are [2]", forbid=RUN_OR_BUILD))
    for argv, flag, value, problem in [
            (("simulate", "--workload", "tool-agent"), "--policy", "least-work,,round-robin", "empty"),
            (("compare", "--workload", "tool-agent", "--rates", "10"), "--suite", "least-work,", "empty"),
            (("capacity", "--workload", "tool-agent"), "--policy", ",least-work", "empty"),
            (("reproduce", "--workloads", "tool-agent"), "--experiments", "end-to-end,,dynamic", "empty"),
            (("reproduce", "--experiments", "end-to-end"), "--workloads", "tool-agent,,leval-like", "empty"),
            (("reproduce", "--experiments", "end-to-end"), "--workloads", "tool-agent,tool-agent", "twice"),
            (("evaluate", "--policy", "least-work", "--quick"), "--against", "round-robin,round-robin", "twice"),
            (("evaluate", "--policy", "vertumnus-adaptive", "--task", "reconfig/matched-phases-v1", "--quick"), "--against",
             "vertumnus-router,", "empty"),
            (("kv-tiers",), "--policies", "least-work,,dynamo-kv", "empty"),
            (("bench", "sim"), "--policy", "least-work,,round-robin", "empty")]:
        # an empty item was silently dropped; a repeated workload or comparison ran (and was averaged) twice
        quiet = ("--quiet",) if argv[0] not in ("kv-tiers", "bench") else ()
        phrase = (f"must be a comma-separated list of names, got {value!r} {EMPTY_ITEM}" if problem == "empty"
                  else f"lists {value.split(',')[0]!r} twice: {value!r}")
        rows.append(CliError(f"{argv[0]}{flag}={value}", (*argv, flag, value, *quiet), flag, phrase,
                             forbid=RUN_OR_BUILD + EVALUATE))
    return rows


def _compare_rows():
    rows = []
    # --- compare, capacity and reproduce options
    rows += [
        CliError("compare-nan-rate", ("compare", "--workload", "tool-agent", "--arrival-window-s", "0", "2", "--suite",
                                      "least-work", "--rates", "nan"),
                 "--rates", "values must all be finite numbers > 0, got 'nan'"),
        CliError("capacity-horizon", ("capacity", "--workload", "tool-agent", "--policy", "least-work", "--quiet",
                                      "--horizon-s", "5"),
                 "--horizon-s", "does not apply to cpgym capacity: every probe runs until its requests finish"),
        CliError("compare-loads-without-a-static-baseline",
                 ("compare", "--suite", "vertumnus-router,vertumnus", "--loads", "0.5", "--workload", "tool-agent",
                  "--no-cache", "--quiet"),
                 "--loads", "but the suite (vertumnus-router, vertumnus) has none", one_line=False,
                 forbid=(("baselines.capacity", "find_capacity"),)),
    ]
    for flag, text, phrase in [("--rates", "1,1", "lists 1.0 twice: '1,1'; expected distinct rates"),
                               ("--rate-scales", "2,2.0", "lists 2.0 twice: '2,2.0'; expected distinct rate factors"),
                               ("--loads", "0.5,0.5", "lists 0.5 twice: '0.5,0.5'; expected distinct loads")]:
        rows.append(CliError(f"compare-repeated{flag}", ("compare", "--workload", "tool-agent", "--suite", "round-robin",
                                                         "--quiet", flag, text),
                             flag, phrase, forbid=CAPACITIES))
    for flag in [("--no-cache",), ("--drain-ratio", "3"), ("--rel-tol", "0.05"), ("--cache-dir", "x")]:
        rows.append(CliError(f"compare-rates{flag[0]}", ("compare", "--workload", "tool-agent", "--suite", "least-work",
                                                         "--rates", "10", *flag),
                             flag[0], "has no effect here: capacities are measured only with --loads or --label-overload",
                             forbid=(("experiments.paper_experiments.end_to_end", "run_compare"),)))
    for command in ("capacity", "compare"):
        extra = ("--policy", "round-robin") if command == "capacity" else ("--suite", "round-robin", "--loads", "0.5")
        for flag, value, phrase in [("--drain-ratio", "1", "must be a finite number > 1, got 1.0"),
                                    ("--rel-tol", "0", "must be in (0, 1), got 0.0"),
                                    ("--min-slo-attainment", "1.5", "must be in [0, 1], got 1.5")]:
            # named the dataclass field (capacity.drain_ratio), before any trace or workload is built
            rows.append(CliError(f"{command}{flag}", (command, "--trace", "/nonexistent/trace.jsonl", *extra, "--no-cache",
                                                      flag, value),
                                 flag, phrase, one_line=False))
    for case, folder, phrase in [
            ("missing", "{tmp}/missing", "does not exist; expected a folder holding conversation_trace.jsonl"),
            ("file", "{file}", "is not a folder; expected a folder holding conversation_trace.jsonl"),
            ("empty", "{tmp}", "has no conversation_trace.jsonl; the end-to-end experiment's production workload replays "
                               "it (or leave production out of --workloads)")]:
        rows.append(CliError(f"reproduce-traces-dir-{case}", ("reproduce", "--traces-dir", folder, "--out", "{tmp}/out"),
                             f"--traces-dir {folder}", phrase, forbid=REPRODUCE, after=_not_written("out")))
    return rows


def _tune_rows():
    rows = []
    # --- tune vertumnus: the flag, before any scenario is built, and nothing written
    rows.append(CliError("tune-episode-window-zero", ("tune", "vertumnus", "--workload", "tool-agent", "--target-rps", "6",
                                                      "--episode-window-s", "0", "--quiet", "--out", "{tmp}/t.json"),
                         "--episode-window-s", "must be a finite number > 0 [s], got 0", one_line=False,
                         after=_not_written("t.json")))
    for flags, phrase in [(("--lambdas", "0.5,-1"), "values must be finite numbers >= 0 (paper §5), got -1 in '0.5,-1'"),
                          (("--betas", "0.5"), "values must be finite numbers >= 1 (paper §5), got 0.5"),
                          (("--betas", "1,nan"), "values must be finite numbers >= 1 (paper §5), got nan"),
                          (("--betas", "1,1.5,1"), "lists 1.0 twice: '1,1.5,1'; expected distinct values"),
                          (("--warmup-s", "-3"), "must be a finite number >= 0 [s], got -3")]:
        rows.append(CliError(f"tune{flags[0]}={flags[1]}", ("tune", "vertumnus", "--workload", "tool-agent", "--target-rps",
                                                            "6", *flags, "--quiet", "--out", "{tmp}/t.json"),
                             flags[0], phrase, one_line=False, forbid=(("policies.routing.protocol", "scenarios"),),
                             after=_not_written("t.json")))
    return rows


def _other_command_rows():
    rows = [
        CliError("sweep-out-a-file", ("sweep", "{spec}", "--out", "{file}", "--quiet"), "--out {file}",
                 "exists and is not a folder; expected a folder (new or existing)", setup=_sweep_spec),
        CliError("faults-out-under-a-file", ("faults", "{spec}", "--out", "{spec}/out"), "--out {spec}/out",
                 "cannot be created: {spec} is not a folder", setup=_faults_spec,
                 forbid=(("experiments.faults", "run_fault_experiment"),)),
    ]
    for extra in ((), ("--loads", "0.5")):  # ran seed 1 once but titled the table "seeds 1,1"; or measured capacities first
        rows.append(CliError(f"compare-repeated-seed{''.join(extra)}", ("compare", "--seeds", "0,1,0", "--out", "{tmp}/out",
                                                                       *extra),
                             "--seeds", "lists 0 twice: '0,1,0'; expected distinct seeds (each is one repetition)",
                             forbid=(("experiments.commands.compare", "_capacities_for"),), after=_not_written("out")))
    rows += [
        CliError("sweep-invalid-spec", ("sweep", "{spec}", "--out", "{tmp}/out", "--wandb", "disabled"),
                 "sweep.grid.slo.slo_scal", "expected", also=("{spec}",), after=_not_written("out"),
                 setup=_spec("workload: {name: mixed-default}\npolicies: [least-work]\n"
                             "sweep: {grid: {slo.slo_scal: [1.0]}}\n")),
        # --jobs 0 left a folder holding only provenance.json
        CliError("sweep-jobs-zero", ("sweep", "{spec}", "--out", "{tmp}/new", "--jobs", "0", "--wandb", "disabled"),
                 "--jobs", "must be >= 1, got 0", one_line=False, setup=_spec(TINY), after=_not_written("new")),
        # `cpgym sweep --dry-run --jobs 0` and `--dry-run --out FILE` exited 0: the checks ran only without --dry-run
        CliError("sweep-dry-run-jobs-zero", ("sweep", "{spec}", "--out", "{tmp}/o", "--jobs", "0", "--dry-run"), "--jobs",
                 "must be >= 1, got 0", one_line=False, setup=_spec(TINY), after=_not_written("o")),
        CliError("sweep-dry-run-out-a-file", ("sweep", "{spec}", "--out", "{file}", "--dry-run"), "--out",
                 "exists and is not a folder", one_line=False, setup=_spec(TINY)),
    ]
    kv_tiers = (("experiments.kv_tiers", "run_tier_study"),)
    for flags, phrase in [
            # was "target_rps must be > 0 [requests/s], got -0.9" (load x capacity, not the flag)
            (("--capacity-rps", "-1"), "must be a finite number > 0 [requests/s], got -1.0"),
            (("--capacity-rps", "nan"), "must be a finite number > 0 [requests/s], got nan"),
            (("--capacity-rps", "10", "--capacity-policy", "nope"), "unknown policy 'nope'"),  # was ignored
            # both were found inside the study: after the capacity search (~9 s), after the whole tier table (~15 s)
            (("--policies", "least-work,nosuch"), "unknown policy 'nosuch'; known policies: vertumnus, "),
            (("--eviction-policies", "nosuch"), "unknown policy 'nosuch'; known policies: vertumnus, ")]:
        rows.append(CliError(f"kv-tiers{''.join(flags)}", ("kv-tiers", "--arrival-window-s", "0", "5", *flags), flags[-2],
                             phrase, forbid=kv_tiers))
    for window in (("10", "5"), ("-5", "5"), ("0", "nan")):  # was "end_s must be > start_s" / run as if it began at 0
        rows.append(CliError(f"kv-tiers-window-{'-'.join(window)}", ("kv-tiers", "--arrival-window-s", *window,
                                                                    "--capacity-rps", "10"),
                             "--arrival-window-s START END", f"needs finite 0 <= START < END, got {' '.join(window)}",
                             forbid=kv_tiers))
    dynamic = ("dynamic", "--num-phases", "1", "--compositions", "cp4x10", "--quiet")
    run_dynamic = (("experiments.paper_experiments.dynamic_phases", "run_dynamic_phases"),)
    rows += [
        CliError("dynamic-window-after-the-last-phase", ("dynamic", "--arrival-window-s", "5000", "6000", "--quiet"),
                 "(--arrival-window-s, --num-phases, --phase-duration-s)",
                 "arrival_window_s [5000, 6000) starts after the last phase (num_phases x phase_duration_s = 600 s)",
                 forbid=(("baselines.controller.measurement", "CapacityTable"),)),
        CliError("dynamic-plot-under-a-file", (*dynamic, "--plot", "{file}/dyn.png"), "--plot {file}/dyn.png",
                 "cannot be created: {file} is not a folder", forbid=run_dynamic),
        CliError("dynamic-plot-a-folder", (*dynamic, "--plot", "{tmp}"), "--plot {tmp}", "is a folder; expected a file path",
                 forbid=run_dynamic),
        CliError("dynamic-capacity-cache-dir-a-file", (*dynamic, "--short-load", "0.5", "--capacity-cache-dir", "{file}"),
                 "--capacity-cache-dir {file}", "exists and is not a folder; expected a folder (new or existing)",
                 forbid=run_dynamic),
    ]
    for text in ["", " ; ", "cp4x10;;cp2x20", "cp4x10;", ";cp4x10"]:  # was "min() arg is an empty sequence" / dropped
        rows.append(CliError(f"dynamic-compositions-{text!r}", ("dynamic", "--compositions", text, "--quiet"),
                             "(--compositions)", f"compositions must be 'all' or ';'-separated compositions (e.g. "
                             f"'cp4x10;cp2x20'), got {text!r} (an empty item: doubled, leading or trailing ';')"))
    return rows


def _reproduce_rows():
    cal = str(Path(__file__).resolve().parents[2] / "envs/sim/calibrations/qwen3-30b-a3b__h20-3e.json")
    rows = [
        CliError("reproduce-unknown-workload", ("reproduce", "--workloads", "nope"), "--workloads", "unknown workload 'nope'"),
        CliError("reproduce-loads-decreasing", ("reproduce", "--loads", "0.9,0.5", "--workloads", "leval-like"), "--loads",
                 "must be increasing fractions in (0, 2], got [0.9, 0.5]"),
        CliError("reproduce-unknown-experiment", ("reproduce", "--experiments", "nope"), "--experiments",
                 "unknown kind 'nope'"),
        CliError("reproduce-dynamic-param-workload-seed", ("reproduce", "--experiments", "dynamic", "--dynamic-param",
                                                          "workload_seed=3"),
                 "['workload_seed']", "the workload seed"),
        CliError("reproduce-dynamic-param-without-value", ("reproduce", "--experiments", "dynamic", "--dynamic-param",
                                                          "num_phases"),
                 "--dynamic-param", "must be NAME=VALUE, got 'num_phases'"),
        CliError("reproduce-dynamic-composition-of-another-pool",
                 ("reproduce", "--workloads", "tool-agent", "--quiet", "--pool-gpus", "8", "--pool-composition", "cp4x2",
                  "--dynamic-param", "compositions=cp4x2;cp4x5"),
                 "compositions item 'cp4x5'", "is not a composition of the 8-GPU pool", one_line=False,
                 forbid=(("experiments.reproduce", "_map"),)),
    ]
    # a missing calibration or a composition of the wrong GPU count failed without naming --models (or only once
    # the runs started); two entries with one label pooled both models' runs; an empty entry was ignored
    for i, (models, key, phrase) in enumerate([
            ("a=x.json;", "--models", "an empty entry in 'a=x.json;' (doubled, leading or trailing ';')"),
            ("", "--models", "an empty entry in ''"),
            (f"a={cal}@", "--models", f"entries must be LABEL=CALIBRATION_FILE[@COMPOSITION], got 'a={cal}@'"),
            ("a=/nonexistent/cal.json", "--models entry 'a'", "/nonexistent/cal.json: calibration file does not exist"),
            (f"a={cal}@cp4x5", "--models entry 'a'", "composition 'cp4x5' uses 20 GPUs but the pool has 40"),
            (f"a={cal};a={cal}", "--models", "entries 'a' and 'a' are both labelled 'a'"),
            (f"ds={cal.replace('qwen3-30b-a3b', 'deepseek-v3')}", "--models entry 'ds'",
             "the model's weights are sharded over G = 8"),
            (f"default={cal};Qwen3-30B-A3B={cal}", "--models",
             "entries 'default' and 'Qwen3-30B-A3B' are both labelled 'Qwen3-30B-A3B'")]):
        argv = (("reproduce", "--workloads", "leval-like", "--models", models) if i == 0 else
                ("reproduce", "--workloads", "tool-agent", "--experiments", "end-to-end", "--quiet", "--models", models))
        rows.append(CliError(f"reproduce-models-{i}", argv, key, phrase, forbid=(("experiments.reproduce", "_map"),)))
    # end-to-end only: a bad dynamic parameter is an error even where the dynamic runs are not selected
    for setting, key, phrase in [
            ("num_phases=abc", "--dynamic-param num_phases='abc'", "expected an integer"),
            ("num_phases=2.5", "--dynamic-param num_phases=2.5", "expected an integer"),
            ("rising_rate=3", "--dynamic-param rising_rate=3", "expected true or false"),
            ("phase_duration_s=fast", "--dynamic-param phase_duration_s='fast'", "expected a number"),
            ("arrival_window_s=a,b", "--dynamic-param arrival_window_s='a,b'", "expected START,END in seconds"),
            ("num_phases=-1", "num_phases", "dynamic: num_phases and k_windows must be >= 1")]:  # DynamicPhasesConfig's check
        rows.append(CliError(f"reproduce-dynamic-param-{setting}", ("reproduce", "--experiments", "end-to-end", "--quiet",
                                                                    "--out", "{tmp}/out", "--dynamic-param", setting),
                             key, phrase, forbid=REPRODUCE))
    for flags, phrase in [
            # a repeated seed ran twice and was counted twice in the paired CI
            (("--seeds", "0,0"), "lists 0 twice: '0,0'; expected distinct seeds"),
            (("--cache-seeds", "3,4,3"), "lists 3 twice: '3,4,3'; expected distinct seeds"),
            (("--seeds", "-1"), "must be integers >= 0, got [-1]"),
            # an empty value was read as "not given": the preset ran instead
            (("--seeds", ""), "needs at least one value, got ''"),
            (("--loads", ""), "needs at least one value, got ''")]:
        rows.append(CliError(f"reproduce{flags[0]}={flags[1]}", ("reproduce", "--quick", "--workloads", "tool-agent",
                                                                 "--quiet", "--out", "{tmp}/out", *flags),
                             flags[0], phrase, forbid=REPRODUCE, after=_not_written("out")))
    return rows


def _dynamic_and_cache_ablation_rows():
    """`cpgym dynamic` / `cpgym cache-ablation`: the flag, before any capacity search, simulation or output."""
    tiny = ("--num-phases", "2", "--phase-duration-s", "20", "--long-rate-rps", "1", "--decision-window-s", "5",
            "--k-windows", "1", "--initial", "cp4x10")
    dynamic = ("dynamic", *tiny, "--compositions", "cp4x10;cp2x20", "--quiet")
    no_search = (("experiments.paper_experiments.dynamic_phases", "phase_capacities"), ("baselines.runner", "run_policy"))
    run_dynamic = (("experiments.paper_experiments.dynamic_phases", "run_dynamic_phases"),)
    rows = []
    for flags, key, phrase in [
            # controller / look-ahead / switch settings: checked after the capacity bisections, named by their inner field
            (("--lookahead-replications", "0"), "(--lookahead-replications)",
             "lookahead_replications must be an integer >= 1, got 0"),
            (("--lookahead-stationary-duration-s", "0"), "(--lookahead-stationary-duration-s)",
             "lookahead_stationary_duration_s must be finite"),
            (("--switch-s", "nan"), "(--switch-s)", "switch_s must be a finite number >= 0, got nan"),
            (("--target-margin", "-0.1"), "(--target-margin)", "target_margin must be a finite number >= 0, got -0.1"),
            # the arrival window: checked when the workload was built, after the bisections
            (("--arrival-window-s", "30", "10"), "(--arrival-window-s)",
             "arrival_window_s must be [start, end) with 0 <= start < end, got 30 10"),
            (("--arrival-window-s", "100", "200"), "(--arrival-window-s, --num-phases, --phase-duration-s)",
             "arrival_window_s [100, 200) starts after the last phase (num_phases x phase_duration_s = 40 s)")]:
        rows.append(CliError(f"dynamic{''.join(flags)}", (*dynamic, "--short-load", "0.5", "--capacity-cache-dir",
                                                          "{tmp}/cache", *flags),
                             key, phrase, forbid=no_search, after=_not_written("cache")))
    # the paper rule has no look-ahead: these flags were accepted and ignored
    for flags, given in [(("--lookahead-replications", "3"), "lookahead_replications"),
                         (("--lookahead-duration-s", "30", "--target-trend-min-t", "1"),
                          "lookahead_duration_s / target_trend_min_t"),
                         (("--target-margin", "0"), "target_margin"),  # 0.0 == False: it passed a test against (None, False)
                         (("--target-sample", "latest"), "target_sample")]:
        rows.append(CliError(f"dynamic-paper-rule{''.join(flags)}", (*dynamic, "--short-rate-rps", "2", "--decision",
                                                                     "paper-rule", *flags),
                             f"dynamic: {given}", "set the 'target' decision; decision 'paper-rule' has none",
                             forbid=no_search))
    # was "composition 'cp16x2' cannot be placed": a composition the user never typed
    for flags in [("--supported-degrees", "16", "--pool-gpus", "32"), ("--pool-gpus", "41"), ("--gpus-per-node", "3")]:
        rows.append(CliError(f"dynamic-no-homogeneous-pool{''.join(flags)}", ("dynamic", *tiny, "--quiet", *flags),
                             "--supported-degrees", "no CP degree both divides --pool-gpus", also=("--gpus-per-node",),
                             forbid=no_search))
    for flag, value, phrase in [("--plot", "dyn.txt", "needs a file name ending in one of"),  # savefig refused it late
                                ("--plot", "dyn", "needs a file name ending in one of"),  # written as dyn.png
                                ("--plot", "", "is empty; expected a file path"),  # was "--plot  is a folder"
                                ("--out-dir", "", "is empty; expected a folder path")]:  # was ignored: nothing written
        rows.append(CliError(f"dynamic{flag}={value}", (*dynamic, "--short-rate-rps", "2", flag, value), flag, phrase,
                             forbid=no_search))
    rows += [
        # `--compositions all` over CP degrees 1,2,4,8 is refused before anything runs unless --max-compositions allows it
        CliError("dynamic-all-compositions-beyond-the-bound", ("dynamic", "--supported-degrees", "1,2,4,8", "--quiet"),
                 "--compositions all", "is 286 fixed compositions of CP degrees 1,2,4,8 on 40 GPUs (more than "
                 "--max-compositions 32)"),
        # the paper rule has no look-ahead: an error naming the flag, before any capacity search
        CliError("dynamic-paper-rule-target-replay-sample", ("dynamic", "--decision", "paper-rule", "--target-replay-sample",
                                                             "--quiet"),
                 "--target-replay-sample", "decision 'paper-rule' has none", one_line=False),
        CliError("dynamic-target-sample-choice", ("dynamic", "--target-sample", "first", "--quiet"),
                 "error: --target-sample: ", "expected one of regime-start, latest, got 'first'"),
    ]
    # a composition of the wrong GPU count or degree failed only after the capacity searches of --short-load
    # (minutes), with the pool's message alone (no flag); a duplicate ran and reported the same pool twice
    for argv, key, phrase in [
            (("--compositions", "foo"), "(--compositions)", "dynamic: compositions item 'foo' is not a composition of the "
                                                            "8-GPU pool (CP degrees 2,4): composition item 'foo' is invalid"),
            (("--compositions", "cp4x2;cp4x5"), "(--compositions)",
             "dynamic: compositions item 'cp4x5' is not a composition of the 8-GPU pool (CP degrees 2,4): composition "
             "'cp4x5' uses 20 GPUs but the pool has 8"),
            (("--compositions", "cp4x1,cp2x2;cp2x2,cp4x1"), "(--compositions)",
             "dynamic: compositions lists the same pool twice"),
            (("--compositions", "cp2x4", "--initial", "cp8x1"), "(--initial)",
             "dynamic: initial 'cp8x1' is not a composition of the 8-GPU pool")]:
        rows.append(CliError(f"dynamic-8-gpus{''.join(argv)}", ("dynamic", "--pool-gpus", "8", "--short-load", "0.5",
                                                                "--quiet", *argv),
                             key, phrase, forbid=(("baselines.capacity", "find_capacity"),)))
    # the config sees only a rate that differs from its default: 40 req/s with --short-load ran silently
    for argv, key, phrase in [(("--short-load", "0.5", "--short-rate-rps", "40"), "--short-load", "replaces --short-rate-rps"),
                              (("--long-load=0.5", "--long-rate-rps=4"), "--long-load", "replaces --long-rate-rps")]:
        rows.append(CliError(f"dynamic{''.join(argv)}", ("dynamic", *argv, "--quiet"), key, phrase, one_line=False,
                             forbid=run_dynamic))
    # inf passed the `> 0` check: advice "use --phase-duration-s >= inf", then a controller error without the flag
    for flag in ["--decision-window-s", "--phase-duration-s", "--short-rate-rps", "--rate-scale"]:
        rows.append(CliError(f"dynamic{flag}-inf", ("dynamic", flag, "inf", "--quiet"), f"({flag})",
                             "must be a finite number > 0, got inf", forbid=run_dynamic))
    ablation = ("cache-ablation", "--rates", "1", "--duration-s", "10")
    no_ablation = (("experiments.paper_experiments.cache_ablation", "run_cache_ablation"),)
    rows.append(CliError("cache-ablation-empty-out", (*ablation, "--out", ""), "--out", "is empty; expected a folder path",
                         forbid=no_ablation))
    for flags, key, phrase in [(("--rates", "1,2,1"), "(--rates)", "rates_rps must be distinct rates, got [1.0, 2.0, 1.0]"),
                               (("--duration-s", "inf"), "(--duration-s)", "duration_s must be a finite number > 0, got inf"),
                               (("--scan-interval-s", "inf"), "(--scan-interval-s)",
                                "scan_interval_s must be a finite number > 0, got inf")]:
        rows.append(CliError(f"cache-ablation{''.join(flags)}", (*ablation, *flags), key, phrase, forbid=no_ablation))
    return rows


def _main_job_rows():
    """The main job's (`cpgym simulate`) bad input, and `bench sim` / `compare`'s: one line, no traceback."""
    return [CliError(f"main-job-{i}", argv, key, phrase) for i, (argv, key, phrase) in enumerate([
        (("simulate", "--policy", "no-such-policy"), "'no-such-policy'", "unknown policy"),
        (("simulate", "--pool-composition", "cp4x3"), "composition 'cp4x3'", "uses 12 GPUs but the pool has 40"),
        (("simulate", "--trace", "/nonexistent/trace.jsonl"), "/nonexistent/trace.jsonl", "trace file does not exist"),
        (("simulate", "--slo", "soon"), "--slo", "got 'soon'"),
        (("simulate", "--policy", ""), "--policy", "needs at least one"),
        (("simulate", "--policy", "least-work,least-work"), "--policy", "twice"),
        (("simulate", "--arrival-window-s", "-10", "5"), "--arrival-window-s", "0 <= START < END"),
        (("simulate", "--arrival-window-s", "1e9", "2e9"), "--arrival-window-s", "has no requests"),
        (("simulate", "--workload-seed", "-1"), "--workload-seed", "must be an integer >= 0"),
        (("simulate", "--trace", "/"), "/: ", "is a folder, expected a trace file"),
        (("simulate", "--calibration", "/"), "/: ", "is a folder, expected a calibration JSON file"),
        (("bench", "sim", "--repeat", "0"), "--repeat", "must be >= 1"),
        (("compare", "--rates", ""), "--rates", "needs at least one value")])]


ROWS = [row for rows in (_list_rows(), _report_and_out_rows(), _workload_rows(), _simulator_rows(), _policy_rows(),
                         _compare_rows(), _tune_rows(), _other_command_rows(), _reproduce_rows(),
                         _dynamic_and_cache_ablation_rows(), _main_job_rows()) for row in rows]


def test_row_ids_are_distinct():
    assert_distinct_ids(ROWS)


@pytest.mark.parametrize("row", [param(r) for r in ROWS])
def test_cli_error(row, tmp_path, monkeypatch, capsys):
    check(row, tmp_path, monkeypatch, capsys)
