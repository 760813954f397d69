"""The `cpgym` entry point: grouped tooling commands with their deprecated aliases, and error reporting."""

from __future__ import annotations

import statistics

import pytest

from experiments.cli import ALIASES, build_parser, main, normalize_argv


def _parsed(argv: list[str]) -> dict:
    """The options a command sees, without the routing fields (`command`, `subcommand`)."""
    ns = vars(build_parser().parse_args(normalize_argv(argv)))
    return {k: v for k, v in ns.items() if k not in ("command", "subcommand")}


@pytest.mark.parametrize("old, new", [
    (["bench", "--repeat", "2", "--policy", "least-work"], ["bench", "sim", "--repeat", "2", "--policy", "least-work"]),
    (["bench"], ["bench", "sim"]),
    (["bench-env", "--steps", "7"], ["bench", "env", "--steps", "7"]),
    (["profile", "--out", "x.json", "--degrees", "1,2"], ["kernels", "profile", "--out", "x.json", "--degrees", "1,2"]),
    (["calibrate", "--model", "Qwen3-8B", "--gpu", "H20"], ["kernels", "calibrate", "--model", "Qwen3-8B", "--gpu", "H20"]),
    (["--traceback", "bench", "--repeat", "2"], ["--traceback", "bench", "sim", "--repeat", "2"]),
])
def test_old_and_new_spellings_reach_the_same_command(old, new):
    a, b = _parsed(old), _parsed(new)
    assert a == b
    assert a["_module"] == dict(sim="experiments.commands.bench", env="experiments.commands.bench_env",
                                profile="experiments.commands.profile",
                                calibrate="experiments.commands.calibrate")[new[new.index(a["_command"].split()[0]) + 1]]


def test_aliases_are_documented_in_help(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    for old, (group, sub) in ALIASES.items():
        assert f"deprecated alias of `cpgym {group} {sub}`" in out
    assert "`bench` without sim|env = `bench sim`" in out


def test_group_help_and_missing_subcommand(capsys):
    with pytest.raises(SystemExit) as e:
        main(["kernels", "--help"])
    assert e.value.code == 0 and "calibrate" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["kernels"])
    assert e.value.code == 2


def test_bench_sim_refuses_a_horizon(tmp_path, capsys):
    # it ran to the horizon but divided every request of the workload by the shorter run's time
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 100, "output_length": 1, "hash_ids": [1]}\n')
    assert main(["bench", "sim", "--trace", str(trace), "--policy", "least-work", "--repeat", "1",
                 "--horizon-s", "5"]) == 2
    assert capsys.readouterr().err.startswith("cpgym bench sim: error: --horizon-s does not apply to cpgym bench sim")


def test_both_spellings_run_the_same_command_and_report_the_same_error(capsys):
    assert main(["bench", "--repeat", "0"]) == 2
    old = capsys.readouterr().err
    assert main(["bench", "sim", "--repeat", "0"]) == 2
    new = capsys.readouterr().err
    assert new == "cpgym bench sim: error: --repeat must be >= 1, got 0\n"
    assert old == ("cpgym: warning: `cpgym bench` is deprecated and will be removed in the next release; "
                   "use `cpgym bench sim`\n" + new)


@pytest.mark.parametrize("argv, expected", [
    (["bench", "--repeat", "0"], "bench sim"), (["bench-env", "--steps", "0"], "bench env"),
    (["profile", "--degrees", "0"], "kernels profile"), (["calibrate", "--help"], "kernels calibrate"),
    (["bench", "sim", "--repeat", "0"], None), (["bench", "--help"], None), (["simulate", "--seed", "0"], None),
])
def test_deprecated_spellings_print_one_notice(argv, expected):
    from experiments.cli import deprecation_notice

    notice = deprecation_notice(argv)
    if expected is None:
        assert notice is None
    else:
        assert f"`cpgym {argv[0]}` is deprecated" in notice and f"use `cpgym {expected}`" in notice
        assert "\n" not in notice


