"""Bad command-line input is one clear line, found before anything runs (QA pass over the CLI)."""

from __future__ import annotations

import os

import pytest

from envs.sim.options import check_out_dir
from experiments.cli import main
from experiments.common import parse_list
from tests.interrupt import patch_everywhere


@pytest.mark.parametrize("text", ["2,,4", "2,", ",2", " , "])
def test_list_flags_reject_empty_items(text):
    with pytest.raises(ValueError, match="--supported-degrees must be a comma-separated list of integers"):
        parse_list(text, "--supported-degrees", int)


def test_list_flags_reject_an_empty_list():
    with pytest.raises(ValueError, match="--rates needs at least one value"):
        parse_list("", "--rates")
    assert parse_list(" 1, 2 ", "--rates") == [1.0, 2.0]


@pytest.mark.parametrize("text", ["0.1,,0.2", ",0.1", "0.1,", " , "])
def test_generated_list_flag_rejects_an_empty_item(text, capsys):
    """A config-dataclass list flag (``tuple[float, ...]``) with an empty item is argparse's error
    line naming the flag and the value (was silently parsed as the list without it)."""
    from experiments.cli import build_parser

    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["train", "arms", "--switch-margins", text, "--out", "unused"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("cpgym train arms: error: --switch-margins: ")  # one line, no usage
    assert "must be a comma-separated list of numbers" in err and f"got {text!r} (an empty item" in err


@pytest.mark.parametrize("argv, flag", [(["train", "reconfig", "--workload-seeds", "1,,2"], "--workload-seeds"),
                                        (["train", "arms", "--betas", "x,1"], "--betas")])
def test_generated_int_and_float_list_flags_name_the_flag(argv, flag, capsys):
    from experiments.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args([*argv, "--out", "unused"])
    assert f"error: {flag}: must be a comma-separated list of" in capsys.readouterr().err


def test_generated_list_flag_parses_a_well_formed_list():
    from experiments.cli import build_parser

    args = build_parser().parse_args(["train", "arms", "--switch-margins", " 0.1, 0.2", "--out", "x"])
    assert args.switch_margins == (0.1, 0.2)


@pytest.mark.parametrize("parse", ["kernels", "compare"])
def test_other_list_flags_reject_an_empty_item(parse):
    """The hand-written list flags share the same parser: ``--degrees 1,,2`` / ``compare --seeds 0,``."""
    if parse == "kernels":
        from experiments.commands.kernels import parse_int_list

        with pytest.raises(ValueError, match="^--degrees must be a comma-separated list of integers, got '1,,2' "):
            parse_int_list("1,,2", "--degrees", 1)
    else:
        from experiments.cli import build_parser
        from experiments.commands.compare import plan

        with pytest.raises(ValueError, match="^--seeds must be a comma-separated list of integers, got '0,' "):
            plan(build_parser().parse_args(["compare", "--seeds", "0,"]))


def test_report_of_a_file_says_it_is_not_a_folder(tmp_path, capsys):
    f = tmp_path / "passwd"
    f.write_text("x")
    assert main(["report", str(f)]) == 2
    err = capsys.readouterr().err
    assert err == f"cpgym report: error: run folder {str(f)!r} is not a folder; give a sweep's --out folder " \
                  "or a folder of `cpgym simulate --out` runs\n"
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_report_out_that_is_a_file_is_one_line_naming_it(tmp_path, capsys):
    run = tmp_path / "runs"
    assert main(["simulate", "--workload", "tool-agent", "--arrival-window-s", "0", "2", "--policy", "least-work", "--quiet",
                 "--out", str(run)]) == 0
    capsys.readouterr()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["report", str(run), "--out", str(blocker)]) == 2
    assert capsys.readouterr().err == f"cpgym report: error: --out {blocker} exists and is not a folder; " \
        "expected a folder (new or existing)\n"


