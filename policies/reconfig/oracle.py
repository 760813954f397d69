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

How much paying for the moves keeps of a per-phase schedule is measured by the benchmark's
``oracle:phase-schedule`` (``baselines.fixed_compositions.schedule_oracle``).
"""

from __future__ import annotations

import numpy as np

from baselines.fixed_compositions import fixed_mean_ttft, phase_at, phase_ttft, select_targets
from envs.planning.composition import degree_counts
from envs.sim.options import is_int, is_number

__all__ = ["phase_ttft", "save_phase_ttft", "load_phase_ttft", "select_targets", "phase_targets", "phase_at",
           "fixed_mean_ttft", "collect_demonstrations", "collect_learner_states",
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