@pytest.mark.parametrize("argv, prog, unknown", [
    (["train", "routing", "--seed", "3", "--out", "x"], "cpgym train routing", "--seed 3"),
    (["simulate", "--bogus"], "cpgym simulate", "--bogus"),
    (["kernels", "check", "--bogus"], "cpgym kernels check", "--bogus")])
def test_unknown_flag_reports_the_sub_command_usage(argv, prog, unknown, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert err.startswith(f"usage: {prog} ")
    assert err.rstrip().endswith(f"{prog}: error: unrecognized arguments: {unknown}")


def test_traceback_flag_reraises_input_errors(capsys):
    with pytest.raises(ValueError, match="--repeat must be >= 1"):
        main(["--traceback", "bench", "sim", "--repeat", "0"])


def test_input_error_is_one_line_without_traceback(capsys):
    assert main(["kernels", "check", "--degrees", "0"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--degrees" in err and "Traceback" not in err


def test_value_error_from_inside_a_library_is_a_bug_not_an_input_error(monkeypatch):
    """A ValueError raised in library code (here: statistics) is not cpgym's validation: it propagates."""
    import experiments.commands.bench as bench

    monkeypatch.setattr(bench, "run", lambda args: statistics.quantiles([1.0], n=4))
    with pytest.raises(statistics.StatisticsError):
        main(["bench", "sim"])


def test_unexpected_exception_types_propagate(monkeypatch):
    import experiments.commands.bench as bench

    def buggy(args):
        return {}["missing"]

    monkeypatch.setattr(bench, "run", buggy)
    with pytest.raises(KeyError):
        main(["bench", "sim"])


def _in_worker_process(fn, *args):
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=1) as pool:
        return pool.submit(fn, *args).result()


def test_input_error_raised_in_a_worker_process_stays_one_line(monkeypatch, capsys):
    """compare --jobs / sweep run cells in worker processes: cpgym's own validation there is still an input error."""
    import experiments.commands.bench as bench
    from experiments.commands.kernels import parse_int_list

    monkeypatch.setattr(bench, "run", lambda args: _in_worker_process(parse_int_list, "a,b", "--degrees"))
    assert main(["bench", "sim"]) == 2
    err = capsys.readouterr().err
    assert err == "cpgym bench sim: error: --degrees must be a comma-separated list of integers, got 'a,b'\n"


def test_library_error_raised_in_a_worker_process_propagates(monkeypatch):
    import experiments.commands.bench as bench

    monkeypatch.setattr(bench, "run", lambda args: _in_worker_process(statistics.quantiles, [1.0]))
    with pytest.raises(statistics.StatisticsError):
        main(["bench", "sim"])


def test_ctrl_c_after_the_command_returned_is_one_line_and_130(tmp_path):
    """A Ctrl-C while the process shuts down (simulated by an atexit callback sending SIGINT to
    itself) prints the one `interrupted` line and exits 130, like one during the run."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = ("import atexit, os, signal, sys, time\n"
            "from experiments.cli import main\n"
            "atexit.register(lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(5)))\n"
            "sys.argv = ['cpgym', 'simulate', '--list-policies']\n"
            "sys.exit(main())\n")
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 130, res.stderr
    assert res.stderr == "cpgym simulate: interrupted\n"
    assert "vertumnus" in res.stdout  # the command's output is complete


@pytest.mark.parametrize("argv, unknown", [(["evaluate", "--policy", "least-work", "--seed", "1"], "--seed 1"),
                                           (["simulate", "--pol", "least-work"], "--pol least-work"),
                                           (["train", "routing", "--out", "x", "--timestep", "5"], "--timestep 5")])
def test_flags_are_never_abbreviations(argv, unknown, capsys):
    """`--seed` is not read as `--seeds` (nor any prefix as a longer flag): a flag a command does not
    take is an error."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert capsys.readouterr().err.rstrip().endswith(f"error: unrecognized arguments: {unknown}")
