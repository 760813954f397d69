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

    def reset(self):
        self.last_step_duration_s = np.zeros(self.num_envs)
        return self.venv.reset()

    def step_wait(self):
        obs, rewards, dones, infos = self.venv.step_wait()
        self.last_step_duration_s = np.array([float(info.get("step_duration_s", 0.0)) for info in infos])
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
