"""What ``cpgym`` imports to start (issue #40 item 4): building the parser loads the commands' flag
declarations only (``experiments/flags``), never torch, gymnasium, Stable-Baselines3 or the
training code; ``cpgym simulate`` runs without torch. Behaviour tests (what is imported), not
timing tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Modules the parser must not load: the heavy libraries and the training code.
HEAVY = ("torch", "gymnasium", "stable_baselines3", "sb3_contrib", "policies.routing.train", "policies.reconfig.train")


def _loaded_after(code: str) -> dict:
    """Runs ``code`` in a fresh interpreter; returns ``{module: loaded?}`` for :data:`HEAVY` and numpy."""
    probe = code + (f"\nimport json, sys\nprint(json.dumps({{m: m in sys.modules for m in {HEAVY + ('numpy',)!r}}}))\n")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_build_parser_imports_no_torch_gymnasium_or_training_code():
    loaded = _loaded_after("from experiments.cli import build_parser\nbuild_parser()")
    assert not [m for m in HEAVY if loaded[m]], loaded


def test_simulate_help_imports_no_heavy_module_and_no_numpy():
    code = ("import contextlib, io\nfrom experiments.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
            "    main(['simulate', '--help'])")
    loaded = _loaded_after(code)
    assert not [m for m in (*HEAVY, "numpy") if loaded[m]], loaded


def test_simulate_run_imports_no_torch_or_gymnasium():
    code = ("import contextlib, io\nfrom experiments.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    assert main(['simulate', '--workload-param', 'duration_s=5', '--format', 'json', '--quiet']) == 0")
    loaded = _loaded_after(code)
    assert loaded["numpy"]  # it did simulate
    assert not [m for m in HEAVY if loaded[m]], loaded


def test_lazy_parser_declares_the_flags_of_the_eager_one():
    """``main``'s parser (flags declared on use) accepts and rejects what the CLI reference's does."""
    from experiments.cli import build_parser, parse_args

    argv = ["simulate", "--policy", "least-work", "--target-rps", "3", "--seed", "2"]
    assert vars(parse_args(argv)) == vars(build_parser().parse_args(argv))
    argv = ["train", "routing", "--timesteps", "64", "--out", "x"]
    assert vars(parse_args(argv)) == vars(build_parser().parse_args(argv))


def test_workload_names_match_the_registry():
    """The names the parser lists without loading the generators are the registry's."""
    from envs.workloads import WORKLOAD_NAMES, WORKLOADS

    assert WORKLOAD_NAMES == tuple(WORKLOADS)
