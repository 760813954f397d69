"""The discrete-event prefill-pool simulator (SimPy; no torch or gymnasium imports).

The names below load on first use (PEP 562 ``__getattr__``): importing a light sub-module such as
``envs.sim.config`` or ``envs.sim.options`` (what the ``cpgym`` parser reads) does not load the
simulator, numpy or SimPy.
"""

from __future__ import annotations

import importlib
import importlib.util

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


def __getattr__(name: str):
    """A public name (:data:`_EXPORTS`) or a sub-module (``pkg.traces`` after ``import pkg``, as
    when this file imported every sub-module), loaded on first use."""
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    elif not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return value  # not cached here: a test that patches the sub-module's name patches this one too


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
