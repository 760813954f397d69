from __future__ import annotations

import json

import numpy as np
import pytest
import torch as th

from envs.routing_env import PrefillRoutingEnv
from envs.sim import SimConfig
from tests.factories import SMALL_POOL, random_workload, toy_calibration


def _env(n=60, seed=0):
    wins = [random_workload(n, rate_rps=4.0, seed=s) for s in range(seed, seed + 3)]
    return PrefillRoutingEnv(wins, SimConfig(pool=SMALL_POOL), toy_calibration())


def test_extractor_is_permutation_equivariant():
    from policies.common.extractor import WorkerSetExtractor

    env = _env()
    obs, _ = env.reset(seed=0)
    th.manual_seed(0)
    ext = WorkerSetExtractor(env.observation_space, hidden_dim=16)
    batch = {k: th.as_tensor(v).unsqueeze(0) for k, v in obs.items()}
    out = ext(batch)
    n = env.max_num_workers
    perm = th.randperm(n)
    pb = dict(batch)
    pb["workers"] = batch["workers"][:, perm]
    pout = ext(pb)
    th.testing.assert_close(pout[:, :n], out[:, perm], rtol=1e-5, atol=1e-5)  # logits follow the workers
    th.testing.assert_close(pout[:, n:], out[:, n:], rtol=1e-5, atol=1e-5)    # value features invariant
    assert out.shape == (1, n + 16)


def test_maskable_ppo_smoke_trains_saves_loads_and_evaluates(tmp_path):
    """A few thousand steps of the real training entry point (wandb disabled), then the
    checkpoint loads and acts through the environment without invalid actions."""
    from envs.workloads import WorkloadSource, default_traces_dir
    from policies.common.checkpoint import LearnedPolicy
    from policies.common.heuristic import run_episode
    from policies.routing.episodes import EpisodeSource
    from policies.routing.train import TrainConfig, train_routing

    src = EpisodeSource(WorkloadSource(trace=str(default_traces_dir() / "conversation_trace.jsonl"), target_rps=12.0),
                        episode_window_s=10.0)
    cfg = TrainConfig(source=src, total_timesteps=2048, n_envs=2, n_steps=256, batch_size=128, n_epochs=2,
                      wandb_mode="disabled", checkpoint_every_steps=1024)
    path = train_routing(cfg, tmp_path, log=lambda s: None)
    assert path.is_file()
    meta = json.loads((tmp_path / "train_config.json").read_text())
    assert meta["timesteps"] >= 2048 and meta["train_config"]["source"]["workload"]["target_rps"] == 12.0
    assert (tmp_path / "progress.csv").read_text().count("\n") >= 2
    assert list((tmp_path / "checkpoints").glob("*.zip"))
    pol = LearnedPolicy(tmp_path)
    env = PrefillRoutingEnv(src.windows("eval", seed=1)[:1], SimConfig())
    res, ret, n = run_episode(env, pol, options={"window_index": 0, "sim_seed": 1})
    assert env.unwrapped._num_invalid == 0
    assert n > 0 and not np.isnan(res.records["ttft_s"]).any()
    assert ret == pytest.approx(-0.0 - np.nansum(res.records["ttft_s"]), rel=1e-9)


def test_mean_ci95():
    from envs.metrics.stats import mean_ci95

    m, ci = mean_ci95([1.0, 2.0, 3.0])
    assert m == 2.0 and ci == pytest.approx(4.303 * 1.0 / np.sqrt(3))
    assert np.isnan(mean_ci95([5.0])[1])


def test_heuristic_policy_under_dummy_vec_env():
    from stable_baselines3.common.vec_env import DummyVecEnv

    from envs.sim.router import LeastWorkRouter
    from policies.common.heuristic import HeuristicPolicy

    venv = DummyVecEnv([lambda: _env(), lambda: _env(seed=5)])
    pol = HeuristicPolicy(LeastWorkRouter(), venv)
    obs = venv.reset()
    for _ in range(50):
        masks = np.stack(venv.env_method("action_masks"))
        a, _ = pol.predict(obs, action_masks=masks)
        assert masks[np.arange(2), a].all()
        obs, *_ = venv.step(a)


