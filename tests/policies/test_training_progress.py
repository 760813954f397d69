"""``cpgym train`` shows progress with mean TTFT and SLO attainment (it used to print one line at
the start and one at the end), silenced by ``--quiet``."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest

from envs.routing_env import PrefillRoutingEnv
from envs.sim import SimConfig
from envs.workloads import WorkloadSource, default_traces_dir
from policies.common.callbacks import EPISODE_METRIC_KEYS, EpisodeMetrics

PROGRESS = re.compile(r"train: (\d+)/(\d+) step .*episodes=(\d+), mean_ttft_s=([0-9.]+), slo_attainment=([0-9.]+)")


def _source():
    from policies.routing.episodes import EpisodeSource

    return EpisodeSource(WorkloadSource(trace=str(default_traces_dir() / "conversation_trace.jsonl"), target_rps=12.0),
                         episode_window_s=10.0)


def test_episode_metrics_equal_the_simulator_summary():
    from envs.metrics import summarize

    env = EpisodeMetrics(PrefillRoutingEnv(_source().windows("train")[:1], SimConfig()))
    obs, _ = env.reset(seed=0)
    infos = []
    while True:
        obs, _, term, trunc, info = env.step(int(np.argmax(obs["workers"][:, 0] * env.unwrapped.action_masks())))
        infos.append(info)
        if term or trunc:
            break
    assert all("episode_metrics" not in i for i in infos[:-1])
    m = infos[-1]["episode_metrics"]
    s = summarize(env.unwrapped.sim.result())
    assert set(m) == set(EPISODE_METRIC_KEYS) and m == {k: s[k] for k in EPISODE_METRIC_KEYS}
    assert m["mean_ttft_s"] > 0 and 0.0 <= m["slo_attainment_token_weighted"] <= 1.0


def test_train_routing_prints_ttft_and_slo_attainment(tmp_path, capsys):
    from policies.routing.train import TrainConfig, train_routing

    cfg = TrainConfig(source=_source(), total_timesteps=512, n_envs=2, n_steps=256, batch_size=256, n_epochs=1,
                      wandb_mode="disabled", checkpoint_every_steps=1024)
    train_routing(cfg, tmp_path / "a", log=lambda s: None)
    lines = [m for m in map(PROGRESS.match, capsys.readouterr().err.splitlines()) if m]
    assert lines, "no progress line"
    steps, total, episodes, ttft, slo = lines[-1].groups()
    assert int(steps) >= 512 and int(total) == 512 and int(episodes) >= 1
    assert float(ttft) > 0 and 0.0 <= float(slo) <= 1.0


def test_progress_callback_lines_every_interval(tmp_path):
    """With interval 0 every step batch gives a line: the display never goes quiet while training runs."""
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    from policies.common.callbacks import TrainingProgress, monitored
    from policies.common.extractor import WorkerSetPolicy

    wins = _source().windows("train")[:2]
    venv = DummyVecEnv([lambda: monitored(PrefillRoutingEnv(wins, SimConfig()))])
    model = MaskablePPO(WorkerSetPolicy, venv, n_steps=128, batch_size=128, n_epochs=1, seed=0, verbose=0)
    f = io.StringIO()
    cb = TrainingProgress(256, mode="lines", interval_s=0.0, file=f)
    model.learn(256, callback=cb)
    lines = f.getvalue().splitlines()
    assert len(lines) >= 256  # one per step (+ the final line)
    assert cb.num_episodes >= 1 and PROGRESS.match(lines[-1])


@pytest.mark.parametrize("quiet", [False, True])
@pytest.mark.slow
def test_train_reconfig_progress(tmp_path, capfd, quiet):
    """Progress lines on stderr, none with ``--quiet``; wandb on (offline) is silenced too (its
    banner and sync hint went to stderr)."""
    from policies.reconfig.train import ReconfigTrainConfig, train_reconfig

    cfg = ReconfigTrainConfig(workload=WorkloadSource(name="phases"), workload_seeds=(0,), episode_window_s=60.0,
                              total_timesteps=8,
                              n_steps=8, batch_size=8, n_epochs=1, wandb_mode="offline")
    train_reconfig(cfg, tmp_path, log=lambda s: None, progress="off" if quiet else "lines")
    err = capfd.readouterr().err
    if quiet:
        assert err == ""
    else:
        m = [m for m in map(PROGRESS.match, err.splitlines()) if m][-1]
        assert int(m.group(3)) >= 1 and 0.0 <= float(m.group(5)) <= 1.0
        assert "wandb:" in err  # shown unless quiet, so the quiet check above can fail
