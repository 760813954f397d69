"""What a researcher should not have to discover in the code (issue: surprises, help and docs):
config.json's SLO block, grid values in sweep folder names, the workload seed of each run seed,
why prediction_errors.csv shows a service-time error with noise off, untruncated evaluate
tables, help text without ``%%``, compare's --help listing every file it writes, and the README's
description of ``simulate --format json``."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from experiments.cli import build_parser, main
from experiments.spec import load_spec
from experiments.sweep.run import run_sweep
from tests.experiments.conftest import write_spec

# The user documentation: the README and the docs/ pages (the prose moved from the README to docs/).
_REPO = Path(__file__).resolve().parents[2]
README = "\n".join(p.read_text() for p in [_REPO / "README.md", *sorted((_REPO / "docs").rglob("*.md"))])


@pytest.mark.parametrize("slo, present, absent", [
    ([], {"kind", "slo_scale", "min_ttft_slo_s"}, {"ttft_slo_s"}),
    (["--slo", "5"], {"kind", "ttft_slo_s"}, {"slo_scale", "min_ttft_slo_s"}),
])
def test_config_json_shows_only_the_slo_fields_in_use(tmp_path, slo, present, absent):
    assert main(["simulate", "--workload", "mixed-default", "--arrival-window-s", "0", "3", "--policy", "least-work",
                 "--out", str(tmp_path), "--quiet", "--format", "json", *slo]) == 0
    (run,) = tmp_path.iterdir()
    block = json.loads((run / "config.json").read_text())["sim_config"]["slo"]
    assert present <= set(block) and not absent & set(block)


def test_sweep_folders_name_their_grid_values_and_cell_json_its_slo(tmp_path):
    spec = load_spec(write_spec(tmp_path, """
name: grid-names
workload: {name: mixed-default, params: {duration_s: 3.0}}
policies: [least-work]
seeds: [0]
rates: [10]
sweep: {grid: {cache_capacity_scale: [0.5, 1.0]}}
"""))
    out = tmp_path / "out"
    run_sweep(spec, out, jobs=1, progress=False)
    names = sorted(d.name for d in out.iterdir() if (d / "cell.json").is_file())
    assert [n.split("__")[0] for n in names] == ["mixed-default-10rps-cache_capacity_scale=0.5",
                                                 "mixed-default-10rps-cache_capacity_scale=1.0"]
    assert all(n.split("__")[1:3] == ["least-work", "0"] for n in names)
    cell = json.loads((out / names[0] / "cell.json").read_text())
    assert "ttft_slo_s" not in cell["sim_config"]["slo"]


def test_dry_run_shows_the_workload_seed_of_each_run_seed(capsys):
    assert main(["sweep", "experiments/specs/quick.yaml", "--dry-run", "--out", "/nonexistent/quick"]) == 0
    pairs = set(re.findall(r"  seed=(\d+)  workload_seed=(\d+)", capsys.readouterr().out))
    assert pairs == {("0", "0"), ("1", "1")}  # seed_workload: true re-draws the workload per seed
    assert "seed_workload" in README


def test_service_time_error_with_noise_off_comes_from_batching():
    """The README's explanation of prediction_errors.csv: with noise off the error is the
    batch-mates' work; one request per step makes it vanish."""
    from baselines.prediction_error import summarize_prediction_errors
    from baselines.runner import run_policy
    from envs import workloads
    from envs.sim import SimConfig

    wl = workloads.scale_to_rate(workloads.get_workload("tool-agent", seed=0, duration_s=60.0), 20.0)
    base = SimConfig()
    assert base.prediction_error.noise_sigma == 0.0
    errors = {}
    for n in (base.engine.max_batch_requests, 1):
        cfg = replace(base, engine=replace(base.engine, max_batch_requests=n))
        errors[n] = summarize_prediction_errors(run_policy("vertumnus-router", wl, cfg)).iloc[0]["mean_service_rel_error"]
    assert errors[base.engine.max_batch_requests] > 0.05 and abs(errors[1]) < 0.005
    assert "prediction_errors.csv" in README and "batch" in README.split("prediction_errors.csv", 2)[2][:900]


