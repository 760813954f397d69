"""Single-device attention building blocks: reference, masked block attention with LSE, merge.

Layout (packed, one request, as flash-attention's varlen API): queries ``[T_q, H_q, D]``,
keys/values ``[T_k, H_kv, D]`` (values may have their own head dim ``D_v``), GQA with
``H_q % H_kv == 0`` and query head ``h`` using KV head ``h // (H_q / H_kv)`` (HuggingFace
``repeat_kv`` convention). Positions are absolute token positions; a query at position ``q``
sees the keys at positions ``<= q`` (dense causal). With a cached prefix of P tokens and R new
queries at positions ``P .. P+R-1`` this is the *bottom-right aligned* causal mask; note that
``torch.nn.functional.scaled_dot_product_attention(is_causal=True)`` is top-left aligned when
``T_q != T_k`` (documented in its docstring), which is why every path here builds the mask
explicitly from positions.

Precision: scores, softmax statistics and partial-result merging use the *accumulation dtype*
``float64`` for float64 inputs and ``float32`` otherwise (the log-sum-exp merge of flash /
ring attention is done in fp32, e.g. Liu et al., "Ring Attention", arXiv 2310.01889).
"""

from __future__ import annotations

import math
import numbers

import torch
import torch.nn.functional as F

INVALID_POSITION = 2**62
"""Position given to padding keys that no query may see (larger than any real position)."""


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """``float64`` for float64 inputs, ``float32`` for everything else."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def bottom_right_causal_mask(num_new_tokens: int, num_cached_tokens: int, device=None) -> torch.Tensor:
    """Bool mask ``[R, P+R]``, True where new query i (position P+i) may see key j (j <= P+i)."""
    if num_new_tokens < 0 or num_cached_tokens < 0:
        raise ValueError("token counts must be >= 0")
    q_pos = torch.arange(num_new_tokens, device=device) + num_cached_tokens
    k_pos = torch.arange(num_cached_tokens + num_new_tokens, device=device)
    return k_pos[None, :] <= q_pos[:, None]


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[int, int]:
    if q.dim() != 3 or k.dim() != 3 or v.dim() != 3:
        raise ValueError(f"q, k, v must be [tokens, heads, head_dim], "
                         f"got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if k.shape[:2] != v.shape[:2]:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must agree in tokens and heads")
    if q.shape[2] != k.shape[2]:
        raise ValueError(f"q head_dim {q.shape[2]} != k head_dim {k.shape[2]}")
    hq, hkv = q.shape[1], k.shape[1]
    if hkv == 0 or hq % hkv:
        raise ValueError(f"query heads {hq} must be a multiple of KV heads {hkv} (GQA)")
    return hq, hkv


def _check_positions(q: torch.Tensor, k: torch.Tensor, q_positions: torch.Tensor, k_positions: torch.Tensor,
                     block_tokens: int) -> None:
    """Raises ValueError naming the argument unless the positions are 1-D with one entry per
    query / key and ``block_tokens`` is an integer >= 1 (a wrong length used to be sliced
    silently, a block size <= 0 gave an all-zero output)."""
    if q_positions.dim() != 1 or q_positions.shape[0] != q.shape[0]:
        raise ValueError(f"q_positions must have shape [T_q] = [{q.shape[0]}], got {tuple(q_positions.shape)}")
    if k_positions.dim() != 1 or k_positions.shape[0] != k.shape[0]:
        raise ValueError(f"k_positions must have shape [T_k] = [{k.shape[0]}], got {tuple(k_positions.shape)}")
    if isinstance(block_tokens, bool) or not isinstance(block_tokens, numbers.Integral) or block_tokens < 1:
        raise ValueError(f"block_tokens must be an integer >= 1, got {block_tokens!r}")


def expand_kv_heads(x: torch.Tensor, num_q_heads: int) -> torch.Tensor:
    """``[T, H_kv, D] -> [T, H_q, D]``, KV head j repeated for query heads ``j*g .. j*g+g-1``."""
    return x.repeat_interleave(num_q_heads // x.shape[1], dim=1)


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """Float64 dense causal attention of R new queries over ``P + R`` keys (bottom-right aligned).

    Args:
        q: ``[R, H_q, D]`` queries at positions ``P .. P+R-1``.
        k, v: ``[P+R, H_kv, D]`` / ``[P+R, H_kv, D_v]``: the cached prefix followed by the new tokens.
        scale: softmax scale, default ``1/sqrt(D)``.

    Returns:
        ``[R, H_q, D_v]`` float64: ``softmax(q k^T * scale + mask) v`` with the explicit mask of
        :func:`bottom_right_causal_mask`.

    Raises:
        ValueError: on inconsistent shapes or fewer keys than queries.
    """
    hq, _ = _check_qkv(q, k, v)
    r, t = q.shape[0], k.shape[0]
    if t < r:
        raise ValueError(f"need at least as many keys ({t}) as queries ({r})")
    scale = 1.0 / math.sqrt(q.shape[2]) if scale is None else scale
    q64, k64, v64 = q.double(), expand_kv_heads(k.double(), hq), expand_kv_heads(v.double(), hq)
    scores = torch.einsum("qhd,khd->hqk", q64, k64) * scale
    scores = scores.masked_fill(~bottom_right_causal_mask(r, t - r, device=q.device)[None], float("-inf"))
    return torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), v64)


def attention_with_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_positions: torch.Tensor,
                       k_positions: torch.Tensor, scale: float | None = None, block_tokens: int = 256,
                       keys_sorted: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Position-masked attention returning the partial output and its log-sum-exp.

    Args:
        q: ``[T_q, H_q, D]``; k, v: ``[T_k, H_kv, D]`` / ``[T_k, H_kv, D_v]``.
        q_positions: ``[T_q]`` int64; k_positions: ``[T_k]`` int64 (``INVALID_POSITION`` = never seen).
        scale: default ``1/sqrt(D)``.
        block_tokens: queries per block (bounds the ``[H_q, block, T_k]`` score buffer).
        keys_sorted: keys are in ascending position order; each query block then only reads
            the keys up to its last position (skips fully masked key tiles, as flash kernels do).

    Returns:
        ``(out, lse)``: ``[T_q, H_q, D_v]`` and ``[T_q, H_q]`` in the accumulation dtype. A query
        that sees no key gets ``out = 0`` and ``lse = -inf`` (identity of :func:`merge_partials`).

    Raises:
        ValueError: on inconsistent q/k/v shapes, positions that are not 1-D with one entry per
            query / key, or ``block_tokens`` < 1.
    """
    hq, hkv = _check_qkv(q, k, v)
    _check_positions(q, k, q_positions, k_positions, block_tokens)
    g = hq // hkv
    acc = accumulation_dtype(q.dtype)
    scale = 1.0 / math.sqrt(q.shape[2]) if scale is None else scale
    tq, dv = q.shape[0], v.shape[2]
    out = torch.zeros(tq, hq, dv, dtype=acc, device=q.device)
    lse = torch.full((tq, hq), float("-inf"), dtype=acc, device=q.device)
    kt = k.to(acc).permute(1, 0, 2)  # [H_kv, T_k, D]
    vt = v.to(acc).permute(1, 0, 2)  # [H_kv, T_k, D_v]
    for start in range(0, tq, block_tokens):
        stop = min(start + block_tokens, tq)
        b = stop - start
        qp = q_positions[start:stop]
        lim = k.shape[0]
        if keys_sorted:
            lim = int(torch.searchsorted(k_positions, qp.max().reshape(1), right=True).item())
        if lim == 0:
            continue
        qg = q[start:stop].to(acc).permute(1, 0, 2).reshape(hkv, g * b, -1)
        s = torch.matmul(qg, kt[:, :lim].transpose(1, 2)).mul_(scale).view(hkv, g, b, lim)
        visible = k_positions[None, :lim] <= qp[:, None]  # [b, lim]
        s.masked_fill_(~visible, float("-inf"))
        m = s.amax(dim=-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        p = torch.exp(s - m)
        denom = p.sum(dim=-1, keepdim=True)
        o = torch.matmul(p.view(hkv, g * b, lim), vt[:, :lim]).view(hkv, g, b, dv)
        o = o / denom.clamp_min(torch.finfo(acc).tiny)
        out[start:stop] = o.reshape(hq, b, dv).permute(1, 0, 2)
        lse[start:stop] = (m + torch.log(denom)).reshape(hq, b).transpose(0, 1)
    return out, lse


def masked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_positions: torch.Tensor,
                     k_positions: torch.Tensor, scale: float | None = None, block_tokens: int = 256,
                     keys_sorted: bool = False, impl: str = "matmul") -> torch.Tensor:
    """Position-masked attention output ``[T_q, H_q, D_v]`` in q's dtype (no LSE).

    ``impl="matmul"``: :func:`attention_with_lse` (accumulation dtype). ``impl="sdpa"``:
    ``torch.nn.functional.scaled_dot_product_attention`` per query block with an explicit
    boolean mask built from the positions, computed in q's dtype (on GPU in bf16 this
    dispatches to a fused kernel). With ``"sdpa"`` every query must see at least one key
    (a fully masked row is NaN); the CP all-gather path guarantees it (a query sees itself).
    ``keys_sorted`` reads a block's key limit back to the host (one sync per block on GPU).

    Raises:
        ValueError: on an unknown ``impl``, inconsistent shapes, positions that are not 1-D with
            one entry per query / key, or ``block_tokens`` < 1.
    """
    if impl == "matmul":
        return attention_with_lse(q, k, v, q_positions, k_positions, scale, block_tokens, keys_sorted)[0].to(q.dtype)
    if impl != "sdpa":
        raise ValueError(f"impl must be 'matmul' or 'sdpa', got {impl!r}")
    hq, _ = _check_qkv(q, k, v)
    _check_positions(q, k, q_positions, k_positions, block_tokens)
    scale = 1.0 / math.sqrt(q.shape[2]) if scale is None else scale
    outs = []
    for start in range(0, q.shape[0], block_tokens):
        stop = min(start + block_tokens, q.shape[0])
        qp = q_positions[start:stop]
        lim = k.shape[0]
        if keys_sorted:
            lim = int(torch.searchsorted(k_positions, qp.max().reshape(1), right=True).item())
        visible = k_positions[None, :lim] <= qp[:, None]
        kb = expand_kv_heads(k[:lim], hq).permute(1, 0, 2)[None]
        vb = expand_kv_heads(v[:lim], hq).permute(1, 0, 2)[None]
        o = F.scaled_dot_product_attention(q[start:stop].permute(1, 0, 2)[None], kb, vb, attn_mask=visible[None, None],
                                           scale=scale)
        outs.append(o[0].permute(1, 0, 2))
    return torch.cat(outs) if outs else q.new_zeros(0, hq, v.shape[2])


def merge_partials(out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor,
                   lse_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge two partial attention results over disjoint key sets by log-sum-exp.

    ``lse = log(exp(lse_a) + exp(lse_b))``, ``out = exp(lse_a - lse) * out_a + exp(lse_b - lse) * out_b``.
    Shapes ``[T, H, D_v]`` / ``[T, H]``; computed in the inputs' dtype (call with the
    accumulation dtype, fp32 or fp64). Rows with both ``lse = -inf`` stay ``(0, -inf)``.
    """
    lse = torch.logaddexp(lse_a, lse_b)
    ref = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    wa = torch.exp(lse_a - ref).unsqueeze(-1)
    wb = torch.exp(lse_b - ref).unsqueeze(-1)
    return wa * out_a + wb * out_b, lse
