"""Context-parallel (CP) prefill attention on ``torch.distributed``.

Two algorithms over the layout of :class:`kernels_ref.layout.ZigzagLayout` (only the R new
tokens are zigzag-sharded; the P cached prefix tokens are sharded contiguously):

* :func:`zigzag_allgather_attention` -- all-gather K/V, then local attention: every rank
  all-gathers the K/V of the new tokens and of the cached prefix in one collective and computes
  its two query chunks against all keys up to the chunk end (Llama 3 CP, arXiv 2407.21783
  §3.3.2; the zigzag + AllGather-KV scheme of the Vertumnus paper §2, "Context Parallelism").
* :func:`ring_attention` -- ring pass-KV: C steps; at each step a rank attends its queries to
  the K/V block it holds, merges the partial result by log-sum-exp (fp32, or fp64 for fp64
  inputs), and passes the block to the next rank with overlapped isend/irecv (Liu et al.,
  "Ring Attention", arXiv 2310.01889; Meta "Context Parallelism for Scalable Million-Token
  Inference", arXiv 2411.01783, pass-KV variant).

Shapes of one rank's inputs (``s`` = ``layout.chunk_tokens``, ``p`` = ``layout.prefix_shard_tokens``):
``q [2s, H_q, D]``, ``k [2s, H_kv, D]``, ``v [2s, H_kv, D_v]`` for its new tokens (chunk ``r``
then chunk ``2C-1-r``, padding rows included, see :func:`shard_new_tokens`), and
``k_prefix [p, H_kv, D]``, ``v_prefix [p, H_kv, D_v]`` for its prefix shard
(:func:`shard_prefix`). Output ``[2s, H_q, D_v]`` in q's dtype; rows of padding tokens are
meaningless and dropped by :func:`unshard_new_tokens`.

Backends: gloo on CPU (tested), nccl on GPU (written for the same collectives --
``all_gather`` and ``batch_isend_irecv`` -- but not exercised in this repository's CPU CI).
``group=None`` without an initialised process group runs the single-rank (C = 1) path.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from kernels_ref.attention import INVALID_POSITION, accumulation_dtype, attention_with_lse, masked_attention, merge_partials
from kernels_ref.layout import ZigzagLayout


@dataclass
class CPAttentionResult:
    """Output of a CP attention call on one rank.

    Attributes:
        out: ``[2s, H_q, D_v]`` local outputs (q's dtype).
        pairs: causal query-key pairs of the rank's real queries that the kernel covered
            (``None`` unless ``count_pairs=True``); sums to ``W(R, P)`` over the ranks.
    """

    out: torch.Tensor
    pairs: int | None = None


# ---- layout helpers ---------------------------------------------------------------------------

def shard_new_tokens(x: torch.Tensor, layout: ZigzagLayout, rank: int) -> torch.Tensor:
    """The rank's ``[2s, ...]`` rows of a full new-token tensor ``[R, ...]`` (zero padding)."""
    if x.shape[0] != layout.num_new_tokens:
        raise ValueError(f"expected {layout.num_new_tokens} new-token rows, got {x.shape[0]}")
    pad = layout.padded_new_tokens - layout.num_new_tokens
    if pad:
        x = torch.cat([x, x.new_zeros((pad, *x.shape[1:]))])
    idx = torch.tensor(layout.local_new_indices(rank), device=x.device)
    return x.index_select(0, idx)


def unshard_new_tokens(parts: list[torch.Tensor], layout: ZigzagLayout) -> torch.Tensor:
    """Inverse of :func:`shard_new_tokens`: ``C`` tensors ``[2s, ...]`` (rank order) -> ``[R, ...]``."""
    if len(parts) != layout.degree:
        raise ValueError(f"expected {layout.degree} parts, got {len(parts)}")
    s = layout.chunk_tokens
    chunks = [None] * layout.num_chunks
    for rank, part in enumerate(parts):
        lo, hi = layout.chunk_ids(rank)
        chunks[lo], chunks[hi] = part[:s], part[s:2 * s]
    return torch.cat(chunks)[: layout.num_new_tokens]


def shard_prefix(x: torch.Tensor, layout: ZigzagLayout, rank: int) -> torch.Tensor:
    """The rank's ``[p, ...]`` contiguous shard of a cached-prefix tensor ``[P, ...]`` (zero padding)."""
    if x.shape[0] != layout.num_cached_tokens:
        raise ValueError(f"expected {layout.num_cached_tokens} prefix rows, got {x.shape[0]}")
    start, stop = layout.prefix_range(rank)
    part = x[start:stop]
    pad = layout.prefix_shard_tokens - part.shape[0]
    return torch.cat([part, x.new_zeros((pad, *x.shape[1:]))]) if pad else part


def new_token_positions(layout: ZigzagLayout, rank: int, device=None) -> torch.Tensor:
    """``[2s]`` int64 absolute positions of the rank's new tokens (padding: ``>= P+R``)."""
    return torch.tensor(layout.local_new_positions(rank), dtype=torch.int64, device=device)


def prefix_positions(layout: ZigzagLayout, rank: int, device=None) -> torch.Tensor:
    """``[p]`` int64 positions of the rank's prefix shard; padding rows get ``INVALID_POSITION``."""
    start, stop = layout.prefix_range(rank)
    pos = list(range(start, stop)) + [INVALID_POSITION] * (layout.prefix_shard_tokens - (stop - start))
    return torch.tensor(pos, dtype=torch.int64, device=device)


def _group_rank_size(group) -> tuple[int, int]:
    if group is None and not (dist.is_available() and dist.is_initialized()):
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def _check_inputs(q, k, v, k_prefix, v_prefix, layout: ZigzagLayout, degree: int) -> None:
    if layout.degree != degree:
        raise ValueError(f"layout degree {layout.degree} != process-group size {degree}")
    n = layout.local_new_tokens
    if q.shape[0] != n or k.shape[0] != n or v.shape[0] != n:
        raise ValueError(f"q, k, v must have {n} local rows, got {q.shape[0]}, {k.shape[0]}, {v.shape[0]}")
    p = layout.prefix_shard_tokens
    if k_prefix.shape[0] != p or v_prefix.shape[0] != p:
        raise ValueError(f"k_prefix, v_prefix must have {p} rows, got {k_prefix.shape[0]}, {v_prefix.shape[0]}")


def _count_pairs(q_pos: torch.Tensor, k_pos: torch.Tensor, real_end: int) -> int:
    real = q_pos[q_pos < real_end]
    if real.numel() == 0 or k_pos.numel() == 0:
        return 0
    return int((k_pos[None, :] <= real[:, None]).sum().item())


# ---- all-gather KV ------------------------------------------------------------------------------

def zigzag_allgather_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_prefix: torch.Tensor,
                               v_prefix: torch.Tensor, layout: ZigzagLayout, group=None, impl: str = "matmul",
                               block_tokens: int = 256, count_pairs: bool = False,
                               scale: float | None = None) -> CPAttentionResult:
    """Zigzag CP attention with an all-gather of K/V (shapes in the module docstring).

    Communication per rank: one ``all_gather`` of ``(p + 2s) * H_kv * (D + D_v)`` elements, i.e.
    the whole prefix and new-token KV arrive at every rank. Compute per rank: its two query
    chunks against the keys up to each chunk's end (``impl`` as in
    :func:`kernels_ref.attention.masked_attention`), i.e. ``W(R, P) / C`` pairs up to padding.

    Raises:
        ValueError: if the layout does not match the group size or the input shapes.
    """
    rank, degree = _group_rank_size(group)
    _check_inputs(q, k, v, k_prefix, v_prefix, layout, degree)
    dk = k.shape[2]
    local = torch.cat([torch.cat([k_prefix, k]), torch.cat([v_prefix, v])], dim=-1).contiguous()
    if degree == 1:
        gathered = [local]
    else:
        gathered = [torch.empty_like(local) for _ in range(degree)]
        dist.all_gather(gathered, local, group=group)
    p, s, P = layout.prefix_shard_tokens, layout.chunk_tokens, layout.num_cached_tokens
    parts = [g[:p] for g in gathered] if p else []
    for j in range(layout.num_chunks):
        if j < degree:
            parts.append(gathered[j][p:p + s])
        else:
            parts.append(gathered[layout.num_chunks - 1 - j][p + s:p + 2 * s])
    full = torch.cat(parts)
    if p:
        full = torch.cat([full[:P], full[degree * p:]])  # drop prefix padding rows
    k_full, v_full = full[..., :dk], full[..., dk:]
    k_pos = torch.arange(full.shape[0], dtype=torch.int64, device=q.device)
    q_pos_all = new_token_positions(layout, rank, device=q.device)
    outs, pairs = [], 0
    for i, j in enumerate(layout.chunk_ids(rank)):
        lim = P + (j + 1) * s
        q_pos = q_pos_all[i * s:(i + 1) * s]
        outs.append(masked_attention(q[i * s:(i + 1) * s], k_full[:lim], v_full[:lim], q_pos, k_pos[:lim],
                                     scale=scale, block_tokens=block_tokens, keys_sorted=True, impl=impl))
        if count_pairs:
            pairs += _count_pairs(q_pos, k_pos[:lim], P + layout.num_new_tokens)
    return CPAttentionResult(torch.cat(outs), pairs if count_pairs else None)


