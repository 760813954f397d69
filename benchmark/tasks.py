"""Named, versioned benchmark tasks (issue #39, "Tasks") and their episodes.

A :class:`Task` fixes everything a comparison depends on: the kind (``routing`` or ``reconfig``),
the workload (a trace file or a named generator with its parameters), the pool and hardware
calibration, the TTFT SLO rule (``envs.sim.config.SLOConfig``'s defaults), the load as a fraction
of capacity **measured on the training split only** (``benchmark.capacity``), episode, warm-up and
decision windows, and the split (``benchmark.splits``). Ids name what a task is and end in a
version: ``routing/conversation-0.9-v1``. A task whose definition changes gets a new version; an
old id is never redefined.

Episodes (:func:`episodes`):

* **trace tasks** — the trace is scaled by the task's ``rate_scale`` (``target_rps`` over the
  training block's own mean rate), then each split's block is cut into consecutive windows of
  ``episode_window_s``; an episode is one window preceded by ``warmup_s`` of the *same block*
  (the first window starts ``warmup_s`` into the block). Only requests arriving inside the window
  are measured (``metadata["measure_from_s"]``); all requests run to completion (no horizon).
* **generator tasks** — one episode per seed of the split's seed range: the generator's workload
  for that seed, scaled by ``rate_scale``; routing tasks keep the first ``warmup_s +
  episode_window_s`` seconds (warm-up, then the measured window), reconfiguration tasks the whole
  scenario (measured from ``warmup_s``).

Every episode's ``metadata`` holds ``task``, ``split``, ``episode_index``, ``seed`` (generator)
or ``block_offset_s`` (trace: where the episode starts on the scaled trace's clock [s]),
``measure_from_s``, ``window_start_s`` and ``window_end_s``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, replace
from importlib import resources
from pathlib import Path

from benchmark.splits import SPLIT_NAMES, SeedSplit, TraceSplit, check_split_name
from envs import workloads
from envs.sim.config import SimConfig
from envs.sim.fault_config import GPU_FAILURE, FaultConfig, FaultEvent
from envs.sim.pool import DEFAULT_COMPOSITION, PoolConfig
from envs.sim.request import Workload
from envs.workloads import transforms

#: Task kinds: what the evaluated policy decides.
KINDS = ("routing", "reconfig")


def calibration_file(name: str) -> str:
    """Path of a shipped calibration (``envs/sim/calibrations/<name>.json``)."""
    return str(resources.files("envs.sim").joinpath("calibrations", f"{name}.json"))


@dataclass(frozen=True)
class Task:
    """One benchmark task.

    Args:
        id: ``<kind>/<name>-v<version>`` (e.g. ``routing/conversation-0.9-v1``).
        kind: ``"routing"`` (the policy routes each request on a fixed pool) or ``"reconfig"``
            (the policy also splits and merges workers).
        description: one line: what the task tests.
        trace: trace file name in the shared traces folder (``envs.workloads.default_traces_dir``),
            exclusive with ``generator``.
        generator: named workload (``envs.workloads.WORKLOADS``), exclusive with ``trace``.
        generator_params: keyword overrides of the generator, ``((name, value), ...)``.
        split: :class:`TraceSplit` (trace) or :class:`SeedSplit` (generator).
        load_fraction: target arrival rate as a fraction of the capacity measured on the training
            split; ``None`` keeps the generator's own rates (reconfiguration scenarios sized by
            their generator, e.g. ``matched-phases``), its load then reported as measured.
        num_gpus, composition: the pool (``PoolConfig``; paper §9: 40 GPUs, ``cp4x6,cp2x8``).
        calibration: shipped calibration name (``None``: ``SimConfig``'s default, Qwen3-30B-A3B
            on H20-3e).
        node_calibrations: heterogeneous pool: one shipped calibration name per node.
        gpu_failure_at_s: a GPU failure this many seconds into every episode's measured window
            (GPU 0, a CP-4 worker's first rank), detected after ``fault_detection_s`` and the
            surviving GPUs re-formed after ``fault_rebuild_s``; ``None``: no fault.
        episode_window_s: measured window of an episode [s] (routing).
        warmup_s: warm-up before each measured window [s], from the same block or seed.
        decision_window_s: the controller's decision window [s] (reconfig).
        capacity_definition: the named capacity definition (``envs.planning.capacity_definitions``).
        reference: the policy every paired difference is taken against (``tuned:<name>`` is the
            task's stored tuned variant; see ``benchmark.tuning``).

    Raises:
        ValueError: naming the field, on an inconsistent or out-of-range definition.
    """

    id: str
    kind: str
    description: str
    split: TraceSplit | SeedSplit
    trace: str | None = None
    generator: str | None = None
    generator_params: tuple[tuple[str, object], ...] = ()
    load_fraction: float | None = None
    num_gpus: int = 40
    composition: str = DEFAULT_COMPOSITION
    calibration: str | None = None
    node_calibrations: tuple[str, ...] = ()
    gpu_failure_at_s: float | None = None
    fault_detection_s: float = 5.0
    fault_rebuild_s: float = 10.0
    episode_window_s: float = 10.0
    warmup_s: float = 30.0
    decision_window_s: float | None = None
    capacity_definition: str = "protocol-queueing-delay"
    reference: str = "tuned:vertumnus-router"

    def __post_init__(self) -> None:
        kind, _, rest = self.id.partition("/")
        if kind != self.kind or not rest or not rest.rsplit("-", 1)[-1].startswith("v"):
            raise ValueError(f"task id {self.id!r}: expected '<kind>/<name>-v<version>' with kind {self.kind!r}")
        if self.kind not in KINDS:
            raise ValueError(f"task {self.id}: kind must be one of {KINDS}, got {self.kind!r}")
        if (self.trace is None) == (self.generator is None):
            raise ValueError(f"task {self.id}: exactly one of trace and generator must be set")
        if self.trace is not None and not isinstance(self.split, TraceSplit):
            raise ValueError(f"task {self.id}: a trace task needs a TraceSplit")
        if self.generator is not None and not isinstance(self.split, SeedSplit):
            raise ValueError(f"task {self.id}: a generator task needs a SeedSplit")
        if self.load_fraction is not None and not (0 < self.load_fraction <= 16):
            raise ValueError(f"task {self.id}: load_fraction must be in (0, 16], got {self.load_fraction!r}")
        if self.load_fraction is None and self.trace is not None:
            raise ValueError(f"task {self.id}: a trace task needs a load_fraction (the trace's own rate is arbitrary)")
        for name in ("episode_window_s", "warmup_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= (0 if name == "warmup_s" else 1e-9)):
                raise ValueError(f"task {self.id}: {name} must be a finite number {'>= 0' if name == 'warmup_s' else '> 0'}")

    # --- pool and simulator -----------------------------------------------------------------
    def sim_config(self, seed: int = 0) -> SimConfig:
        """The simulator configuration of every episode of the task (run seed ``seed``)."""
        faults = None
        if self.gpu_failure_at_s is not None:
            faults = FaultConfig(events=(FaultEvent(GPU_FAILURE, time_s=self.warmup_s + self.gpu_failure_at_s, gpu=0),),
                                 detection_delay_s=self.fault_detection_s, rebuild_s=self.fault_rebuild_s)
        return SimConfig(pool=PoolConfig(num_gpus=self.num_gpus, composition=self.composition),
                         calibration_path=calibration_file(self.calibration) if self.calibration else None,
                         node_calibration_paths=tuple(calibration_file(n) for n in self.node_calibrations),
                         faults=faults, seed=seed)

    def capacity_sim_config(self) -> SimConfig:
        """The configuration capacity is measured with: the task's healthy pool (no fault)."""
        return replace(self.sim_config(), faults=None)

    @property
    def workload_label(self) -> str:
        """The trace's stem or the generator's name."""
        return Path(self.trace).stem if self.trace else str(self.generator)

    def to_dict(self) -> dict:
        """The task's definition as plain JSON data (``cpgym benchmark list``)."""
        d = {"id": self.id, "kind": self.kind, "description": self.description,
             "workload": ({"trace": self.trace} if self.trace else
                          {"generator": self.generator, "params": dict(self.generator_params)}),
             "load_fraction": self.load_fraction, "pool": {"num_gpus": self.num_gpus, "composition": self.composition},
             "calibration": self.calibration or "default", "node_calibrations": list(self.node_calibrations),
             "gpu_failure_at_s": self.gpu_failure_at_s, "episode_window_s": self.episode_window_s,
             "warmup_s": self.warmup_s, "decision_window_s": self.decision_window_s,
             "capacity_definition": self.capacity_definition, "reference": self.reference,
             "slo": asdict(self.sim_config().slo)}
        d["splits"] = self.split.to_dict()
        return d


# ------------------------------------------------------------------------------------------
# workloads of a task


@functools.lru_cache(maxsize=8)
def _load_trace(path: str) -> Workload:
    return workloads.load_trace(path)


def trace_path(task: Task) -> Path:
    """The task's trace file in the shared traces folder."""
    return workloads.default_traces_dir() / str(task.trace)


def generator_workload(task: Task, seed: int, **overrides) -> Workload:
    """The generator's workload of ``seed`` (the task's parameters, then ``overrides``)."""
    return workloads.get_workload(str(task.generator), seed=seed, **{**dict(task.generator_params), **overrides})


def training_workload(task: Task) -> Workload:
    """The workload capacity is measured on: the training block of the trace (unscaled, re-based
    to 0), or the generator's workload of the first training seed. Nothing outside the training
    split."""
    if task.trace is not None:
        a, b = task.split.train_s
        return transforms.window(_load_trace(str(trace_path(task))), a, b)
    return generator_workload(task, task.split.seeds("train")[0])


def rate_scale(task: Task, capacity_rps: float, native_rps: float) -> float:
    """``target_rps / native_rps``: the factor every episode's arrival rate is multiplied by
    (1 for a generator task without a ``load_fraction``)."""
    if task.load_fraction is None:
        return 1.0
    return task.load_fraction * capacity_rps / native_rps


def episodes(task: Task, split: str, scale: float, *, max_episodes: int | None = None) -> list[Workload]:
    """The episodes of ``split`` at arrival-rate factor ``scale`` (:func:`rate_scale`), in order.

    Args:
        task: the task.
        split: ``"train"``, ``"validation"`` or ``"test"``.
        scale: the task's rate scale (``benchmark.capacity.task_rate_scale``).
        max_episodes: at most this many, evenly spread over the split (first and last kept).

    Returns:
        Workloads re-based to the episode's start (module docstring: metadata).

    Raises:
        ValueError: on an unknown split, a scale <= 0, or a trace gap shorter than the warm-up at
            this scale (the blocks would not be sealed).
    """
    check_split_name(split)
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"task {task.id}: rate scale must be a finite number > 0, got {scale!r}")
    if task.trace is not None:
        return _spread(_trace_episodes(task, split, scale), max_episodes)
    # the seeds are chosen first: only the kept episodes are generated
    return [_seed_episode(task, split, i, seed, scale) for i, seed in _spread(list(enumerate(task.split.seeds(split))),
                                                                                max_episodes)]


def _trace_episodes(task: Task, split: str, scale: float) -> list[Workload]:
    if task.split.gap_s / scale < task.warmup_s - 1e-9:
        raise ValueError(f"task {task.id}: the split's gap ({task.split.gap_s:g} s of the trace, "
                         f"{task.split.gap_s / scale:.1f} s at rate scale {scale:.3g}) is shorter than the warm-up "
                         f"({task.warmup_s:g} s)")
    full = transforms.scale_rate(_load_trace(str(trace_path(task))), scale)
    out = []
    for k, start in enumerate(_window_starts(task, split, scale)):
        ep = transforms.window(full, start - task.warmup_s, start + task.episode_window_s)
        out.append(_tag(ep, task, split, k, block_offset_s=start - task.warmup_s))
    return out


def _window_starts(task: Task, split: str, scale: float) -> list[float]:
    """Start of each measured window of a trace split's block on the scaled clock [s]."""
    a, b = (x / scale for x in task.split.block_s(split))
    w, warm = task.episode_window_s, task.warmup_s
    starts = []
    while a + warm + (len(starts) + 1) * w <= b + 1e-9:
        starts.append(a + warm + len(starts) * w)
    return starts


def num_episodes(task: Task, split: str, scale: float | None) -> int | None:
    """How many episodes :func:`episodes` cuts from ``split`` at rate factor ``scale``, without
    building them (a generator task: its seeds; a trace task: ``None`` when ``scale`` is)."""
    check_split_name(split)
    if task.trace is None:
        return len(task.split.seeds(split))
    return None if scale is None else len(_window_starts(task, split, scale))


def _seed_episode(task: Task, split: str, index: int, seed: int, scale: float) -> Workload:
    if task.kind == "routing":
        native_s = (task.warmup_s + task.episode_window_s) * scale
        wl = generator_workload(task, seed, duration_s=math.ceil(native_s) + 1.0)
        wl = transforms.scale_rate(wl, scale) if scale != 1.0 else wl
        wl = transforms.window(wl, 0.0, task.warmup_s + task.episode_window_s)
        return _tag(wl, task, split, index, seed=seed)
    wl = generator_workload(task, seed)
    wl = transforms.scale_rate(wl, scale) if scale != 1.0 else wl
    return _tag(wl, task, split, index, seed=seed, window_end_s=max(wl.duration_s, task.warmup_s) + 1e-9)


def _tag(wl: Workload, task: Task, split: str, index: int, *, window_end_s: float | None = None, **extra) -> Workload:
    meta = {**wl.metadata, "task": task.id, "split": split, "episode_index": index,
            "measure_from_s": task.warmup_s, "window_start_s": task.warmup_s,
            "window_end_s": window_end_s if window_end_s is not None else task.warmup_s + task.episode_window_s,
            "window_index": index, **extra}
    return replace(wl, metadata=meta)


def _spread(items: list, max_items: int | None) -> list:
    if max_items is None or max_items >= len(items):
        return items
    if max_items < 1:
        raise ValueError(f"max_episodes must be >= 1, got {max_items}")
    n = len(items)
    idx = sorted({round(i * (n - 1) / max(max_items - 1, 1)) for i in range(max_items)})
    return [items[i] for i in idx]


# ------------------------------------------------------------------------------------------
# suite v1

#: The conversation trace's split (its own clock: 0 ... 3537 s): train, then validation,
#: then test (48 %, 16 %, 28 % of it), separated by 150 s gaps (>= the 30 s warm-up at any rate scale up to 5).
CONVERSATION_SPLIT = TraceSplit(train_s=(0.0, 1700.0), validation_s=(1850.0, 2400.0), test_s=(2550.0, 3540.0), gap_s=150.0)
#: Seed ranges of every generator task (disjoint: train 0-63, validation 1000-1015, test 2000-2019).
GENERATOR_SPLIT = SeedSplit(train=(0, 64), validation=(1000, 1016), test=(2000, 2020))
#: Reconfiguration scenarios are longer: fewer episodes per split.
RECONFIG_SPLIT = SeedSplit(train=(0, 32), validation=(1000, 1008), test=(2000, 2010))
#: Heterogeneous pool: H20 (96 GB) and H20-3e (141 GB) nodes alternating, 5 nodes x 8 GPUs.
HETERO_NODES = ("qwen3-30b-a3b__h20", "qwen3-30b-a3b__h20-3e", "qwen3-30b-a3b__h20", "qwen3-30b-a3b__h20-3e",
                "qwen3-30b-a3b__h20")

CONVERSATION = "conversation_trace.jsonl"


def _suite() -> dict[str, Task]:
    tasks = []
    for load in (0.7, 0.9):
        tasks.append(Task(f"routing/conversation-{load:g}-v1", "routing",
                          f"Mooncake conversation trace at {load:g} of capacity, paper pool (40 GPUs, cp4x6,cp2x8)",
                          CONVERSATION_SPLIT, trace=CONVERSATION, load_fraction=load))
        tasks.append(Task(f"routing/leval-like-{load:g}-v1", "routing",
                          f"L-Eval-like long-document questions at {load:g} of capacity, paper pool",
                          GENERATOR_SPLIT, generator="leval-like", load_fraction=load, episode_window_s=20.0))
        tasks.append(Task(f"routing/tool-agent-{load:g}-v1", "routing",
                          f"Tool-agent sessions at {load:g} of capacity, paper pool",
                          GENERATOR_SPLIT, generator="tool-agent", load_fraction=load, episode_window_s=20.0))
    tasks.append(Task("routing/hetero-h20-h20-3e-0.9-v1", "routing",
                      "conversation trace at 0.9 of capacity on a heterogeneous pool (H20 and H20-3e nodes alternating)",
                      CONVERSATION_SPLIT, trace=CONVERSATION, load_fraction=0.9, node_calibrations=HETERO_NODES))
    tasks.append(Task("routing/gpu-failure-0.9-v1", "routing",
                      "conversation trace at 0.9 of capacity; GPU 0 fails 5 s into every 20 s window (detected after "
                      "5 s, its worker re-formed 10 s later)",
                      CONVERSATION_SPLIT, trace=CONVERSATION, load_fraction=0.9, episode_window_s=20.0,
                      gpu_failure_at_s=5.0))
    tasks.append(Task("reconfig/matched-phases-v1", "reconfig",
                      "randomised rising-rate / alternating short- and long-heavy phases at 0.4-0.8 of the mix's "
                      "capacity (the generator's own load)",
                      RECONFIG_SPLIT, generator="matched-phases", warmup_s=0.0, decision_window_s=20.0,
                      reference="tuned:vertumnus"))
    tasks.append(Task("reconfig/production-day-v1", "reconfig",
                      "a synthetic production day compressed 60x (24 h in 1,440 s): diurnal rate swing 4x, long requests "
                      "~6 % of arrivals and 40-45 % of input tokens, prefix hit rate 36-54 % (paper §2); peak at 0.92 of "
                      "the peak hour's capacity (results/benchmark/production-day)",
                      RECONFIG_SPLIT, generator="production-day", warmup_s=0.0, decision_window_s=20.0,
                      reference="tuned:vertumnus"))
    return {t.id: t for t in tasks}


#: The benchmark suite v1: task id -> :class:`Task`.
TASKS: dict[str, Task] = _suite()


def get_task(task_id: str) -> Task:
    """The task named ``task_id``.

    Raises:
        ValueError: for an unknown id, listing the known ones.
    """
    try:
        return TASKS[task_id]
    except KeyError:
        raise ValueError(f"unknown task {task_id!r}; known tasks: {', '.join(TASKS)}") from None


def parse_task_ids(text: str) -> list[Task]:
    """``"ID[,ID...]"`` (``all``: every task) -> tasks, in the order given.

    Raises:
        ValueError: naming an unknown or repeated id, or on an empty item (``"a,,b"``, ``"a,"``).
    """
    ids = [s.strip() for s in str(text).split(",")]
    if ids == ["all"]:
        return list(TASKS.values())
    if not any(ids) or not all(ids):
        raise ValueError(f"--tasks: expected ID[,ID...] or 'all' without empty items, got {text!r}")
    seen = [i for i in ids if ids.count(i) > 1]
    if seen:
        raise ValueError(f"--tasks lists {seen[0]!r} twice")
    return [get_task(i) for i in ids]


__all__ = ["KINDS", "SPLIT_NAMES", "Task", "TASKS", "get_task", "parse_task_ids", "episodes", "training_workload",
           "rate_scale", "generator_workload", "trace_path", "calibration_file", "num_episodes"]
