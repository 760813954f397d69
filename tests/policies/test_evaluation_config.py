"""``cpgym evaluate`` flags come from ``EvaluationConfig``; the evaluation runs without argparse."""

from __future__ import annotations

import pytest

from experiments.cli import build_parser


def test_flags_generate_the_config():
    from envs.sim.options import config_from_args
    from policies.evaluate import EvaluationConfig

    args = build_parser().parse_args(["evaluate", "--policy", "least-work", "--seeds", "4,5", "--windows", "0,2",
                                      "--episode-window-s", "30", "--reference", "least-work"])
    cfg = config_from_args(EvaluationConfig, args)
    assert cfg == EvaluationConfig(policy="least-work", seeds=(4, 5), windows="0,2", episode_window_s=30.0,
                                   reference="least-work")
    assert cfg.part_and_indices() == ("eval", [0, 2])


@pytest.mark.parametrize("fields, match", [
    ({"seeds": ()}, "seeds"), ({"seeds": (-1,)}, "seeds"), ({"eval_every": 1}, "eval_every"),
    ({"trace": "x", "workload": "phases"}, "not both"), ({"episode_window_s": 0.0}, "episode_window_s"),
])
def test_config_rejects_bad_values(fields, match):
    from policies.evaluate import EvaluationConfig

    with pytest.raises(ValueError, match=match):
        EvaluationConfig(policy="least-work", **fields)


def test_policy_flag_has_no_default():
    """Required whenever something runs, checked after parsing (not with --from-csv, whose rows name
    their policies): the error is a row of tests/policies/test_errors.py."""
    assert build_parser().parse_args(["evaluate"]).policy is None


def test_run_evaluation_as_a_library_call():
    from envs.sim import SimConfig
    from policies.evaluate import EvaluationConfig, run_evaluation

    cfg = EvaluationConfig(policy="least-work", against="round-robin", workload="tool-agent", target_rps=10.0,
                           episode_window_s=20.0, windows="0", seeds=(1,))
    res = run_evaluation(cfg, SimConfig())
    assert res.kind == "routing" and res.part == "eval"
    assert [r["policy"] for r in res.rows] == ["least-work", "round-robin"]
    assert all(r["seed"] == 1 and r["window"] == 0 and r["mean_ttft_s"] > 0 for r in res.rows)


def test_max_windows_without_the_protocol_says_what_to_add():
    """--max-windows 1 is a valid count; the error names the missing --loads/--protocol instead of
    reading as if 1 were below the minimum."""
    from policies.evaluate import EvaluationConfig

    with pytest.raises(ValueError, match="add --loads or --protocol") as err:
        EvaluationConfig(policy="least-work", max_windows=1, protocol=False)
    assert ">= 1" not in str(err.value)
    with pytest.raises(ValueError, match="max_windows must be >= 1, got 0"):
        EvaluationConfig(policy="least-work", max_windows=0, protocol=True)


@pytest.mark.parametrize("fields, message", [
    # protocol-only flags without --loads/--protocol (they were ignored)
    ({"warmup_s": 5.0}, r"warmup_s \(--warmup-s 5\.0\) applies only to the protocol evaluation"),
    # per-seed flags with the protocol (its windows are fixed: they were ignored)
    ({"loads": (0.7,), "seeds": (4,)}, r"seeds \(--seeds 4\) applies only to the per-seed evaluation"),
    ({"protocol": True, "eval_every": 3}, r"eval_every \(--eval-every 3\) applies only to the per-seed evaluation"),
    # --target-rps was silently replaced by the loads' rates
    ({"loads": (0.7,), "target_rps": 5.0}, r"give loads \(--loads, fractions of capacity\) or target_rps \(--target-rps 5\)"),
])
def test_flags_the_chosen_mode_would_ignore_are_errors(fields, message):
    from policies.evaluate import EvaluationConfig

    with pytest.raises(ValueError, match=message):
        EvaluationConfig(policy="least-work", **fields)
    EvaluationConfig(policy="least-work", protocol=True, tuned="t.json", warmup_s=5.0)  # where they apply
    EvaluationConfig(policy="least-work", seeds=(4,), eval_every=3)


