"""Roofline calibration of the prefill cost model from a model config and a GPU datasheet.

Pure Python (no torch, no numpy) so that the simulator can import it.

Cost model (paper §2.2 / §3.2, ``../shared/paper/vertumnus-walkthrough.zh.txt``)::

    E_C(R, P) = d + a*R + b*P + (c*R + alpha*W(R, P)) / C,   W(R, P) = R*P + R*(R + 1)/2

Coefficient mapping used here (all in seconds; ``eff_*`` are the efficiency factors of
:class:`Efficiency`, ``peak`` the dense BF16 tensor throughput [FLOP/s], ``hbm`` the HBM
bandwidth [B/s], ``link`` the intra-node link bandwidth [B/s], ``kv`` the KV bytes of one token
over all layers, :meth:`ModelSpec.kv_bytes_per_token`)::

    c     = (1 - f_serial) * 2 * active_non_embedding_params / (peak * eff_compute)   [s/token]
    alpha = attention_flops_per_pair / (peak * eff_compute)                 [s/pair]
            (= 4 * layers * q_heads * head_dim / (peak * eff_compute) for GQA)
    a     = f_serial * 2 * active_non_embedding_params / (peak * eff_compute)
            + kv / (link * eff_link)                                        [s/token]
            The first term is the share ``f_serial`` (``cp_serial_fraction``, default 0.15) of
            the per-token linear work that CP does not divide: every rank still runs the
            embedding, norms, MoE gating/dispatch bookkeeping and the non-overlapped part of
            the per-layer collectives on its own shard boundaries, and small per-rank GEMMs
            run at lower efficiency. 0.15 is an assumption chosen so that CP-4 on an uncached
            8k prompt runs ~3.1x faster than one GPU (~77 % parallel efficiency) and ~3.7x at
            64k (~93 %), in line with published CP prefill scaling (Meta, "Context Parallelism
            for Scalable Million-Token Inference", MLSys 2025: near-linear at 128k, lower for
            short contexts) and with the walk-through's example of CP paying a real GPU-time
            cost; with f_serial = 0 CP would be almost free in GPU time, which no deployment
            shows. The second term is the KV all-gather of the new tokens: each rank receives
            (C-1)/C of the R new tokens' KV; the factor (C-1)/C is bounded by 1 (the cost
            model has no C-dependent a term), so this is the conservative large-C value.
    b     = kv / (hbm * eff_hbm) + kv / (link * eff_link)                   [s/token]
            every rank reads the whole cached prefix KV from HBM once per layer, and the
            prefix (sharded over the C ranks) is gathered over the link (same (C-1)/C bound).
    d     = overhead_s (default 15 ms)                                      [s]
            fixed per-step overhead: scheduling, kernel launches, sampling the first token,
            the LM head on the last token. An assumption, not a datasheet figure; override it.

The ``2 * params`` per token rule counts one multiply-add per weight (Kaplan et al. 2020,
"Scaling Laws for Neural Language Models", §2.1); the LM head is excluded (prefill computes
logits for the last token only, a per-request constant folded into ``d``). The attention rule
counts QK^T and PV: ``2 * qk_dim + 2 * v_dim`` FLOPs per head per causal query-key pair.
With these rules the published figures are reproduced (tests/kernels_ref/test_roofline.py):
Qwen3-8B BF16 KV = 144 KiB/token, 8192 tokens = 1.125 GiB, hand-off at 25 GB/s = 48.3 ms,
8192-token prefill 0.856 s on A100 (312 TFLOP/s at 50 %) and 1.81 s on H20 (148 TFLOP/s at 50 %).

Memory fields (CP shards tokens, not weights: every rank holds all weights, as the
calibration format in envs/sim/cost_model.py states)::

    weight_bytes_per_gpu     = total_params * dtype_bytes
    activation_reserve_bytes = activation_reserve_fraction (default 10 %) * HBM capacity
    max_prompt_tokens        = the model's served context (Qwen3: 131072 with YaRN x4)

All bandwidths and capacities are datasheet decimal units (1 GB = 1e9 B, 1 TB/s = 1e12 B/s).
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import asdict, dataclass

DEFAULT_OVERHEAD_S = 0.015
DEFAULT_CP_SERIAL_FRACTION = 0.15  # share of per-token linear work CP does not divide (module docstring)
DEFAULT_ACTIVATION_RESERVE_FRACTION = 0.10
DEFAULT_EFFICIENCY = 0.5
REFERENCE_PREFILL_TOKENS = 8192

_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float8": 1}


@dataclass(frozen=True)
class GpuSpec:
    """Datasheet figures of one GPU type.

    Attributes:
        name: preset name, e.g. ``"H20"``.
        peak_bf16_flops_per_s: dense (no sparsity) BF16 tensor-core peak [FLOP/s].
        hbm_bandwidth_bytes_per_s: HBM bandwidth [B/s].
        hbm_capacity_bytes: HBM capacity [B] (datasheet GB, 1 GB = 1e9 B).
        link_bandwidth_bytes_per_s: intra-node GPU-GPU link (NVLink) bandwidth as quoted on
            the datasheet (total, both directions) [B/s].
        source: where the numbers come from.
    """

    name: str
    peak_bf16_flops_per_s: float
    hbm_bandwidth_bytes_per_s: float
    hbm_capacity_bytes: int
    link_bandwidth_bytes_per_s: float
    source: str

    def __post_init__(self) -> None:
        for key in ("peak_bf16_flops_per_s", "hbm_bandwidth_bytes_per_s", "hbm_capacity_bytes", "link_bandwidth_bytes_per_s"):
            if not getattr(self, key) > 0:
                raise ValueError(f"GPU {self.name}: {key} must be > 0, got {getattr(self, key)!r}")


@dataclass(frozen=True)
class Efficiency:
    """Fractions of the datasheet peaks reached in prefill, each in (0, 1].

    Defaults 0.5: the "at 50 %" of the published prefill figures for compute; the same
    assumed value for HBM and link (not measured; set them from profiling when available).
    """

    compute: float = DEFAULT_EFFICIENCY
    hbm: float = DEFAULT_EFFICIENCY
    link: float = DEFAULT_EFFICIENCY

    def __post_init__(self) -> None:
        for key, value in asdict(self).items():
            if not (isinstance(value, (int, float)) and 0.0 < value <= 1.0):
                raise ValueError(f"efficiency {key} must be in (0, 1], got {value!r}")


@dataclass(frozen=True)
class ModelSpec:
    """Architecture of a decoder-only transformer, enough for FLOPs, params and KV bytes.

    Attributes (HuggingFace ``config.json`` names in brackets):
        name: preset name.
        num_layers [num_hidden_layers], hidden_size, num_q_heads [num_attention_heads],
        num_kv_heads [num_key_value_heads], head_dim: GQA attention geometry.
        intermediate_size: dense SwiGLU MLP width (dense layers only).
        vocab_size: embedding rows (the LM head has the same size unless tied).
        num_experts [num_experts / n_routed_experts], num_experts_per_token
        [num_experts_per_tok], moe_intermediate_size, num_shared_experts
        [n_shared_experts]: MoE layers (``num_experts == 0``: dense model).
        first_dense_layers [first_k_dense_replace]: leading layers with a dense MLP in a MoE model.
        tie_word_embeddings: LM head shares the embedding matrix.
        qk_norm: per-head RMSNorm on q and k (Qwen3).
        attention: ``"gqa"`` or ``"mla"`` (DeepSeek multi-head latent attention).
        kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim, q_lora_rank: MLA geometry
            (``q_lora_rank == 0``: uncompressed q projection).
        dtype: weights and KV cache dtype name (``bfloat16``...).
        max_prompt_tokens: longest served prompt [tokens].
        source: where the config comes from.
    """

    name: str
    num_layers: int
    hidden_size: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_prompt_tokens: int
    source: str
    num_experts: int = 0
    num_experts_per_token: int = 0
    moe_intermediate_size: int = 0
    num_shared_experts: int = 0
    first_dense_layers: int = 0
    tie_word_embeddings: bool = False
    qk_norm: bool = False
    attention: str = "gqa"
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    q_lora_rank: int = 0
    dtype: str = "bfloat16"

    def __post_init__(self) -> None:
        if self.attention not in ("gqa", "mla"):
            raise ValueError(f"model {self.name}: attention must be 'gqa' or 'mla', got {self.attention!r}")
        if self.dtype not in _DTYPE_BYTES:
            raise ValueError(f"model {self.name}: dtype must be one of {sorted(_DTYPE_BYTES)}, got {self.dtype!r}")
        if self.attention == "gqa" and self.num_q_heads % self.num_kv_heads:
            raise ValueError(f"model {self.name}: num_q_heads {self.num_q_heads} is not a multiple of num_kv_heads {self.num_kv_heads}")
        if self.num_experts and not (0 < self.num_experts_per_token <= self.num_experts):
            raise ValueError(f"model {self.name}: num_experts_per_token must be in [1, num_experts]")

    @property
    def dtype_bytes(self) -> int:
        return _DTYPE_BYTES[self.dtype]

    # ---- geometry -------------------------------------------------------------------------
    @property
    def qk_head_dim(self) -> int:
        """Per-head query/key dimension (MLA: nope + rope part)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.attention == "mla" else self.head_dim

    @property
    def value_head_dim(self) -> int:
        return self.v_head_dim if self.attention == "mla" else self.head_dim

    # ---- parameters -----------------------------------------------------------------------
    def attention_params_per_layer(self) -> int:
        h, nq = self.hidden_size, self.num_q_heads
        if self.attention == "gqa":
            p = h * nq * self.head_dim + 2 * h * self.num_kv_heads * self.head_dim + nq * self.head_dim * h
            return p + (2 * self.head_dim if self.qk_norm else 0)
        qk = self.qk_head_dim
        if self.q_lora_rank:
            q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * nq * qk
        else:
            q = h * nq * qk
        kv_a = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
        kv_b = self.kv_lora_rank * nq * (self.qk_nope_head_dim + self.v_head_dim)
        return q + kv_a + kv_b + nq * self.v_head_dim * h

    def _expert_params(self) -> int:
        return 3 * self.hidden_size * self.moe_intermediate_size

    def _mlp_params(self, moe: bool, active: bool) -> int:
        if not moe:
            return 3 * self.hidden_size * self.intermediate_size
        routed = self.num_experts_per_token if active else self.num_experts
        return (routed + self.num_shared_experts) * self._expert_params() + self.hidden_size * self.num_experts

    def _layer_params(self, active: bool) -> int:
        n_moe = self.num_layers - self.first_dense_layers if self.num_experts else 0
        n_dense = self.num_layers - n_moe
        norms = 2 * self.hidden_size
        return (self.num_layers * (self.attention_params_per_layer() + norms)
                + n_dense * self._mlp_params(False, active) + n_moe * self._mlp_params(True, active))

    def non_embedding_params(self) -> int:
        """Parameters outside the embedding and LM head (incl. the final norm)."""
        return self._layer_params(active=False) + self.hidden_size

    def active_non_embedding_params(self) -> int:
        """Non-embedding parameters used per token (routed top-k + shared experts + router)."""
        return self._layer_params(active=True) + self.hidden_size

    def embedding_params(self) -> int:
        """Input embedding plus LM head (once when tied)."""
        return self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)

    def total_params(self) -> int:
        return self.non_embedding_params() + self.embedding_params()

    # ---- FLOPs and bytes ------------------------------------------------------------------
    def attention_flops_per_pair(self) -> int:
        """FLOPs of one causal query-key pair over all layers and query heads:
        ``2 * layers * q_heads * (qk_dim + v_dim)`` (QK^T and PV); GQA: ``4*layers*heads*head_dim``.
        MLA is counted in its prefill (decompressed, multi-head) form."""
        return 2 * self.num_layers * self.num_q_heads * (self.qk_head_dim + self.value_head_dim)

    def linear_flops_per_token(self) -> int:
        """``2 * active non-embedding params`` FLOPs per new token (projections and MLP/experts)."""
        return 2 * self.active_non_embedding_params()

    def prefill_flops(self, num_new_tokens: int, num_cached_tokens: int = 0) -> int:
        """FLOPs of a prefill of R new tokens over P cached ones:
        ``2 * active_non_embedding_params * R + attention_flops_per_pair * W(R, P)``."""
        if num_new_tokens < 0 or num_cached_tokens < 0:
            raise ValueError("token counts must be >= 0")
        return self.linear_flops_per_token() * num_new_tokens + self.attention_flops_per_pair() * attention_pairs(num_new_tokens, num_cached_tokens)

    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes of one token over all layers.

        GQA: ``2 (K and V) * layers * kv_heads * head_dim * dtype_bytes``.
        MLA: ``layers * (kv_lora_rank + qk_rope_head_dim) * dtype_bytes`` -- the cache holds the
        compressed latent c_KV and the shared decoupled RoPE key only (DeepSeek-V2 paper,
        arXiv 2405.04434, §2.1, Table 1: (d_c + d_h^R) * l elements per token).
        """
        if self.attention == "mla":
            return self.num_layers * (self.kv_lora_rank + self.qk_rope_head_dim) * self.dtype_bytes
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes

    def config_dict(self) -> dict:
        return asdict(self)


def attention_pairs(num_new_tokens: int, num_cached_tokens: int) -> int:
    """``W(R, P) = R*P + R*(R+1)/2`` (paper §2.2); same as ``envs.sim.cost_model.attention_pairs``."""
    r = num_new_tokens
    return r * num_cached_tokens + r * (r + 1) // 2


# ---- presets --------------------------------------------------------------------------------

GPUS: dict[str, GpuSpec] = {
    "H20": GpuSpec(
        "H20", 148e12, 4.0e12, 96_000_000_000, 900e9,
        "NVIDIA HGX H20 specification as widely reported since Nov 2023 (96 GB HBM3, 4.0 TB/s, 148 TFLOP/s dense "
        "FP16/BF16, NVLink 900 GB/s); NVIDIA publishes no public H20 datasheet"),
    "H20-3e": GpuSpec(
        "H20-3e", 148e12, 4.8e12, 141_000_000_000, 900e9,
        "H20 with 141 GB HBM3e at 4.8 TB/s (paper §9 testbed GPU); compute and NVLink as H20; "
        "figures as reported by vendors, no public NVIDIA datasheet"),
    "A100-80GB": GpuSpec(
        "A100-80GB", 312e12, 2.039e12, 80_000_000_000, 600e9,
        "NVIDIA A100 Tensor Core GPU datasheet (SXM 80GB: BF16 312 TFLOP/s dense, HBM2e 2,039 GB/s, NVLink 600 GB/s)"),
    "H100": GpuSpec(
        "H100", 989.5e12, 3.35e12, 80_000_000_000, 900e9,
        "NVIDIA H100 Tensor Core GPU datasheet (SXM: BF16 1,979 TFLOP/s with sparsity = 989.5 dense, "
        "80 GB HBM3, 3.35 TB/s, NVLink 900 GB/s)"),
    "H200": GpuSpec(
        "H200", 989.5e12, 4.8e12, 141_000_000_000, 900e9,
        "NVIDIA H200 Tensor Core GPU datasheet (SXM: BF16 1,979 TFLOP/s with sparsity = 989.5 dense, "
        "141 GB HBM3e, 4.8 TB/s, NVLink 900 GB/s)"),
}

MODELS: dict[str, ModelSpec] = {
    "Qwen3-8B": ModelSpec(
        name="Qwen3-8B", num_layers=36, hidden_size=4096, num_q_heads=32, num_kv_heads=8, head_dim=128,
        intermediate_size=12288, vocab_size=151936, max_prompt_tokens=131072, qk_norm=True,
        source="huggingface.co/Qwen/Qwen3-8B config.json; 32768 native context, 131072 with YaRN factor 4 (model card)"),
    "Qwen3-30B-A3B": ModelSpec(
        name="Qwen3-30B-A3B", num_layers=48, hidden_size=2048, num_q_heads=32, num_kv_heads=4, head_dim=128,
        intermediate_size=6144, vocab_size=151936, max_prompt_tokens=131072, qk_norm=True,
        num_experts=128, num_experts_per_token=8, moe_intermediate_size=768,
        source="huggingface.co/Qwen/Qwen3-30B-A3B config.json (30.5B total, 3.3B activated); 131072 with YaRN factor 4"),
    "DeepSeek-V2-Lite": ModelSpec(
        name="DeepSeek-V2-Lite", num_layers=27, hidden_size=2048, num_q_heads=16, num_kv_heads=16, head_dim=128,
        intermediate_size=10944, vocab_size=102400, max_prompt_tokens=32768,
        num_experts=64, num_experts_per_token=6, moe_intermediate_size=1408, num_shared_experts=2, first_dense_layers=1,
        attention="mla", kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128, q_lora_rank=0,
        source="huggingface.co/deepseek-ai/DeepSeek-V2-Lite config.json (15.7B total, 2.4B activated, 32k context); "
               "MLA KV = (kv_lora_rank 512 + rope 64) per layer"),
    "DeepSeek-V3": ModelSpec(
        name="DeepSeek-V3", num_layers=61, hidden_size=7168, num_q_heads=128, num_kv_heads=128, head_dim=128,
        intermediate_size=18432, vocab_size=129280, max_prompt_tokens=131072,
        num_experts=256, num_experts_per_token=8, moe_intermediate_size=2048, num_shared_experts=1, first_dense_layers=3,
        attention="mla", kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128, q_lora_rank=1536,
        source="huggingface.co/deepseek-ai/DeepSeek-V3 config.json (671B total excl. MTP, 37B activated, 128K context); "
               "KV counted in BF16; its weights do not fit one GPU, so no replicated-weights calibration"),
}


def get_gpu(name: str) -> GpuSpec:
    """Preset by name (case-insensitive). Raises ValueError listing the presets."""
    for key, spec in GPUS.items():
        if key.lower() == name.lower():
            return spec
    raise ValueError(f"unknown GPU {name!r}; presets: {', '.join(GPUS)}")


def get_model(name: str) -> ModelSpec:
    """Preset by name (case-insensitive). Raises ValueError listing the presets."""
    for key, spec in MODELS.items():
        if key.lower() == name.lower():
            return spec
    raise ValueError(f"unknown model {name!r}; presets: {', '.join(MODELS)}")


# ---- derived figures ------------------------------------------------------------------------

def prefill_compute_time_s(model: ModelSpec, gpu: GpuSpec, num_new_tokens: int, num_cached_tokens: int = 0,
                           compute_efficiency: float = DEFAULT_EFFICIENCY) -> float:
    """Compute-bound prefill time on one GPU, ``prefill_flops / (peak * efficiency)`` [s].

    This is the published-figure convention (no overhead, no communication); the full cost
    model adds ``d + a*R + b*P``.
    """
    return model.prefill_flops(num_new_tokens, num_cached_tokens) / (gpu.peak_bf16_flops_per_s * compute_efficiency)


def kv_transfer_time_s(model: ModelSpec, num_tokens: int, bandwidth_bytes_per_s: float) -> float:
    """Time to move ``num_tokens`` tokens of KV cache at ``bandwidth_bytes_per_s`` [s] (e.g. P/D hand-off)."""
    if bandwidth_bytes_per_s <= 0:
        raise ValueError(f"bandwidth must be > 0, got {bandwidth_bytes_per_s!r}")
    return num_tokens * model.kv_bytes_per_token() / bandwidth_bytes_per_s


@dataclass(frozen=True)
class RooflineCoefficients:
    """Roofline values of the five cost-model coefficients (field names as ``CostCoefficients``)."""

    d_s: float
    a_s_per_token: float
    b_s_per_token: float
    c_s_per_token: float
    alpha_s_per_pair: float

    def service_time_s(self, degree: int, num_new_tokens: int, num_cached_tokens: int) -> float:
        """``E_C(R, P)`` [s]."""
        w = attention_pairs(num_new_tokens, num_cached_tokens)
        return (self.d_s + self.a_s_per_token * num_new_tokens + self.b_s_per_token * num_cached_tokens
                + (self.c_s_per_token * num_new_tokens + self.alpha_s_per_pair * w) / degree)


def roofline_coefficients(model: ModelSpec, gpu: GpuSpec, efficiency: Efficiency = Efficiency(),
                          overhead_s: float = DEFAULT_OVERHEAD_S,
                          cp_serial_fraction: float = DEFAULT_CP_SERIAL_FRACTION) -> RooflineCoefficients:
    """Cost-model coefficients by the mapping in the module docstring.

    Raises:
        ValueError: if ``overhead_s`` < 0 or ``cp_serial_fraction`` is outside [0, 1].
    """
    if not overhead_s >= 0:
        raise ValueError(f"overhead_s must be >= 0, got {overhead_s!r}")
    if not 0.0 <= cp_serial_fraction <= 1.0:
        raise ValueError(f"cp_serial_fraction must be in [0, 1], got {cp_serial_fraction!r}")
    compute = gpu.peak_bf16_flops_per_s * efficiency.compute
    link = gpu.link_bandwidth_bytes_per_s * efficiency.link
    hbm = gpu.hbm_bandwidth_bytes_per_s * efficiency.hbm
    kv = model.kv_bytes_per_token()
    linear = model.linear_flops_per_token() / compute
    return RooflineCoefficients(
        d_s=float(overhead_s),
        a_s_per_token=cp_serial_fraction * linear + kv / link,
        b_s_per_token=kv / hbm + kv / link,
        c_s_per_token=(1.0 - cp_serial_fraction) * linear,
        alpha_s_per_pair=model.attention_flops_per_pair() / compute,
    )


def memory_fields(model: ModelSpec, gpu: GpuSpec,
                  activation_reserve_fraction: float = DEFAULT_ACTIVATION_RESERVE_FRACTION) -> dict:
    """The calibration's memory fields [bytes / tokens], see the module docstring.

    Raises:
        ValueError: if the fraction is outside [0, 1), or the replicated weights plus the
            reserve leave no KV memory on the GPU.
    """
    if not 0.0 <= activation_reserve_fraction < 1.0:
        raise ValueError(f"activation_reserve_fraction must be in [0, 1), got {activation_reserve_fraction!r}")
    weights = model.total_params() * model.dtype_bytes
    reserve = int(round(activation_reserve_fraction * gpu.hbm_capacity_bytes))
    if weights + reserve >= gpu.hbm_capacity_bytes:
        raise ValueError(
            f"{model.name} weights ({weights / 1e9:.1f} GB, replicated on every CP rank) plus the activation reserve "
            f"({reserve / 1e9:.1f} GB) do not fit a {gpu.name} ({gpu.hbm_capacity_bytes / 1e9:.0f} GB)")
    return {
        "kv_bytes_per_token": model.kv_bytes_per_token(),
        "gpu_memory_bytes": int(gpu.hbm_capacity_bytes),
        "weight_bytes_per_gpu": int(weights),
        "activation_reserve_bytes": reserve,
        "max_prompt_tokens": model.max_prompt_tokens,
    }


COEFFICIENT_MAPPING = {
    "c_s_per_token": "(1 - cp_serial_fraction) * 2 * active_non_embedding_params / (peak_bf16_flops_per_s * eff_compute)",
    "alpha_s_per_pair": "2 * layers * q_heads * (qk_head_dim + v_head_dim) / (peak_bf16_flops_per_s * eff_compute)",
    "a_s_per_token": "cp_serial_fraction * 2 * active_non_embedding_params / (peak_bf16_flops_per_s * eff_compute) + kv_bytes_per_token / (link_bandwidth * eff_link)  [CP-undivided share of per-token work + KV all-gather of new tokens, (C-1)/C <= 1]",
    "b_s_per_token": "kv_bytes_per_token / (hbm_bandwidth * eff_hbm) + kv_bytes_per_token / (link_bandwidth * eff_link)",
    "d_s": "overhead_s (assumed fixed per-step overhead)",
}


def build_calibration_dict(model: ModelSpec, gpu: GpuSpec, efficiency: Efficiency = Efficiency(),
                           overhead_s: float = DEFAULT_OVERHEAD_S,
                           activation_reserve_fraction: float = DEFAULT_ACTIVATION_RESERVE_FRACTION,
                           command: str | None = None, created: str | None = None,
                           cp_serial_fraction: float = DEFAULT_CP_SERIAL_FRACTION) -> dict:
    """The calibration file content (``envs.sim.cost_model.Calibration`` JSON format 1) as a dict.

    ``created`` defaults to today's date (ISO, UTC). Raises ValueError as
    :func:`memory_fields` / :func:`roofline_coefficients`.
    """
    coeff = roofline_coefficients(model, gpu, efficiency, overhead_s, cp_serial_fraction)
    memory = memory_fields(model, gpu, activation_reserve_fraction)
    if created is None:
        created = _dt.datetime.now(_dt.timezone.utc).date().isoformat()
    provenance = {
        "method": "roofline",
        "source": "kernels_ref.roofline: FLOPs / (peak * efficiency), bytes / (bandwidth * efficiency)",
        "created": created,
        "tool": "cpgym calibrate",
        "command": command or f"cpgym calibrate --model {model.name} --gpu {gpu.name}",
        "datasheet": asdict(gpu),
        "model_config": model.config_dict(),
        "efficiency": asdict(efficiency),
        "overhead_s": float(overhead_s),
        "cp_serial_fraction": float(cp_serial_fraction),
        "activation_reserve_fraction": float(activation_reserve_fraction),
        "coefficient_mapping": COEFFICIENT_MAPPING,
        "derived": {
            "total_params": model.total_params(),
            "non_embedding_params": model.non_embedding_params(),
            "active_non_embedding_params": model.active_non_embedding_params(),
            "linear_flops_per_token": model.linear_flops_per_token(),
            "attention_flops_per_pair": model.attention_flops_per_pair(),
            f"prefill_time_s_{REFERENCE_PREFILL_TOKENS}": prefill_compute_time_s(
                model, gpu, REFERENCE_PREFILL_TOKENS, 0, efficiency.compute),
        },
    }
    return {
        "format_version": 1,
        "model": model.name,
        "gpu_type": gpu.name,
        "dtype": model.dtype,
        "coefficients": asdict(coeff),
        **memory,
        "provenance": provenance,
    }


def build_calibration(model: ModelSpec, gpu: GpuSpec, efficiency: Efficiency = Efficiency(), **kwargs):
    """Like :func:`build_calibration_dict` but returns a validated ``envs.sim.cost_model.Calibration``."""
    from envs.sim.cost_model import Calibration  # lazy: envs.sim may import this module

    return Calibration.from_dict(build_calibration_dict(model, gpu, efficiency, **kwargs), source=f"roofline {model.name}/{gpu.name}")
