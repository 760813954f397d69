"""Bad command-line input is one clear line, found before anything runs (QA pass over the CLI)."""

from __future__ import annotations

import os

import pytest

from envs.sim.options import check_out_dir
from experiments.cli import main
from experiments.common import parse_list
from tests.factories import write_trace
from tests.interrupt import patch_everywhere


@pytest.mark.parametrize("text", ["2,,4", "2,", ",2", " , "])
def test_list_flags_reject_empty_items(text):
    with pytest.raises(ValueError, match="--supported-degrees must be a comma-separated list of integers"):
        parse_list(text, "--supported-degrees", int)


def test_list_flags_reject_an_empty_list():
    with pytest.raises(ValueError, match="--rates needs at least one value"):
        parse_list("", "--rates")
    assert parse_list(" 1, 2 ", "--rates") == [1.0, 2.0]


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


@pytest.fixture
def no_training(monkeypatch):
    """``cpgym train routing|reconfig`` fails the test if training (any simulation) starts."""
    import policies.reconfig.train as train_reconfig
    import policies.routing.train as train

    def no_train(*a, **k):
        raise AssertionError("training started before checking --out")

    patch_everywhere(monkeypatch, train_reconfig, "train_reconfig", no_train)
    patch_everywhere(monkeypatch, train, "train_routing", no_train)


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_train_out_in_a_read_only_folder_names_the_flag(tmp_path, capsys, no_training):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        # a real read-only folder (the error table fakes os.access); needs chmod, so not a table row
        assert main(["train", "reconfig", "--out", str(ro)]) == 2
        err = capsys.readouterr().err
        assert f"--out {ro}" in err and "is not writable" in err and len(err.splitlines()) == 1
        assert main(["train", "reconfig", "--out", str(ro / "run")]) == 2
        assert f"error: --out {ro / 'run'} cannot be created: " in capsys.readouterr().err
        assert list(ro.iterdir()) == []
    finally:
        ro.chmod(0o700)


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


@pytest.mark.parametrize("value", ["nan", "inf", "5,-inf"])
def test_positive_list_flags_reject_non_finite_values(value):
    # nan/inf parse as floats; they used to pass and fail later naming `workload: target_rps`
    with pytest.raises(ValueError, match=r"^--rates values must all be finite numbers > 0, got "):
        parse_list(value, "--rates", positive=True)


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


@pytest.mark.slow
def test_evaluate_out_creates_its_folder(tmp_path, capsys):
    out = tmp_path / "new" / "sub" / "rows.csv"
    assert main(["evaluate", "--policy", "least-work", "--against", "round-robin", "--max-episodes", "1", "--quiet",
                 "--format", "json", "--out", str(out)]) == 0
    assert out.is_file() and "policy" in out.read_text().splitlines()[0].split(",")


def test_capacity_does_not_offer_the_horizon_it_refuses():
    """``cpgym capacity --horizon-s`` is an error (tests/experiments/test_cli_errors.py), so its --help leaves it out."""
    from experiments.cli import build_parser

    sub = next(a for a in build_parser()._subparsers._group_actions if a.dest == "command").choices
    assert "--horizon-s" not in sub["capacity"].format_help()
    assert "--horizon-s" in sub["simulate"].format_help()


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


def test_reproduce_traces_dir_needs_the_trace_only_for_experiments_that_replay_it(tmp_path):
    from experiments.cli import build_parser
    from experiments.commands.reproduce import config_from_args

    args = build_parser().parse_args(["reproduce", "--traces-dir", str(tmp_path), "--no-cache"])
    assert config_from_args(args, ["dynamic", "cache"]).workloads  # no end-to-end: the trace is not read
    args = build_parser().parse_args(["reproduce", "--traces-dir", str(tmp_path), "--workloads", "tool-agent", "--no-cache"])
    assert config_from_args(args).workloads[0].key == "tool-agent"


@pytest.mark.parametrize("timestamps, rate_scale, expected", [
    ([0, 0, 0], None, "3 requests, rate undefined (every request arrives at 0 s),"),  # was "0.00 req/s"
    ([0], None, "1 requests, rate undefined (one request),"),  # was "0.00 req/s"
    ([0, 1000, 2000], "1e300", "3 requests, 1e+300 req/s,"),  # was a 300-digit number
    ([0, 1000, 2000], None, "3 requests, 1.00 req/s,"),
])
def test_simulate_title_states_the_rate_it_has(timestamps, rate_scale, expected, tmp_path, capsys):
    trace = write_trace(tmp_path / "t.jsonl", ({"timestamp": t, "input_length": 600, "output_length": 5,
                                                "hash_ids": [2 * i, 2 * i + 1]} for i, t in enumerate(timestamps)))
    scale = ["--rate-scale", rate_scale] if rate_scale else []
    assert main(["simulate", "--trace", str(trace), "--policy", "round-robin", "--quiet", *scale]) == 0
    assert expected in " ".join(capsys.readouterr().out.split())


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
    trace = write_trace(tmp_path / "long.jsonl", ({"timestamp": 1000 * i, "input_length": 400_000, "output_length": 5,
                                                   "hash_ids": [x + 10**6 * i for x in ids]} for i in range(3)))
    argv = ["simulate", "--trace", str(trace), "--policy", "round-robin", "--quiet"]
    assert main([*argv, "--format", "json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert row["mean_ttft_s"] is None and row["prefix_hit_rate"] is None
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "nan" not in out
    assert "│ round-robin │ cp4x6,cp2x8 │ 3 │ 3 │ - │ - │ - │ - │ 0.000 │ 0.000 │ - │" in " ".join(out.split())
