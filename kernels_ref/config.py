"""Geometry of the reference decoder layer (pure Python, importable without torch)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LayerConfig:
    """Geometry of :class:`PrefillDecoderLayer`.

    Attributes:
        hidden_size, num_q_heads, num_kv_heads, head_dim, intermediate_size: as in HF configs.
        num_experts: 0 for a dense SwiGLU MLP, else routed experts of width ``moe_intermediate_size``.
        num_experts_per_token: top-k.
        rope_theta: RoPE base (Qwen3: 1e6).
        rms_norm_eps: RMSNorm epsilon (Qwen3: 1e-6).

    Raises:
        ValueError: on non-positive sizes, ``num_q_heads % num_kv_heads != 0``, an odd head_dim,
            or an invalid top-k.
    """

    hidden_size: int = 128
    num_q_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 32
    intermediate_size: int = 256
    num_experts: int = 0
    num_experts_per_token: int = 0
    moe_intermediate_size: int = 0
    rope_theta: float = 1e6
    rms_norm_eps: float = 1e-6

    def __post_init__(self) -> None:
        for key in ("hidden_size", "num_q_heads", "num_kv_heads", "head_dim", "intermediate_size"):
            if getattr(self, key) < 1:
                raise ValueError(f"LayerConfig.{key} must be >= 1, got {getattr(self, key)}")
        if self.num_q_heads % self.num_kv_heads:
            raise ValueError(f"num_q_heads {self.num_q_heads} must be a multiple of num_kv_heads {self.num_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for RoPE, got {self.head_dim}")
        if self.num_experts and not (1 <= self.num_experts_per_token <= self.num_experts and self.moe_intermediate_size >= 1):
            raise ValueError("MoE needs 1 <= num_experts_per_token <= num_experts and moe_intermediate_size >= 1")

    def weight_shapes(self) -> list[tuple[int, ...]]:
        """Shapes of the weight tensors :class:`PrefillDecoderLayer` allocates (norms, fused QKV,
        output projection, then the dense SwiGLU or the router and the stacked experts)."""
        h, hd = self.hidden_size, self.head_dim
        shapes = [(h,), (h,), (h, (self.num_q_heads + 2 * self.num_kv_heads) * hd), (self.num_q_heads * hd, h)]
        if self.num_experts:
            e, m = self.num_experts, self.moe_intermediate_size
            return shapes + [(h, e), (e, h, 2 * m), (e, m, h)]
        return shapes + [(h, 2 * self.intermediate_size), (self.intermediate_size, h)]

    def linear_flops_per_token(self) -> int:
        """``2 * active params`` of the layer [FLOP/token] (projections + MLP or top-k experts)."""
        h, hd = self.hidden_size, self.head_dim
        attn = h * (self.num_q_heads + 2 * self.num_kv_heads) * hd + self.num_q_heads * hd * h
        if self.num_experts:
            mlp = self.num_experts_per_token * 3 * h * self.moe_intermediate_size + h * self.num_experts
        else:
            mlp = 3 * h * self.intermediate_size
        return 2 * (attn + mlp)
