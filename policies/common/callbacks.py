"""Training progress of ``cpgym train routing|reconfig``: episode TTFT metrics and an SB3 callback.

* :class:`EpisodeMetrics` — a Gymnasium wrapper that adds ``info["episode_metrics"]`` (mean
  TTFT [s] of the finished requests, token-weighted SLO attainment in [0, 1] with unfinished
  requests counted as misses — paper §3, the same numbers as ``cpgym simulate`` via
  :func:`envs.metrics.summarize`) to the step that ends an episode. It reads the simulator before
  the vector env resets it, so it works under ``DummyVecEnv`` and ``SubprocVecEnv`` alike.
* :class:`ValidationCallback` — periodic validation on the evaluation protocol's validation
  windows with best-model selection (``policies.routing.protocol``).
* :class:`TrainingProgress` — an SB3 callback that shows steps done, steps/s, ETA and the mean
  TTFT and SLO attainment of the last finished episodes: a tqdm bar on a terminal, a line at
  least every ``interval_s`` seconds otherwise (:class:`envs.progress.Progress`), nothing
  when ``mode="off"`` (``--quiet``).
"""

from __future__ import annotations

import csv
import math
import warnings
from collections import deque
from pathlib import Path

import gymnasium as gym
from stable_baselines3.common.callbacks import BaseCallback

from envs.metrics import summarize
from envs.metrics.summary import measured_summary
from envs.progress import Progress, progress_mode
from policies.common.heuristic import run_episode

EPISODE_METRIC_KEYS = ("mean_ttft_s", "slo_attainment_token_weighted", "num_requests", "num_unfinished")


