"""Oracle labels and behaviour cloning for the target-composition reconfiguration policy
(``cpgym train reconfig --action-mode target --warm-start oracle``).

Per-operation PPO from the no-op never found a profitable schedule on ``matched-phases``
(``results/README.md``, research log): every operation drains workers, and reaching a good composition
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

Optionally (:func:`verified_targets`, ``--oracle-candidate-switch-costs``), each training seed's
label schedule is the best of several candidate schedules *as simulated in the environment*
(:func:`follow_schedule`): the per-phase TTFTs of step 1 come from fixed pools and ignore the
drain and backlog of the moves between them, so on some seeds the cheapest-looking schedule is
slower than holding one composition.
"""

from __future__ import annotations

import numpy as np

from baselines.fixed_compositions import fixed_mean_ttft, phase_at, phase_ttft, select_targets
from envs.metrics import summarize
from envs.planning.composition import degree_counts
from envs.sim.options import is_int, is_number

__all__ = ["phase_ttft", "save_phase_ttft", "load_phase_ttft", "select_targets", "phase_targets", "phase_at",
           "fixed_mean_ttft", "follow_schedule", "verified_targets", "collect_demonstrations", "collect_learner_states",
           "behaviour_clone"]


def save_phase_ttft(path, tables: dict[int, tuple[np.ndarray, np.ndarray]], compositions: list[str]) -> None:
    """Writes :func:`phase_ttft` results of several workload seeds to ``path`` (JSON: the
    composition menu and, per seed, ``ttft_s`` (null for inf) and ``num_requests``), so that a
    later run (``cpgym train reconfig --oracle-phase-ttft``) need not re-simulate them."""
    import json
    from pathlib import Path

    data = {"compositions": list(compositions), "seeds": {
        str(s): {"ttft_s": [[float(x) if np.isfinite(x) else None for x in row] for row in t],
                 "num_requests": [int(n) for n in num]} for s, (t, num) in sorted(tables.items())}}
    Path(path).write_text(json.dumps(data) + "\n")


