"""GPU pool topology and worker placement.

A pool is a fixed budget of ``num_gpus`` GPUs in topology groups (nodes) of ``gpus_per_node``.
A worker of CP degree C owns C consecutive GPUs starting at an offset aligned to C inside one
node (a CP-4 worker on GPUs 0-3 or 4-7, never 2-5, never across nodes unless
``allow_cross_node``) — the pre-built, topology-compatible groups of paper §6/§8.

A *composition* says which workers exist. Two string forms (``--pool-composition``):

* counts: ``"cp4x6,cp2x8"`` — six CP-4 and eight CP-2 workers, placed largest degree first at
  the lowest aligned free offset (deterministic);
* explicit: ``"cp4@0,cp4@4,cp2@8,..."`` — a worker of degree C on GPUs ``first..first+C-1``.

Worker ids are the first GPU index divided by the smallest supported degree, so they are stable
across split/merge (a split of the CP-4 worker on GPUs 0-3 yields ids of GPUs 0 and 2) and
bounded by ``num_gpus // min(supported_degrees)``.
"""

from __future__ import annotations

import numbers
import re
from dataclasses import dataclass, field

from envs.sim.options import option, split_number_list

# Paper §9: 40 of the 64 H20-3e GPUs form the prefill pool, 8 GPUs per node; Qwen3 uses CP {2, 4},
# DeepSeek {4, 8} (its weights are sharded over a group of GPUs: PoolConfig.check_weight_shard).
# The default mix keeps 24 GPUs in six CP-4 workers (long prompts) and 16 GPUs in eight CP-2
# workers (short prompts, more independent lanes): 14 workers.
DEFAULT_COMPOSITION = "cp4x6,cp2x8"

_COUNT_RE = re.compile(r"^cp(\d+)x(\d+)$")
_PLACE_RE = re.compile(r"^cp(\d+)@(\d+)$")


def parse_degrees(text: str, flag: str = "--supported-degrees") -> tuple[int, ...]:
    """``"2,4"`` -> ``(2, 4)``: the CP degrees given with ``flag``.

    Raises:
        ValueError: naming ``flag``, unless ``text`` is a comma-separated list of powers of two >= 1.
    """
    try:
        degrees = split_number_list(text, int)
    except ValueError as exc:
        raise ValueError(f"{flag} {exc}") from None
    if any(d < 1 or d & (d - 1) for d in degrees):  # PoolConfig's own error names its field pool.supported_degrees
        raise ValueError(f"{flag} must be powers of two >= 1 (CP degrees), got {text!r}")
    return tuple(degrees)