class EpisodeMetrics(gym.Wrapper):
    """Adds ``info["episode_metrics"]`` = ``{key: value for key in EPISODE_METRIC_KEYS}`` when an
    episode ends (``terminated`` or ``truncated``). The wrapped env's ``unwrapped`` must expose
    the episode's simulator as ``sim`` (both cpgym environments do)."""

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated or truncated:
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
            ``"off"`` (see :func:`envs.progress.progress_mode`).
        interval_s: lines mode: the longest gap between two lines [s] (default 10).
        num_recent_episodes: episodes averaged in the TTFT / SLO fields (default 20).
        file: output stream (default ``sys.stderr``).

    Needs environments wrapped by :class:`EpisodeMetrics` for the TTFT / SLO fields; without them
    it shows steps only.
    """

    def __init__(self, total_timesteps: int, mode: str | bool | None = None, interval_s: float = 10.0,
                 num_recent_episodes: int = 20, file=None) -> None:
        super().__init__()

        self.total_timesteps = int(total_timesteps)
        self.mode = progress_mode(mode, stream=file)
        self.interval_s = interval_s
        self.file = file
        self.recent: deque[dict] = deque(maxlen=num_recent_episodes)
        self.num_episodes = 0
        self._bar = None
        self._shown = 0

    def _on_training_start(self) -> None:
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

    def close(self) -> None:
        """Ends the display without its final line (after Ctrl-C or an error; no-op once closed)."""
        if self._bar is not None:
            self._bar.close(final_line=False)
            self._bar = None


__all__ = ["EpisodeMetrics", "TrainingProgress", "monitored", "EPISODE_METRIC_KEYS"]


class ValidationCallback(BaseCallback):
    """Periodic validation with best-model selection (SB3 ``EvalCallback`` style, on the
    protocol's validation windows with the deterministic numpy actor and warm-up excluded).

    Every ``every_steps`` environment steps (and at the start, i.e. the warm start) the policy
    routes every window of ``windows``; the mean over windows of the measured mean TTFT is written
    to ``out/validation.csv`` (``timesteps, mean_ttft_s, p90_ttft_s, slo_attainment_token_weighted``)
    and to wandb as ``validation/*``; the best model so far is saved as ``out/best_model.zip``.

    A window without a finished measured request is left out of the means; a validation where
    that holds for every window (mean TTFT NaN, e.g. a ``--horizon-s`` that ends the episodes
    within the warm-up) is never the best. If that happens before any validation had a finite
    mean TTFT — in ``cpgym train routing`` the first validation, before the first PPO update —
    it raises ``ValueError`` (it used to go on and fail only at the end of training, with no
    ``best_model.zip`` to copy to ``model.zip``).
    """

    def __init__(self, windows, sim_config, out: Path, every_steps: int, run=None, log=print) -> None:
        super().__init__()
        self.windows = list(windows)
        self.sim_config = sim_config
        self.out = Path(out)
        self.every_steps = every_steps
        self.run = run
        self.log = log
        self.next_step = 0
        self.best_ttft_s = math.inf
        self.best_step = -1
        self.history: list[tuple[int, float, float, float]] = []
        with open(self.out / "validation.csv", "w", newline="") as fh:
            csv.writer(fh).writerow(["timesteps", "mean_ttft_s", "p90_ttft_s", "slo_attainment_token_weighted"])

    def _on_training_start(self) -> None:
        self.validate(self.model)

    def _on_step(self) -> bool:
        if self.num_timesteps >= self.next_step:
            self.validate(self.model)
        return True

    def validate(self, model) -> float:
        """Runs the validation windows now; returns the mean TTFT [s] over them."""
        import numpy as np

        from envs.routing_env import PrefillRoutingEnv  # lazy: gymnasium (start-up of the CLI)
        from policies.common.numpy_policy import NumpyWorkerSetActor  # lazy: gymnasium (start-up of the CLI)

        actor = NumpyWorkerSetActor(model.policy.features_extractor)

        class _Act:
            def predict(self, obs, deterministic=True, action_masks=None, **_):
                return actor.act(obs, action_masks), None

        ms = []
        for wl in self.windows:
            env = PrefillRoutingEnv([wl], self.sim_config)
            res, _, _ = run_episode(env, _Act(), options={"window_index": 0, "sim_seed": self.sim_config.seed})
            s = measured_summary(res, wl.metadata.get("measure_from_s", 0.0))
            ms.append((s["mean_ttft_s"], s["p90_ttft_s"], s["slo_attainment_token_weighted"]))
        with warnings.catch_warnings():  # a column without a finite value is NaN (checked below), not a warning
            warnings.simplefilter("ignore", RuntimeWarning)
            m = np.nanmean(np.array(ms, dtype=float), axis=0)
        step = int(model.num_timesteps)
        if not math.isfinite(m[0]) and self.best_step < 0:
            self._no_finite_validation(step)
        self.history.append((step, float(m[0]), float(m[1]), float(m[2])))
        with open(self.out / "validation.csv", "a", newline="") as fh:
            csv.writer(fh).writerow(self.history[-1])
        if self.run is not None:
            self.run.log({"validation/mean_ttft_s": m[0], "validation/p90_ttft_s": m[1],
                          "validation/slo_attainment_token_weighted": m[2], "timesteps": step})
        if m[0] < self.best_ttft_s:
            self.best_ttft_s, self.best_step = float(m[0]), step
            model.save(self.out / "best_model.zip")
        self.next_step = step + self.every_steps
        self.log(f"validation at {step} steps: mean TTFT {m[0]:.4f} s over {len(self.windows)} windows"
                 f"{' (best)' if self.best_step == step else ''}")
        return float(m[0])

    def _no_finite_validation(self, step: int) -> None:
        """Raises the error of a first validation without a finished request (see the class docstring)."""
        horizon = self.sim_config.horizon_s
        raise ValueError(
            f"validation at {step} steps: no request of the {len(self.windows)} validation window(s) finished after its "
            "warm-up (mean TTFT NaN), so validation cannot select a model (best_model.zip); "
            + (f"--horizon-s {horizon:g} ends each episode before that; leave it out or raise it above --warmup-s "
               "plus --episode-window-s" if horizon is not None else "check --warmup-s and --episode-window-s"))

    def summary(self) -> dict:
        return {"best_mean_ttft_s": self.best_ttft_s, "best_timesteps": self.best_step,
                "warm_start_mean_ttft_s": self.history[0][1], "num_windows": len(self.windows),
                "history": [list(h) for h in self.history]}