def test_tuned_file_of_a_per_seed_routing_evaluation_is_an_error(tmp_path):
    # --tuned is read by the protocol and by reconfiguration evaluations; routing episodes ignored it unread
    from envs.sim import SimConfig
    from policies.evaluate import EvaluationConfig, run_evaluation

    cfg = EvaluationConfig(policy="least-work", against="round-robin", workload="tool-agent", target_rps=10.0,
                           windows="0", seeds=(1,), tuned=str(tmp_path / "t.json"))
    with pytest.raises(ValueError, match=r"tuned \(--tuned .*t\.json\) applies only to the protocol evaluation \(add "
                                         r"--loads or --protocol\) or to a reconfiguration evaluation, or drop --tuned"):
        run_evaluation(cfg, SimConfig())


def _routing_checkpoint(tmp_path, source: dict):
    """A checkpoint folder whose ``train_config.json`` has this episode source (``routing_source``
    reads only the metadata; the model is never loaded)."""
    import json

    (tmp_path / "model.zip").write_bytes(b"")
    (tmp_path / "train_config.json").write_text(json.dumps({"kind": "routing", "train_config": {"source": source}}))
    return str(tmp_path)


def test_routing_source_is_the_checkpoints_whole_training_source(tmp_path):
    # the generator parameters, rate scale and arrival window of the training source were dropped:
    # the "held-out" windows came from the generator's default workload (51,677 requests instead
    # of the 3,699 of a 40 s tool-agent training run)
    from policies.evaluate import EvaluationConfig, routing_source

    ckpt = _routing_checkpoint(tmp_path, {"trace": None, "workload": "tool-agent", "workload_seed": 0, "target_rps": None,
                                          "rate_scale": 2.0, "arrival_window_s": [0.0, 30.0], "skip_invalid": False,
                                          "params": [["duration_s", 40]], "window_s": 10.0, "eval_every": 4})
    src = routing_source(EvaluationConfig(policy=ckpt))
    w = src.workload
    assert (w.name, w.params, w.rate_scale, w.target_rps, w.arrival_window_s, src.episode_window_s) == \
        ("tool-agent", (("duration_s", 40),), 2.0, None, (0.0, 30.0), 10.0)
    # --target-rps replaces the checkpoint's rate (either form); --workload replaces the whole source
    src = routing_source(EvaluationConfig(policy=ckpt, target_rps=5.0))
    assert (src.workload.target_rps, src.workload.rate_scale, src.workload.params) == (5.0, None, (("duration_s", 40),))
    src = routing_source(EvaluationConfig(policy=ckpt, workload="leval-like"))
    w = src.workload
    assert (w.name, w.params, w.rate_scale, w.arrival_window_s) == ("leval-like", (), None, None)


def test_routing_source_reads_the_episode_window_of_both_checkpoint_shapes(tmp_path):
    """A checkpoint written before the rename keeps its episode window under ``source.window_s``;
    one written after under ``source.episode_window_s``: both are read, neither falls back to 60 s."""
    from policies.evaluate import EvaluationConfig, routing_source

    source = {"trace": None, "workload": "tool-agent", "workload_seed": 0, "target_rps": None, "rate_scale": None,
              "arrival_window_s": None, "skip_invalid": False, "params": [], "eval_every": 4}
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    old = _routing_checkpoint(tmp_path / "old", {**source, "window_s": 15.0})
    new = _routing_checkpoint(tmp_path / "new", {**source, "episode_window_s": 25.0})
    assert routing_source(EvaluationConfig(policy=old)).episode_window_s == 15.0
    assert routing_source(EvaluationConfig(policy=new)).episode_window_s == 25.0
    assert routing_source(EvaluationConfig(policy=new, episode_window_s=5.0)).episode_window_s == 5.0


