"""Bad input a fresh user hit (issue #42): a bad flag value is one line naming the flag the user
typed and what it expects (exit 2), the sub-command is named as typed (``cpgym train routing``),
and an unknown flag keeps argparse's usage. Assertions on the flag and a phrase, not sentences."""

from __future__ import annotations

import pytest

from experiments.cli import main


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and not err.startswith("usage:"), err
    return err


@pytest.mark.parametrize("argv, prefix, phrases", [
    (["simulate", "--target-rps", "abc"], "cpgym simulate: error: --target-rps: ", ["expected a number", "got 'abc'"]),
    (["simulate", "--workload-seed", "1.5"], "cpgym simulate: error: --workload-seed: ",
     ["expected an integer", "got '1.5'"]),
    (["simulate", "--format", "jsn"], "cpgym simulate: error: --format: ",
     ["expected one of table, json", "got 'jsn'", "did you mean 'json'"]),
    (["simulate", "--target-rps"], "cpgym simulate: error: --target-rps: ", ["expected a value"]),
    (["simulate", "--arrival-window-s", "1"], "cpgym simulate: error: --arrival-window-s: ",
     ["expected 2 values (START END)"]),
    (["simulate", "--quiet=1"], "cpgym simulate: error: --quiet: ", ["expected no value", "got '1'"]),
    (["train", "routing", "--timesteps", "x"], "cpgym train routing: error: --timesteps: ", ["expected an integer"]),
    (["train", "reconfig", "--action-mode", "targt"], "cpgym train reconfig: error: --action-mode: ",
     ["expected one of operation, target", "did you mean 'target'"]),
    (["bench", "sim", "--repeat", "two"], "cpgym bench sim: error: --repeat: ", ["expected an integer"]),
    (["kernels", "check", "--format", "yaml"], "cpgym kernels check: error: --format: ", ["expected one of table, json"]),
    (["kernels", "nope"], "cpgym kernels: error: SUBCOMMAND: ", ["expected one of check, profile, calibrate", "got 'nope'"]),
    (["simulat"], "cpgym: error: COMMAND: ", ["expected one of simulate,", "did you mean 'simulate'"]),
])
def test_a_bad_value_is_one_line_naming_the_flag(argv, prefix, phrases, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = _one_line(capsys)
    assert err.startswith(prefix), err
    assert all(p in err for p in phrases), err


def test_an_unknown_flag_keeps_the_usage(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--bogus"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: cpgym simulate ") and "unrecognized arguments: --bogus" in err


@pytest.mark.parametrize("argv, flag, phrase", [
    # evaluate checks its episode count as a flag, before anything runs
    (["evaluate", "--policy", "least-work", "--max-episodes", "0"], "--max-episodes", "must be >= 1"),
    # capacity named the generator's argument ('seed must be ... or a numpy.random.SeedSequence')
    (["capacity", "--workload-seed", "-1"], "--workload-seed", "must be an integer >= 0"),
    # the pool's message named no flag ('composition item ...')
    (["simulate", "--pool-composition", "cp3x1"], "--pool-composition cp3x1", "CP degree 3 is not supported"),
])
def test_a_bad_value_names_the_flag_not_the_field(argv, flag, phrase, capsys):
    assert main([*argv, "--quiet"]) == 2
    err = _one_line(capsys)
    assert err.startswith(f"cpgym {argv[0]}: error: {flag}") and phrase in err, err
    assert "workload:" not in err and "SeedSequence" not in err


@pytest.mark.parametrize("kind, flags", [("routing", ["--timesteps", "0"]), ("reconfig", ["--n-envs", "0"]),
                                         ("arms", ["--loads", "3"])])
def test_train_errors_name_the_kind_typed(kind, flags, tmp_path, capsys):
    assert main(["train", kind, *flags, "--out", str(tmp_path / "run"), "--quiet"]) == 2
    err = _one_line(capsys)
    assert err.startswith(f"cpgym train {kind}: error: ") and flags[0] in err, err
    assert not (tmp_path / "run").exists()
