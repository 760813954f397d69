"""Checks of the training settings shared by ``cpgym train routing`` and ``cpgym train reconfig``."""

from __future__ import annotations

import numbers
from typing import Any

#: Largest ``--train-seed``: SB3 seeds numpy's legacy global generator with it (``np.random.seed``
#: takes ``[0, 2**32 - 1]``); the seeds derived from it (``seed * 1000 + rank`` of the environments,
#: ``seed + episode`` of the simulator) go to ``numpy.random.SeedSequence``, which takes any integer >= 0.
MAX_TRAIN_SEED = 2**32 - 1


def check_train_seed(seed: Any) -> None:
    """The PPO / environment seed of a training config must be an integer in ``[0, MAX_TRAIN_SEED]``.

    Raises:
        ValueError: naming the field ``seed`` (the CLI adds ``--train-seed``) and the range otherwise.
    """
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed <= MAX_TRAIN_SEED:
        raise ValueError(f"seed must be an integer in [0, {MAX_TRAIN_SEED}], got {seed!r}")


def check_minibatch(n_steps: int, n_envs: int, batch_size: int) -> None:
    """PPO needs ``2 <= batch_size <= n_steps * n_envs`` (one rollout holds ``n_steps * n_envs``
    transitions; SB3 ``PPO`` asserts ``batch_size > 1``).

    Raises:
        ValueError: naming both sizes otherwise.
    """
    if not 2 <= batch_size <= n_steps * n_envs:
        raise ValueError(f"batch_size must be in [2, n_steps x n_envs = {n_steps * n_envs}], got {batch_size}")