def _reconfig_checkpoint(tmp_path, **train_config):
    import json

    (tmp_path / "model.zip").write_bytes(b"")
    tc = {"trace": None, "workload": "phases", "workload_seed": 0, "target_rps": None, "rate_scale": None,
          "arrival_window_s": None, "params": [], "workload_seeds": [0], **train_config}
    (tmp_path / "train_config.json").write_text(json.dumps({"kind": "reconfig", "train_config": tc}))
    return str(tmp_path)


def test_reconfig_episodes_are_the_checkpoints_training_workload(tmp_path, monkeypatch):
    # only the workload name was read: a checkpoint trained with --workload-param num_phases=2
    # (or --rate-scale, an arrival window) was evaluated on the generator's default workload
    from envs import workloads
    from envs.sim import SimConfig
    from policies.evaluate import EvaluationConfig, reconfig_workload_fields, run_evaluation

    ckpt = _reconfig_checkpoint(tmp_path, rate_scale=0.5, arrival_window_s=[0.0, 50.0],
                                params=[["num_phases", 2], ["phase_duration_s", 30]])
    cfg = EvaluationConfig(policy=ckpt, kind="reconfig", seeds=(1000,))
    assert reconfig_workload_fields(cfg) == {"target_rps": None, "rate_scale": 0.5, "arrival_window_s": (0.0, 50.0),
                                             "params": (("num_phases", 2), ("phase_duration_s", 30))}
    # --target-rps replaces the checkpoint's rate; --workload replaces its whole source
    assert reconfig_workload_fields(EvaluationConfig(policy=ckpt, kind="reconfig", target_rps=4.0)) == {
        "target_rps": 4.0, "arrival_window_s": (0.0, 50.0), "params": (("num_phases", 2), ("phase_duration_s", 30))}
    assert reconfig_workload_fields(EvaluationConfig(policy=ckpt, kind="reconfig", workload="phases")) == {"target_rps": None}

    built = []

    def build(**fields):
        built.append(fields)
        raise RuntimeError("built")  # stop before the model is needed

    monkeypatch.setattr(workloads, "build_workload", build)
    monkeypatch.setattr("policies.reconfig.evaluate.LearnedReconfig", lambda path: type("M", (), {
        "check_pool": lambda self, pool: None})())
    with pytest.raises(RuntimeError, match="built"):
        run_evaluation(cfg, SimConfig())
    assert built == [{"name": "phases", "seed": 1000, "target_rps": None, "rate_scale": 0.5, "arrival_window_s": (0.0, 50.0),
                      "params": (("num_phases", 2), ("phase_duration_s", 30))}]


def test_reconfig_checkpoint_trained_on_a_trace_needs_a_workload(tmp_path):
    # it was evaluated on the phases workload without a word
    from policies.evaluate import EvaluationConfig, reconfig_workload

    ckpt = _reconfig_checkpoint(tmp_path, trace="/data/conversation_trace.jsonl", workload=None)
    with pytest.raises(ValueError, match=r"was trained on the trace /data/conversation_trace.jsonl; --kind reconfig "
                                         r"evaluates named workloads only .*give --workload NAME"):
        reconfig_workload(EvaluationConfig(policy=ckpt, kind="reconfig"))
    assert reconfig_workload(EvaluationConfig(policy=ckpt, kind="reconfig", workload="phases")) == "phases"


def test_reconfig_default_workload_is_below_saturation_and_old_checkpoints_keep_phases(tmp_path):
    # the default was phases, whose 90 / 18 req/s is past the default pool's capacity (every policy 100+ s)
    from policies.evaluate import EvaluationConfig, reconfig_workload
    from policies.reconfig.defaults import DEFAULT_RECONFIG_WORKLOAD
    from policies.reconfig.train import ReconfigTrainConfig

    assert DEFAULT_RECONFIG_WORKLOAD == "matched-phases" == ReconfigTrainConfig().workload.name
    assert reconfig_workload(EvaluationConfig(policy="none", kind="reconfig")) == "matched-phases"
    # a checkpoint whose train_config names no workload was trained on the then-default phases
    ckpt = _reconfig_checkpoint(tmp_path, workload=None)
    assert reconfig_workload(EvaluationConfig(policy=ckpt, kind="reconfig")) == "phases"