# ---- ring pass-KV -------------------------------------------------------------------------------

def _send_recv(send: torch.Tensor, recv: torch.Tensor, rank: int, degree: int, group):
    nxt, prv = (rank + 1) % degree, (rank - 1) % degree
    if group is not None:
        nxt, prv = dist.get_global_rank(group, nxt), dist.get_global_rank(group, prv)
    ops = [dist.P2POp(dist.isend, send, nxt, group), dist.P2POp(dist.irecv, recv, prv, group)]
    return dist.batch_isend_irecv(ops)


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_prefix: torch.Tensor, v_prefix: torch.Tensor,
                   layout: ZigzagLayout, group=None, block_tokens: int = 256, count_pairs: bool = False,
                   scale: float | None = None) -> CPAttentionResult:
    """Ring pass-KV CP attention (shapes in the module docstring).

    Step ``t`` (0..C-1): the rank holds the K/V block (prefix shard + two new-token chunks) of
    rank ``(r - t) mod C``, starts sending it to rank ``r+1`` and receiving the next one from
    ``r-1``, computes ``(out_t, lse_t)`` for each local query chunk that can see any key of the
    block (:func:`kernels_ref.attention.attention_with_lse`), and merges it into the running
    result with :func:`kernels_ref.attention.merge_partials` in the accumulation dtype.

    Raises:
        ValueError: if the layout does not match the group size or the input shapes.
    """
    rank, degree = _group_rank_size(group)
    _check_inputs(q, k, v, k_prefix, v_prefix, layout, degree)
    dk = k.shape[2]
    acc = accumulation_dtype(q.dtype)
    s, real_end = layout.chunk_tokens, layout.num_cached_tokens + layout.num_new_tokens
    q_pos_all = new_token_positions(layout, rank, device=q.device)
    out = torch.zeros(q.shape[0], q.shape[1], v.shape[2], dtype=acc, device=q.device)
    lse = torch.full((q.shape[0], q.shape[1]), float("-inf"), dtype=acc, device=q.device)
    cur = torch.cat([torch.cat([k_prefix, k]), torch.cat([v_prefix, v])], dim=-1).contiguous()
    pairs = 0
    for step in range(degree):
        src = (rank - step) % degree
        reqs, nxt = None, None
        if step < degree - 1:
            nxt = torch.empty_like(cur)
            reqs = _send_recv(cur, nxt, rank, degree, group)
        k_pos = torch.cat([prefix_positions(layout, src, q.device), new_token_positions(layout, src, q.device)])
        min_key = min([pos for pos in layout.local_new_positions(src)] + list(range(*layout.prefix_range(src))))
        for i in range(2):
            rows = slice(i * s, (i + 1) * s)
            q_pos = q_pos_all[rows]
            if min_key > layout.local_new_positions(rank)[(i + 1) * s - 1]:
                continue  # the whole block is in this chunk's future
            o_t, l_t = attention_with_lse(q[rows], cur[..., :dk], cur[..., dk:], q_pos, k_pos,
                                          scale=scale, block_tokens=block_tokens)
            out[rows], lse[rows] = merge_partials(out[rows], lse[rows], o_t, l_t)
            if count_pairs:
                pairs += _count_pairs(q_pos, k_pos, real_end)
        if reqs is not None:
            for req in reqs:
                req.wait()
            cur = nxt
    return CPAttentionResult(out.to(q.dtype), pairs if count_pairs else None)
