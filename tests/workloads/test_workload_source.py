"""One workload builder: a spec, the CLI's shared flags and both trainers give the same requests."""

from __future__ import annotations

import pytest

from envs.workloads import WorkloadSource, build_workload
from experiments.cli import build_parser

FLAGS = ["--workload", "phases", "--workload-seed", "3", "--target-rps", "5", "--arrival-window-s", "0", "300"]


@pytest.mark.slow
def test_spec_cli_and_both_trainers_build_identical_request_lists(tmp_path):
    from experiments.commands.train import configs_from_args
    from experiments.common import workload_from_args
    from experiments.spec import WorkloadSpec

    parser = build_parser()
    via_spec = WorkloadSpec(name="phases", seed=3, target_rps=5.0, arrival_window_s=(0.0, 300.0)).build()
    via_cli = workload_from_args(parser.parse_args(["simulate", *FLAGS]))
    routing = configs_from_args(parser.parse_args(["train", "routing", *FLAGS, "--out", str(tmp_path)]))
    reconfig = configs_from_args(parser.parse_args(["train", "reconfig", *FLAGS, "--out", str(tmp_path)]))
    via_routing_trainer = routing.source.workload_obj()
    (via_reconfig_trainer,) = reconfig.episode_windows()  # 300 s of arrivals: one episode of the whole window
    assert via_spec.num_requests > 100
    for other in (via_cli, via_routing_trainer, via_reconfig_trainer):
        assert other.requests == via_spec.requests
        assert other.kv_block_size_tokens == via_spec.kv_block_size_tokens


@pytest.mark.slow
def test_builder_applies_rate_then_window():
    base = build_workload(name="phases", seed=1)
    scaled = build_workload(name="phases", seed=1, rate_scale=2.0)
    assert scaled.num_requests == base.num_requests
    assert scaled.requests[-1].arrival_time_s == pytest.approx(base.requests[-1].arrival_time_s / 2)
    win = build_workload(name="phases", seed=1, rate_scale=2.0, arrival_window_s=(10, 20))
    assert 0 < win.num_requests < base.num_requests


@pytest.mark.parametrize("fields, match", [
    ({}, "exactly one"),
    ({"name": "phases", "trace": "x.jsonl"}, "exactly one"),
    ({"name": "phases", "target_rps": 1.0, "rate_scale": 2.0}, "exclusive"),
    ({"name": "phases", "target_rps": -1.0}, "target_rps"),
    ({"name": "phases", "arrival_window_s": (5, 5)}, "arrival_window_s"),
    ({"name": "phases", "seed": -1}, "seed"),
    # these failed without naming the field (NaN: "cannot convert float NaN to integer"; a
    # malformed window: "could not convert string to float" / "not enough values to unpack")
    # or were accepted (True)
    ({"name": "phases", "seed": float("nan")}, "seed must be an integer >= 0"),
    ({"name": "phases", "seed": True}, "seed must be an integer >= 0"),
    ({"name": "phases", "seed": "1"}, "seed must be an integer >= 0"),
    ({"name": "phases", "arrival_window_s": ("a", 3)}, r"arrival_window_s must be two numbers \(start, end\)"),
    ({"name": "phases", "arrival_window_s": (1,)}, r"arrival_window_s must be two numbers \(start, end\)"),
    ({"trace": "x.jsonl", "params": (("duration_s", 1.0),)}, "params"),
    # a string or a list failed inside the comparison ("'>' not supported between 'str' and 'int'")
    ({"name": "phases", "target_rps": "5"}, "target_rps must be a finite number > 0, got '5'"),
    ({"name": "phases", "rate_scale": [2]}, r"rate_scale must be a finite number > 0, got \[2\]"),
])
def test_source_rejects_bad_fields(fields, match):
    with pytest.raises(ValueError, match=match):
        WorkloadSource(**fields)


def test_source_seed_is_stored_as_an_int():
    assert WorkloadSource(name="phases", seed=3.0).seed == 3 and type(WorkloadSource(name="phases", seed=3.0).seed) is int


def test_trainer_episode_defaults_are_single_sourced():
    from envs.routing_env import DEFAULT_WINDOW_S
    from policies.reconfig.train import DEFAULT_RECONFIG_EPISODE_WINDOW_S, ReconfigTrainConfig
    from policies.routing.episodes import EpisodeSource

    assert EpisodeSource().episode_window_s == DEFAULT_WINDOW_S
    assert ReconfigTrainConfig().episode_window_s == DEFAULT_RECONFIG_EPISODE_WINDOW_S
    args = build_parser().parse_args(["train", "reconfig", "--out", "x"])
    assert args.episode_window_s == DEFAULT_RECONFIG_EPISODE_WINDOW_S


def test_source_refuses_an_unknown_workload_name_when_built():
    # the name was checked only by build(), after a trainer had written provenance.json to --out
    with pytest.raises(ValueError, match=r"^unknown workload 'nope'; known workloads: bursty, "):
        WorkloadSource(name="nope")
