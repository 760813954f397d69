"""Where a routing policy's episode windows come from: :class:`EpisodeSource` (serialised into
checkpoints; used by training, evaluation and the protocol)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from envs.episodes import DEFAULT_WINDOW_S
from envs.sim.options import option as _opt
from envs.workloads import DEFAULT_WORKLOAD, WorkloadSource


@dataclass(frozen=True)
class EpisodeSource:
    """Where the episode windows come from (serialised into checkpoints).

    Args:
        workload: the full workload, an :class:`envs.workloads.WorkloadSource` (default the
            named :data:`envs.workloads.DEFAULT_WORKLOAD`; the CLI fills it from the shared workload
            flags ``--trace``/``--workload``, ``--workload-seed``, ``--target-rps``/``--rate-scale``,
            ``--arrival-window-s``, ``--skip-invalid``, ``--workload-param``).
        episode_window_s: episode window length [s] (default 60, ``envs.routing_env.DEFAULT_WINDOW_S``).
        eval_every: every ``eval_every``-th window is held out (see
            ``envs.routing_env.split_windows``; default 4).

    Raises:
        ValueError: naming the field, on a ``workload`` that is not a ``WorkloadSource``,
            ``episode_window_s`` <= 0 or ``eval_every`` < 2.
    """

    workload: WorkloadSource = field(default=WorkloadSource(name=DEFAULT_WORKLOAD), metadata={"cli": False})
    episode_window_s: float = _opt(DEFAULT_WINDOW_S, "episode window length [s]")
    eval_every: int = _opt(4, "hold out every N-th episode window for evaluation", metavar="N")

    def __post_init__(self) -> None:
        if not isinstance(self.workload, WorkloadSource):
            raise ValueError(f"episode source: workload must be an envs.workloads.WorkloadSource, got {self.workload!r}")
        if not self.episode_window_s > 0:
            raise ValueError(f"episode_window_s must be > 0, got {self.episode_window_s}")
        if self.eval_every < 2:
            raise ValueError(f"eval_every must be >= 2, got {self.eval_every}")

    def workload_source(self, seed: int | None = None) -> WorkloadSource:
        """The :class:`~envs.workloads.WorkloadSource` of the full workload; ``seed`` overrides its seed."""
        return self.workload if seed is None else self.workload.with_seed(seed)

    def workload_obj(self, seed: int | None = None):
        """The full (rate-scaled, windowed) workload; ``seed`` overrides the workload's seed."""
        return self.workload_source(seed).build()

    def windows(self, part: str, seed: int | None = None):
        """Episode windows of a part (``"train"``, ``"eval"``, ``"all"``)."""
        from envs.routing_env import episode_windows, split_windows  # lazy: gymnasium (start-up of the CLI)

        return split_windows(episode_windows(self.workload_obj(seed), self.episode_window_s), part, self.eval_every)

    @property
    def label(self) -> str:
        w = self.workload
        name = Path(w.trace).stem if w.trace else w.name
        return f"{name}@{w.target_rps:g}rps" if w.target_rps else name
