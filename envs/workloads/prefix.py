"""Prefix-consistent KV block hashes for synthetic workloads.

A prompt is modelled as a sequence of *segments* (a system prompt, a document, a user
message, a model answer, a tool output ...), each with an integer id and a length in tokens.
Block ``j`` of a prompt covers tokens ``[j*B, (j+1)*B)`` (``B = kv_block_size_tokens``, the
last block possibly partial, as in the Mooncake FAST'25 traces). Its hash id is allocated by
:class:`BlockHasher` from the pair ``(hash of block j-1, content of block j)`` where the content
is the list of ``(segment id, start, end)`` pieces the block covers. Hence

* equal hash at position ``k`` ⇔ equal content of blocks ``0..k`` (prefix consistency: equal
  hash at ``k`` implies equal hashes at every position ``< k``);
* a partial last block never equals a full block at the same position (its content differs),
  so a conversation's next turn reuses only the previous turn's *full* blocks, as a paged KV
  cache (vLLM, SGLang, Mooncake) does.

Ids are dense integers ``0, 1, 2, ...`` in order of first use; every generator call owns its
own :class:`BlockHasher`, so there is no global state and results are reproducible.
"""

from __future__ import annotations

__all__ = ["BlockHasher", "PromptContext"]


class BlockHasher:
    """Allocates prefix-consistent block hash ids and segment ids (one instance per generator call).

    Args:
        kv_block_size_tokens: tokens per KV block [tokens], >= 1.
    """

    __slots__ = ("kv_block_size_tokens", "_table", "_num_segments")

    def __init__(self, kv_block_size_tokens: int = 512) -> None:
        if int(kv_block_size_tokens) < 1:
            raise ValueError(f"kv_block_size_tokens must be >= 1, got {kv_block_size_tokens}")
        self.kv_block_size_tokens = int(kv_block_size_tokens)
        self._table: dict[tuple, int] = {}
        self._num_segments = 0

    @property
    def num_block_ids(self) -> int:
        """Number of distinct block hash ids allocated so far."""
        return len(self._table)

    def new_segment_id(self) -> int:
        """A fresh segment id (content never seen before)."""
        self._num_segments += 1
        return self._num_segments - 1

    def block_id(self, parent_hash: int, content: tuple) -> int:
        """The hash id of a block with the given parent block hash (-1 for block 0) and content."""
        key = (parent_hash, content)
        h = self._table.get(key)
        if h is None:
            h = len(self._table)
            self._table[key] = h
        return h

    def context(self) -> "PromptContext":
        """An empty prompt context bound to this hasher."""
        return PromptContext(self)


class PromptContext:
    """A growing prompt (a list of segments) whose full-block hashes are computed incrementally.

    Appending segments never changes already-full blocks, so their hashes are cached; only the
    new blocks (and the partial last block) are hashed on each :meth:`block_hashes` call.
    """

    __slots__ = ("hasher", "_seg_ids", "_seg_starts", "num_tokens", "_full", "_cursor_seg")

    def __init__(self, hasher: BlockHasher) -> None:
        self.hasher = hasher
        self._seg_ids: list[int] = []
        self._seg_starts: list[int] = []  # absolute token position where each segment starts
        self.num_tokens = 0  # prompt length so far [tokens]
        self._full: list[int] = []  # hashes of the full blocks hashed so far
        self._cursor_seg = 0  # first segment overlapping block len(self._full)

    def append(self, segment_id: int, num_tokens: int) -> "PromptContext":
        """Append ``num_tokens`` tokens of segment ``segment_id`` (>= 1 token); returns self."""
        n = int(num_tokens)
        if n < 1:
            raise ValueError(f"a segment must have >= 1 token, got {num_tokens}")
        self._seg_ids.append(int(segment_id))
        self._seg_starts.append(self.num_tokens)
        self.num_tokens += n
        return self

    def append_new(self, num_tokens: int) -> int:
        """Append a segment of never-seen content; returns its segment id."""
        sid = self.hasher.new_segment_id()
        self.append(sid, num_tokens)
        return sid

    def fork(self) -> "PromptContext":
        """An independent copy (e.g. a shared system prompt extended differently per request)."""
        c = PromptContext(self.hasher)
        c._seg_ids = list(self._seg_ids)
        c._seg_starts = list(self._seg_starts)
        c.num_tokens = self.num_tokens
        c._full = list(self._full)
        c._cursor_seg = self._cursor_seg
        return c

    def _content(self, start: int, end: int, seg: int) -> tuple:
        """Content key of tokens ``[start, end)``, scanning segments from index ``seg``."""
        ids, starts = self._seg_ids, self._seg_starts
        num_segs = len(ids)
        parts: list[int] = []
        pos = start
        while pos < end:
            seg_end = starts[seg + 1] if seg + 1 < num_segs else self.num_tokens
            if seg_end <= pos:
                seg += 1
                continue
            piece_end = min(end, seg_end)
            parts.extend((ids[seg], pos - starts[seg], piece_end - starts[seg]))
            pos = piece_end
            if piece_end == seg_end:
                seg += 1
        return tuple(parts)

    def block_hashes(self) -> tuple[int, ...]:
        """``ceil(num_tokens / B)`` prefix-consistent block hashes of the current prompt."""
        bs = self.hasher.kv_block_size_tokens
        table = self.hasher._table
        n = self.num_tokens
        num_full = n // bs
        full = self._full
        ids, starts = self._seg_ids, self._seg_starts
        num_segs = len(ids)
        seg = self._cursor_seg
        parent = full[-1] if full else -1
        for j in range(len(full), num_full):
            start = j * bs
            end = start + bs
            while seg + 1 < num_segs and starts[seg + 1] <= start:
                seg += 1
            seg_end = starts[seg + 1] if seg + 1 < num_segs else n
            if end <= seg_end:  # fast path: the block lies inside one segment
                s0 = starts[seg]
                content: tuple = (ids[seg], start - s0, end - s0)
            else:
                content = self._content(start, end, seg)
            key = (parent, content)
            h = table.get(key)
            if h is None:
                h = len(table)
                table[key] = h
            full.append(h)
            parent = h
        self._cursor_seg = seg
        if n % bs == 0:
            return tuple(full)
        start = num_full * bs
        while seg + 1 < num_segs and starts[seg + 1] <= start:
            seg += 1
        return (*full, self.hasher.block_id(parent, self._content(start, n, seg)))
