"""Every benchmark task as a Gymnasium environment (issue #39, "Tasks"):
``gymnasium.make("cpgym/Benchmark-v1", task="routing/conversation-0.9-v1", split="train")``.

A routing task gives :class:`envs.routing_env.PrefillRoutingEnv` over the split's episodes (with
the ``faults`` observation key on a task with a GPU failure), a reconfiguration task
``baselines.envs.make_reconfig_env`` (Vertumnus inner router, the task's decision window); both
on ``task.sim_config()``. ``reset()`` draws one of the split's episodes; ``options={"window_index":
i}`` chooses episode ``i``. The split defaults to ``"train"``: validation is for model selection,
test for final numbers only. The test split is sealed: its uses are logged in the ledger
(``benchmark.ledger``) only through ``cpgym benchmark run --split test`` and
``benchmark.evaluate(..., split="test")``; an environment over it is not, so making one emits a
:class:`SealedSplitWarning`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from benchmark.capacity import task_episodes
from benchmark.tasks import Task, get_task
from envs.sim.request import Workload


class SealedSplitWarning(UserWarning):
    """An environment over a task's sealed test split was made (module docstring)."""


def task_env(task: Task, episodes: Sequence[Workload], **env_kwargs):
    """The task's environment over ``episodes`` (module docstring); ``env_kwargs`` go to the
    environment's constructor (they override the task's defaults)."""
    if task.kind == "routing":
        from envs.routing_env import PrefillRoutingEnv  # lazy: gymnasium (benchmark's heuristic runs do not need it)

        kwargs = {"observe_faults": task.gpu_failure_at_s is not None, **env_kwargs}
        return PrefillRoutingEnv(list(episodes), task.sim_config(), **kwargs)
    from baselines.envs import make_reconfig_env  # lazy: gymnasium (benchmark's heuristic runs do not need it)

    kwargs = {"decision_window_s": task.decision_window_s, **env_kwargs} if task.decision_window_s else env_kwargs
    return make_reconfig_env(list(episodes), task.sim_config(), **kwargs)


def make_benchmark_env(task: str | Task, split: str = "train", *, max_episodes: int | None = None, **env_kwargs):
    """The entry point of ``cpgym/Benchmark-v1``: :func:`task_env` over the episodes of ``split``
    (``benchmark.capacity.task_episodes``; at most ``max_episodes``, evenly spread).

    Warns:
        SealedSplitWarning: for ``split="test"`` (module docstring).

    Raises:
        ValueError: on an unknown task id or split, or a task without stored capacity.
    """
    t = get_task(task) if isinstance(task, str) else task
    if split == "test":
        warnings.warn(f"{t.id}: the test split is sealed; its uses are logged in the ledger only through "
                      "`cpgym benchmark run --split test` and benchmark.evaluate(..., split='test'), not through "
                      "this environment", SealedSplitWarning, stacklevel=2)
    return task_env(t, task_episodes(t, split, max_episodes=max_episodes), **env_kwargs)


__all__ = ["SealedSplitWarning", "make_benchmark_env", "task_env"]
