"""`cpgym kernels calibrate | check | profile` errors, one table: each row is a command line, the
flag or name its one error line must name, a short phrase it must hold, and exit status 2
(tests/error_table.py). Rows with ``forbid`` must fail before a rank process starts."""

from __future__ import annotations

import pytest

from tests.error_table import CliError, check, param

NO_RANKS = (("torch.multiprocessing", "start_processes"),)
CALIBRATE = ("kernels", "calibrate", "--model", "Qwen3-8B", "--gpu", "H20")
PROFILE = ("kernels", "profile", "--out", "{tmp}/c.json")


def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the relative --out x.json


def _no_file(tmp_path, names):
    assert not (tmp_path / "c.json").exists()


def _rows():
    rows = [
        CliError("calibrate-unknown-model", ("kernels", "calibrate", "--model", "nope", "--gpu", "H20"), "'nope'",
                 "unknown model"),
        CliError("calibrate-efficiency-2", (*CALIBRATE, "--efficiency", "2"), "--efficiency", "must be a fraction in (0, 1]"),
        CliError("calibrate-deepseek-v3-on-h20", ("kernels", "calibrate", "--model", "DeepSeek-V3", "--gpu", "H20"),
                 "DeepSeek-V3 weights", "do not fit"),
        CliError("calibrate-deepseek-v3-shard-4", ("kernels", "calibrate", "--model", "DeepSeek-V3", "--gpu", "H20-3e",
                                                   "--weight-shard-gpus", "4"),
                 "DeepSeek-V3 weights", "do not fit"),
        CliError("calibrate-fp8-on-a100", ("kernels", "calibrate", "--model", "DeepSeek-V3", "--gpu", "A100-80GB"),
                 "A100-80GB", "no FP8 tensor cores"),
        CliError("calibrate-dense-sharded", ("kernels", "calibrate", "--model", "Qwen3-8B", "--gpu", "H20-3e",
                                             "--weight-shard-gpus", "2"),
                 "Qwen3-8B", "is dense"),
        CliError("calibrate-negative-reserve", ("kernels", "calibrate", "--model", "Qwen3-8B", "--gpu", "H20-3e",
                                                "--activation-reserve-gb", "-1"),
                 "--activation-reserve-gb", "must be a finite number of GB >= 0"),
        CliError("check-degree-0", ("kernels", "check", "--degrees", "0"), "--degrees", "got '0'"),
        CliError("profile-new-tokens-not-integers", ("kernels", "profile", "--out", "x.json", "--new-tokens", "a,b"),
                 "--new-tokens", "must be a comma-separated list of integers"),
        CliError("profile-grid-too-small", ("kernels", "profile", "--out", "x.json", "--new-tokens", "8", "--cached-tokens",
                                            "0", "--degrees", "1"),
                 "5 coefficients", "needs at least 5", setup=_in_tmp),
        # --degrees 1,1 ran every CP-1 case twice and reported '30/30 passed' for 15 cases
        CliError("check-repeated-degree", ("kernels", "check", "--degrees", "1,2,1"), "--degrees",
                 "lists 1 twice: '1,2,1'; expected distinct CP degrees", forbid=(("kernels_ref.check", "run_check_suite"),)),
    ]
    # --degrees 99999 tried to start 99,999 torch processes (one gloo rank each)
    for argv in [("kernels", "check", "--degrees", "1,99999"), ("kernels", "profile", "--out", "x.json", "--degrees", "64")]:
        rows.append(CliError(f"{argv[1]}-degree-beyond-the-rank-limit", argv, "CP degrees", "expected CP degrees <= ",
                             setup=_in_tmp, forbid=NO_RANKS))
    # --layers 1e8 ran until memory was exhausted; --hidden 1e8 failed in torch's allocator
    for flags in [("--layers", "100000000"), ("--hidden", "100000000"),
                  ("--experts", "100000", "--moe-intermediate", "100000"), ("--new-tokens", "64,256,1024,2000000000")]:
        rows.append(CliError(f"profile-grid-beyond-memory{flags[0]}", (*PROFILE, *flags), "lower --layers, --hidden",
                             "the profile grid needs about", forbid=NO_RANKS, after=_no_file))
    for flags, phrase in [
            (("--activation-reserve-gb", "inf"), "must be a finite number of GB >= 0, got inf"),  # was a traceback
            (("--overhead-s", "nan"), "must be a finite number of seconds >= 0, got nan"),  # was 'overhead_s ...'
            (("--overhead-s", "inf"), "must be a finite number of seconds >= 0, got inf"),  # was 'cost coefficient d_s'
            (("--cp-serial-fraction", "1.5"), "must be a fraction in [0, 1], got 1.5"),
            (("--efficiency", "0"), "must be a fraction in (0, 1], got 0.0"),  # was 'efficiency compute ...'
            (("--link-efficiency", "nan"), "must be a fraction in (0, 1], got nan"),
            (("--weight-shard-gpus", "3"), "must be one of 1, 2, 4, 8, got 3")]:
        rows.append(CliError(f"calibrate{flags[0]}={flags[1]}", (*CALIBRATE, *flags), flags[0], phrase))
    for flags, key, phrase in [
            (("--layers", "0"), "--layers", "must be an integer >= 1, got 0"),  # was 'num_layers, repeats and block_tokens'
            (("--repeats", "0"), "--repeats", "must be an integer >= 1, got 0"),
            (("--warmup", "-1"), "--warmup", "must be an integer >= 0, got -1"),
            (("--hidden", "0"), "--hidden", "must be an integer >= 1, got 0"),  # was 'LayerConfig.hidden_size must be >= 1'
            (("--kv-heads", "0"), "--kv-heads", "must be an integer >= 1, got 0"),
            (("--q-heads", "3", "--kv-heads", "2"), "--q-heads 3", "must be a multiple of --kv-heads 2 (GQA)"),
            (("--head-dim", "7"), "--head-dim", "must be even (rotate-half RoPE), got 7"),
            (("--experts", "-1"), "--experts", "must be an integer >= 0 (0: dense MLP), got -1"),  # was about MoE top-k
            (("--experts", "4", "--top-k", "9"), "--top-k", "must be in [1, --experts = 4], got 9"),
            (("--experts", "4", "--moe-intermediate", "0"), "--moe-intermediate", "must be an integer >= 1 with --experts"),
            (("--dtype", "bfloat16"), "--dtype", "on --device cpu must be one of float32, float64, got 'bfloat16'"),
            # profiled (64, P, C) twice per repeat, and the fit and the calibration's samples counted it twice
            (("--new-tokens", "64,256,64,1024"), "(--new-tokens)", "lists 64 twice: 64,256,64,1024; expected"),
            (("--cached-tokens", "0,1024,1024"), "(--cached-tokens)", "lists 1024 twice: 0,1024,1024; expected")]:
        rows.append(CliError(f"profile{''.join(flags)}", (*PROFILE, *flags), key, phrase, forbid=NO_RANKS))
    # --out DIR ran the whole profiling grid (minutes) and then failed with the OS error alone ('Is a directory')
    for command, extra in [("profile", ()), ("calibrate", CALIBRATE[2:])]:
        rows += [CliError(f"{command}-out-a-folder", ("kernels", command, "--out", "{tmp}", *extra), "--out {tmp}",
                          "is a folder; expected a file path", forbid=NO_RANKS),
                 CliError(f"{command}-out-under-a-file", ("kernels", command, "--out", "{file}/c.json", *extra),
                          "--out {file}/c.json", "cannot be created: {file} is not a folder", forbid=NO_RANKS)]
    return rows


ROWS = _rows()


@pytest.mark.parametrize("row", [param(r) for r in ROWS])
def test_kernels_cli_error(row, tmp_path, monkeypatch, capsys):
    check(row, tmp_path, monkeypatch, capsys)
