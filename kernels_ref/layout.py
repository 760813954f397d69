"""Token layouts of a CP prefill over C ranks (pure Python, no torch).

New tokens (the R uncached suffix tokens, absolute positions ``P .. P+R-1``) are zigzag
partitioned (Llama 3 CP, arXiv 2407.21783 §3.3.2; Vertumnus paper §2, "Context
Parallelism"): the suffix is padded to ``2*C*s`` tokens, cut into ``2C`` chunks of
``s = ceil(R / 2C)`` tokens, and rank ``r`` holds chunks ``r`` and ``2C-1-r``, so every rank
gets one early (cheap) and one late (expensive) chunk of the causal triangle. Padding tokens are
appended after the last real token (positions ``>= P+R``), so the causal mask keeps every real
query from seeing them; their outputs are dropped.

The cached prefix (P tokens, positions ``0 .. P-1``) is sharded contiguously: rank ``r`` holds
positions ``[r*p, min((r+1)*p, P))`` with ``p = ceil(P / C)`` (padded to ``p`` rows for the
equal-size collectives). Only the new tokens need balancing: the prefix has no queries.

Balance: with ``2C | R`` every rank owns exactly ``W(R, P) / C`` causal query-key pairs.
Otherwise the ``2C*s - R < 2C`` padding tokens fill the tail of the last chunks (chunk
``2C-1`` of rank 0 first), and a rank deviates from ``W/C`` by at most the pairs the padding
positions would have had, ``sum_{q=P+R}^{P+2Cs-1} (q+1)``: fewer than 2C tokens' worth, and
within one chunk (``s`` tokens) whenever ``s >= 2C - 1``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ZigzagLayout:
    """Zigzag layout of R new tokens and contiguous layout of P cached tokens over C ranks.

    Args:
        num_new_tokens: R >= 1.
        num_cached_tokens: P >= 0.
        degree: C >= 1.

    Raises:
        ValueError: on R < 1, P < 0 or C < 1.
    """

    num_new_tokens: int
    num_cached_tokens: int
    degree: int

    def __post_init__(self) -> None:
        if self.num_new_tokens < 1:
            raise ValueError(f"num_new_tokens must be >= 1, got {self.num_new_tokens}")
        if self.num_cached_tokens < 0:
            raise ValueError(f"num_cached_tokens must be >= 0, got {self.num_cached_tokens}")
        if self.degree < 1:
            raise ValueError(f"degree must be >= 1, got {self.degree}")

    @property
    def num_chunks(self) -> int:
        return 2 * self.degree

    @property
    def chunk_tokens(self) -> int:
        """s = ceil(R / 2C) [tokens per chunk]."""
        return -(-self.num_new_tokens // self.num_chunks)

    @property
    def padded_new_tokens(self) -> int:
        """2C * s >= R [tokens]."""
        return self.num_chunks * self.chunk_tokens

    @property
    def local_new_tokens(self) -> int:
        """2s: new tokens (incl. padding) held by each rank."""
        return 2 * self.chunk_tokens

    @property
    def prefix_shard_tokens(self) -> int:
        """p = ceil(P / C): padded prefix rows per rank (0 when P = 0)."""
        return -(-self.num_cached_tokens // self.degree)

    def _check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.degree:
            raise ValueError(f"rank must be in [0, {self.degree}), got {rank}")

    def chunk_ids(self, rank: int) -> tuple[int, int]:
        """The two chunk indices ``(r, 2C-1-r)`` of ``rank``."""
        self._check_rank(rank)
        return rank, self.num_chunks - 1 - rank

    def local_new_indices(self, rank: int) -> list[int]:
        """Indices in ``[0, padded_new_tokens)`` of the rank's 2s new tokens (ascending)."""
        s = self.chunk_tokens
        out: list[int] = []
        for j in self.chunk_ids(rank):
            out.extend(range(j * s, (j + 1) * s))
        return out

    def local_new_positions(self, rank: int) -> list[int]:
        """Absolute positions ``P + index`` of the rank's new tokens (padding included)."""
        return [self.num_cached_tokens + i for i in self.local_new_indices(rank)]

    def prefix_range(self, rank: int) -> tuple[int, int]:
        """``[start, stop)`` positions of the rank's prefix shard (may be empty)."""
        self._check_rank(rank)
        p = self.prefix_shard_tokens
        start = min(rank * p, self.num_cached_tokens)
        return start, min(start + p, self.num_cached_tokens)

    def rank_pairs(self, rank: int) -> int:
        """Causal query-key pairs of the rank's real queries: sum over positions q < P+R of (q + 1)."""
        end = self.num_cached_tokens + self.num_new_tokens
        return sum(q + 1 for q in self.local_new_positions(rank) if q < end)

    def total_pairs(self) -> int:
        """``W(R, P)``."""
        r = self.num_new_tokens
        return r * self.num_cached_tokens + r * (r + 1) // 2

    @property
    def num_padding_tokens(self) -> int:
        return self.padded_new_tokens - self.num_new_tokens

    def max_imbalance_pairs(self) -> int:
        """Bound on ``|rank_pairs(r) - W/C|``: the pairs of the padding positions (0 when 2C | R).

        Derivation: the padded layout is exactly balanced (``W(2Cs, P)/C`` per rank); removing
        the padding lowers rank r by ``D_r`` and the mean by ``sum(D)/C``, so the deviation is at
        most ``sum(D)``.
        """
        end = self.num_cached_tokens + self.num_new_tokens
        return sum(q + 1 for q in range(end, self.num_cached_tokens + self.padded_new_tokens))
