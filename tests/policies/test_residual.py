"""Residual policy over the Vertumnus cost, slot padding, pool-size transfer and the numpy forward."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th

from envs.routing_env import PrefillRoutingEnv
from envs.sim import SimConfig
from envs.sim.pool import PoolConfig
from tests.factories import SMALL_POOL, random_workload, toy_calibration


def _windows(n=80, k=2):
    return [random_workload(n, rate_rps=6.0, seed=s) for s in range(k)]


def _model(env, **fe):
    from sb3_contrib import MaskablePPO

    from policies.common.extractor import WorkerSetPolicy

    return MaskablePPO(WorkerSetPolicy, env, n_steps=64, batch_size=32, seed=0, verbose=0,
                       policy_kwargs={"features_extractor_kwargs": {"hidden_dim": 16, **fe}})


def _agreement_with_vertumnus(env, actor_fn, beta=3.0, lambda_=1.0, num_episodes=2):
    from baselines.vertumnus import VertumnusParams, VertumnusRouter
    from policies.common.heuristic import HeuristicPolicy

    heur = HeuristicPolicy(VertumnusRouter(VertumnusParams(beta=beta, lambda_=lambda_)), env)
    same = total = 0
    for ep in range(num_episodes):
        obs, _ = env.reset(options={"window_index": ep % len(env.windows), "sim_seed": ep})
        while True:
            a_h, _ = heur.predict(obs)
            same += int(actor_fn(obs, env.action_masks()) == int(a_h))
            total += 1
            obs, _, term, trunc, _ = env.step(int(a_h))
            if term or trunc:
                break
    return same / total, total


@pytest.mark.parametrize("beta,lambda_", [(3.0, 1.0), (1.5, 0.5)])
def test_untrained_residual_policy_is_vertumnus(beta, lambda_):
    """logits = -J/tau + f with f's last layer zero: the most likely action is Vertumnus's choice
    (the same (beta, lambda)), through torch and through the numpy forward."""
    from policies.common.numpy_policy import NumpyWorkerSetActor

    env = PrefillRoutingEnv(_windows(), SimConfig(pool=SMALL_POOL), toy_calibration())
    model = _model(env, residual_tau_s=0.1, residual_beta=beta, residual_lambda=lambda_)
    assert th.count_nonzero(model.policy.features_extractor.psi[-1].weight) == 0
    actor = NumpyWorkerSetActor(model.policy.features_extractor)

    def torch_act(obs, mask):
        return int(model.predict(obs, deterministic=True, action_masks=mask)[0])

    agree_np, n = _agreement_with_vertumnus(env, actor.act, beta, lambda_)
    agree_th, _ = _agreement_with_vertumnus(env, torch_act, beta, lambda_)
    assert n > 100
    assert agree_np == 1.0 and agree_th == 1.0


def test_plain_policy_is_not_vertumnus():
    """Control for the test above: without the prior the untrained policy disagrees often."""
    from policies.common.numpy_policy import NumpyWorkerSetActor

    env = PrefillRoutingEnv(_windows(), SimConfig(pool=SMALL_POOL), toy_calibration())
    actor = NumpyWorkerSetActor(_model(env).policy.features_extractor)
    agree, _ = _agreement_with_vertumnus(env, actor.act)
    assert agree < 0.9


@pytest.mark.parametrize("residual", [None, 0.2])
def test_numpy_forward_matches_torch(residual):
    """Same logits (masked slots aside) and the same actions as the torch extractor, with
    non-zero weights everywhere (the residual layer perturbed as after training)."""
    from policies.common.numpy_policy import NumpyWorkerSetActor

    env = PrefillRoutingEnv(_windows(), SimConfig(pool=SMALL_POOL), toy_calibration(), num_slots=12)
    model = _model(env, **({} if residual is None else {"residual_tau_s": residual}))
    ext = model.policy.features_extractor
    gen = th.Generator().manual_seed(0)  # the test's own stream: not the global RNG that earlier tests moved
    with th.no_grad():
        for p in ext.parameters():
            p.add_(0.3 * th.randn(p.shape, generator=gen, dtype=p.dtype))
    actor = NumpyWorkerSetActor(ext)
    obs, _ = env.reset(seed=0)
    n_checked = 0
    for _ in range(60):
        mask = env.action_masks()
        with th.no_grad():
            t_logits = ext({k: th.as_tensor(v).unsqueeze(0) for k, v in obs.items()})[0, : env.max_num_workers].numpy()
        np_logits = actor.logits(obs)
        np.testing.assert_allclose(np_logits[mask], t_logits[mask], rtol=1e-4, atol=1e-4)
        a_np, a_th = actor.act(obs, mask), int(model.predict(obs, deterministic=True, action_masks=mask)[0])
        # the same action, or a tie within float32 rounding (two workers' logits within 1e-5)
        assert a_np == a_th or abs(float(t_logits[a_np]) - float(t_logits[a_th])) < 1e-5, (a_np, a_th)
        n_checked += 1
        obs, _, term, trunc, _ = env.step(actor.act(obs, mask))
        if term or trunc:
            obs, _ = env.reset()
    assert n_checked == 60


def test_slot_padding_masks_empty_slots():
    env = PrefillRoutingEnv(_windows(), SimConfig(pool=SMALL_POOL), toy_calibration(), num_slots=16)
    obs, _ = env.reset(seed=0)
    n_pool = SMALL_POOL.max_num_workers
    assert obs["workers"].shape == (16, 12) and obs["workers_extra"].shape == (16, 1)
    assert env.action_space.n == 16 and env.observation_space.contains(obs)
    assert not env.action_masks()[n_pool:].any() and not obs["workers"][n_pool:].any()
    _, _, _, _, info = env.step(15)  # a padded slot is an invalid action: remapped, flagged
    assert info["invalid_action"]
    with pytest.raises(ValueError, match="num_slots"):
        PrefillRoutingEnv(_windows(), SimConfig(pool=SMALL_POOL), toy_calibration(), num_slots=n_pool - 1)


def test_context_features():
    """Time to the window end falls as the simulation advances; the recent arrival rate is
    bounded by the arrivals seen so far (no look-ahead)."""
    wl = _windows(k=1)[0]
    env = PrefillRoutingEnv([wl], SimConfig(pool=SMALL_POOL), toy_calibration())
    obs, info = env.reset(seed=0)
    last = wl.requests[-1].arrival_time_s
    prev = obs["context"][0]
    assert prev == pytest.approx(last - info["sim_time_s"], rel=1e-5)
    for _ in range(30):
        obs, _, term, trunc, info = env.step(int(env.action_masks().argmax()))
        if term or trunc:
            break
        now = info["sim_time_s"]
        assert obs["context"][0] <= prev + 1e-6
        prev = obs["context"][0]
        span = min(now, 10.0)
        num_seen = sum(1 for r in wl.requests if now - span < r.arrival_time_s <= now)
        assert obs["context"][1] == pytest.approx(num_seen / span, rel=1e-5)


@pytest.mark.parametrize("num_gpus", [32, 64])
def test_40_gpu_checkpoint_runs_on_other_pool_sizes(tmp_path, num_gpus):
    """A checkpoint built for the 40-GPU default pool (40 slots) decides on 32- and 64-GPU pools
    through LearnedPolicy (the error was "Unexpected observation shape (32, 12)")."""
    from envs import workloads
    from policies.common.checkpoint import LearnedPolicy
    from policies.common.heuristic import run_episode

    trace = workloads.default_traces_dir() / "conversation_trace.jsonl"
    wins = workloads.windows(workloads.scale_to_rate(workloads.load_trace(trace), 12.0), 5.0)[:2]
    env40 = PrefillRoutingEnv(wins, SimConfig())
    assert env40.max_num_workers == 40
    model = _model(env40, residual_tau_s=0.1)
    model.save(tmp_path / "model.zip")
    pol = LearnedPolicy(tmp_path)
    comp = "cp4x4,cp2x8" if num_gpus == 32 else "cp4x8,cp2x16"
    env = PrefillRoutingEnv(wins, SimConfig(pool=PoolConfig(num_gpus=num_gpus, composition=comp)))
    assert env.max_num_workers == num_gpus
    res, _, n = run_episode(env, pol, options={"window_index": 0, "sim_seed": 0})
    assert n > 0 and env._num_invalid == 0 and not np.isnan(res.records["ttft_s"]).any()


def test_bench_env_json_rows(capsys):
    """`cpgym bench-env --format json`: one row per measurement with the documented keys; the
    learned checkpoint is measured through both the numpy and the torch forward."""
    import json

    from experiments.cli import main

    assert main(["bench", "env", "--steps", "30", "--heuristics", "vertumnus-router", "--policy", "shipped-residual",
                 "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert all(set(r) == {"policy", "decision_latency_us", "env_steps_per_s"} for r in rows)
    names = [r["policy"] for r in rows]
    assert "vertumnus-router" in names and "learned:routing_conversation_residual" in names
    assert "learned:routing_conversation_residual (torch)" in names
    assert "learned:routing_conversation_residual (observation + decision)" in names
    assert all(r["env_steps_per_s"] > 0 for r in rows)
    assert all(r["decision_latency_us"] > 0 for r in rows if not r["policy"].startswith("env"))


@pytest.mark.slow
def test_bench_env_arm_selection_checkpoint(capsys):
    """`cpgym bench env --policy shipped` (the arm-selection router): one latency row (no network,
    so no torch backend and no separate observation cost)."""
    import json

    from experiments.cli import main

    assert main(["bench", "env", "--steps", "30", "--heuristics", "vertumnus", "--policy", "shipped", "--format", "json"]) == 0
    names = [r["policy"] for r in json.loads(capsys.readouterr().out)]
    assert "learned:routing_vertumnus_arms" in names
    assert not any(n.startswith("learned:routing_vertumnus_arms (") for n in names)


def test_numpy_actor_reused_buffers_across_slot_counts():
    """The actor reuses its input buffer between calls: alternating 12- and 16-slot observations
    give exactly the logits of a fresh actor per call (no state leaks from the previous call)."""
    from policies.common.numpy_policy import NumpyWorkerSetActor

    env12 = PrefillRoutingEnv(_windows(), SimConfig(pool=SMALL_POOL), toy_calibration(), num_slots=12)
    env16 = PrefillRoutingEnv(_windows(), SimConfig(pool=SMALL_POOL), toy_calibration(), num_slots=16)
    ext = _model(env12, residual_tau_s=0.2).policy.features_extractor
    gen = th.Generator().manual_seed(1)
    with th.no_grad():
        for p in ext.parameters():
            p.add_(0.3 * th.randn(p.shape, generator=gen, dtype=p.dtype))
    shared = NumpyWorkerSetActor(ext)
    o12, _ = env12.reset(seed=0)
    o16, _ = env16.reset(seed=1)
    for _ in range(20):
        for env, obs in ((env12, o12), (env16, o16)):
            np.testing.assert_array_equal(shared.logits(obs), NumpyWorkerSetActor(ext).logits(obs))
        o12 = env12.step(shared.act(o12, env12.action_masks()))[0]
        o16 = env16.step(shared.act(o16, env16.action_masks()))[0]
