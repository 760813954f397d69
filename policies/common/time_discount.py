"""Discounting per second of simulated time for PPO on the routing environment (a semi-MDP).

Routing decisions are not evenly spaced in time: at 12 requests/s a per-decision ``gamma`` of
0.995 looks ~17 s ahead, at 50 requests/s ~4 s. The cost a decision causes (the queueing it adds)
plays out in *seconds*, so the discount of the transition from decision ``i`` (at simulated time
``t_i``) to decision ``i+1`` is ``gamma_s ** (t_{i+1} - t_i)`` with ``gamma_s`` the discount per
simulated second — the semi-Markov form of the Bellman equation (Bradtke & Duff, "Reinforcement
learning methods for continuous-time Markov decision problems", NIPS 1994; used for event-driven
schedulers such as Decima, Mao et al. SIGCOMM 2019, which discounts by elapsed time too).

SB3's ``PPO`` discounts every step by one fixed ``gamma``, so two pieces replace that, without
touching the algorithm otherwise:

* :class:`StepDurationRecorder` — a ``VecEnvWrapper`` that keeps each environment's last
  ``info["step_duration_s"]`` (``PrefillRoutingEnv`` reports the simulated time from a decision
  to the next one);
* :class:`TimeDiscountedRolloutBuffer` — the ``MaskableDictRolloutBuffer`` whose GAE uses the
  per-transition discount ``d_t = gamma_s ** dt_t``:
  ``delta_t = r_t + d_t V(s_{t+1}) (1 - done) - V(s_t)``,
  ``A_t = delta_t + d_t * lambda * (1 - done) * A_{t+1}`` (``lambda`` stays per decision).

Approximation: the reward of one step (``-∫ n(t) dt`` over the step, ``envs.routing_env``) is not
discounted *inside* the step; steps last ~0.07 s at 14 requests/s, where ``0.9 ** 0.07`` = 0.993,
so this moves a step's weight by < 1 %. PPO's own ``gamma`` remains in use for SB3's time-limit
bootstrap (``TimeLimit.truncated``), which the protocol's windows (no horizon) never trigger.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from sb3_contrib.common.maskable.buffers import MaskableDictRolloutBuffer
from stable_baselines3.common.vec_env import VecEnvWrapper


class StepDurationRecorder(VecEnvWrapper):
    """Records ``info["step_duration_s"]`` of every environment's last step.

    Attributes:
        last_step_duration_s: shape ``(num_envs,)`` [s]; 0 for an environment whose info lacks
            the key (and before the first step).
    """

    def __init__(self, venv) -> None:
        super().__init__(venv)
        self.last_step_duration_s = np.zeros(self.num_envs)
        #: simulated time of the last step's decision [s] (``info["sim_time_s"] - step_duration_s``)
        self.last_decision_time_s = np.zeros(self.num_envs)
        #: per environment, the number of the episode the last step belongs to (0, 1, ...)
        self.last_episode_number = np.zeros(self.num_envs, dtype=np.int64)
        self._episode_number = np.zeros(self.num_envs, dtype=np.int64)

    def reset(self):
        self.last_step_duration_s = np.zeros(self.num_envs)
        return self.venv.reset()

    def step_wait(self):
        obs, rewards, dones, infos = self.venv.step_wait()
        self.last_step_duration_s = np.array([float(info.get("step_duration_s", 0.0)) for info in infos])
        now_s = np.array([float(info.get("sim_time_s", 0.0)) for info in infos])
        self.last_decision_time_s = now_s - self.last_step_duration_s
        self.last_episode_number = self._episode_number.copy()
        self._episode_number += np.asarray(dones, dtype=np.int64)
        return obs, rewards, dones, infos


class TimeDiscountedRolloutBuffer(MaskableDictRolloutBuffer):
    """Rollout buffer of MaskablePPO with a discount per simulated second (module docstring).

    Args:
        gamma_per_s: discount per second of simulated time in (0, 1]; e.g. 0.9 weighs the cost
            10 s later by 0.35.
        other arguments: those of ``MaskableDictRolloutBuffer`` (``gamma`` is not used by GAE).

    Use with ``MaskablePPO(..., rollout_buffer_class=TimeDiscountedRolloutBuffer,
    rollout_buffer_kwargs={"gamma_per_s": 0.9})`` on a :class:`StepDurationRecorder`-wrapped
    VecEnv, and set ``model.rollout_buffer.durations = recorder`` before ``learn``.

    Raises:
        ValueError: if ``gamma_per_s`` is outside (0, 1].
        RuntimeError: on ``add`` without ``durations`` attached, or a negative step duration.
    """

    def __init__(self, *args, gamma_per_s: float = 1.0, **kwargs) -> None:
        if not 0 < gamma_per_s <= 1:
            raise ValueError(f"gamma_per_s must be in (0, 1], got {gamma_per_s}")
        self.gamma_per_s = float(gamma_per_s)
        self.durations: StepDurationRecorder | None = None
        super().__init__(*args, **kwargs)

    def reset(self) -> None:
        super().reset()
        self.step_discounts = np.ones((self.buffer_size, self.n_envs), dtype=np.float32)
        self.step_durations_s = np.zeros((self.buffer_size, self.n_envs), dtype=np.float32)

    def add(self, *args, **kwargs) -> None:
        if self.durations is None:
            raise RuntimeError("TimeDiscountedRolloutBuffer: attach the StepDurationRecorder of the training VecEnv "
                               "(model.rollout_buffer.durations = recorder) before learning")
        dt = self.durations.last_step_duration_s
        if (dt < 0).any():
            raise RuntimeError(f"TimeDiscountedRolloutBuffer: negative step duration {dt.min()} s")
        self.step_durations_s[self.pos] = dt
        self.step_discounts[self.pos] = self.gamma_per_s ** dt
        super().add(*args, **kwargs)

    def compute_returns_and_advantage(self, last_values, dones: np.ndarray) -> None:
        """GAE with the per-transition discount ``gamma_per_s ** dt`` (SB3's loop otherwise)."""
        last_values = last_values.clone().cpu().numpy().flatten()
        last_gae_lam = 0.0
        for step in reversed(range(self.buffer_size)):
            if step == self.buffer_size - 1:
                next_non_terminal = 1.0 - dones.astype(np.float32)
                next_values = last_values
            else:
                next_non_terminal = 1.0 - self.episode_starts[step + 1]
                next_values = self.values[step + 1]
            d = self.step_discounts[step]
            delta = self.rewards[step] + d * next_values * next_non_terminal - self.values[step]
            last_gae_lam = delta + d * self.gae_lambda * next_non_terminal * last_gae_lam
            self.advantages[step] = last_gae_lam
        self.returns = self.advantages + self.values


class InputDrivenRolloutBuffer(TimeDiscountedRolloutBuffer):
    """Advantages against an input-driven baseline (Mao et al., "Variance reduction for
    reinforcement learning in input-driven environments", ICLR 2019), discounted per second.

    The training environments are *replicas*: they draw the same sequence of episode windows and
    simulator seeds (``TrainConfig.input_baseline``), so episode ``m`` of every environment
    replays the same arrivals while the sampled actions differ. For step ``i`` of environment
    ``k`` at decision time ``t`` in its episode ``m``, the baseline is the mean over the other
    replicas ``j`` of their discounted return-to-go from their first decision at or after ``t``
    in their episode ``m`` (``G_j(t') * gamma_s ** (t' - t)``); the advantage is the Monte-Carlo
    return-to-go ``G_k,i`` (per-second discount, bootstrapped with the critic at the rollout end)
    minus that baseline. The baseline depends on the input (the arrivals to come) but not on the
    action taken at ``(k, i)``, which is what removes the input's share of the variance. Where no
    other replica covers ``(m, t)`` in this rollout (episode parts in the previous rollout), the
    critic's value is the baseline. The value target stays ``G_k,i``.

    Raises:
        RuntimeError: see :class:`TimeDiscountedRolloutBuffer`; ValueError with fewer than two
            environments.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.n_envs < 2:
            raise ValueError(f"InputDrivenRolloutBuffer needs >= 2 replica environments, got n_envs={self.n_envs}")

    def reset(self) -> None:
        super().reset()
        self.decision_times_s = np.zeros((self.buffer_size, self.n_envs))
        self.episode_numbers = np.zeros((self.buffer_size, self.n_envs), dtype=np.int64)
        #: share of steps whose baseline came from other replicas (the rest: the critic)
        self.replica_baseline_share = 0.0

    def add(self, *args, **kwargs) -> None:
        if self.durations is not None:
            self.decision_times_s[self.pos] = self.durations.last_decision_time_s
            self.episode_numbers[self.pos] = self.durations.last_episode_number
        super().add(*args, **kwargs)

    def compute_returns_and_advantage(self, last_values, dones: np.ndarray) -> None:
        last_values = last_values.clone().cpu().numpy().flatten()
        g = np.zeros((self.buffer_size, self.n_envs))
        nxt = last_values * (1.0 - dones.astype(np.float64))
        for step in reversed(range(self.buffer_size)):
            if step < self.buffer_size - 1:
                nxt = g[step + 1] * (1.0 - self.episode_starts[step + 1])
            g[step] = self.rewards[step] + self.step_discounts[step] * nxt
        baseline = self.values.astype(np.float64).copy()
        num_replica = 0
        for m in np.unique(self.episode_numbers):
            seg = {k: np.flatnonzero(self.episode_numbers[:, k] == m) for k in range(self.n_envs)}
            for k, steps_k in seg.items():
                if steps_k.size == 0:
                    continue
                t_k = self.decision_times_s[steps_k, k]
                total = np.zeros(steps_k.size)
                count = np.zeros(steps_k.size)
                for j, steps_j in seg.items():
                    if j == k or steps_j.size == 0:
                        continue
                    t_j = self.decision_times_s[steps_j, j]
                    pos = np.searchsorted(t_j, t_k, side="left")
                    # covered: j's part of episode m holds a decision at or after t (and began by t)
                    ok = (pos < t_j.size) & (t_j[0] <= t_k)
                    pj = np.minimum(pos, t_j.size - 1)
                    val = g[steps_j[pj], j] * self.gamma_per_s ** np.maximum(t_j[pj] - t_k, 0.0)
                    total += np.where(ok, val, 0.0)
                    count += ok
                have = count > 0
                baseline[steps_k[have], k] = total[have] / count[have]
                num_replica += int(have.sum())
        self.replica_baseline_share = num_replica / g.size
        self.advantages = (g - baseline).astype(np.float32)
        self.returns = g.astype(np.float32)


class ReplicaSeed(gym.Wrapper):
    """Makes replica environments draw the same episodes: every seeded ``reset`` (SB3 seeds each
    VecEnv member with ``seed + index``) uses ``seed`` instead, so all replicas' generators — and
    with them the windows and simulator seeds of their episodes — follow the same sequence
    (:class:`InputDrivenRolloutBuffer`). Unseeded resets pass through."""

    def __init__(self, env: gym.Env, seed: int) -> None:
        super().__init__(env)
        self.replica_seed = int(seed)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        return self.env.reset(seed=None if seed is None else self.replica_seed, options=options)

    def action_masks(self):
        return self.env.unwrapped.action_masks()
