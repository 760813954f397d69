"""The shipped residual routing checkpoint is reproducible from the command in its README."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from policies.common.checkpoint import SHIPPED_RESIDUAL, current_meta

# as every reader sees it: the keys of earlier releases renamed (the stored file keeps source.window_s)
META = current_meta(json.loads((SHIPPED_RESIDUAL / "train_config.json").read_text()))


def _config_from_argv(argv: list[str], tmp_path: Path):
    from envs.workloads import default_traces_dir
    from experiments.cli import build_parser
    from experiments.commands.train import configs_from_args
    from experiments.common import sim_config_from_args

    argv = list(argv)
    argv[argv.index("--out") + 1] = str(tmp_path / "run")
    if "--trace" in argv:  # the trace's folder on this machine
        argv[argv.index("--trace") + 1] = str(default_traces_dir() / Path(argv[argv.index("--trace") + 1]).name)
    args = build_parser().parse_args(argv)
    return configs_from_args(args), sim_config_from_args(args)


def _comparable(train_config: dict, keys: dict) -> dict:
    """JSON form with the trace's file name only, restricted to the recorded keys (fields added
    to the configs later keep their defaults)."""
    d = json.loads(json.dumps(train_config))
    d["source"]["workload"]["trace"] = Path(d["source"]["workload"]["trace"]).name
    d["source"] = {k: d["source"][k] for k in keys["source"]}
    return {k: d[k] for k in keys}


def test_readme_command_gives_the_shipped_train_config(tmp_path):
    from policies.routing.train import _jsonable

    assert f"cpgym {' '.join(META['argv'][:2])}" in (SHIPPED_RESIDUAL / "README.md").read_text()
    cfg, sc = _config_from_argv(META["argv"], tmp_path)
    rec = META["train_config"]
    assert _comparable(_jsonable(asdict(cfg)), rec) == _comparable(rec, rec)
    assert cfg.residual_tau_s is not None and cfg.validate_every_steps is not None


@pytest.mark.slow
def test_tiny_retrain_is_deterministic(tmp_path):
    """Two tiny retrains of the shipped configuration (fewer steps, one validation window) give
    identical weights and validation logs."""
    import torch as th
    from sb3_contrib import MaskablePPO

    from policies.routing.train import train_routing

    cfg, sc = _config_from_argv(META["argv"], tmp_path)
    tiny = replace(cfg, total_timesteps=256, n_steps=128, batch_size=128, validate_every_steps=256, num_validation_windows=1)
    for k in ("a", "b"):
        train_routing(tiny, tmp_path / k, sim_config=sc, log=lambda s: None)
    wa = MaskablePPO.load(tmp_path / "a" / "last_model.zip").policy.state_dict()
    wb = MaskablePPO.load(tmp_path / "b" / "last_model.zip").policy.state_dict()
    assert all(th.equal(wa[n], wb[n]) for n in wa)
    assert (tmp_path / "a" / "validation.csv").read_text() == (tmp_path / "b" / "validation.csv").read_text()


@pytest.mark.slow
def test_warm_start_validation_matches_the_shipped_log(tmp_path):
    """The first validation of a retrain (the warm start: the tuned Vertumnus prior) gives the
    shipped run's first validation row exactly."""
    import pandas as pd

    from policies.routing.train import train_routing

    cfg, sc = _config_from_argv(META["argv"], tmp_path)
    tiny = replace(cfg, total_timesteps=16, n_steps=16, batch_size=16, validate_every_steps=10**6)
    train_routing(tiny, tmp_path / "run", sim_config=sc, log=lambda s: None)
    first = pd.read_csv(tmp_path / "run" / "validation.csv").iloc[0].tolist()
    assert first == pytest.approx(META["validation"]["history"][0], rel=1e-12)