def test_evaluate_table_never_truncates_policy_names(capsys):
    argv = ["evaluate", "--policy", "least-work", "--against", "vertumnus-no-reservation,vertumnus-length-only",
            "--max-episodes", "1", "--quiet"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "…" not in out
    for name in ("vertumnus-no-reservation", "vertumnus-length-only", "vertumnus-router (untuned)"):
        assert name in out


def _help(command: str) -> str:
    parser = build_parser()
    sub = next(a for a in parser._subparsers._group_actions if a.dest == "command")
    return sub.choices[command].format_help()


@pytest.mark.parametrize("command", ["compare", "evaluate", "report", "sweep", "simulate"])
def test_help_has_no_doubled_percent(command):
    assert "%%" not in _help(command)


def test_compare_help_lists_every_file_it_writes(tmp_path):
    out = tmp_path / "cmp"
    assert main(["compare", "--suite", "least-work,vertumnus", "--rates", "10", "--seeds", "0", "--workload",
                 "mixed-default", "--arrival-window-s", "0", "4", "--beta", "1,3", "--out", str(out), "--format", "json"]) == 0
    text = " ".join(_help("compare").split())
    written = sorted(f.name for f in out.iterdir())
    assert len(written) == 7 and all(name in text for name in written), (written, text)


def test_readme_describes_simulate_json_as_one_array(capsys):
    assert main(["simulate", "--workload", "mixed-default", "--arrival-window-s", "0", "3", "--policy",
                 "least-work,round-robin",
                 "--format", "json", "--quiet"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert isinstance(rows, list) and [r["policy"] for r in rows] == ["least-work", "round-robin"]
    assert "`--format json` prints one JSON array with one object per policy" in README


def _readme_commands() -> list[str]:
    """Every ``cpgym ...`` command line of the README's ``bash`` blocks (continuations joined,
    trailing comments dropped)."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.split(r"\s#", line)[0].strip()
            if "cpgym " in line:
                out.append(line[line.index("cpgym "):])
    return out


@pytest.mark.parametrize("command", _readme_commands())
def test_readme_commands_parse(command):
    # a flag renamed or removed in the CLI but still shown in the README fails here (placeholders
    # such as `<tuned>` and the `$T` shell variable stand for a value)
    import shlex

    argv = shlex.split(re.sub(r"<[^>]+>", "1", command.replace("$T", "trace.jsonl")))[1:]
    build_parser().parse_args(argv)


def test_readme_has_commands_to_parse():
    assert len(_readme_commands()) >= 20 and any(c.startswith("cpgym simulate") for c in _readme_commands())


def test_sweep_folder_names_cut_long_grid_parts_but_stay_distinct():
    from types import SimpleNamespace

    from experiments.sweep.execute import cell_folder_name

    long = [("vertumnus-adaptive.target_margin", 0.12), ("vertumnus-adaptive.regime_change_unlocks", False),
            ("vertumnus-adaptive.target_urgent_gain", 1.0), ("vertumnus-adaptive.target_horizons_s", (0.0,)),
            ("vertumnus-adaptive.max_candidates", 36)]
    run = "matched-phases__vertumnus-adaptive__0__1796102215"
    a = cell_folder_name(run, SimpleNamespace(axes=(*long, ("vertumnus-adaptive.target_degrees", (2, 4)))))
    b = cell_folder_name(run, SimpleNamespace(axes=(*long, ("vertumnus-adaptive.target_degrees", (2, 4, 8)))))
    tag_a, tag_b = a.split("__")[0], b.split("__")[0]
    assert a != b and tag_a[:-8] == tag_b[:-8]  # only the digest of the whole grid part differs
    assert len(tag_a) == len("matched-phases-") + 100 and re.fullmatch(r".*~[0-9a-f]{8}", tag_a)
    assert a.split("__")[1:] == ["vertumnus-adaptive", "0", "1796102215"]
    short = cell_folder_name(run, SimpleNamespace(axes=(("cache_capacity_scale", 0.5),)))
    assert short == "matched-phases-cache_capacity_scale=0.5__vertumnus-adaptive__0__1796102215"


def _subcommands():
    parser = build_parser()
    sub = next(a for a in parser._subparsers._group_actions if a.dest == "command")
    return sub.choices


def _degrees_action(parser):
    """The shown ``--supported-degrees`` flag (a hidden one, e.g. evaluate's ignored pool flags, has no help)."""
    import argparse

    return next((a for a in parser._actions if "--supported-degrees" in a.option_strings
                 and a.help != argparse.SUPPRESS), None)


_WITH_DEGREES = sorted(name for name, p in _subcommands().items() if _degrees_action(p) is not None)


def test_the_commands_with_supported_degrees_are_found():
    assert {"simulate", "compare", "dynamic", "reproduce"} <= set(_WITH_DEGREES)


@pytest.mark.parametrize("command", _WITH_DEGREES)
def test_supported_degrees_help_states_the_default_in_use(command):
    """``cpgym reproduce --help`` said "default 1,2,4,8" while it ran with 2,4 (set_defaults)."""
    parser = _subcommands()[command]
    assert f"(default: {parser.get_default('supported_degrees')}" in _degrees_action(parser).help


def test_reproduce_has_no_seed_flag_it_would_ignore():
    # the run seeds are --seeds; --seed was accepted and replaced by each run's seed
    with pytest.raises(SystemExit):
        build_parser().parse_args(["reproduce", "--seed", "3"])


def _flags(name, parser):
    import argparse

    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for n, sp in a.choices.items():
                yield from _flags(f"{name} {n}", sp)
        elif a.option_strings and a.help != argparse.SUPPRESS and a.dest != "help":
            yield name, a


def test_every_flag_has_help_and_time_and_rate_flags_name_their_unit():
    """--format of evaluate / capacity / bench, tune --quiet had no help; bench env --target-rps
    and train --residual-tau-s no unit."""
    missing, no_unit = [], []
    for command, sub in _subcommands().items():
        for name, a in _flags(command, sub):
            if not a.help:
                missing.append(f"{name} {a.option_strings[0]}")
            elif a.dest.endswith("_s") and a.dest != "gamma_per_s" and not re.search(r"\[s\]|\bs\b|second", a.help):
                no_unit.append(f"{name} {a.option_strings[0]}")
            elif a.dest.endswith("_rps") and not re.search(r"req", a.help):
                no_unit.append(f"{name} {a.option_strings[0]}")
    assert missing == [] and no_unit == []


@pytest.mark.parametrize("command, flag", [("dynamic", "--lookahead-duration-s"), ("train routing", "--residual-tau-s"),
                                           ("evaluate", "--max-episodes")])
def test_generated_help_states_a_default_once(command, flag):
    """A field whose help already says its default got "(default: none)" appended as well
    ("(default: LookaheadConfig's) (default: none)")."""
    parser = _subcommands()[command.split()[0]]
    if " " in command:
        parser = next(a for a in parser._actions if a.dest and a.choices and isinstance(a.choices, dict)).choices[
            command.split()[1]]
    action = next(a for a in parser._actions if flag in a.option_strings)
    assert action.help.count("default") == 1, action.help


def test_sweep_folder_names_show_tuple_axes_as_their_items():
    # (2, 4) was written "-2,-4-" (brackets and spaces made dashes), read as negative numbers
    from types import SimpleNamespace

    from experiments.sweep.execute import cell_folder_name

    run = "matched-phases__vertumnus-adaptive__0__1796102215"
    axes = (("vertumnus-adaptive.target_degrees", (2, 4)), ("vertumnus-adaptive.target_horizons_s", (0.0,)))
    assert cell_folder_name(run, SimpleNamespace(axes=axes)) == \
        "matched-phases-target_degrees=2,4-target_horizons_s=0.0__vertumnus-adaptive__0__1796102215"
    assert cell_folder_name(run, SimpleNamespace(axes=(("vertumnus-adaptive.target_degrees", ()),))).startswith(
        "matched-phases-target_degrees=empty__")


def test_every_flag_with_choices_names_its_default():
    # kernels check / profile --device did not say that cpu is the default
    missing = [f"{name} {a.option_strings[0]}" for command, sub in _subcommands().items()
               for name, a in _flags(command, sub) if a.choices and "default" not in a.help]
    assert missing == []


def test_readme_request_counts_of_the_quick_spec_seeds_are_the_built_ones():
    """The README's "two seeds of quick.yaml replay N0 and N1 requests" (was 2227 and 2011; the
    cells' workloads hold 2519 and 2454 at both rates)."""
    m = re.search(r"`experiments/specs/quick.yaml` therefore replay (\d+) and (\d+) requests \(seeds 0 and 1", README)
    assert m, "the README sentence moved"
    counts = {}
    for wl in {cell.workload for cell in load_spec("experiments/specs/quick.yaml").resolve()}:  # 2 seeds x 2 rates
        counts.setdefault(wl.seed, set()).add(wl.build().num_requests)
    assert counts == {0: {int(m.group(1))}, 1: {int(m.group(2))}}


def _flag_help(argv: list[str], flag: str) -> str:
    """The help text of the option ``flag`` of the (sub)command ``argv``, %-formatted as printed."""
    import argparse

    parser = build_parser()
    for name in argv:
        parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
    action = next(a for a in parser._actions if flag in a.option_strings)
    return " ".join((action.help % {"default": action.default}).split())


def test_help_says_what_the_flags_do_with_units():
    """--cache-capacity-scale scales the prefix cache only (0 = no reuse, not no KV memory);
    --timesteps is rounded up to whole rollouts (10 trained 2048 steps); the target decision's
    gains are shares of a predicted mean TTFT, with ControllerConfig's defaults."""
    from baselines.controller import ControllerConfig

    assert "prefix-cache capacity" in _flag_help(["simulate"], "--cache-capacity-scale")
    assert "0 = no prefix reuse" in _flag_help(["simulate"], "--cache-capacity-scale")
    for kind in ("routing", "reconfig"):
        assert "rounded up to whole rollouts of n_steps x n_envs steps" in _flag_help(["train", kind], "--timesteps")
    margin = _flag_help(["dynamic"], "--target-margin")
    assert "a share of its predicted mean TTFT" in margin and "0.05 = 5 %" in margin
    assert margin.endswith(f"(default: ControllerConfig's, {ControllerConfig().target_margin:g})")
    urgent = _flag_help(["dynamic"], "--target-urgent-gain")
    assert "0.25 = 25 %" in urgent
    assert urgent.endswith(f"(default: ControllerConfig's, {ControllerConfig().target_urgent_gain:g})")
