"""Evaluation protocol (disjoint windows, warm start, capacity, paired CIs) and `cpgym tune vertumnus`."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from envs.sim import SimConfig
from envs.workloads import WorkloadSource
from tests.factories import SMALL_POOL, random_workload, tiny_trace, toy_calibration
from tests.interrupt import patch_everywhere


def test_protocol_windows_are_disjoint_and_warm_started():
    from policies.routing.protocol import part_of, protocol_windows

    wl = random_workload(400, rate_rps=4.0, seed=0)
    parts = {p: protocol_windows(wl, 5.0, p, warmup_s=3.0) for p in ("train", "validation", "test")}
    idx = {p: {w.metadata["window_index"] for w in ws} for p, ws in parts.items()}
    assert not (idx["train"] & idx["validation"]) and not (idx["train"] & idx["test"])
    assert not (idx["validation"] & idx["test"])
    assert all(j % 4 == 3 for j in idx["test"]) and all(j % 4 == 1 for j in idx["validation"])
    assert all(part_of(j) == "train" and j % 4 in (0, 2) for j in idx["train"])
    n_all = len(protocol_windows(wl, 5.0, "all"))
    assert sum(len(v) for v in idx.values()) == n_all
    for w in parts["test"]:  # the warm-up is the preceding trace; the measured part is the window
        j = w.metadata["window_index"]
        warm = w.metadata["measure_from_s"]
        assert warm == pytest.approx(min(3.0, 5.0 * j))
        measured = [r for r in w.requests if r.arrival_time_s >= warm]
        expected = [r for r in wl.requests if 5.0 * j <= r.arrival_time_s < 5.0 * (j + 1)]
        assert [r.num_prompt_tokens for r in measured] == [r.num_prompt_tokens for r in expected]
    with pytest.raises(ValueError, match="part"):
        protocol_windows(wl, 5.0, "eval")


def test_measured_summary_counts_only_the_window():
    from baselines.runner import run_policy
    from policies.routing.protocol import measured_summary, protocol_windows

    cfg = SimConfig(pool=SMALL_POOL, calibration_path=None)
    wl = protocol_windows(random_workload(300, rate_rps=4.0, seed=1), 10.0, "test", warmup_s=5.0)[0]
    res = run_policy("least-work", wl, cfg, toy_calibration())
    s = measured_summary(res, wl.metadata["measure_from_s"])
    keep = res.records["arrival_s"] >= wl.metadata["measure_from_s"]
    assert 0 < s["num_requests"] == keep.sum() < wl.num_requests
    assert s["mean_ttft_s"] == pytest.approx(np.nanmean(res.records["ttft_s"][keep]))


def test_tune_vertumnus_picks_grid_argmin_on_training_windows():
    from policies.routing.protocol import protocol_windows, run_heuristic_window, tune_vertumnus, tuned_spec

    cfg = SimConfig(pool=SMALL_POOL)
    wl = random_workload(300, rate_rps=6.0, seed=2)
    train = protocol_windows(wl, 10.0, "train")
    t = tune_vertumnus(train, cfg, betas=(1.0, 4.0), lambdas=(0.0, 2.0))
    assert len(t["grid"]) == 4 and t["num_windows"] == len(train)
    best = min(t["grid"], key=lambda g: g["mean_ttft_s"])
    assert (t["beta"], t["lambda"]) == (best["beta"], best["lambda"])
    # the reported objective is reproducible from the tuned spec
    again = np.mean([run_heuristic_window(tuned_spec(t["beta"], t["lambda"]), w, cfg)["mean_ttft_s"] for w in train])
    assert again == pytest.approx(t["mean_ttft_s"])
    assert len({g["mean_ttft_s"] for g in t["grid"]}) > 1  # the grid points differ on this scenario


def test_capacity_bisection_brackets_the_overload_point(tmp_path):
    from envs import workloads
    from policies.routing.protocol import capacity_rps

    cfg = SimConfig(pool=SMALL_POOL)
    base = workloads.load_trace(tiny_trace(tmp_path / "t.jsonl", num_requests=3000))
    cap = capacity_rps(lambda r: workloads.scale_to_rate(base, r), cfg, "least-work", low_rps=0.25, high_rps=2048.0,
                       num_iterations=5)
    ok = [r for r, _, s in cap.probes if s]
    bad = [r for r, _, s in cap.probes if not s]
    assert bad and max(ok) == cap.capacity_rps < min(bad)


def test_cell_table_paired_delta_and_ci():
    from policies.routing.protocol import cell_table

    rows = []
    for w, (a, b) in enumerate([(1.0, 2.0), (2.0, 2.0), (1.5, 2.0)]):
        rows += [{"policy": "x", "workload": "t", "load_fraction": 0.9, "rate_rps": 9.0, "window": w, "mean_ttft_s": a,
                  "p90_ttft_s": a, "slo_attainment_token_weighted": 1.0},
                 {"policy": "ref", "workload": "t", "load_fraction": 0.9, "rate_rps": 9.0, "window": w, "mean_ttft_s": b,
                  "p90_ttft_s": b, "slo_attainment_token_weighted": 1.0}]
    tab = {r["policy"]: r for r in cell_table(rows, "ref")}
    x = tab["x"]
    assert x["num_windows"] == 3 and x["mean_ttft_s"] == pytest.approx(1.5)
    assert x["delta_mean_ttft_pct_vs_ref"] == pytest.approx(-25.0)
    half = 4.303 * np.std([-50.0, 0.0, -25.0], ddof=1) / math.sqrt(3)
    assert (x["ci_low"], x["ci_high"]) == pytest.approx((-25.0 - half, -25.0 + half))
    assert tab["ref"]["delta_mean_ttft_pct_vs_ref"] == 0.0 and set(x) >= {
        "policy", "workload", "load_fraction", "num_windows", "mean_ttft_s", "p90_ttft_s", "slo_attainment_token_weighted",
        "delta_mean_ttft_pct_vs_ref", "ci_low", "ci_high", "reference"}


def test_tune_and_evaluate_commands_on_atiny_trace(tmp_path, capsys):
    """`cpgym tune vertumnus` writes the tuned cell; `cpgym evaluate --tuned` uses it for
    vertumnus-tuned on the test windows and prints the protocol's JSON rows; an untrained
    residual checkpoint evaluates exactly like the Vertumnus router (same windows, same TTFTs)."""
    from experiments.cli import main

    trace = tiny_trace(tmp_path / "tiny.jsonl")
    pool = ["--pool-gpus", "8", "--pool-composition", "cp2x2,cp1x4", "--supported-degrees", "1,2"]
    out = tmp_path / "tuned.json"
    assert main(["tune", "vertumnus", "--trace", str(trace), "--target-rps", "6", "--episode-window-s", "4",
                 "--betas", "1,3", "--lambdas", "0,1", "--out", str(out), "--quiet", *pool]) == 0
    cells = json.loads(out.read_text())["cells"]
    (key, cell), = cells.items()
    assert key == "tiny@6rps" and len(cell["grid"]) == 4
    capsys.readouterr()
    from sb3_contrib import MaskablePPO

    from envs.routing_env import PrefillRoutingEnv
    from envs.sim.pool import PoolConfig
    from envs.workloads import load_trace, windows
    from policies.common.extractor import WorkerSetPolicy

    pool_cfg = PoolConfig(num_gpus=8, composition="cp2x2,cp1x4", supported_degrees=(1, 2))
    env = PrefillRoutingEnv(windows(load_trace(trace), 20.0), SimConfig(pool=pool_cfg))
    MaskablePPO(WorkerSetPolicy, env, n_steps=64, batch_size=32, seed=0, policy_kwargs={
        "features_extractor_kwargs": {"hidden_dim": 8, "residual_tau_s": 0.1}}).save(tmp_path / "ckpt" / "model.zip")
    assert main(["evaluate", "--policy", str(tmp_path / "ckpt"), "--against", "vertumnus-router,vertumnus-tuned,least-work",
                 "--trace", str(trace),
                 "--target-rps", "6", "--protocol", "--episode-window-s", "4", "--tuned", str(out), "--format", "json",
                 "--quiet", *pool]) == 0
    rows = json.loads(capsys.readouterr().out)
    by = {r["policy"]: r for r in rows}
    assert set(by) == {str(tmp_path / "ckpt"), "vertumnus-router", "vertumnus-tuned", "least-work"}
    assert all(r["reference"] == "vertumnus-tuned" and r["num_windows"] >= 2 for r in rows)
    assert by[str(tmp_path / "ckpt")]["mean_ttft_s"] == by["vertumnus-router"]["mean_ttft_s"]
    assert by["least-work"]["mean_ttft_s"] != by["vertumnus-router"]["mean_ttft_s"]


def test_tune_stopped_midway_keeps_its_finished_cells(tmp_path, capsys, monkeypatch):
    """The JSON was written after the last cell only: a tuning run that failed or was interrupted
    at its last load lost every cell already tuned."""
    import types

    import policies.routing.protocol as protocol
    from experiments.cli import main
    from tests.interrupt import fail_on_call

    trace = tiny_trace(tmp_path / "tiny.jsonl")
    patch_everywhere(monkeypatch, protocol, "capacity_rps", lambda *a, **k: types.SimpleNamespace(capacity_rps=10.0,
                                                                                      policy="vertumnus-router", probes=[]))
    patch_everywhere(monkeypatch, protocol, "tune_vertumnus", fail_on_call(protocol.tune_vertumnus, 2))
    out = tmp_path / "tuned" / "tuned.json"
    with pytest.raises(RuntimeError, match="killed"):
        main(["--traceback", "tune", "vertumnus", "--trace", str(trace), "--loads", "0.4,0.6", "--episode-window-s", "4",
              "--betas", "1,3", "--lambdas", "0", "--max-windows", "1", "--out", str(out), "--quiet", "--pool-gpus", "8",
              "--pool-composition", "cp2x2,cp1x4", "--supported-degrees", "1,2"])
    doc = json.loads(out.read_text())
    assert doc["heuristic"] == "vertumnus" and list(doc["cells"]) == ["tiny@0.4"]
    assert set(protocol.load_tuned_cells(str(out))) == {"tiny@0.4"}  # the reader of a complete file reads it
    assert len(doc["cells"]["tiny@0.4"]["grid"]) == 2 and not list(out.parent.glob(".*.tmp"))


def test_training_on_protocol_windows_validates_and_keeps_the_best(tmp_path):
    """Residual training on the protocol's train windows: validation.csv has the warm start and
    periodic rows, model.zip is the best-validation model, episodes.csv has TTFT/SLO columns,
    the last update's train/* are logged."""
    import filecmp

    import pandas as pd

    from envs.sim.pool import PoolConfig
    from policies.routing.episodes import EpisodeSource
    from policies.routing.train import TrainConfig, train_routing

    trace = tiny_trace(tmp_path / "tiny.jsonl", num_requests=300)
    src = EpisodeSource(WorkloadSource(trace=str(trace), target_rps=6.0), episode_window_s=4.0)
    cfg = TrainConfig(source=src, total_timesteps=256, n_envs=1, n_steps=64, batch_size=64, n_epochs=1, wandb_mode="disabled",
                      residual_tau_s=0.1, warmup_s=2.0, validate_every_steps=128, num_validation_windows=2)
    sc = SimConfig(pool=PoolConfig(num_gpus=8, composition="cp2x2,cp1x4", supported_degrees=(1, 2)))
    train_routing(cfg, tmp_path / "run", sim_config=sc, log=lambda s: None)
    val = pd.read_csv(tmp_path / "run" / "validation.csv")
    assert val["timesteps"].iloc[0] == 0 and len(val) >= 3
    assert filecmp.cmp(tmp_path / "run" / "model.zip", tmp_path / "run" / "best_model.zip", shallow=False)
    eps = pd.read_csv(tmp_path / "run" / "episodes.csv")
    assert len(eps) and eps["mean_ttft_s"].notna().all() and eps["slo_attainment_token_weighted"].between(0, 1).all()
    prog = pd.read_csv(tmp_path / "run" / "progress.csv")
    assert prog["time/total_timesteps"].max() == 256 and prog["train/n_updates"].max() == 4
    meta = json.loads((tmp_path / "run" / "train_config.json").read_text())
    assert meta["validation"]["best_mean_ttft_s"] == val["mean_ttft_s"].min()


def test_spread_subset_keeps_evenly_spread_windows():
    from policies.routing.protocol import spread_subset

    wins = list(range(100))
    assert spread_subset(wins, None) == wins and spread_subset(wins, 200) == wins
    sub = spread_subset(wins, 5)
    assert sub == [0, 25, 50, 74, 99]  # round(linspace(0, 99, 5)): first and last kept
    assert spread_subset(wins, 1) == [0]
    with pytest.raises(ValueError, match="max_windows"):
        spread_subset(wins, 0)


def test_evaluate_max_windows_needs_the_protocol():
    from policies.evaluate import EvaluationConfig

    assert EvaluationConfig(policy="shipped", loads=(0.9,), max_windows=20).max_windows == 20
    with pytest.raises(ValueError, match="max_windows"):
        EvaluationConfig(policy="shipped", max_windows=20)
    with pytest.raises(ValueError, match="max_windows"):
        EvaluationConfig(policy="shipped", loads=(0.9,), max_windows=0)

