"""The default sources of runs given neither a trace nor a workload, each defined once in
envs.workloads: the named synthetic workload (simulation commands) and the default trace
(routing training / evaluation, the registered routing environment)."""

from pathlib import Path

from envs import workloads
from envs.workloads import DEFAULT_TRACE_FILE, DEFAULT_WORKLOAD, WORKLOADS, default_trace_path, default_traces_dir


def test_the_default_workload_is_registered_and_the_default_trace_is_in_the_traces_folder():
    assert DEFAULT_WORKLOAD in WORKLOADS
    assert default_trace_path() == default_traces_dir() / DEFAULT_TRACE_FILE


def test_simulation_commands_and_episode_sources_default_to_the_one_named_workload():
    import argparse

    from experiments.common import add_workload_arguments, workload_source_from_args
    from policies.routing.episodes import EpisodeSource

    p = argparse.ArgumentParser()
    add_workload_arguments(p)
    src = workload_source_from_args(p.parse_args([]))
    assert (src.name, src.trace) == (DEFAULT_WORKLOAD, None)
    assert EpisodeSource.__dataclass_fields__["workload"].default.name == DEFAULT_WORKLOAD


def test_routing_training_defaults_to_the_one_trace(tmp_path, monkeypatch):
    from experiments.cli import build_parser

    monkeypatch.setattr(workloads, "default_traces_dir", lambda: tmp_path)
    assert default_trace_path() == tmp_path / DEFAULT_TRACE_FILE
    monkeypatch.undo()
    args = build_parser().parse_args(["train", "routing"])
    assert Path(args._default_trace) == default_trace_path()
