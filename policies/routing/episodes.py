"""Where a routing policy's episode windows come from: :class:`EpisodeSource` (serialised into
checkpoints; used by training, evaluation and the protocol)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envs.routing_env import DEFAULT_WINDOW_S
from envs.sim.options import option as _opt
from envs.workloads import DEFAULT_WORKLOAD, WorkloadSource


@dataclass(frozen=True)
class EpisodeSource:
    """Where the episode windows come from (serialised into checkpoints).

    The full workload is built by the one workload builder, :class:`envs.workloads.WorkloadSource`
    (:meth:`workload_source`); the CLI fills the first eight fields from the shared workload flags
    (``--trace``/``--workload``, ``--workload-seed``, ``--target-rps``/``--rate-scale``,
    ``--arrival-window-s``, ``--skip-invalid``, ``--workload-param``).

    Args:
        trace: trace path (Mooncake JSONL, Azure CSV, L-Eval CSV), or ``None`` for ``workload``.
        workload: named synthetic workload (``envs.workloads.WORKLOADS``) when ``trace`` is None.
        workload_seed: generator seed / arrival-spreading seed of the trace loader.
        target_rps: time-scale arrivals to this mean rate [requests/s] (``None`` keeps it).
        rate_scale: multiply the arrival rate by this factor (exclusive with ``target_rps``).
        arrival_window_s: keep arrivals in ``[start, end)`` [s] before cutting episodes.
        skip_invalid: skip invalid trace lines instead of failing.
        params: keyword overrides of the named workload's generator, ``((name, value), ...)``.
        episode_window_s: episode window length [s] (default 60, ``envs.routing_env.DEFAULT_WINDOW_S``).
        eval_every: every ``eval_every``-th window is held out (see
            ``envs.routing_env.split_windows``; default 4).

    Raises:
        ValueError: naming the field, on a missing source, ``episode_window_s`` <= 0 or a rate <= 0.
    """

    trace: str | None = field(default=None, metadata={"cli": False})
    workload: str | None = field(default=DEFAULT_WORKLOAD, metadata={"cli": False})
    workload_seed: int = field(default=0, metadata={"cli": False})
    target_rps: float | None = field(default=None, metadata={"cli": False})
    rate_scale: float | None = field(default=None, metadata={"cli": False})
    arrival_window_s: tuple[float, float] | None = field(default=None, metadata={"cli": False})
    skip_invalid: bool = field(default=False, metadata={"cli": False})
    params: tuple[tuple[str, Any], ...] = field(default=(), metadata={"cli": False})
    episode_window_s: float = _opt(DEFAULT_WINDOW_S, "episode window length [s]")
    eval_every: int = _opt(4, "hold out every N-th episode window for evaluation", metavar="N")

    def __post_init__(self) -> None:
        if self.trace is None and self.workload is None:
            raise ValueError("episode source: give trace or workload")
        if not self.episode_window_s > 0:
            raise ValueError(f"episode_window_s must be > 0, got {self.episode_window_s}")
        if self.eval_every < 2:
            raise ValueError(f"eval_every must be >= 2, got {self.eval_every}")
        if self.arrival_window_s is not None:
            object.__setattr__(self, "arrival_window_s", tuple(float(x) for x in self.arrival_window_s))
        self.workload_source()  # validates rates, window and seed (ValueError naming the field)

    def workload_source(self, seed: int | None = None):
        """The :class:`~envs.workloads.WorkloadSource` of the full workload; ``seed`` overrides
        ``workload_seed``."""
        return WorkloadSource(name=None if self.trace else self.workload, trace=self.trace,
                              seed=self.workload_seed if seed is None else seed, target_rps=self.target_rps,
                              rate_scale=self.rate_scale, arrival_window_s=self.arrival_window_s,
                              skip_invalid=self.skip_invalid,
                              params=tuple(tuple(kv) for kv in self.params))

    def workload_obj(self, seed: int | None = None):
        """The full (rate-scaled, windowed) workload; ``seed`` overrides ``workload_seed``."""
        return self.workload_source(seed).build()

    def windows(self, part: str, seed: int | None = None):
        """Episode windows of a part (``"train"``, ``"eval"``, ``"all"``)."""
        from envs.routing_env import episode_windows, split_windows  # lazy: gymnasium (start-up of the CLI)

        return split_windows(episode_windows(self.workload_obj(seed), self.episode_window_s), part, self.eval_every)

    @property
    def label(self) -> str:
        name = Path(self.trace).stem if self.trace else self.workload
        return f"{name}@{self.target_rps:g}rps" if self.target_rps else name
