"""The discrete-event prefill-pool simulator (SimPy; no torch or gymnasium imports).

The names below load on first use (PEP 562 ``__getattr__``): importing a light sub-module such as
``envs.sim.config`` or ``envs.sim.options`` (what the ``cpgym`` parser reads) does not load the
simulator, numpy or SimPy.
"""

from __future__ import annotations

from envs.sim.lazy_exports import lazy_attributes

#: public name -> the sub-module defining it
_EXPORTS = {
    "PENDING": "cache", "READY": "cache", "PrefixCache": "cache",
    "EngineConfig": "config", "LatencyConfig": "config", "PredictionErrorConfig": "config", "SimConfig": "config",
    "SLOConfig": "config",
    "Calibration": "cost_model", "CostCoefficients": "cost_model", "CostModel": "cost_model",
    "attention_pairs": "cost_model",
    "EventPriority": "events",
    "DEFAULT_COMPOSITION": "pool", "PoolConfig": "pool",
    "Request": "request", "Workload": "request",
    "PoolView": "router", "Router": "router",
    "SimResult": "simulator", "Simulator": "simulator",
    "Worker": "worker", "WorkerState": "worker",
}

__all__ = list(_EXPORTS)


__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS, __all__)
