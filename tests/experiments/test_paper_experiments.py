"""Each paper spec (``experiments/paper/*.yaml``) and the commands its header lists
(``#   $ cpgym ...``) plan the same runs: workload (source, seed, rate, window, generator
parameters), pool, policy and seed."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from experiments.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
PAPER_SPECS = sorted((REPO / "experiments" / "paper").glob("*.yaml"))


def _workload_key(source) -> tuple:
    trace = str(Path(source.trace).resolve()) if source.trace else None
    params = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in dict(source.params).items()))
    return (source.name, trace, source.seed, params, source.target_rps, source.rate_scale,
            tuple(source.arrival_window_s) if source.arrival_window_s else None)


def _run_key(source, config, policy: str) -> tuple:
    pool = config.pool
    return (_workload_key(source), (pool.num_gpus, pool.gpus_per_node, pool.composition, tuple(pool.supported_degrees)),
            config.slo, policy, config.seed)


def _spec_runs(path: Path) -> list[tuple]:
    from envs.workloads import WorkloadSource
    from experiments.spec import load_spec
    from experiments.spec.model import materialize_param

    runs = []
    for cell in load_spec(path).resolve():
        wl = cell.workload
        assert not cell.policy_params, "a policy parameter has no command-line form here"
        src = WorkloadSource(name=wl.name, trace=wl.trace, seed=wl.seed, target_rps=wl.target_rps, rate_scale=wl.rate_scale,
                             arrival_window_s=wl.arrival_window_s, params=tuple((k, materialize_param(v)) for k,
                                                                                v in wl.params))
        runs.append(_run_key(src, cell.config, cell.policy))
    return runs


def _command_runs(path: Path) -> list[tuple]:
    import importlib

    lines = [ln.split("$", 1)[1].strip() for ln in path.read_text().splitlines() if ln.startswith("#") and "$ cpgym " in ln]
    assert lines, f"{path.name}: no '#   $ cpgym ...' command in the header"
    parser, runs = build_parser(), []
    for line in lines:
        argv = shlex.split(line)[1:]
        args = parser.parse_args(argv)
        runs += [_run_key(src, cfg, pol) for src, cfg, pol in importlib.import_module(args._module).plan(args)]
    return runs


@pytest.mark.parametrize("path", PAPER_SPECS, ids=[p.stem for p in PAPER_SPECS])
def test_paper_spec_and_its_commands_plan_the_same_runs(path, monkeypatch):
    monkeypatch.chdir(REPO)  # the commands' relative trace paths are relative to the repository root
    spec, commands = _spec_runs(path), _command_runs(path)
    assert len(spec) == len(set(spec)) and len(commands) == len(set(commands))
    assert sorted(spec, key=repr) == sorted(commands, key=repr)


def test_every_paper_command_has_a_spec():
    assert {p.stem for p in PAPER_SPECS} == {"end-to-end", "dynamic-phases", "cache-ablation"}


def test_dynamic_defaults_are_the_paper_rates():
    """The drift of the issue: the spec said 9 req/s long phases while the command ran 4."""
    from experiments.paper_experiments.dynamic_phases import DynamicPhasesConfig
    from experiments.spec import load_spec

    params = dict(load_spec(REPO / "experiments/paper/dynamic-phases.yaml").workload.params)
    assert {k: params[k] for k in DynamicPhasesConfig().workload_params()} == DynamicPhasesConfig().workload_params()
