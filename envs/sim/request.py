"""Requests and workloads: the immutable input of a simulation run.

A :class:`Request` describes one prefill request as it arrives at the prefill pool. It holds
no simulation state (start/finish times live in the simulator's per-run records), so the same
:class:`Workload` can be replayed under many policies and seeds.

Block hashes follow the Mooncake FAST'25 trace convention (kvcache-ai/Mooncake,
``FAST25-release/traces``): one integer per ``kv_block_size_tokens`` tokens of the prompt
(``ceil(L / block)`` ids, the last block possibly partial), where equal ids at equal positions
mean an identical, reusable prefix KV block. A request's reusable prefix on a worker is the
longest leading run of its block hashes that the worker's cache holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Request:
    """One prefill request.

    Attributes:
        request_id: index of the request in its workload, ``0..num_requests-1`` in arrival order.
        arrival_time_s: arrival time at the prefill pool [s], >= 0.
        num_prompt_tokens: prompt length L [tokens], >= 1.
        num_output_tokens: number of tokens the decode pool will generate [tokens], >= 0
            (kept for completeness; the prefill pool does not decode).
        block_hashes: prefix block hashes, exactly ``ceil(L / kv_block_size_tokens)`` entries.
        session_id: optional conversation/session id (multi-turn and agent workloads), else -1.
    """

    request_id: int
    arrival_time_s: float
    num_prompt_tokens: int
    num_output_tokens: int
    block_hashes: tuple[int, ...]
    session_id: int = -1


def num_blocks_for(num_tokens: int, kv_block_size_tokens: int) -> int:
    """Number of KV blocks covering ``num_tokens`` tokens: ``ceil(num_tokens / block)``."""
    return -(-num_tokens // kv_block_size_tokens)


@dataclass(frozen=True)
class Workload:
    """An ordered, validated list of requests plus the block size their hashes refer to.

    Args:
        name: short name used in run names and tables (e.g. ``"conversation_trace"``).
        requests: requests sorted by ``arrival_time_s`` (ties keep their order), with
            ``request_id == position``.
        kv_block_size_tokens: tokens per prefix block hash (512 for the Mooncake traces).
        source: where the workload came from (a file path or a generator description).

    Raises:
        ValueError: if requests are not sorted by arrival, ids are not ``0..n-1``, or a
            request's number of block hashes is not ``ceil(L / kv_block_size_tokens)``.
    """

    name: str
    requests: tuple[Request, ...]
    kv_block_size_tokens: int = 512
    source: str = ""
    metadata: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.kv_block_size_tokens < 1:
            raise ValueError(f"workload {self.name!r}: kv_block_size_tokens must be >= 1, got {self.kv_block_size_tokens}")
        prev = -math.inf
        bs = self.kv_block_size_tokens
        for i, r in enumerate(self.requests):
            if r.request_id != i:
                raise ValueError(f"workload {self.name!r}: request at position {i} has request_id {r.request_id}; "
                                 f"expected {i}")
            if r.arrival_time_s < prev:
                raise ValueError(f"workload {self.name!r}: request {i} arrives at {r.arrival_time_s} s, "
                                 f"before request {i - 1} ({prev} s); requests must be sorted by arrival")
            prev = r.arrival_time_s
            if r.num_prompt_tokens < 1:
                raise ValueError(f"workload {self.name!r}: request {i} has num_prompt_tokens={r.num_prompt_tokens}; "
                                 "expected >= 1")
            if len(r.block_hashes) != -(-r.num_prompt_tokens // bs):
                raise ValueError(
                    f"workload {self.name!r}: request {i} has {len(r.block_hashes)} block hashes for "
                    f"{r.num_prompt_tokens} tokens; expected ceil({r.num_prompt_tokens}/{bs})={-(-r.num_prompt_tokens // bs)}"
                )

    @property
    def num_requests(self) -> int:
        return len(self.requests)

    @property
    def duration_s(self) -> float:
        """Time from the first to the last arrival [s] (0 for fewer than two requests)."""
        if len(self.requests) < 2:
            return 0.0
        return self.requests[-1].arrival_time_s - self.requests[0].arrival_time_s

    @property
    def mean_rate_rps(self) -> float:
        """Mean arrival rate [requests/s]: ``(n - 1) / duration`` (0 if undefined)."""
        d = self.duration_s
        return (len(self.requests) - 1) / d if d > 0 else 0.0
