"""The discrete-event prefill-pool simulator (SimPy; no torch or gymnasium imports)."""

from envs.sim.cache import PENDING, READY, PrefixCache
from envs.sim.config import EngineConfig, LatencyConfig, PredictionErrorConfig, SimConfig, SLOConfig
from envs.sim.cost_model import Calibration, CostCoefficients, CostModel, attention_pairs
from envs.sim.events import EventPriority
from envs.sim.pool import DEFAULT_COMPOSITION, PoolConfig
from envs.sim.request import Request, Workload
from envs.sim.router import PoolView, Router
from envs.sim.simulator import SimResult, Simulator
from envs.sim.worker import Worker, WorkerState

__all__ = [
    "PENDING", "READY", "PrefixCache", "EngineConfig", "LatencyConfig", "PredictionErrorConfig", "SimConfig",
    "SLOConfig", "Calibration", "CostCoefficients", "CostModel", "attention_pairs", "DEFAULT_COMPOSITION",
    "PoolConfig", "Request", "Workload", "PoolView", "Router", "EventPriority", "SimResult", "Simulator",
    "Worker", "WorkerState",
]