@dataclass(frozen=True)
class PoolConfig:
    """The fixed GPU budget and its initial worker composition.

    Args:
        num_gpus: GPUs in the prefill pool (paper §9: 40).
        gpus_per_node: GPUs per topology group (8 on an HGX node).
        composition: worker composition string (see module docstring).
        supported_degrees: CP degrees a worker may have (paper: Qwen3 {2,4}, DeepSeek {4,8}).
        allow_cross_node: allow a worker to span nodes (not in the paper).
        gpu_type: GPU type, informational (the calibration file sets the cost model).

    Raises:
        ValueError: on an unsupported degree, misaligned or overlapping placement, a worker
            crossing a node, or a composition whose GPU count differs from ``num_gpus``.
    """

    num_gpus: int = option(40, "GPUs in the prefill pool (as in the paper's §9 pool)", flag="--pool-gpus")
    gpus_per_node: int = option(8, "GPUs per topology group")
    # unset: a command can tell a composition left out (then PoolConfig's default)
    composition: str = option(DEFAULT_COMPOSITION, "worker composition: 'cp4x6,cp2x8' (counts) or 'cp4@0,cp2@4,...' "
                                                   "(placements)", flag="--pool-composition", unset=True)
    supported_degrees: tuple[int, ...] = option((1, 2, 4, 8), "CP degrees a worker may have", parse=parse_degrees)
    allow_cross_node: bool = field(default=False, metadata={"cli": False})
    gpu_type: str = field(default="H20-3e", metadata={"cli": False})

    def __post_init__(self) -> None:
        # integers (numpy ones included, stored as int): a string failed inside a comparison, 40.5
        # GPUs inside the placement, 8.0 GPUs per node was accepted
        for name in ("num_gpus", "gpus_per_node"):
            v = getattr(self, name)
            if not _is_integer(v) or v < 1:
                raise ValueError(f"pool.{name} must be an integer >= 1, got {v!r}")
            object.__setattr__(self, name, int(v))
        degrees = self.supported_degrees
        if isinstance(degrees, (str, bytes)) or not hasattr(degrees, "__iter__") or not tuple(degrees) or any(
                not _is_integer(d) or d < 1 or d & (d - 1) for d in degrees):
            raise ValueError(f"pool.supported_degrees must be powers of two >= 1, got {degrees!r}")
        if not isinstance(self.composition, str):
            raise ValueError(f"pool.composition must be a string such as 'cp4x6,cp2x8' or 'cp4@0,cp2@4,...', "
                             f"got {self.composition!r}")
        object.__setattr__(self, "supported_degrees", tuple(sorted({int(d) for d in degrees})))
        self.placements()  # validate eagerly

    @property
    def min_degree(self) -> int:
        return self.supported_degrees[0]

    @property
    def max_num_workers(self) -> int:
        """Upper bound on worker ids: ``num_gpus // min(supported_degrees)``."""
        return self.num_gpus // self.min_degree

    def worker_id_for(self, first_gpu: int) -> int:
        return first_gpu // self.min_degree

    def placements(self) -> list[tuple[int, int]]:
        """Resolved ``[(degree, first_gpu), ...]`` sorted by first GPU; validated."""
        return resolve_composition(self.composition, self)

    def check_group(self, degree: int, first_gpu: int) -> None:
        """Raises ValueError unless ``degree`` GPUs from ``first_gpu`` form a valid CP group."""
        if degree not in self.supported_degrees:
            raise ValueError(f"CP degree {degree} is not supported; "
                             f"supported degrees are {list(self.supported_degrees)}")
        if first_gpu < 0 or first_gpu + degree > self.num_gpus:
            raise ValueError(f"worker cp{degree}@{first_gpu} uses GPUs {first_gpu}..{first_gpu + degree - 1}, "
                             f"outside the pool of {self.num_gpus} GPUs")
        if first_gpu % degree:
            raise ValueError(f"worker cp{degree}@{first_gpu} is misaligned: "
                             f"a CP-{degree} worker must start at a multiple of {degree}")
        if not self.allow_cross_node and first_gpu // self.gpus_per_node != (first_gpu + degree - 1) // self.gpus_per_node:
            raise ValueError(f"worker cp{degree}@{first_gpu} crosses a node boundary (nodes of {self.gpus_per_node} GPUs)")

    def check_weight_shard(self, weight_shard_gpus: int) -> None:
        """Raises ValueError unless every worker degree the pool allows holds whole weight shard
        groups: the smallest supported degree must be >= G and a multiple of G (then so is every
        supported degree, all powers of two). A CP-2G worker is then two G-groups joined at the
        attention level, so split and merge never move weights
        (``Calibration.weight_shard_gpus``; kernels_ref/roofline.py, weight placement)."""
        g = weight_shard_gpus
        if self.min_degree < g or self.min_degree % g:
            raise ValueError(
                f"the model's weights are sharded over G = {g} GPUs (calibration weight_shard_gpus), but the pool supports "
                f"CP degree {self.min_degree}: every supported degree must be a multiple of {g} "
                f"(e.g. --supported-degrees {','.join(str(d) for d in self.supported_degrees if d % g == 0) or g})")