@pytest.mark.parametrize("backend, deterministic", [("numpy", True), ("torch", True), ("numpy", False)])
def test_learned_policy_names_a_wrong_shape_action_mask(backend, deterministic):
    # a 5-entry mask on an 8-slot observation was a numpy IndexError (boolean index did not match)
    # or torch "RuntimeError: shape '[1, 8]' is invalid for input of size 5"
    from policies.common.checkpoint import LearnedPolicy

    env = _env()
    obs, _ = env.reset(seed=0)
    mask = env.action_masks()
    pol = LearnedPolicy("shipped-residual", backend=backend)
    with pytest.raises(ValueError, match=r"action_masks of shape \(5,\) does not fit the observation: expected \(8,\)"):
        pol.predict(obs, action_masks=mask[:5], deterministic=deterministic)
    batch = {k: v[None] for k, v in obs.items()}
    with pytest.raises(ValueError, match=r"action_masks of shape \(1, 5\) does not fit the observation: expected \(1, 8\)"):
        pol.predict(batch, action_masks=mask[None, :5], deterministic=deterministic)
    if backend == "numpy" and deterministic:  # a mask of the right size in another shape is reshaped, as SB3 does
        a, _ = pol.predict(obs, action_masks=mask[None], deterministic=True)
        assert a == pol.predict(obs, action_masks=mask, deterministic=True)[0] and mask[a]


@pytest.mark.parametrize("change, match", [
    (lambda o: [1, 2, 3], r"observation must be a dict with keys \['context', 'pool', 'request', 'workers', "
                          r"'workers_extra'\] \(a PrefillRoutingEnv observation\), got list"),
    (lambda o: {k: v for k, v in o.items() if k != "context"}, r"observation lacks key\(s\) \['context'\]"),
    (lambda o: {**o, "workers": o["workers"][:, :5]},
     r"observation\['workers'\] of shape \(8, 5\) does not fit the model: expected \(num_slots, 12\) or "
     r"\(batch, num_slots, 12\)"),
    (lambda o: {**o, "workers": o["workers"].T}, r"observation\['workers'\] of shape \(12, 8\) does not fit"),
    (lambda o: {**o, "request": o["request"][:3]},
     r"observation\['request'\] of shape \(3,\) does not fit the model: expected \(6,\)"),
    (lambda o: {**o, "workers_extra": o["workers_extra"][:4]},
     r"observation\['workers_extra'\] of shape \(4, 1\) does not fit the model: expected \(8, 1\)"),
])
@pytest.mark.parametrize("deterministic", [True, False])
def test_learned_policy_names_a_malformed_observation(change, match, deterministic):
    # a missing key was a KeyError, a wrong shape a numpy broadcasting error inside the forward pass
    # ("operands could not be broadcast together with shapes (40,5) (12,)")
    from policies.common.checkpoint import LearnedPolicy

    env = _env()
    obs, _ = env.reset(seed=0)
    pol = LearnedPolicy("shipped-residual")
    with pytest.raises(ValueError, match=match):
        pol.predict(change(obs), action_masks=env.action_masks(), deterministic=deterministic)


@pytest.mark.parametrize("backend, deterministic, batch", [("numpy", False, False), ("numpy", True, True),
                                                            ("torch", True, False)])
def test_learned_policy_names_the_slot_count_the_sb3_model_needs(backend, deterministic, batch):
    # an 8-slot observation for the 40-slot model's SB3 path failed inside SB3 ("cannot reshape array
    # of size 96 into shape (40,12)", "Unexpected observation shape (8, 12) for Box environment")
    from policies.common.checkpoint import LearnedPolicy

    env = _env()
    obs, _ = env.reset(seed=0)
    mask = env.action_masks()
    if batch:
        obs, mask = {k: v[None] for k, v in obs.items()}, mask[None]
    pol = LearnedPolicy("shipped-residual", backend=backend)
    with pytest.raises(ValueError, match=r"observation\['workers'\] has 8 worker slots and the model 40: a batch, "
                                         r"deterministic=False or backend='torch' run the SB3 model"):
        pol.predict(obs, action_masks=mask, deterministic=deterministic)
    a, _ = LearnedPolicy("shipped-residual").predict(env.reset(seed=0)[0], action_masks=env.action_masks())
    assert env.action_masks()[a]  # the numpy path decides on any number of slots
