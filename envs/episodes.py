"""Episode windows of the Gymnasium environments: a workload cut into consecutive windows
(episodes), their deterministic train/eval split, and the default scenario of the registered
routing id. Imports neither gymnasium nor torch.
"""

from __future__ import annotations

from collections.abc import Sequence

from envs.sim import Workload

#: Default scenario of the registered routing id: conversation trace at this rate [requests/s].
DEFAULT_TARGET_RPS = 12.0
#: Default episode window [s].
DEFAULT_WINDOW_S = 60.0


def episode_windows(workload: Workload, window_s: float) -> list[Workload]:
    """Cuts a workload into consecutive windows of ``window_s`` seconds (episodes), dropping empty
    ones. Uses ``envs.workloads.windows`` (arrival times re-based to the window start).

    Raises:
        ValueError: if ``window_s`` <= 0 or no window holds a request.
    """
    from envs import workloads

    if not window_s > 0:
        raise ValueError(f"window_s must be > 0, got {window_s}")
    wins = [w for w in workloads.windows(workload, window_s) if w.num_requests > 0]
    if not wins:
        raise ValueError(f"workload {workload.name!r} has no request in any window of {window_s} s")
    return wins


def split_windows(wins: Sequence[Workload], part: str, eval_every: int = 4) -> list[Workload]:
    """Deterministic train/eval split of episode windows: every ``eval_every``-th window
    (indices 3, 7, 11, ... for 4) is held out for evaluation, the others train.

    Args:
        part: ``"train"``, ``"eval"`` or ``"all"``.

    Raises:
        ValueError: on an unknown part, ``eval_every`` < 2, or an empty result.
    """
    if eval_every < 2:
        raise ValueError(f"eval_every must be >= 2, got {eval_every}")
    if part == "all":
        out = list(wins)
    elif part == "train":
        out = [w for i, w in enumerate(wins) if i % eval_every != eval_every - 1]
    elif part == "eval":
        out = [w for i, w in enumerate(wins) if i % eval_every == eval_every - 1]
    else:
        raise ValueError(f"part must be 'train', 'eval' or 'all', got {part!r}")
    if not out:
        raise ValueError(f"no {part} window among {len(wins)} windows (eval_every={eval_every})")
    return out


def nonempty_windows(workloads: Workload | Sequence[Workload]) -> list[Workload]:
    """The non-empty episode windows of a workload or a sequence of them.

    Raises:
        ValueError: if no window holds a request.
    """
    ws = [workloads] if isinstance(workloads, Workload) else list(workloads)
    ws = [w for w in ws if w.num_requests > 0]
    if not ws:
        raise ValueError("workloads: no episode window holds a request")
    return ws


def default_routing_windows() -> list[Workload]:
    """Default episodes of the registered routing id (the shipped checkpoint's scenario): the
    training windows (:func:`split_windows`) of :data:`DEFAULT_WINDOW_S`-second windows of the
    Mooncake conversation trace time-scaled to :data:`DEFAULT_TARGET_RPS` requests/s, where the
    40-GPU default pool is loaded (~0.9 utilisation under least-work) and the heuristics differ."""
    from envs import workloads

    wl = workloads.build_workload(trace=workloads.default_traces_dir() / "conversation_trace.jsonl",
                                  target_rps=DEFAULT_TARGET_RPS)
    return split_windows(episode_windows(wl, DEFAULT_WINDOW_S), "train")