def _is_integer(value: object) -> bool:
    """A Python or numpy integer (bool excluded)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def resolve_composition(composition: str, pool: PoolConfig) -> list[tuple[int, int]]:
    """Parses and places a composition string; see the module docstring for the forms.

    Returns:
        ``[(degree, first_gpu), ...]`` sorted by ``first_gpu``.

    Raises:
        ValueError: naming the offending item and what was expected.
    """
    items = [s.strip().lower() for s in composition.split(",")]
    if items == [""]:
        raise ValueError("pool composition is empty; expected e.g. 'cp4x6,cp2x8' or 'cp4@0,cp4@4,...'")
    if "" in items:  # never silently dropped: 'cp4x6,,cp2x8' is likely a typo for a missing item
        raise ValueError(f"pool composition {composition!r} has an empty item (doubled, leading or trailing comma); "
                         "expected e.g. 'cp4x6,cp2x8'")
    explicit = [_PLACE_RE.match(s) for s in items]
    counts = [_COUNT_RE.match(s) for s in items]
    used = [False] * pool.num_gpus
    placements: list[tuple[int, int]] = []
    if all(explicit):
        for s, m in zip(items, explicit):
            degree, first = int(m.group(1)), int(m.group(2))
            pool.check_group(degree, first)
            for g in range(first, first + degree):
                if used[g]:
                    raise ValueError(f"worker {s} overlaps another worker on GPU {g}")
                used[g] = True
            placements.append((degree, first))
    elif all(counts):
        wanted: list[int] = []
        for s, m in zip(items, counts):
            degree, n = int(m.group(1)), int(m.group(2))
            if n < 1:  # 'cp4x0' read as "no CP-4 workers", but failed later as an unsupported degree
                rest = ",".join(i for i, c in zip(items, counts) if int(c.group(2)) > 0)
                raise ValueError(f"composition item {s!r}: the worker count must be >= 1; leave out a degree with no "
                                 f"workers" + (f" ({rest!r})" if rest else ""))
            if degree not in pool.supported_degrees:
                raise ValueError(f"composition item {s!r}: CP degree {degree} is not supported; "
                                 f"supported degrees are {list(pool.supported_degrees)}")
            wanted += [degree] * n
        total = sum(wanted)
        if total != pool.num_gpus:
            raise ValueError(f"composition {composition!r} uses {total} GPUs but the pool has {pool.num_gpus}")
        placements = _place_first_fit(wanted, composition, pool)
    else:
        bad = next(s for s, a, b in zip(items, explicit, counts) if not (a if any(explicit) else b))
        raise ValueError(f"composition item {bad!r} is invalid; "
                         f"expected all items as 'cp<C>x<count>' or all as 'cp<C>@<first_gpu>'")
    if sum(d for d, _ in placements) != pool.num_gpus:
        raise ValueError(f"composition {composition!r} uses {sum(d for d, _ in placements)} GPUs "
                         f"but the pool has {pool.num_gpus}")
    placements.sort(key=lambda p: p[1])
    return placements


def _place_first_fit(degrees: list[int], composition: str, pool: PoolConfig) -> list[tuple[int, int]]:
    """Places workers of ``degrees`` (a count-form composition, whose degrees sum to ``pool.num_gpus``)
    largest first, each in the lowest aligned free GPU group that :meth:`PoolConfig.check_group` accepts.

    Returns:
        ``[(degree, first_gpu), ...]`` in placement order.

    Raises:
        ValueError: if a worker finds no aligned free group (``composition`` is named in the message).
    """
    used = [False] * pool.num_gpus
    placements: list[tuple[int, int]] = []
    for degree in sorted(degrees, reverse=True):
        for first in range(0, pool.num_gpus - degree + 1, degree):
            try:
                pool.check_group(degree, first)
            except ValueError:
                continue
            if not any(used[first:first + degree]):
                for g in range(first, first + degree):
                    used[g] = True
                placements.append((degree, first))
                break
        else:
            raise ValueError(f"composition {composition!r} cannot be placed: no aligned free group of {degree} GPUs "
                             f"left in nodes of {pool.gpus_per_node}")
    return placements


def composition_string(placements: list[tuple[int, int]]) -> str:
    """Inverse of the explicit form: ``[(4, 0), (2, 4)] -> "cp4@0,cp2@4"``."""
    return ",".join(f"cp{d}@{g}" for d, g in sorted(placements, key=lambda p: p[1]))


def composition_counts(degrees: list[int]) -> str:
    """Counts form of a list of degrees, largest first: ``[2, 4, 4] -> "cp4x2,cp2x1"``."""
    out = []
    for d in sorted(set(degrees), reverse=True):
        out.append(f"cp{d}x{degrees.count(d)}")
    return ",".join(out)
