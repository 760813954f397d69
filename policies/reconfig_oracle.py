"""Oracle labels and behaviour cloning for the target-composition reconfiguration policy
(``cpgym train reconfig --action-mode target --warm-start oracle``).

Per-operation PPO from the no-op never found a profitable schedule on ``matched-phases`` (the
``reconfig_matched`` README): every operation drains workers, and reaching a good composition
takes many operations. With ``action_mode="target"`` one action names a composition; this module
gives the policy a starting point that already reconfigures:

1. :func:`phase_targets` — per phase of a training workload, the composition of the target menu
   whose *fixed* pool gives the phase's requests the lowest mean TTFT (one whole-workload
   simulation per composition with the Vertumnus router; an oracle: it knows the outcome, so it
   is computed on TRAINING seeds only).
2. :func:`collect_demonstrations` — rolls the environment out choosing, at each decision time,
   the oracle composition of the phase that time falls in, and records (observation, action).
3. :func:`behaviour_clone` — fits the PPO policy's action distribution to those actions (masked
   cross-entropy, Adam), after which PPO fine-tunes it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

__all__ = ["phase_targets", "phase_at", "collect_demonstrations", "behaviour_clone"]


def phase_at(workload, time_s: float) -> int:
    """Index of the phase of ``workload`` (``metadata["phase_boundaries_s"]``) that holds ``time_s``
    (the last phase after the end).

    Raises:
        ValueError: when the workload has no phase metadata (not a phased synthetic workload).
    """
    bounds = (workload.metadata or {}).get("phase_boundaries_s")
    if not bounds:
        raise ValueError(f"workload {workload.name!r} has no metadata['phase_boundaries_s'] (expected a phased "
                         "synthetic workload such as matched-phases)")
    return int(min(max(np.searchsorted(bounds, time_s, side="right") - 1, 0), len(bounds) - 2))


def phase_targets(workload, sim_config, compositions: list[str], router: str = "vertumnus-router",
                  tolerance: float = 0.0) -> list[int]:
    """Per phase, the index into ``compositions`` of the fixed composition whose run gives the
    phase's requests (``metadata["phase_of_request"]``, by arrival) the lowest mean TTFT.

    One simulation per composition (``router`` on that fixed pool, simulator seed =
    ``sim_config.seed``). Among the compositions within ``tolerance`` (a share: 0.03 = 3 %) of a
    phase's lowest mean TTFT the one closest (GPU-level distance,
    ``baselines.operation_plan.composition_distance``) to the previous phase's choice (the pool's
    initial composition for the first phase) is taken: near-ties do not cost reconfigurations.
    Remaining ties go to the earlier composition.

    Raises:
        ValueError: when the workload has no ``phase_of_request`` metadata.
    """
    from experiments.runner import run_policy

    phase = (workload.metadata or {}).get("phase_of_request")
    if phase is None:
        raise ValueError(f"workload {workload.name!r} has no metadata['phase_of_request'] (expected a phased "
                         "synthetic workload such as matched-phases)")
    phase = np.asarray(phase)
    num_phases = len(workload.metadata["phase_boundaries_s"]) - 1
    ttft = np.full((len(compositions), num_phases), np.inf)
    for k, comp in enumerate(compositions):
        cfg = replace(sim_config, pool=replace(sim_config.pool, composition=comp))
        t = run_policy(router, workload, cfg).records["ttft_s"]
        for p in range(num_phases):
            sel = t[phase == p]
            if len(sel) and not np.isnan(sel).all():
                ttft[k, p] = np.nanmean(sel)
    from baselines.composition import degree_counts
    from baselines.operation_plan import composition_distance

    counts = [degree_counts(c, sim_config.pool) for c in compositions]
    prev = degree_counts(sim_config.pool.composition, sim_config.pool)
    out = []
    for p in range(num_phases):
        best = ttft[:, p].min()
        near = [k for k in range(len(compositions)) if ttft[k, p] <= best * (1.0 + tolerance)]
        k = min(near, key=lambda k: (composition_distance(prev, counts[k]), ttft[k, p], k))
        out.append(k)
        prev = counts[k]
    return out


def collect_demonstrations(make_env, workloads: list, targets: list[list[int]], seeds: list[int]):
    """Rolls out ``make_env([workload])`` (a target-mode :class:`envs.reconfig_env.PrefillReconfigEnv`)
    on each workload (simulator seed from ``seeds``), choosing at each decision time the oracle
    composition ``targets[i][phase]`` of the phase that time falls in.

    Returns:
        ``(observations, actions)``: a dict of stacked raw observations (one row per step, keys
        and shapes of the env's observation space) and an int64 array of the actions.
    """
    obs_rows: dict[str, list] = {}
    actions = []
    for wl, tg, seed in zip(workloads, targets, seeds):
        env = make_env([wl])
        obs, _ = env.reset(seed=seed, options={"window_index": 0, "sim_seed": seed})
        done = False
        while not done:
            a = tg[phase_at(wl, env.decision_time_s)]
            for key, v in obs.items():
                obs_rows.setdefault(key, []).append(np.array(v, copy=True))
            actions.append(a)
            obs, _, term, trunc, _ = env.step(a)
            done = term or trunc
    return {k: np.stack(v) for k, v in obs_rows.items()}, np.asarray(actions, dtype=np.int64)


def behaviour_clone(model, observations: dict, actions: np.ndarray, epochs: int, batch_size: int = 64,
                    learning_rate: float = 1e-3, seed: int = 0) -> list[float]:
    """Fits ``model.policy`` (an sb3-contrib ``MaskablePPO`` policy) to the demonstrations by
    minimising the mean negative log-likelihood of ``actions`` (all actions allowed: the target
    menu is never masked). ``observations`` must already be normalised as the policy sees them.
    The value head is untouched (PPO fits it). Returns the mean loss of each epoch.

    Raises:
        ValueError: on an empty demonstration set or non-positive ``epochs`` / ``batch_size``.
    """
    import torch as th

    n = len(actions)
    if n == 0 or epochs < 1 or batch_size < 1:
        raise ValueError(f"behaviour cloning needs demonstrations, epochs >= 1 and batch_size >= 1; got {n} steps, "
                         f"epochs={epochs}, batch_size={batch_size}")
    policy = model.policy
    policy.set_training_mode(True)
    opt = th.optim.Adam(policy.parameters(), lr=learning_rate)
    rng = np.random.default_rng(seed)
    obs_t = {k: th.as_tensor(v, dtype=th.float32, device=policy.device) for k, v in observations.items()}
    act_t = th.as_tensor(actions, device=policy.device)
    losses = []
    for _ in range(epochs):
        perm = rng.permutation(n)
        total = 0.0
        for i in range(0, n, batch_size):
            idx = th.as_tensor(perm[i:i + batch_size], device=policy.device)
            dist = policy.get_distribution({k: v[idx] for k, v in obs_t.items()})
            loss = -dist.log_prob(act_t[idx]).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
        losses.append(total / n)
    policy.set_training_mode(False)
    return losses
