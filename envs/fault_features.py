"""The fault observations of the Gymnasium envs (``observe_faults=True``): what a scheduler
knows about faults, per worker-id slot (the routing and reconfiguration envs share them)."""

from __future__ import annotations

import numpy as np

from envs.sim.simulator import Simulator
from envs.sim.worker import WorkerState

#: per-worker-slot fault flags of the Gymnasium observations (``observe_faults=True``), each 0/1.
FAULT_OBSERVATION_FEATURES = ("down", "degraded", "rebuilding")


def fault_flags(sim: Simulator, max_num_workers: int) -> np.ndarray:
    """What a scheduler knows about faults, per worker-id slot: shape ``(max_num_workers, 3)``,
    float32, columns ``FAULT_OBSERVATION_FEATURES``:

    * ``down``: the slot's first GPU has a *detected* failure (not yet repaired) — an undetected
      failure is invisible, as to a real router;
    * ``degraded``: the slot's worker runs slower (a straggler GPU);
    * ``rebuilding``: the slot's worker is REBUILDING (not schedulable yet).

    All zeros without a fault model (:class:`envs.sim.faults.FaultManager`).
    """
    out = np.zeros((max_num_workers, len(FAULT_OBSERVATION_FEATURES)), dtype=np.float32)
    fm = sim.attachments.get("faults")
    if fm is None:
        return out
    pool = sim.config.pool
    for g in fm.detected_failed_gpus():
        if g % pool.min_degree == 0:
            out[pool.worker_id_for(g), 0] = 1.0
    for wid, w in sim.workers.items():
        if fm.is_degraded(w):
            out[wid, 1] = 1.0
        if w.state == WorkerState.REBUILDING:
            out[wid, 2] = 1.0
    return out
