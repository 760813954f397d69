"""A prefill decoder layer on CP attention: RMSNorm, QKV projection, RoPE, attention, MLP / MoE.

Llama / Qwen3 block structure (pre-norm, SwiGLU MLP, rotate-half RoPE; Qwen3 tech report
arXiv 2505.09388 §2; MoE with softmax top-k routing and renormalised top-k weights as
``Qwen3MoeSparseMoeBlock`` with ``norm_topk_prob=True``). It exists so that the per-token
linear work of the cost model (the ``c*R`` term: projections and MLP, sharded over the CP
ranks because each rank projects only its own tokens) is real when profiling; it is not a
faithful reimplementation of any checkpoint (no q/k-norm, no shared experts, random weights).

Shapes: a rank's hidden states ``[T_local, hidden]`` with ``T_local = 2s`` (its zigzag new
tokens, :mod:`kernels_ref.layout`); the cached prefix K/V of this layer is the rank's shard
``[p, H_kv, head_dim]`` (post-RoPE, as a KV cache stores it).
"""

from __future__ import annotations

import torch

from kernels_ref.attention import reference_attention
from kernels_ref.config import LayerConfig
from kernels_ref.cp_attention import ring_attention, zigzag_allgather_attention
from kernels_ref.layout import ZigzagLayout


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last dim, computed in fp32 (fp64 for fp64)."""
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf = x.to(acc)
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def apply_rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate-half RoPE (Su et al., arXiv 2104.09864; HF ``apply_rotary_pos_emb``) on ``[T, H, D]``."""
    d = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d))
    ang = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    ang = torch.cat([ang, ang], dim=-1)[:, None, :]
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class PrefillDecoderLayer(torch.nn.Module):
    """One decoder layer whose attention runs context-parallel.

    Args:
        config: the geometry.
        seed: weights are drawn from ``torch.Generator().manual_seed(seed)`` (normal, std
            ``1/sqrt(fan_in)``, norms ones), so every CP rank builds identical (replicated) weights.
        dtype, device: parameter dtype and device.
    """

    def __init__(self, config: LayerConfig, seed: int, dtype: torch.dtype = torch.float32, device="cpu") -> None:
        super().__init__()
        self.config = config
        gen = torch.Generator().manual_seed(seed)
        h, hd, c = config.hidden_size, config.head_dim, config

        def w(fan_in: int, *shape: int) -> torch.nn.Parameter:
            t = torch.randn(*shape, generator=gen, dtype=torch.float64) / fan_in ** 0.5
            return torch.nn.Parameter(t.to(dtype=dtype, device=device), requires_grad=False)

        self.attn_norm = torch.nn.Parameter(torch.ones(h, dtype=dtype, device=device), requires_grad=False)
        self.mlp_norm = torch.nn.Parameter(torch.ones(h, dtype=dtype, device=device), requires_grad=False)
        self.w_qkv = w(h, h, (c.num_q_heads + 2 * c.num_kv_heads) * hd)
        self.w_o = w(c.num_q_heads * hd, c.num_q_heads * hd, h)
        if c.num_experts:
            self.w_router = w(h, h, c.num_experts)
            self.w_gate_up = w(h, c.num_experts, h, 2 * c.moe_intermediate_size)
            self.w_down = w(c.moe_intermediate_size, c.num_experts, c.moe_intermediate_size, h)
        else:
            self.w_gate_up = w(h, h, 2 * c.intermediate_size)
            self.w_down = w(c.intermediate_size, c.intermediate_size, h)

    def qkv(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``[T, hidden] -> q [T, H_q, D], k [T, H_kv, D], v [T, H_kv, D]`` (RoPE on q and k)."""
        c = self.config
        t = x.shape[0]
        qkv = rms_norm(x, self.attn_norm, c.rms_norm_eps) @ self.w_qkv
        nq, nkv = c.num_q_heads * c.head_dim, c.num_kv_heads * c.head_dim
        q = qkv[:, :nq].view(t, c.num_q_heads, c.head_dim)
        k = qkv[:, nq:nq + nkv].view(t, c.num_kv_heads, c.head_dim)
        v = qkv[:, nq + nkv:].reshape(t, c.num_kv_heads, c.head_dim)
        return apply_rope(q, positions, c.rope_theta), apply_rope(k, positions, c.rope_theta), v

    def _swiglu(self, h: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
        gate, up = (h @ w_gate_up).chunk(2, dim=-1)
        return (torch.nn.functional.silu(gate) * up) @ w_down

    def mlp(self, h: torch.Tensor) -> torch.Tensor:
        """Dense SwiGLU or top-k MoE on ``[T, hidden]``."""
        c = self.config
        if not c.num_experts:
            return self._swiglu(h, self.w_gate_up, self.w_down)
        acc = torch.float64 if h.dtype == torch.float64 else torch.float32
        probs = torch.softmax((h @ self.w_router).to(acc), dim=-1)
        weight, expert = probs.topk(c.num_experts_per_token, dim=-1)
        weight = (weight / weight.sum(-1, keepdim=True)).to(h.dtype)
        out = torch.zeros_like(h)
        for e in range(c.num_experts):
            tok, slot = (expert == e).nonzero(as_tuple=True)
            if tok.numel():
                y = self._swiglu(h[tok], self.w_gate_up[e], self.w_down[e]) * weight[tok, slot, None]
                out.index_add_(0, tok, y)
        return out

    def finish(self, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        """Output projection, residual, MLP and residual: ``[T, hidden], [T, H_q, D] -> [T, hidden]``."""
        x = x + attn.reshape(x.shape[0], -1) @ self.w_o
        return x + self.mlp(rms_norm(x, self.mlp_norm, self.config.rms_norm_eps))

    def forward(self, x: torch.Tensor, k_prefix: torch.Tensor, v_prefix: torch.Tensor, layout: ZigzagLayout,
                rank: int, group=None, algorithm: str = "allgather", impl: str = "matmul",
                block_tokens: int = 256) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """CP forward of the rank's tokens.

        Args:
            x: ``[2s, hidden]`` hidden states of the rank's new tokens (zigzag layout).
            k_prefix, v_prefix: ``[p, H_kv, D]`` the rank's shard of this layer's cached prefix.
            layout: the request's layout; ``rank`` the rank in ``group``.
            algorithm: ``"allgather"`` (:func:`zigzag_allgather_attention`) or ``"ring"``.
            impl: attention implementation of the all-gather path (``"matmul"`` or ``"sdpa"``).

        Returns:
            ``(y [2s, hidden], k [2s, H_kv, D], v [2s, H_kv, D])``: outputs and the new tokens'
            K/V, which the rank appends to its KV cache.

        Raises:
            ValueError: on an unknown algorithm or mismatched shapes.
        """
        from kernels_ref.cp_attention import new_token_positions  # lazy: torch

        q, k, v = self.qkv(x, new_token_positions(layout, rank, device=x.device))
        if algorithm == "allgather":
            res = zigzag_allgather_attention(q, k, v, k_prefix, v_prefix, layout, group=group, impl=impl,
                                             block_tokens=block_tokens)
        elif algorithm == "ring":
            res = ring_attention(q, k, v, k_prefix, v_prefix, layout, group=group, block_tokens=block_tokens)
        else:
            raise ValueError(f"algorithm must be 'allgather' or 'ring', got {algorithm!r}")
        return self.finish(x, res.out), k, v

    def reference_forward(self, x: torch.Tensor, k_prefix: torch.Tensor,
                          v_prefix: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Single-device forward of all R new tokens with :func:`reference_attention`.

        ``x [R, hidden]`` at positions ``P .. P+R-1``, ``k_prefix, v_prefix [P, H_kv, D]``.
        Call it on a float64 copy of the layer (``layer.double()``) for a float64 reference.
        """
        p = k_prefix.shape[0]
        positions = torch.arange(p, p + x.shape[0], device=x.device)
        q, k, v = self.qkv(x, positions)
        attn = reference_attention(q, torch.cat([k_prefix, k]), torch.cat([v_prefix, v])).to(x.dtype)
        return self.finish(x, attn), k, v
