"""The fault model of a run: :class:`FaultConfig` (a schedule of :class:`FaultEvent` plus
optional random processes) and its YAML/JSON file format (:func:`load_fault_config`).

What each fault kind does to the pool, and the recovery, is the mechanism's concern
(:class:`envs.sim.faults.FaultManager`, ``envs/sim/faults.py``); this module only describes and
validates the model.

Defaults (sources):

* ``detection_delay_s = 30``: Kubernetes liveness probe defaults, ``periodSeconds`` 10 x
  ``failureThreshold`` 3 (kubernetes API ``V1Probe``), the usual health check of a serving pod;
  NCCL/torch collective timeouts are far longer (minutes) and are not what a router relies on.
* ``rebuild_s = 60``: vLLM start-up with a warm compile cache: weights 0.9 s, torch.compile
  7.5 s (cached), CUDA graph capture 17 s, engine init 34 s, first response after 59 s
  (vllm-project/vllm#20264); vllm-project/vllm#19824 lists ~10 s weight load, ~60 s graph
  capture for Llama-70B TP-8 (longer without caches).
* ``repair_s = 3600``: assumption (drain the node, reset or replace the GPU, re-qualify it); no
  published median was found. Most runs are shorter, so a failed GPU rarely returns.
* Random rates default to 0 (off). ``LLAMA3_GPU_FAILURE_RATE_PER_GPU_HOUR`` is the measured
  rate of the Llama 3 405B pre-training (Meta, "The Llama 3 Herd of Models", 2024, Table 5): 256
  GPU-attributed unexpected interruptions (faulty GPU 148, HBM3 72, SRAM 19, GPU system
  processor 17) in 54 days on 16,384 H100 GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path

from envs.sim.checks import is_finite_number
from envs.sim.yaml_keys import check_unique_keys, compose, load

GPU_FAILURE = "gpu_failure"
NODE_FAILURE = "node_failure"
STRAGGLER = "straggler"
LINK_SLOWDOWN = "link_slowdown"
LINK_FAILURE = "link_failure"
FAULT_KINDS = (GPU_FAILURE, NODE_FAILURE, STRAGGLER, LINK_SLOWDOWN, LINK_FAILURE)

#: Meta, "The Llama 3 Herd of Models" (2024), Table 5: 256 GPU-attributed interruptions
#: (148 + 72 + 19 + 17) over 54 days x 24 h x 16,384 H100 GPUs [1/(GPU h)].
LLAMA3_GPU_FAILURE_RATE_PER_GPU_HOUR = 256 / (54 * 24 * 16384)

_EVENT_FIELDS = {
    GPU_FAILURE: ("gpu",),
    NODE_FAILURE: ("node",),
    STRAGGLER: ("gpu", "factor", "duration_s"),
    LINK_SLOWDOWN: ("link", "factor", "duration_s"),
    LINK_FAILURE: ("link", "duration_s"),
}


@dataclass(frozen=True)
class FaultEvent:
    """One scheduled fault.

    Attributes:
        kind: one of ``FAULT_KINDS``.
        time_s: when it happens [s], >= 0.
        gpu: GPU index (``gpu_failure``, ``straggler``), else -1.
        node: node index (``node_failure``), else -1.
        factor: step-time multiplier > 1 (``straggler``) or bandwidth share in (0, 1)
            (``link_slowdown``); 1 otherwise.
        duration_s: how long a straggler / link fault lasts [s] (> 0 for those kinds).
        link: ``"intra:<node>"``, ``"out:<node>"`` or ``"in:<node>"`` (link faults), else "".

    Raises:
        ValueError: naming the field and what was expected.
    """

    kind: str
    time_s: float
    gpu: int = -1
    node: int = -1
    factor: float = 1.0
    duration_s: float = 0.0
    link: str = ""

    def __post_init__(self) -> None:
        for name in ("time_s", "factor", "duration_s"):
            if is_finite_number(getattr(self, name)):
                object.__setattr__(self, name, float(getattr(self, name)))
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"kind: expected one of {list(FAULT_KINDS)}, got {self.kind!r}")
        if not is_finite_number(self.time_s) or self.time_s < 0:
            raise ValueError(f"time_s: expected a finite number >= 0, got {self.time_s!r}")
        need = _EVENT_FIELDS[self.kind]
        if "gpu" in need and not (isinstance(self.gpu, int) and self.gpu >= 0):
            raise ValueError(f"gpu: a {self.kind} needs a GPU index >= 0, got {self.gpu!r}")
        if "node" in need and not (isinstance(self.node, int) and self.node >= 0):
            raise ValueError(f"node: a {self.kind} needs a node index >= 0, got {self.node!r}")
        if "duration_s" in need and not (is_finite_number(self.duration_s) and self.duration_s > 0):
            raise ValueError(f"duration_s: a {self.kind} needs a finite duration > 0, got {self.duration_s!r}")
        if self.kind == STRAGGLER and not (is_finite_number(self.factor) and self.factor >= 1):
            raise ValueError(f"factor: a straggler's step-time factor must be >= 1, got {self.factor!r}")
        if self.kind == LINK_SLOWDOWN and not (is_finite_number(self.factor) and 0 < self.factor < 1):
            raise ValueError(f"factor: a link slowdown's bandwidth share must be in (0, 1), got {self.factor!r}")
        if "link" in need:
            parse_link(self.link)

    @property
    def end_s(self) -> float:
        return self.time_s + self.duration_s


def parse_link(link: str) -> tuple[str, int]:
    """``"intra:3" -> ("intra", 3)``; the link keys of :class:`envs.sim.links.KVLinks`.

    Raises:
        ValueError: unless ``link`` is ``intra|out|in`` ``:`` a node index.
    """
    kind, _, node = str(link).partition(":")
    if kind not in ("intra", "out", "in") or not node.isdigit():
        raise ValueError(f"link: expected 'intra:<node>', 'out:<node>' or 'in:<node>', got {link!r}")
    return kind, int(node)


@dataclass(frozen=True)
class FaultConfig:
    """The fault model of a run (module docstring: semantics, defaults and their sources).

    Args:
        events: scheduled faults, any order.
        detection_delay_s: fault -> detection [s] (default 30).
        rebuild_s: detection -> re-formed workers ACTIVE, and repair -> rejoined workers ACTIVE [s]
            (default 60).
        repair_s: detection -> failed GPU healthy again [s] (default 3600).
        gpu_failure_rate_per_gpu_hour: Poisson rate of random GPU failures [1/(GPU h)] (0: off).
        node_failure_rate_per_node_hour: Poisson rate of random node failures [1/(node h)] (0: off).
        straggler_rate_per_gpu_hour: Poisson rate of random stragglers [1/(GPU h)] (0: off).
        straggler_factor: step-time factor of a random straggler (default 2).
        straggler_duration_s: duration of a random straggler [s] (default 60).
        impact_window_s: metrics compare TTFT / SLO attainment of the requests arriving this
            long before vs after each fault [s] (default 120).
        source: where the config came from (file name), for messages.

    Raises:
        ValueError: on a negative / non-finite field or an invalid event (naming it).
    """

    events: tuple[FaultEvent, ...] = ()
    detection_delay_s: float = 30.0
    rebuild_s: float = 60.0
    repair_s: float = 3600.0
    gpu_failure_rate_per_gpu_hour: float = 0.0
    node_failure_rate_per_node_hour: float = 0.0
    straggler_rate_per_gpu_hour: float = 0.0
    straggler_factor: float = 2.0
    straggler_duration_s: float = 60.0
    impact_window_s: float = 120.0
    source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "events", tuple(self.events))
        for f in fields(self):
            if f.name in ("events", "source"):
                continue
            v = getattr(self, f.name)
            if not is_finite_number(v) or v < 0:
                raise ValueError(f"faults.{f.name}: expected a finite number >= 0, got {v!r}")
            object.__setattr__(self, f.name, float(v))
        if self.straggler_factor < 1:
            raise ValueError(f"faults.straggler_factor: expected >= 1, got {self.straggler_factor!r}")
        for f in ("rebuild_s", "straggler_duration_s", "impact_window_s"):
            if getattr(self, f) <= 0:
                raise ValueError(f"faults.{f}: expected > 0, got {getattr(self, f)!r}")
        for i, e in enumerate(self.events):
            if not isinstance(e, FaultEvent):
                raise ValueError(f"faults.events[{i}]: expected a FaultEvent, got {type(e).__name__}")

    @property
    def has_random(self) -> bool:
        return (self.gpu_failure_rate_per_gpu_hour > 0 or self.node_failure_rate_per_node_hour > 0
                or self.straggler_rate_per_gpu_hour > 0)

    @property
    def is_empty(self) -> bool:
        """No scheduled fault and no random process: the run is exactly a fault-free run."""
        return not self.events and not self.has_random


# ---------------------------------------------------------------------------------- loading
_TOP_KEYS = {f.name for f in fields(FaultConfig)} - {"events", "source"}
_EVENT_KEYS = {f.name for f in fields(FaultEvent)}


def load_fault_config(path: str | Path) -> FaultConfig:
    """Reads a fault schedule (YAML or JSON; JSON is read as YAML)::

        detection_delay_s: 30      # optional, every FaultConfig field
        rebuild_s: 60
        events:
          - {kind: gpu_failure, time_s: 120, gpu: 5}
          - {kind: straggler, time_s: 200, gpu: 9, factor: 3, duration_s: 60}
          - {kind: node_failure, time_s: 400, node: 2}

    Raises:
        FileNotFoundError: if ``path`` does not exist.
        ValueError: one line ``<file>:<line>: <field>: <what was expected>``; also for an empty
            file or a mapping with neither ``events`` nor a random fault process (``{}``;
            ``events: []`` is the empty schedule).
    """
    import yaml

    p = Path(path)
    if p.is_dir():
        raise IsADirectoryError(21, "is a folder, expected a fault schedule (.yaml/.json)", str(p))
    if not p.exists():
        raise FileNotFoundError(2, "fault schedule does not exist", str(p))

    try:
        root = compose(p.read_text())  # 1e9 is a number (PyYAML's own resolver reads it as text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        raise ValueError(f"{p}:{line}: not valid YAML/JSON: {getattr(exc, 'problem', exc)}") from None

    check_unique_keys(root, str(p))  # a second 'events:' silently replaced the first
    if root is None:  # an empty file is more likely a wrong path than a wish for no faults
        raise ValueError(f"{p}:1: the file has no fault schedule (empty); expected a mapping with 'events' "
                         "(write 'events: []' for a run without faults)")
    return _config_from_node(root, str(p))


def _err(src: str, node, where: str, msg: str) -> ValueError:
    return ValueError(f"{src}:{node.start_mark.line + 1}: {where}: {msg}")


def _scalar(node):
    import yaml

    if not isinstance(node, yaml.ScalarNode):
        return node
    return load(yaml.serialize(node))


def _config_from_node(root, src: str) -> FaultConfig:
    import yaml

    if not isinstance(root, yaml.MappingNode):
        raise _err(src, root, "<file>", "expected a mapping with 'events' and optional FaultConfig fields")
    kw: dict = {}
    events: list[FaultEvent] | None = None
    for knode, vnode in root.value:
        key = _scalar(knode)
        if key == "events":
            if not isinstance(vnode, yaml.SequenceNode):
                raise _err(src, vnode, "events", "expected a list of fault events")
            events = [_event_from_node(n, src, i) for i, n in enumerate(vnode.value)]
            first: dict[FaultEvent, int] = {}
            for i, (ev, n) in enumerate(zip(events, vnode.value)):
                if ev in first:  # most likely a copy-paste slip: one fault listed twice
                    raise _err(src, n, f"events[{i}]", f"repeats events[{first[ev]}] (same kind, time, target and "
                                                       "settings); expected each fault once")
                first[ev] = i
        elif key in _TOP_KEYS:
            v = _scalar(vnode)
            if not is_finite_number(v):
                raise _err(src, vnode, str(key), f"expected a number, got {v!r}")
            kw[key] = v
        else:
            raise _err(src, knode, str(key), f"unknown field; expected 'events' or one of {sorted(_TOP_KEYS)}")
    try:
        config = FaultConfig(events=tuple(events or ()), source=src, **kw)
    except ValueError as exc:
        raise ValueError(f"{src}:{root.start_mark.line + 1}: {exc}") from None
    if events is None and config.is_empty:  # as an empty file: '{}' or settings alone are more likely a mistake
        raise _err(src, root, "events", "missing, and no random fault process is set; expected a mapping with 'events' "
                                        "and optional FaultConfig fields (write 'events: []' for a run without faults)")
    return config


def _event_from_node(node, src: str, i: int) -> FaultEvent:
    import yaml

    where = f"events[{i}]"
    if not isinstance(node, yaml.MappingNode):
        raise _err(src, node, where, "expected a mapping like {kind: gpu_failure, time_s: 120, gpu: 5}")
    kw = {}
    for knode, vnode in node.value:
        key = _scalar(knode)
        if key not in _EVENT_KEYS:
            raise _err(src, knode, f"{where}.{key}", f"unknown field; expected one of {sorted(_EVENT_KEYS)}")
        v = _scalar(vnode)
        if isinstance(v, yaml.Node):
            raise _err(src, vnode, f"{where}.{key}", "expected a scalar value")
        kw[key] = v
    if "kind" not in kw or "time_s" not in kw:
        raise _err(src, node, where, "every event needs 'kind' and 'time_s'")
    try:
        return FaultEvent(**kw)
    except (ValueError, TypeError) as exc:
        raise _err(src, node, where, str(exc)) from None
