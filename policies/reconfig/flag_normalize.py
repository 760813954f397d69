"""``VecNormalize`` that leaves 0/1 flag columns as they are.

SB3's ``VecNormalize`` standardises every entry of an observation key with its running mean and
variance. A flag that was (almost) constant during training — ``is_reconfiguring`` of the
reconfiguration environment's ``"workers"`` rows had variance ~1e-8 in every slot of the shipped
``reconfig_target`` statistics — then reads as the clip value (10) the first time it is 1. Flags
(and masks) carry their meaning in {0, 1} and are never rescaled: :class:`FlagPreservingVecNormalize`
normalises the other columns as ``VecNormalize`` does and passes the named columns (indices of the
last axis of a key, e.g. :func:`envs.reconfig_env.observation_flag_columns`) through unchanged.
Its statistics still track those columns; they are never used. Pickled with the statistics
(``vecnormalize.pkl``), so a checkpoint evaluates as it was trained; checkpoints saved with a
plain ``VecNormalize`` load and normalise as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from stable_baselines3.common.vec_env import VecNormalize


class FlagPreservingVecNormalize(VecNormalize):
    """``VecNormalize(venv, **kwargs)`` whose ``normalize_obs`` / ``unnormalize_obs`` keep the
    ``flag_columns`` (``{key: last-axis column indices}``) of dict observations unchanged.

    Raises:
        ValueError: for a key that is not in the observation space, or a column outside its last axis.
    """

    def __init__(self, venv, flag_columns: Mapping[str, Sequence[int]], **kwargs) -> None:
        super().__init__(venv, **kwargs)
        spaces = getattr(self.observation_space, "spaces", None)
        cols = {}
        for key, idx in flag_columns.items():
            if spaces is None or key not in spaces:
                raise ValueError(f"flag columns of {key!r}: no such observation key (keys: {list(spaces or [])})")
            width = spaces[key].shape[-1]
            idx = tuple(int(i) for i in idx)
            if any(not 0 <= i < width for i in idx):
                raise ValueError(f"flag columns {list(idx)} of {key!r}: its last axis has {width} columns")
            if idx:
                cols[key] = idx
        self.flag_columns = cols

    @classmethod
    def from_stats(cls, stats, flag_columns: Mapping[str, Sequence[int]]) -> FlagPreservingVecNormalize:
        """The statistics of ``stats`` (a loaded ``VecNormalize``, e.g. an old checkpoint's
        ``vecnormalize.pkl``, no environment) passing ``flag_columns`` through: to measure a
        checkpoint trained on normalised flags with its flags left as they are."""
        out = cls.__new__(cls)
        out.__dict__.update(stats.__dict__)
        out.flag_columns = {k: tuple(int(i) for i in v) for k, v in flag_columns.items() if v}
        return out

    def _keep_flags(self, out, obs):
        if isinstance(obs, dict):
            for key, idx in self.flag_columns.items():
                if key in obs:
                    out[key][..., list(idx)] = np.asarray(obs[key])[..., list(idx)]
        return out

    def normalize_obs(self, obs):
        return self._keep_flags(super().normalize_obs(obs), obs)

    def unnormalize_obs(self, obs):
        return self._keep_flags(super().unnormalize_obs(obs), obs)


__all__ = ["FlagPreservingVecNormalize"]