def test_out_dir_that_cannot_be_created_fails_before_running(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ValueError, match=r"--out .*file/sub cannot be created"):
        check_out_dir(str(blocker / "sub"))
    with pytest.raises(ValueError, match="exists and is not a folder"):
        check_out_dir(str(blocker))


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_out_dir_in_a_read_only_folder_fails_before_running(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(ValueError, match="cannot be created"):
            check_out_dir(str(ro / "a" / "b"))
    finally:
        ro.chmod(0o700)


def test_out_dir_check_leaves_no_folder_behind(tmp_path):
    check_out_dir(str(tmp_path / "a" / "b" / "c"))
    assert list(tmp_path.iterdir()) == []
    check_out_dir(None)


def _forbid_runs(monkeypatch, tmp_path, targets, what: str):
    """Makes each ``(module, function)`` of ``targets`` fail the test if called (``what`` says
    which check should have come first); returns a file to put a path under."""
    def no_run(*a, **k):
        raise AssertionError(f"ran before checking {what}")

    for module, name in targets:
        patch_everywhere(monkeypatch, module, name, no_run)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    return blocker


def test_simulate_out_that_cannot_be_created_fails_before_simulating(tmp_path, capsys, monkeypatch):
    import baselines.runner as runner

    blocker = _forbid_runs(monkeypatch, tmp_path, [(runner, "run_policy")], "--out")
    assert main(["simulate", "--workload", "tool-agent", "--arrival-window-s", "0", "5", "--policy", "least-work",
                 "--quiet", "--out", str(blocker / "out")]) == 2
    assert "cannot be created" in capsys.readouterr().err


@pytest.fixture
def no_training(monkeypatch):
    """``cpgym train routing|reconfig`` fails the test if training (any simulation) starts."""
    import policies.reconfig.train as train_reconfig
    import policies.routing.train as train

    def no_train(*a, **k):
        raise AssertionError("training started before checking --out")

    patch_everywhere(monkeypatch, train_reconfig, "train_reconfig", no_train)
    patch_everywhere(monkeypatch, train, "train_routing", no_train)


@pytest.mark.parametrize("kind", ["reconfig", "routing"])
@pytest.mark.parametrize("case", ["file", "under-file"])
def test_train_out_that_is_not_a_folder_names_the_flag(kind, case, tmp_path, capsys, no_training):
    """``cpgym train reconfig|routing --out X``: X a file, or under one, is one error line naming
    --out (the check of ``train arms``, ``check_out_dir``), before training; the file is untouched."""
    afile = tmp_path / "afile"
    afile.write_text("x")
    out = afile if case == "file" else afile / "sub"
    assert main(["train", kind, "--out", str(out)]) == 2
    expected = f"{out} exists and is not a folder; expected a folder (new or existing)" if case == "file" \
        else f"{out} cannot be created: {afile} is not a folder"
    assert capsys.readouterr().err == f"cpgym train {kind}: error: --out {expected}\n"
    assert afile.read_text() == "x"


def test_train_out_that_is_not_writable_names_the_flag(tmp_path, capsys, no_training, monkeypatch):
    """An existing --out folder the user cannot write into (os.access says no; root may write
    anywhere, so the test fakes it) fails before training, naming --out."""
    import experiments.common as common

    patch_everywhere(monkeypatch, common.os, "access", lambda path, mode: False)
    assert main(["train", "reconfig", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"cpgym train reconfig: error: --out {tmp_path} is not writable; expected a folder " \
                                      "this user can write into\n"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_train_out_in_a_read_only_folder_names_the_flag(tmp_path, capsys, no_training):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        assert main(["train", "reconfig", "--out", str(ro)]) == 2
        assert capsys.readouterr().err == f"cpgym train reconfig: error: --out {ro} is not writable; expected a folder " \
                                          "this user can write into\n"
        assert main(["train", "reconfig", "--out", str(ro / "run")]) == 2
        assert capsys.readouterr().err.startswith(f"cpgym train reconfig: error: --out {ro / 'run'} cannot be created: ")
        assert list(ro.iterdir()) == []
    finally:
        ro.chmod(0o700)


def test_workload_param_of_the_wrong_type_names_it(capsys):
    assert main(["simulate", "--workload", "tool-agent", "--workload-param", "duration_s=abc", "--quiet"]) == 2
    assert capsys.readouterr().err == \
        "cpgym simulate: error: workload 'tool-agent': parameter duration_s must be a number, got 'abc'\n"


def _leaf_parsers():
    """(prog, parser) of every command, sub-command and train kind."""
    import argparse

    from experiments.cli import build_parser

    todo, out = [build_parser()], []
    while todo:
        p = todo.pop()
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if subs:
            todo.extend(subs[0].choices.values())
        else:
            out.append((p.prog, p))
    return out


@pytest.mark.parametrize("prog, parser", [(prog, p) for prog, p in _leaf_parsers()
                                          if "_default_workload" in p._defaults])  # the shared workload group
def test_workload_help_names_the_source_the_command_uses(prog, parser):
    import argparse
    from pathlib import Path

    from experiments.common import workload_source_from_args

    help_text = next(a.help for a in parser._actions if "--workload" in a.option_strings)
    args = argparse.Namespace(**{a.dest: a.default for a in parser._actions if a.dest != "help"},
                              **parser._defaults)
    src = workload_source_from_args(args)
    if src.trace is not None:
        assert Path(src.trace).name in help_text or "trace" in help_text, (prog, help_text)
    else:
        assert src.name in help_text, (prog, help_text)


def test_bench_sim_help_and_default_agree(capsys):
    from experiments.cli import parse_args
    from experiments.common import workload_source_from_args

    src = workload_source_from_args(parse_args(["bench", "sim"]))
    assert src.trace is not None and src.trace.endswith("conversation_trace.jsonl") and src.name is None
    with pytest.raises(SystemExit):
        main(["bench", "sim", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(default, without --trace or --workload: the trace conversation_trace.jsonl)" in out
    assert "--workload: mixed-default" not in out  # the workload names are listed (#43 item 11), not as the default
    assert workload_source_from_args(parse_args(["simulate"])).name == "mixed-default"


@pytest.mark.parametrize("argv, expected", [
    (["--slo", "5", "--slo-scale", "2"], "--slo-scale applies to --slo scaled only"),
    (["--dram-gb-per-node", "5"], "--dram-gb-per-node has no effect with --kv-tiers hbm; it needs --kv-tiers with dram"),
    (["--kv-tiers", "hbm,dram", "--store-gb", "5"], "--store-gb has no effect with --kv-tiers hbm,dram"),
    (["--kv-layerwise"], "--kv-layerwise has no effect with --kv-tiers hbm"),
    (["--kv-eviction", "next-use"], "--kv-eviction has no effect with --kv-tiers hbm"),
    # read only in queue-head / layer-wise mode: they were accepted and ignored
    (["--kv-tiers", "hbm,dram", "--kv-prefetch-depth", "3"], "--kv-prefetch-depth has no effect without --kv-prefetch "
                                                             "queue-head"),
    (["--kv-tiers", "hbm,dram", "--kv-buffer-layers", "8"], "--kv-buffer-layers has no effect without --kv-layerwise"),
    (["--kv-tiers", "hbm,dram", "--kv-num-layers", "8"], "--kv-num-layers has no effect without --kv-layerwise"),
])
def test_shared_flags_without_effect_are_rejected(argv, expected, capsys):
    assert main(["simulate", "--workload", "tool-agent", "--arrival-window-s", "0", "5", "--quiet", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cpgym simulate: error: {expected}") and len(err.splitlines()) == 1


def test_shared_flags_with_effect_are_accepted():
    from experiments.cli import parse_args
    from experiments.common import sim_config_from_args

    cfg = sim_config_from_args(parse_args(["simulate", "--slo", "scaled", "--slo-scale", "2"]))
    assert cfg.slo.kind == "scaled" and cfg.slo.slo_scale == 2
    assert sim_config_from_args(parse_args(["simulate"])).slo.slo_scale == 3.0
    cfg = sim_config_from_args(parse_args(["simulate", "--kv-tiers", "hbm,dram,store", "--dram-gb-per-node", "5",
                                           "--store-gb", "7", "--kv-layerwise"]))
    assert cfg.kv_tiers.dram_capacity_bytes_per_node == 5e9 and cfg.kv_tiers.store_capacity_bytes == 7e9
    assert cfg.kv_tiers.layerwise
    # the defaults given explicitly are no error
    sim_config_from_args(parse_args(["simulate", "--dram-gb-per-node", "1000", "--kv-eviction", "lru"]))


@pytest.mark.parametrize("argv, expected", [
    (["--kv-tiers", "hbm,dram", "--dram-gb-per-node", "-1"], "--dram-gb-per-node must be a finite number > 0, got -1.0"),
    (["--kv-tiers", "hbm,dram", "--dram-gbps-per-gpu", "0"], "--dram-gbps-per-gpu must be a finite number > 0, got 0.0"),
    (["--kv-tiers", "hbm,dram,store", "--store-gb", "inf"], "--store-gb must be a finite number > 0, got inf"),
    (["--kv-tiers", "hbm,dram,store", "--store-lookup-ms", "-0.5"], "--store-lookup-ms must be a finite number >= 0"),
    (["--kv-tiers", "hbm,dram,store", "--store-gbps-per-node", "0"], "--store-gbps-per-node must be a finite number > 0"),
    # these named TierConfig's fields (kv_tiers.prefetch_depth_requests must be an integer >= 1, got 0)
    (["--kv-tiers", "hbm,dram", "--kv-prefetch", "queue-head", "--kv-prefetch-depth", "0"],
     "--kv-prefetch-depth must be an integer >= 1, got 0"),
    (["--kv-tiers", "hbm,dram", "--kv-layerwise", "--kv-buffer-layers", "0"],
     "--kv-buffer-layers must be an integer >= 1, got 0"),
    (["--kv-tiers", "hbm,dram", "--kv-layerwise", "--kv-num-layers", "-8"], "--kv-num-layers must be an integer >= 1, got -8"),
])
def test_tier_flags_out_of_range_name_the_flag_in_its_units(argv, expected, capsys):
    # they used to name TierConfig's byte field (kv_tiers.dram_capacity_bytes_per_node ... got -1000000000.0)
    assert main(["simulate", "--workload", "tool-agent", "--arrival-window-s", "0", "5", "--quiet", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cpgym simulate: error: {expected}") and len(err.splitlines()) == 1


@pytest.mark.parametrize("flag, expected", [("--cache-capacity-scale", "--cache-capacity-scale must be a finite number >= 0"),
                                            ("--first-decode-step-s", "--first-decode-step-s must be a finite number >= 0"),
                                            ("--kv-handoff-gbps", "--kv-handoff-gbps must be a finite number > 0"),
                                            ("--slo", "--slo must be a finite number of seconds > 0 or 'scaled'"),
                                            ("--slo-scale", "--slo-scale must be a finite number > 0")])
def test_infinite_simulator_numbers_are_one_error_line(flag, expected, capsys):
    # inf used to pass the `> 0` / `>= 0` checks: a traceback (cache scale), or TTFTs of inf with
    # SLO attainment 1.0 (first decode step), or an SLO every request meets
    assert main(["simulate", "--workload", "tool-agent", "--arrival-window-s", "0", "2", "--policy", "least-work",
                 "--quiet", flag, "inf"]) == 2
    assert capsys.readouterr().err == f"cpgym simulate: error: {expected}, got inf\n"


@pytest.mark.parametrize("argv, expected", [
    # each named the SimConfig field and the converted value (bytes/s, 0.0, the number of entries)
    (["--kv-handoff-gbps", "-1"], "--kv-handoff-gbps must be a finite number > 0, got -1"),  # was ...bytes_per_s ... -1e9
    (["--horizon-s", "0"], "--horizon-s must be a finite number > 0, got 0 (leave --horizon-s out to run until every "
                           "request finished)"),  # was "horizon_s must be > 0 or None"
    (["--horizon-s", "inf"], "--horizon-s must be a finite number > 0, got inf"),  # was accepted
    (["--horizon-s", "nan"], "--horizon-s must be a finite number > 0, got nan"),
    (["--max-batch-tokens", "0"], "--max-batch-tokens must be an integer >= 1, got 0"),
    (["--pool-gpus", "0"], "--pool-gpus must be an integer >= 1, got 0"),
    (["--prediction-noise", "-1"], "--prediction-noise must be a finite number >= 0, got -1"),
    (["--slo", "-1"], "--slo must be a finite number of seconds > 0 or 'scaled', got -1"),
    (["--node-calibrations", "/no/such.json"],  # was "node_calibration_paths needs one entry per node (5), got 1"
     "--node-calibrations needs one calibration per node ('' = --calibration): 5 node(s) of --gpus-per-node 8 in "
     "--pool-gpus 40, got 1 in '/no/such.json'"),
    (["--node-calibrations", "/no/such.json,,,,"], "--node-calibrations: /no/such.json does not exist; expected a "
                                                   "calibration JSON file"),
    (["--node-calibrations", "/,,,,"], "--node-calibrations: / is a folder; expected a calibration JSON file"),
])
def test_simulator_flags_name_the_flag_and_the_value_typed(argv, expected, capsys, monkeypatch, tmp_path):
    import baselines.runner as runner

    _forbid_runs(monkeypatch, tmp_path, [(runner, "run_policy")], argv[0])
    assert main(["simulate", "--workload", "tool-agent", "--arrival-window-s", "0", "2", "--policy", "least-work", "--quiet",
                 *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cpgym simulate: error: {expected}") and len(err.splitlines()) == 1


@pytest.mark.parametrize("text", ["{}", "rebuild_s: 5\n"])
def test_faults_file_without_events_is_refused_as_the_empty_file(text, tmp_path, capsys):
    """``--faults`` with ``{}`` (or settings but no events) was a run without faults, although the
    empty file's error says a mapping with 'events' is required: now the same requirement."""
    f = tmp_path / "faults.json"
    f.write_text(text)
    assert main(["simulate", "--workload", "tool-agent", "--arrival-window-s", "0", "2", "--policy", "least-work", "--quiet",
                 "--faults", str(f)]) == 2
    assert capsys.readouterr().err == (f"cpgym simulate: error: {f}:1: events: missing, and no random fault process is "
                                       "set; expected a mapping with 'events' and optional FaultConfig fields (write "
                                       "'events: []' for a run without faults)\n")


@pytest.mark.parametrize("value", ["nan", "inf", "5,-inf"])
def test_positive_list_flags_reject_non_finite_values(value):
    # nan/inf parse as floats; they used to pass and fail later naming `workload: target_rps`
    with pytest.raises(ValueError, match=r"^--rates values must all be finite numbers > 0, got "):
        parse_list(value, "--rates", positive=True)


def test_compare_nan_rate_names_the_flag(capsys):
    assert main(["compare", "--workload", "tool-agent", "--arrival-window-s", "0", "2", "--suite", "least-work",
                 "--rates", "nan"]) == 2
    assert capsys.readouterr().err == "cpgym compare: error: --rates values must all be finite numbers > 0, got 'nan'\n"


def test_out_file_check(tmp_path):
    from envs.sim.options import check_out_file

    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ValueError, match=r"^--out .*/file/sub/x\.csv cannot be created: .*/file is not a folder$"):
        check_out_file(str(blocker / "sub" / "x.csv"))
    with pytest.raises(ValueError, match=r"^--tuned-out .* is a folder; expected a file path$"):
        check_out_file(str(tmp_path), "--tuned-out")
    check_out_file(str(tmp_path / "new" / "x.csv"))  # a missing folder is fine (the writer creates it) ...
    assert list(tmp_path.iterdir()) == [blocker]  # ... and is not left behind
    check_out_file(None)


@pytest.mark.parametrize("command", [
    ["evaluate", "--policy", "least-work", "--against", "round-robin", "--task", "routing/conversation-0.9-v1"],
    ["benchmark", "run", "--policy", "least-work", "--tasks", "routing/conversation-0.9-v1"],
    ["tune", "vertumnus", "--workload", "tool-agent", "--target-rps", "6"],
])
def test_out_file_under_a_file_fails_before_running(command, tmp_path, capsys, monkeypatch):
    import benchmark.protocol as benchmark_protocol
    import policies.routing.protocol as protocol

    blocker = _forbid_runs(monkeypatch, tmp_path, [(benchmark_protocol, "run_benchmark"), (protocol, "scenarios")],
                           "--out")
    assert main(command + ["--quiet", "--out", str(blocker / "rows.csv")]) == 2
    assert capsys.readouterr().err.endswith(f"error: --out {blocker / 'rows.csv'} cannot be created: "
                                            f"{blocker} is not a folder\n")


@pytest.mark.slow
def test_evaluate_out_creates_its_folder(tmp_path, capsys):
    out = tmp_path / "new" / "sub" / "rows.csv"
    assert main(["evaluate", "--policy", "least-work", "--against", "round-robin", "--quick", "--quiet",
                 "--format", "json", "--out", str(out)]) == 0
    assert out.is_file() and out.read_text().startswith("task,policy,split,episode_index")


def test_tune_episode_window_of_zero_is_an_error_not_the_default(tmp_path, capsys):
    assert main(["tune", "vertumnus", "--workload", "tool-agent", "--target-rps", "6", "--episode-window-s", "0",
                 "--quiet", "--out", str(tmp_path / "t.json")]) == 2
    assert "--episode-window-s must be a finite number > 0 [s], got 0" in capsys.readouterr().err
    assert not (tmp_path / "t.json").exists()


@pytest.mark.parametrize("flags, message", [
    (["--lambdas", "0.5,-1"], "--lambdas values must be finite numbers >= 0 (paper §5), got -1 in '0.5,-1'"),
    (["--betas", "0.5"], "--betas values must be finite numbers >= 1 (paper §5), got 0.5"),
    (["--betas", "1,nan"], "--betas values must be finite numbers >= 1 (paper §5), got nan"),
    (["--betas", "1,1.5,1"], "--betas lists 1.0 twice: '1,1.5,1'; expected distinct values"),
    (["--warmup-s", "-3"], "--warmup-s must be a finite number >= 0 [s], got -3"),
])
def test_tune_grid_and_window_errors_name_the_flag_before_any_run(flags, message, tmp_path, capsys, monkeypatch):
    # the router's own check named its field ("vertumnus lambda_"), the protocol's named no flag, and
    # a repeated grid value was run twice
    import policies.routing.protocol as protocol

    patch_everywhere(monkeypatch, protocol, "scenarios", lambda *a, **k: pytest.fail("a scenario was built"))
    assert main(["tune", "vertumnus", "--workload", "tool-agent", "--target-rps", "6", *flags, "--quiet",
                 "--out", str(tmp_path / "t.json")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "t.json").exists()


@pytest.mark.parametrize("command", [
    ["capacity", "--workload", "tool-agent", "--policy", "least-work", "--quiet"],
    ["compare", "--workload", "tool-agent", "--suite", "least-work", "--loads", "0.5"],
    ["reproduce", "--quick", "--experiments", "end-to-end", "--quiet"],
])
def test_capacity_cache_dir_under_a_file_fails_before_any_bisection(command, tmp_path, capsys, monkeypatch):
    import baselines.capacity as capacity
    import experiments.reproduce as reproduce

    blocker = _forbid_runs(monkeypatch, tmp_path, [(capacity, "capacities"), (reproduce, "run_experiments")],
                           "--cache-dir")
    extra = ["--out", str(tmp_path / "out")] if command[0] == "reproduce" else []
    assert main(command + extra + ["--cache-dir", str(blocker)]) == 2
    assert capsys.readouterr().err.endswith(f"error: --cache-dir {blocker} exists and is not a folder; "
        "expected a folder (new or existing)\n")


def test_compare_out_is_checked_before_the_capacity_bisection(tmp_path, capsys, monkeypatch):
    import baselines.capacity as capacity

    blocker = _forbid_runs(monkeypatch, tmp_path, [(capacity, "capacities")], "--out")
    assert main(["compare", "--workload", "tool-agent", "--suite", "least-work", "--loads", "0.5", "--out", str(blocker)]) == 2
    assert capsys.readouterr().err == f"cpgym compare: error: --out {blocker} exists and is not a folder; " \
        "expected a folder (new or existing)\n"


def test_capacity_refuses_a_horizon_it_would_ignore(capsys):
    assert main(["capacity", "--workload", "tool-agent", "--policy", "least-work", "--quiet", "--horizon-s", "5"]) == 2
    assert capsys.readouterr().err == "cpgym capacity: error: --horizon-s does not apply to cpgym capacity: " \
                                      "every probe runs until its requests finish\n"
    from experiments.cli import build_parser

    sub = next(a for a in build_parser()._subparsers._group_actions if a.dest == "command").choices
    assert "--horizon-s" not in sub["capacity"].format_help()  # refused, so not offered in --help
    assert "--horizon-s" in sub["simulate"].format_help()


@pytest.mark.parametrize("flag", [["--no-cache"], ["--drain-ratio", "3"], ["--rel-tol", "0.05"], ["--cache-dir", "x"]])
def test_compare_capacity_flags_without_a_capacity_measurement_are_errors(flag, capsys, monkeypatch):
    import experiments.paper_experiments.end_to_end as end_to_end

    def no_run(*a, **k):
        raise AssertionError(f"ran with {flag[0]}, which has no effect without --loads")

    patch_everywhere(monkeypatch, end_to_end, "run_compare", no_run)
    assert main(["compare", "--workload", "tool-agent", "--suite", "least-work", "--rates", "10", *flag]) == 2
    assert capsys.readouterr().err == f"cpgym compare: error: {flag[0]} has no effect here: capacities are measured " \
                                      "only with --loads or --label-overload\n"


@pytest.mark.parametrize("workload", [[], ["--workload", "tool-agent"]])
def test_skip_invalid_without_a_trace_is_an_error(workload, capsys):
    assert main(["simulate", *workload, "--arrival-window-s", "0", "2", "--policy", "least-work", "--quiet",
                 "--skip-invalid"]) == 2
    name = "tool-agent" if workload else "mixed-default"
    assert capsys.readouterr().err == "cpgym simulate: error: --skip-invalid skips invalid trace lines; it does not " \
                                      f"apply to the named workload '{name}'\n"


@pytest.mark.parametrize("command", [
    ["simulate", "--workload", "tool-agent", "--arrival-window-s", "0", "2", "--quiet", "--policy",
     "least-work,homogeneous-cp4"],
    ["compare", "--workload", "tool-agent", "--arrival-window-s", "0", "2", "--rates", "10", "--suite",
     "least-work,homogeneous-cp4"],
])
def test_a_baseline_whose_own_pool_does_not_fit_is_named_before_any_run(command, capsys, monkeypatch):
    # was "composition item 'cp4x10': CP degree 4 is not supported ..." after the policies before it had run
    import baselines.runner as runner

    def no_run(*a, **k):
        raise AssertionError("simulated before checking every policy's pool")

    patch_everywhere(monkeypatch, runner, "run_policy", no_run)
    patch_everywhere(monkeypatch, runner, "build_simulator", no_run)
    assert main(command + ["--supported-degrees", "2", "--pool-composition", "cp2x20"]) == 2
    assert capsys.readouterr().err.endswith(
        "error: policy 'homogeneous-cp4' runs on its own pool, which these pool flags reject: composition item 'cp4x10': "
        "CP degree 4 is not supported; supported degrees are [2]\n")


@pytest.mark.parametrize("name", ["shipped", "shipped-residual", "policies/checkpoints/routing_conversation_residual"])
def test_simulate_with_a_checkpoint_points_to_evaluate(name, capsys):
    # the README's `--policy shipped` read as "unknown policy 'shipped'; known policies: ..." under simulate
    assert main(["simulate", "--workload", "tool-agent", "--arrival-window-s", "0", "2", "--quiet",
                 "--policy", f"least-work,{name}"]) == 2
    assert capsys.readouterr().err == f"cpgym simulate: error: --policy {name}: learned checkpoints run under " \
                                      f"`cpgym evaluate --policy {name}` (a benchmark task, paired CIs); cpgym simulate " \
                                      "runs the registered policies of --list-policies\n"


def test_config_errors_name_the_flag_of_the_field(capsys):
    """A ``__post_init__`` error names the dataclass field; the generated CLI adds its flag."""
    assert main(["train", "routing", "--episode-window-s", "-1", "--out", "unused", "--quiet"]) == 2
    assert capsys.readouterr().err.strip().endswith("episode_window_s must be > 0, got -1.0 (--episode-window-s)")


def test_flags_named_in_matches_whole_field_names_only():
    import dataclasses

    from envs.sim.options import _flags_named_in

    @dataclasses.dataclass(frozen=True)
    class C:
        window_s: float = 1.0
        episode_window_s: float = 1.0

    fields = dataclasses.fields(C)
    assert _flags_named_in("episode_window_s must be > 0", fields) == ["--episode-window-s"]
    assert _flags_named_in("window_s 0 > episode_window_s 1", fields) == ["--window-s", "--episode-window-s"]
    assert _flags_named_in("--window-s must be > 0 (window_s)", fields) == []  # the flag is already named


_EMPTY_ITEM = "must be a comma-separated list of names, got {!r} (an empty item: doubled, leading or trailing comma)"


@pytest.mark.parametrize("argv, flag, value, problem", [
    (["simulate", "--workload", "tool-agent"], "--policy", "least-work,,round-robin", "empty"),
    (["compare", "--workload", "tool-agent", "--rates", "10"], "--suite", "least-work,", "empty"),
    (["capacity", "--workload", "tool-agent"], "--policy", ",least-work", "empty"),
    (["reproduce", "--workloads", "tool-agent"], "--experiments", "end-to-end,,dynamic", "empty"),
    (["reproduce", "--experiments", "end-to-end"], "--workloads", "tool-agent,,leval-like", "empty"),
    (["reproduce", "--experiments", "end-to-end"], "--workloads", "tool-agent,tool-agent", "twice"),
    (["evaluate", "--policy", "least-work"], "--against", "round-robin,round-robin", "twice"),
    (["evaluate", "--policy", "least-work"], "--against", "vertumnus-router,", "empty"),
    (["kv-tiers"], "--policies", "least-work,,dynamo-kv", "empty"),
    (["bench", "sim"], "--policy", "least-work,,round-robin", "empty"),
])
def test_name_lists_refuse_empty_and_repeated_items(argv, flag, value, problem, capsys, monkeypatch):
    """An empty item was silently dropped (the flag ran fewer policies / workloads than typed); a
    repeated workload or comparison ran twice and was averaged twice (narrower CIs)."""
    import baselines.runner as runner

    def no_run(*a, **k):
        raise AssertionError("ran before the list was checked")

    patch_everywhere(monkeypatch, runner, "run_policy", no_run)
    patch_everywhere(monkeypatch, runner, "build_simulator", no_run)
    assert main([*argv, flag, value, "--quiet"] if argv[0] not in ("kv-tiers", "bench") else [*argv, flag, value]) == 2
    err = capsys.readouterr().err
    want = _EMPTY_ITEM.format(value) if problem == "empty" else f"lists {value.split(',')[0]!r} twice: {value!r}"
    assert err.endswith(f"error: {flag} {want}\n") and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("case", ["missing", "file", "empty"])
def test_reproduce_traces_dir_is_checked_before_any_run(case, tmp_path, capsys, monkeypatch):
    """``cpgym reproduce --traces-dir X`` (other options default) printed nothing for minutes, then
    failed on the production workload's trace: now one line naming --traces-dir, before any run."""
    import experiments.reproduce as reproduce

    blocker = _forbid_runs(monkeypatch, tmp_path, [(reproduce, "run_experiments")], "--traces-dir")
    folder = {"missing": tmp_path / "missing", "file": blocker, "empty": tmp_path}[case]
    out = tmp_path / "out"
    assert main(["reproduce", "--traces-dir", str(folder), "--out", str(out)]) == 2
    expected = {"missing": "does not exist; expected a folder holding conversation_trace.jsonl",
                "file": "is not a folder; expected a folder holding conversation_trace.jsonl",
                "empty": "has no conversation_trace.jsonl; the end-to-end experiment's production workload replays it "
                         "(or leave production out of --workloads)"}[case]
    assert capsys.readouterr().err == f"cpgym reproduce: error: --traces-dir {folder} {expected}\n"
    assert not out.exists()


def test_reproduce_traces_dir_needs_the_trace_only_for_experiments_that_replay_it(tmp_path):
    from experiments.cli import build_parser
    from experiments.commands.reproduce import config_from_args

    args = build_parser().parse_args(["reproduce", "--traces-dir", str(tmp_path), "--no-cache"])
    assert config_from_args(args, ["dynamic", "cache"]).workloads  # no end-to-end: the trace is not read
    args = build_parser().parse_args(["reproduce", "--traces-dir", str(tmp_path), "--workloads", "tool-agent", "--no-cache"])
    assert config_from_args(args).workloads[0].key == "tool-agent"


def test_capacity_cache_dir_with_no_cache_is_an_error(tmp_path, capsys):
    """``--no-cache`` uses no cache folder, so a ``--cache-dir`` next to it (even a file) was silently ignored."""
    f = tmp_path / "a_file"
    f.write_text("x")
    assert main(["capacity", "--workload", "tool-agent", "--policy", "least-work", "--no-cache", "--cache-dir", str(f)]) == 2
    assert f"--cache-dir {f} is not used with --no-cache" in capsys.readouterr().err


@pytest.mark.parametrize("degrees", ["3", "2,6", "0", "-2"])
def test_supported_degrees_name_the_flag(degrees, capsys):
    """Was 'pool.supported_degrees must be powers of two >= 1, got (3,)' (the PoolConfig field)."""
    assert main(["simulate", "--workload", "tool-agent", "--arrival-window-s", "0", "5", "--quiet",
                 "--supported-degrees", degrees]) == 2
    assert capsys.readouterr().err == (f"cpgym simulate: error: --supported-degrees must be powers of two >= 1 (CP degrees), "
                                       f"got {degrees!r}\n")


@pytest.mark.parametrize("timestamps, rate_scale, expected", [
    ([0, 0, 0], None, "3 requests, rate undefined (every request arrives at 0 s),"),  # was "0.00 req/s"
    ([0], None, "1 requests, rate undefined (one request),"),  # was "0.00 req/s"
    ([0, 1000, 2000], "1e300", "3 requests, 1e+300 req/s,"),  # was a 300-digit number
    ([0, 1000, 2000], None, "3 requests, 1.00 req/s,"),
])
def test_simulate_title_states_the_rate_it_has(timestamps, rate_scale, expected, tmp_path, capsys):
    import json

    trace = tmp_path / "t.jsonl"
    lines = (json.dumps({"timestamp": t, "input_length": 600, "output_length": 5, "hash_ids": [2 * i, 2 * i + 1]})
             for i, t in enumerate(timestamps))
    trace.write_text("".join(line + "\n" for line in lines))
    scale = ["--rate-scale", rate_scale] if rate_scale else []
    assert main(["simulate", "--trace", str(trace), "--policy", "round-robin", "--quiet", *scale]) == 0
    assert expected in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("flag, text, expected", [
    ("--rates", "1,1", "--rates lists 1.0 twice: '1,1'; expected distinct rates (each is one row per policy)"),
    ("--rate-scales", "2,2.0", "--rate-scales lists 2.0 twice: '2,2.0'; expected distinct rate factors (each is one row "
                               "per policy)"),
    ("--loads", "0.5,0.5", "--loads lists 0.5 twice: '0.5,0.5'; expected distinct loads (each is one row per policy)"),
])
def test_compare_refuses_a_repeated_rate(flag, text, expected, capsys, monkeypatch):
    """A repeated rate was run once and shown once, silently (a repeated --seeds is refused)."""
    import baselines.capacity

    patch_everywhere(monkeypatch, baselines.capacity, "capacities", lambda *a, **k: pytest.fail("measured capacities"))
    assert main(["compare", "--workload", "tool-agent", "--suite", "round-robin", "--quiet", flag, text]) == 2
    assert capsys.readouterr().err == f"cpgym compare: error: {expected}\n"


def test_simulate_warns_when_a_policy_is_past_saturation(capsys):
    """150 req/s of tool-agent on 40 GPUs (capacity ~55 req/s): the table showed 47 s mean TTFT
    with no sign that the backlog grew through the window; one stderr line per overloaded policy
    now says so, by the `cpgym capacity` test. At 20 req/s nothing is said."""
    argv = ["simulate", "--workload", "tool-agent", "--workload-param", "duration_s=60", "--policy", "round-robin", "--quiet"]
    assert main([*argv, "--target-rps", "150"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("warning: round-robin: overloaded at 150.00 req/s: the last third's mean "
                                               "TTFT slowdown is ")
    assert "(> 1.2: the backlog grows) and token-weighted SLO attainment is 0.0" in err[0]
    assert main([*argv, "--target-rps", "20"]) == 0
    assert capsys.readouterr().err == ""


def test_simulate_caption_says_ttft_columns_leave_unfinished_requests_out(capsys):
    """With --horizon-s cutting 5201 of 5577 requests the table showed a 3.9 s mean TTFT over the
    376 finished ones, with nothing saying the others are not in it."""
    argv = ["simulate", "--workload", "tool-agent", "--workload-param", "duration_s=60", "--target-rps", "150",
            "--policy", "round-robin", "--quiet"]
    note = "TTFT: finished requests only (the unfinished ones count as SLO misses, not in the TTFT columns)"
    assert main([*argv, "--horizon-s", "10"]) == 0
    assert note in " ".join(capsys.readouterr().out.split())
    assert main(argv) == 0  # every request finished: no note
    assert "finished requests only" not in " ".join(capsys.readouterr().out.split())


def test_simulate_table_shows_missing_values_as_the_json_does(tmp_path, capsys):
    """Every request longer than any worker holds: the JSON has null TTFTs and hit rate, the table
    printed 'nan'; it now prints '-'."""
    import json

    ids = list(range(400_000 // 512 + 1))
    lines = (json.dumps({"timestamp": 1000 * i, "input_length": 400_000, "output_length": 5,
                         "hash_ids": [x + 10**6 * i for x in ids]}) for i in range(3))
    trace = tmp_path / "long.jsonl"
    trace.write_text("".join(line + "\n" for line in lines))
    argv = ["simulate", "--trace", str(trace), "--policy", "round-robin", "--quiet"]
    assert main([*argv, "--format", "json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert row["mean_ttft_s"] is None and row["prefix_hit_rate"] is None
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "nan" not in out
    assert "│ round-robin │ cp4x6,cp2x8 │ 3 │ 3 │ - │ - │ - │ - │ 0.000 │ 0.000 │ - │" in " ".join(out.split())
