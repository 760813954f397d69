"""Training progress of ``cpgym train routing|reconfig``: episode TTFT metrics and an SB3 callback.

* :class:`EpisodeMetrics` — a Gymnasium wrapper that adds ``info["episode_metrics"]`` (mean
  TTFT [s] of the finished requests, token-weighted SLO attainment in [0, 1] with unfinished
  requests counted as misses — paper §3, the same numbers as ``cpgym simulate`` via
  :func:`envs.metrics.summarize`) to the step that ends an episode. It reads the simulator before
  the vector env resets it, so it works under ``DummyVecEnv`` and ``SubprocVecEnv`` alike.
* :class:`TrainingProgress` — an SB3 callback that shows steps done, steps/s, ETA and the mean
  TTFT and SLO attainment of the last finished episodes: a tqdm bar on a terminal, a line at
  least every ``interval_s`` seconds otherwise (:class:`experiments.progress.Progress`), nothing
  when ``mode="off"`` (``--quiet``).
"""

from __future__ import annotations

from collections import deque

import gymnasium as gym
from stable_baselines3.common.callbacks import BaseCallback

EPISODE_METRIC_KEYS = ("mean_ttft_s", "slo_attainment_token_weighted", "num_requests", "num_unfinished")


class EpisodeMetrics(gym.Wrapper):
    """Adds ``info["episode_metrics"]`` = ``{key: value for key in EPISODE_METRIC_KEYS}`` when an
    episode ends (``terminated`` or ``truncated``). The wrapped env's ``unwrapped`` must expose
    the episode's simulator as ``sim`` (both cpgym environments do)."""

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated or truncated:
            from envs.metrics import summarize

            summary = summarize(self.env.unwrapped.sim.result())
            info = {**info, "episode_metrics": {k: summary[k] for k in EPISODE_METRIC_KEYS}}
        return obs, reward, terminated, truncated, info


def monitored(env: gym.Env):
    """``Monitor(EpisodeMetrics(env))``: the wrapping of every cpgym training environment."""
    from stable_baselines3.common.monitor import Monitor

    return Monitor(EpisodeMetrics(env))


class TrainingProgress(BaseCallback):
    """Progress of ``model.learn``: steps, rate, ETA and, over the last ``num_recent_episodes``
    finished episodes, the mean of their mean TTFT [s] and of their token-weighted SLO attainment.

    Args:
        total_timesteps: the ``learn`` budget (the display's 100 %).
        mode: ``None``/``"auto"`` (bar on a terminal, lines otherwise), ``"bar"``, ``"lines"`` or
            ``"off"`` (see :func:`experiments.progress.progress_mode`).
        interval_s: lines mode: the longest gap between two lines [s] (default 10).
        num_recent_episodes: episodes averaged in the TTFT / SLO fields (default 20).
        file: output stream (default ``sys.stderr``).

    Needs environments wrapped by :class:`EpisodeMetrics` for the TTFT / SLO fields; without them
    it shows steps only.
    """

    def __init__(self, total_timesteps: int, mode: str | bool | None = None, interval_s: float = 10.0,
                 num_recent_episodes: int = 20, file=None) -> None:
        super().__init__()
        from experiments.progress import progress_mode

        self.total_timesteps = int(total_timesteps)
        self.mode = progress_mode(mode, stream=file)
        self.interval_s = interval_s
        self.file = file
        self.recent: deque[dict] = deque(maxlen=num_recent_episodes)
        self.num_episodes = 0
        self._bar = None
        self._shown = 0

    def _on_training_start(self) -> None:
        from experiments.progress import Progress

        self._shown = self.num_timesteps
        self._bar = Progress(self.total_timesteps, "train", "step", mode=self.mode, interval_s=self.interval_s,
                             initial=self.num_timesteps, file=self.file)

    def _on_step(self) -> bool:
        new = False
        for info in self.locals.get("infos", ()):
            m = info.get("episode_metrics")
            if m is not None:
                self.recent.append(m)
                self.num_episodes += 1
                new = True
        if new:
            self._bar.set_postfix(episodes=self.num_episodes, mean_ttft_s=self._recent_mean("mean_ttft_s"),
                                  slo_attainment=self._recent_mean("slo_attainment_token_weighted"))
        self._bar.update(self.num_timesteps - self._shown)
        self._shown = self.num_timesteps
        return True

    def _recent_mean(self, key: str) -> float:
        """Mean of ``key`` over the recent episodes that have it (NaN: an episode without a finished request)."""
        vals = [m[key] for m in self.recent if m[key] == m[key]]
        return sum(vals) / len(vals) if vals else float("nan")

    def _on_training_end(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


__all__ = ["EpisodeMetrics", "TrainingProgress", "monitored", "EPISODE_METRIC_KEYS"]
