"""Worker entity: one persistent CP worker of degree C on C GPUs (paper §3)."""

from __future__ import annotations

from collections import deque
from enum import IntEnum

from envs.sim.cache import PrefixCache
from envs.sim.request import Request


class WorkerState(IntEnum):
    """Lifecycle of a worker (paper §6 reconfiguration protocol).

    ACTIVE: schedulable. DRAINING: removed from candidates, finishing in-flight steps.
    SWITCHING: ranks at the common step boundary, switching to the pre-built CP groups.
    RETIRED: replaced by the workers of a split/merge, or removed after a detected fault (kept
    only in records).
    REBUILDING: formed on healthy GPUs after a fault or a repair, starting up (process start,
    weight load, graph capture; ``envs/sim/faults.py``); not schedulable.
    """

    ACTIVE = 0
    DRAINING = 1
    SWITCHING = 2
    RETIRED = 3
    REBUILDING = 4


class Worker:
    """A CP worker with its FCFS queue, current engine step and prefix cache.

    The attributes are read-only for policies; the simulator mutates them.

    Attributes:
        worker_id: stable id (first GPU // smallest supported degree).
        degree: CP degree C (number of GPUs / ranks).
        first_gpu: index of its first GPU; it owns ``first_gpu .. first_gpu + C - 1``.
        node: topology group index.
        state: :class:`WorkerState`.
        epoch: configuration epoch the worker was created in (paper §6/§8).
        queue: FCFS queue of dispatched requests not yet started.
        queued_predicted_s: sum of the routing-time predicted service times of ``queue`` [s].
        num_queued_new_tokens: sum of routing-time new tokens of ``queue`` [tokens].
        batch: requests of the running engine step (empty when idle).
        step_start_s / step_predicted_end_s: start and predicted end of the running step [s].
        cache: the worker's :class:`PrefixCache`.
        gpu_time_s: GPU-seconds spent in engine steps (step time x C) [GPU s].
        busy_time_s: wall time spent in engine steps [s].
        num_steps: engine steps run.
        kv_capacity_tokens: KV capacity of the worker [tokens].
        max_prompt_tokens: longest prompt it can serve: min(model limit, KV capacity) [tokens].
        stopped: a rank failed (``envs/sim/faults.py``): no engine step starts or ends; routers
            are not told until the failure is detected (the state stays as it was).
        step_event: the pending end-of-step event of the running step (None when idle).
        cost_model: the predicted cost model ``E_C(R, P)`` of its node's GPU type (heterogeneous
            pools: ``SimConfig.node_calibration_paths``); the pool's one model otherwise.
        gpu_type: its node's GPU type (from the calibration).
    """

    __slots__ = ("worker_id", "degree", "first_gpu", "node", "state", "epoch", "queue", "queued_predicted_s",
                 "num_queued_new_tokens", "batch", "step_start_s", "step_predicted_end_s", "cache", "gpu_time_s",
                 "busy_time_s", "num_steps", "kv_capacity_tokens", "max_prompt_tokens", "created_s", "stopped", "step_event",
                 "cost_model", "gpu_type")

    def __init__(self, worker_id: int, degree: int, first_gpu: int, node: int, cache: PrefixCache,
                 kv_capacity_tokens: int, epoch: int = 0, created_s: float = 0.0) -> None:
        self.worker_id = worker_id
        self.degree = degree
        self.first_gpu = first_gpu
        self.node = node
        self.state = WorkerState.ACTIVE
        self.epoch = epoch
        self.queue: deque[Request] = deque()
        self.queued_predicted_s = 0.0
        self.num_queued_new_tokens = 0
        self.batch: list[Request] = []
        self.step_start_s = 0.0
        self.step_predicted_end_s = 0.0
        self.cache = cache
        self.gpu_time_s = 0.0
        self.busy_time_s = 0.0
        self.num_steps = 0
        self.kv_capacity_tokens = kv_capacity_tokens
        self.max_prompt_tokens = kv_capacity_tokens  # the simulator lowers it to the model's limit
        self.created_s = created_s
        self.stopped = False
        self.step_event = None
        self.cost_model = None  # set by the simulator
        self.gpu_type = ""

    @property
    def gpus(self) -> range:
        return range(self.first_gpu, self.first_gpu + self.degree)

    @property
    def is_idle(self) -> bool:
        return not self.batch

    def __repr__(self) -> str:
        return f"Worker(id={self.worker_id}, cp{self.degree}@{self.first_gpu}, {self.state.name}, queue={len(self.queue)})"