def load_phase_ttft(path, compositions: list[str]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Reads a :func:`save_phase_ttft` file; returns ``{seed: (ttft_s, num_requests)}``.

    Raises:
        FileNotFoundError: when ``path`` does not exist.
        ValueError: naming the file and the field, when it is not JSON, lacks ``compositions`` (a
            list) or ``seeds`` (an object), its composition menu differs from ``compositions``, or
            a seed's entry is not ``{"ttft_s": (K, P) numbers >= 0 or null, "num_requests": P
            integers >= 0}``.
    """
    import json
    from pathlib import Path

    what = "expected a per-phase TTFT file of save_phase_ttft"
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e}); {what}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: {what} (a JSON object with 'compositions' and 'seeds')")
    for key, kind, name in (("compositions", list, "a list"), ("seeds", dict, "an object")):
        if not isinstance(data.get(key), kind):
            raise ValueError(f"{path}: field {key!r} is missing or not {name}; {what}")
    menu = data["compositions"]
    if menu != list(compositions):
        raise ValueError(f"{path}: its composition menu ({len(menu)} entries) differs from this run's "
                         f"({len(compositions)}): same --target-degrees and pool needed")
    return {_seed_of(path, s): _phase_table(f"{path}: seeds[{s!r}]", v, len(menu)) for s, v in data["seeds"].items()}


def _seed_of(path, key: str) -> int:
    try:
        return int(key)
    except ValueError:
        raise ValueError(f"{path}: seeds[{key!r}]: a seed must be an integer") from None


def _phase_table(where: str, entry, num_compositions: int) -> tuple[np.ndarray, np.ndarray]:
    """One seed's ``(ttft_s (K, P), num_requests (P,))`` of a :func:`save_phase_ttft` file
    (null TTFT: inf); raises ValueError naming ``where`` and the field."""
    if not isinstance(entry, dict) or not {"ttft_s", "num_requests"} <= set(entry):
        raise ValueError(f"{where}: expected an object with 'ttft_s' and 'num_requests'")

    num = entry["num_requests"]
    if not isinstance(num, list) or not all(is_int(n) and n >= 0 for n in num):
        raise ValueError(f"{where}.num_requests: expected a list of integers >= 0 (one per phase), got {num!r}")
    rows = entry["ttft_s"]
    try:
        if not isinstance(rows, list) or not all(isinstance(r, list) and all(x is None or is_number(x) for x in r)
                                                 for r in rows):
            raise TypeError
        t = np.array([[np.inf if x is None else float(x) for x in row] for row in rows], float)
    except (TypeError, ValueError):  # not a list of lists of numbers / null, or ragged
        raise ValueError(f"{where}.ttft_s: expected one list per composition of mean TTFTs [s] (numbers or null)") from None
    if t.shape != (num_compositions, len(num)):
        raise ValueError(f"{where}.ttft_s: shape {t.shape}, expected ({num_compositions}, {len(num)}) "
                         "(compositions x phases)")
    if not (t >= 0).all():  # NaN and negative values; null was read as inf
        raise ValueError(f"{where}.ttft_s: expected mean TTFTs >= 0 [s] or null")
    return t, np.asarray(num, np.int64)


def phase_targets(workload, sim_config, compositions: list[str], router: str = "vertumnus-router",
                  tolerance: float = 0.0, switch_cost_s_per_gpu: float = 0.0) -> list[int]:
    """Per phase, the index into ``compositions`` of the oracle composition:
    :func:`phase_ttft` (one simulation per composition) then :func:`select_targets` from the
    pool's initial composition (``sim_config.pool.composition``).

    Raises:
        ValueError: when the workload has no ``phase_of_request`` metadata.
    """
    ttft, num = phase_ttft(workload, sim_config, compositions, router)
    counts = [degree_counts(c, sim_config.pool) for c in compositions]
    return select_targets(ttft, num, counts, degree_counts(sim_config.pool.composition, sim_config.pool),
                          tolerance, switch_cost_s_per_gpu)


def follow_schedule(env, workload, seed: int, targets: list[int]) -> dict:
    """Follows ``targets[phase]`` (menu indices) in the target-mode ``env`` (a
    :class:`envs.reconfig_env.PrefillReconfigEnv` over ``workload``, simulator seed ``seed``, reset
    as the demonstrations are) for the whole workload.

    Returns:
        the per-episode metrics: ``mean_ttft_s``, ``p90_ttft_s``
        [s], ``slo_attainment_token_weighted`` (share), ``num_operations``,
        ``num_committed_operations``, ``num_unfinished``, ``wall_s`` [s].
    """
    import time

    from policies.reconfig.evaluate import operation_counts  # lazy: gymnasium (start-up of the CLI)

    t0 = time.perf_counter()
    env.reset(seed=seed, options={"window_index": 0, "sim_seed": seed})
    done = False
    while not done:
        _, _, term, trunc, _ = env.step(targets[phase_at(workload, env.decision_time_s)])
        done = term or trunc
    result = env.sim.result()
    s = summarize(result)
    n_ops, n_commit = operation_counts(result)
    return {"wall_s": time.perf_counter() - t0, "mean_ttft_s": s["mean_ttft_s"], "p90_ttft_s": s["p90_ttft_s"],
            "slo_attainment_token_weighted": s["slo_attainment_token_weighted"], "num_operations": n_ops,
            "num_committed_operations": n_commit, "num_unfinished": s.get("num_unfinished", 0)}


def verified_targets(env, workload, seed: int, ttft_s: np.ndarray, num_requests: np.ndarray, counts: list[dict],
                     initial: dict, switch_costs_s_per_gpu, tolerance: float = 0.0) -> tuple[list[int], str, dict]:
    """The label schedule of one training seed chosen by simulation: the candidates are the
    :func:`select_targets` schedule of each cost in ``switch_costs_s_per_gpu`` (0 = the per-phase
    rule with ``tolerance``) and the best fixed composition in hindsight held in every phase
    (lowest whole-workload mean TTFT in ``ttft_s``, request-weighted); each distinct schedule is
    followed once in ``env`` (:func:`follow_schedule`, which pays the drains and the backlog the
    fixed-pool TTFTs ignore) and the one with the fewest unfinished requests, then the lowest
    simulated mean TTFT wins (a schedule that leaves requests unfinished under a
    ``SimConfig.horizon_s`` cannot win on the mean TTFT of the ones it finished; ties: the earlier
    candidate, costs in the given order, then the fixed composition; a NaN mean TTFT, no request
    finished, ranks last).

    Args:
        env: target-mode environment over ``workload`` (its menu indexes ``ttft_s`` and ``counts``).
        ttft_s, num_requests, counts, initial: as :func:`select_targets`.
        switch_costs_s_per_gpu: one or more costs [request-s per GPU moved].

    Returns:
        ``(targets, chosen, mean_ttft_s)``: the winning schedule (menu index per phase), its name
        (``"switch-cost-<C>"``, ``C`` as ``%g`` unless that would merge two distinct costs, or
        ``"best-fixed"``) and every candidate's simulated mean TTFT [s].

    Raises:
        ValueError: on no cost, and as :func:`select_targets`.
    """
    costs = [float(c) for c in switch_costs_s_per_gpu]
    if not costs:
        raise ValueError("verified_targets needs at least one switching cost")
    # select_targets first: it validates the shapes and the costs (ValueError, not an IndexError below)
    candidates = {_cost_name(c): select_targets(ttft_s, num_requests, counts, initial, tolerance, c) for c in costs}
    candidates["best-fixed"] = [int(np.argmin(fixed_mean_ttft(ttft_s, num_requests)))] * np.shape(ttft_s)[1]
    simulated: dict[tuple, tuple[int, float]] = {}  # schedule -> (unfinished requests, mean TTFT [s])
    scores = {}
    for name, targets in candidates.items():
        key = tuple(targets)
        if key not in simulated:
            row = follow_schedule(env, workload, seed, targets)
            simulated[key] = (int(row.get("num_unfinished", 0)), float(row["mean_ttft_s"]))
        scores[name] = simulated[key][1]
    # first minimum: the earlier candidate; NaN (no request finished) never wins
    chosen = min(candidates, key=lambda n: (simulated[tuple(candidates[n])][0],
                                            np.inf if np.isnan(scores[n]) else scores[n]))
    return candidates[chosen], chosen, scores


def _cost_name(cost: float) -> str:
    """``"switch-cost-<cost>"``: ``%g`` when it names the cost exactly (``5``, ``1e+06``), else the
    full ``repr`` (``100000.4``), so two distinct costs never share a name."""
    short = f"{cost:g}"
    return f"switch-cost-{short if float(short) == cost else repr(cost)}"


def collect_demonstrations(make_env, workloads: list, targets: list[list[int]], seeds: list[int],
                           num_noisy_rollouts: int = 0, action_noise: float = 0.0, noise_seed: int = 0):
    """Rolls out ``make_env([workload])`` (a target-mode :class:`envs.reconfig_env.PrefillReconfigEnv`)
    on each workload (simulator seed from ``seeds``), choosing at each decision time the oracle
    composition ``targets[i][phase]`` of the phase that time falls in.

    With ``num_noisy_rollouts > 0`` each workload is rolled out that many more times with
    disturbances (DART, Laskey et al. 2017, "DART: Noise Injection for Robust Imitation
    Learning"): at each step, with probability ``action_noise``, a uniformly random menu
    composition is executed instead, while the recorded label stays the oracle's. The clean
    rollouts only visit states in which the pool already is (heading to) the labelled
    composition except at phase changes, so a policy cloned from them can score well by
    repeating its previous choice (the "is_last_action" / "is_projected" target features) and
    never learn to move back; the disturbed states teach it to return to the oracle.

    Returns:
        ``(observations, actions)``: a dict of stacked raw observations (one row per step, keys
        and shapes of the env's observation space) and an int64 array of the actions.

    Raises:
        ValueError: on a negative ``num_noisy_rollouts`` or ``action_noise`` outside [0, 1].
    """
    if num_noisy_rollouts < 0 or not 0.0 <= action_noise <= 1.0:
        raise ValueError(f"num_noisy_rollouts must be >= 0 and action_noise in [0, 1], got {num_noisy_rollouts}, "
                         f"{action_noise}")
    obs_rows: dict[str, list] = {}
    actions: list[int] = []
    for wl, tg, seed in zip(workloads, targets, seeds):
        env = make_env([wl])
        for r in range(1 + num_noisy_rollouts):
            rng = np.random.default_rng([noise_seed, seed, r])

            def execute(obs, label, r=r, rng=rng, env=env):
                return int(rng.integers(env.action_space.n)) if r > 0 and rng.random() < action_noise else label

            _labelled_rollout(env, wl, tg, seed, execute, obs_rows, actions)
    return {k: np.stack(v) for k, v in obs_rows.items()}, np.asarray(actions, dtype=np.int64)


def collect_learner_states(make_env, workloads: list, targets: list[list[int]], seeds: list[int], act):
    """DAgger (Ross et al. 2011, "A Reduction of Imitation Learning and Structured Prediction to
    No-Regret Online Learning", §3): one rollout per workload in which the learner's action
    ``act(observation)`` (raw observation dict -> menu index) is executed, each state labelled with
    the oracle composition ``targets[i][phase]`` of the phase its decision time falls in — the
    states the cloned policy itself reaches, which the oracle's (even disturbed) rollouts may miss.

    Returns:
        ``(observations, actions)`` as :func:`collect_demonstrations` (actions: the oracle labels).
    """
    obs_rows: dict[str, list] = {}
    actions: list[int] = []
    for wl, tg, seed in zip(workloads, targets, seeds):
        _labelled_rollout(make_env([wl]), wl, tg, seed, lambda obs, label: int(act(obs)), obs_rows, actions)
    return {k: np.stack(v) for k, v in obs_rows.items()}, np.asarray(actions, dtype=np.int64)


def _labelled_rollout(env, wl, tg: list[int], seed: int, execute, obs_rows: dict, actions: list) -> None:
    """One whole-workload episode of ``env`` (simulator seed ``seed``): records each observation
    with the oracle label ``tg[phase]`` into ``obs_rows`` / ``actions`` and executes
    ``execute(observation, label)``."""
    obs, _ = env.reset(seed=seed, options={"window_index": 0, "sim_seed": seed})
    done = False
    while not done:
        label = tg[phase_at(wl, env.decision_time_s)]
        for key, v in obs.items():
            obs_rows.setdefault(key, []).append(np.array(v, copy=True))
        actions.append(label)
        obs, _, term, trunc, _ = env.step(execute(obs, label))
        done = term or trunc


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
