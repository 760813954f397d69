"""Datasheets of the models and GPUs the roofline calibration (:mod:`kernels_ref.roofline`) is
derived from: :class:`ModelSpec` (architecture, attention kind, MoE), :class:`GpuSpec` (peak
compute, memory, bandwidths) and the named entries of :data:`MODELS` and :data:`GPUS`.

All bandwidths and capacities are datasheet decimal units (1 GB = 1e9 B, 1 TB/s = 1e12 B/s);
each entry names its source.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from fractions import Fraction

_H20_FP8 = "296 TFLOP/s dense FP8/INT8"

# DeepSeek-V4-Flash: 2 window-only layers, then CSA (r = 4) and HCA (r = 128) alternating; the
# config's 44th entry belongs to the MTP layer, which prefill does not run.
_V4_FLASH_COMPRESS_RATIOS = (0, 0) + (4, 128) * 20 + (4,)


# The paper's testbed model and GPU (§9: Qwen3-30B-A3B on H20-3e); envs/sim/calibrations holds the file.
DEFAULT_MODEL = "Qwen3-30B-A3B"


DEFAULT_GPU = "H20-3e"


ATTENTION_KINDS = ("gqa", "mla", "csa_hca")


WEIGHT_SHARD_CHOICES = (1, 2, 4, 8)  # at most one 8-GPU node


_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float8": 1}


_MIB = 2 ** 20


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
        peak_fp8_flops_per_s: dense FP8 tensor-core peak [FLOP/s]; 0 = no FP8 tensor cores
            (A100), and an FP8 model is refused on it.
    """

    name: str
    peak_bf16_flops_per_s: float
    hbm_bandwidth_bytes_per_s: float
    hbm_capacity_bytes: int
    link_bandwidth_bytes_per_s: float
    source: str
    peak_fp8_flops_per_s: float = 0.0

    def __post_init__(self) -> None:
        for key in ("peak_bf16_flops_per_s", "hbm_bandwidth_bytes_per_s", "hbm_capacity_bytes", "link_bandwidth_bytes_per_s"):
            if not getattr(self, key) > 0:
                raise ValueError(f"GPU {self.name}: {key} must be > 0, got {getattr(self, key)!r}")
        if not self.peak_fp8_flops_per_s >= 0:
            raise ValueError(f"GPU {self.name}: peak_fp8_flops_per_s must be >= 0, got {self.peak_fp8_flops_per_s!r}")

    def peak_flops_per_s(self, dtype: str) -> float:
        """Dense tensor-core peak for GEMMs with ``dtype`` weights [FLOP/s].

        Raises:
            ValueError: for ``float8`` on a GPU without FP8 tensor cores.
        """
        if dtype == "float8":
            if not self.peak_fp8_flops_per_s:
                raise ValueError(f"GPU {self.name} has no FP8 tensor cores (peak_fp8_flops_per_s = 0); "
                                 "an FP8 model cannot run on it")
            return self.peak_fp8_flops_per_s
        return self.peak_bf16_flops_per_s


@dataclass(frozen=True)
class ModelSpec:
    """Architecture of a decoder-only transformer, enough for FLOPs, params and KV bytes.

    Attributes (HuggingFace ``config.json`` names in brackets):
        name: preset name.
        num_layers [num_hidden_layers], hidden_size, num_q_heads [num_attention_heads],
        num_kv_heads [num_key_value_heads], head_dim: attention geometry.
        intermediate_size: dense SwiGLU MLP width (dense layers only).
        vocab_size: embedding rows (the LM head has the same size unless tied).
        num_experts [num_experts / n_routed_experts], num_experts_per_token
        [num_experts_per_tok], moe_intermediate_size, num_shared_experts
        [n_shared_experts]: MoE layers (``num_experts == 0``: dense model).
        first_dense_layers [first_k_dense_replace]: leading layers with a dense MLP in a MoE model.
        tie_word_embeddings: LM head shares the embedding matrix.
        qk_norm: per-head RMSNorm on q and k (Qwen3).
        attention: one of :data:`ATTENTION_KINDS` (module docstring): ``"gqa"``, ``"mla"``
        (DeepSeek multi-head latent attention) or ``"csa_hca"`` (DeepSeek-V4 hybrid
        compressed/sparse attention). Any other kind raises ValueError.
        kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim, q_lora_rank: MLA geometry
        (``q_lora_rank == 0``: uncompressed q projection); ``csa_hca`` uses q_lora_rank and
        qk_rope_head_dim.
        compress_ratios [compress_ratios]: ``csa_hca`` per-layer compression ratio r (0 = window only).
        csa_compress_ratio: the ratio of the CSA (indexer + top-k) layers; other r > 0 are HCA.
        sliding_window [sliding_window], index_topk, index_n_heads, index_head_dim,
        o_lora_rank, o_groups: ``csa_hca`` geometry.
        dtype: weight dtype (``bfloat16``, ``float8``...); selects the tensor-core peak.
        kv_dtype: KV-cache dtype.
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
    kv_dtype: str = "bfloat16"
    compress_ratios: tuple[int, ...] = ()
    csa_compress_ratio: int = 4
    sliding_window: int = 0
    index_topk: int = 0
    index_n_heads: int = 0
    index_head_dim: int = 0
    o_lora_rank: int = 0
    o_groups: int = 0

    def __post_init__(self) -> None:
        if self.attention not in ATTENTION_KINDS:
            raise ValueError(
                f"model {self.name}: attention kind {self.attention!r} is not modelled; supported kinds are "
                f"{', '.join(ATTENTION_KINDS)}. Its work is not assumed to be the dense pair count W(R, P): add a work "
                "term for it in kernels_ref/roofline.py")
        for key in ("dtype", "kv_dtype"):
            if getattr(self, key) not in _DTYPE_BYTES:
                raise ValueError(f"model {self.name}: {key} must be one of {sorted(_DTYPE_BYTES)}, got {getattr(self, key)!r}")
        if self.attention == "gqa" and self.num_q_heads % self.num_kv_heads:
            raise ValueError(f"model {self.name}: num_q_heads {self.num_q_heads} is not a multiple of "
                             f"num_kv_heads {self.num_kv_heads}")
        if self.num_experts and not (0 < self.num_experts_per_token <= self.num_experts):
            raise ValueError(f"model {self.name}: num_experts_per_token must be in [1, num_experts]")
        if self.attention == "csa_hca":
            object.__setattr__(self, "compress_ratios", tuple(self.compress_ratios))
            if len(self.compress_ratios) != self.num_layers or any(r < 0 for r in self.compress_ratios):
                raise ValueError(f"model {self.name}: compress_ratios must hold one ratio >= 0 per layer "
                                 f"({self.num_layers}), got {len(self.compress_ratios)}")
            for key in ("sliding_window", "index_topk", "index_n_heads", "index_head_dim", "o_lora_rank", "o_groups",
                        "q_lora_rank", "csa_compress_ratio"):
                if getattr(self, key) <= 0:
                    raise ValueError(f"model {self.name}: csa_hca attention needs {key} > 0")

    @property
    def dtype_bytes(self) -> int:
        """Bytes of one weight."""
        return _DTYPE_BYTES[self.dtype]

    @property
    def kv_dtype_bytes(self) -> int:
        """Bytes of one KV-cache element."""
        return _DTYPE_BYTES[self.kv_dtype]

    # ---- geometry -------------------------------------------------------------------------
    @property
    def qk_head_dim(self) -> int:
        """Per-head query/key dimension (MLA: nope + rope part)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.attention == "mla" else self.head_dim

    @property
    def value_head_dim(self) -> int:
        return self.v_head_dim if self.attention == "mla" else self.head_dim

    def _layers_with_ratio(self, csa: bool) -> list[int]:
        """Compression ratios of the CSA (``csa``) or HCA layers of a ``csa_hca`` model."""
        return [r for r in self.compress_ratios if r > 0 and (r == self.csa_compress_ratio) == csa]

    # ---- parameters -----------------------------------------------------------------------
    def attention_params_per_layer(self, ratio: int = 0) -> int:
        """Attention parameters of one layer (``ratio``: its compression ratio, ``csa_hca`` only)."""
        h, nq = self.hidden_size, self.num_q_heads
        if self.attention == "gqa":
            p = h * nq * self.head_dim + 2 * h * self.num_kv_heads * self.head_dim + nq * self.head_dim * h
            return p + (2 * self.head_dim if self.qk_norm else 0)
        if self.attention == "csa_hca":
            return self._csa_hca_params(ratio)
        qk = self.qk_head_dim
        if self.q_lora_rank:
            q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * nq * qk
        else:
            q = h * nq * qk
        kv_a = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
        kv_b = self.kv_lora_rank * nq * (self.qk_nope_head_dim + self.v_head_dim)
        return q + kv_a + kv_b + nq * self.v_head_dim * h

    def _csa_hca_params(self, ratio: int) -> int:
        """DeepSeek-V4 attention block: low-rank q (wq_a, wq_b), one shared key-value head (wkv),
        grouped low-rank output (wo_a per group, wo_b), per-head sinks; with r > 0 a compressor
        (wkv and wgate of width ``coff * head_dim``, coff = 2 for the overlapping CSA compressor,
        positional bias ``r * coff * head_dim``); CSA layers add the lightning indexer (its q
        projection, head weights and its own compressor of width ``coff * index_head_dim``).
        Hyper-connection mixing weights (~0.1 % of the total) are not counted."""
        h, nq, d, qr = self.hidden_size, self.num_q_heads, self.head_dim, self.q_lora_rank
        p = h * qr + qr + qr * nq * d + h * d + d + nq * d * self.o_lora_rank + self.o_groups * self.o_lora_rank * h + nq
        if ratio > 0:
            coff = 2 if ratio == self.csa_compress_ratio else 1
            p += 2 * h * coff * d + ratio * coff * d + d
            if ratio == self.csa_compress_ratio:
                di = self.index_head_dim
                p += qr * self.index_n_heads * di + h * self.index_n_heads + 2 * h * coff * di + ratio * coff * di + di
        return p

    def _expert_params(self) -> int:
        return 3 * self.hidden_size * self.moe_intermediate_size

    def _mlp_params(self, moe: bool, active: bool) -> int:
        if not moe:
            return 3 * self.hidden_size * self.intermediate_size
        routed = self.num_experts_per_token if active else self.num_experts
        return (routed + self.num_shared_experts) * self._expert_params() + self.hidden_size * self.num_experts

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.first_dense_layers if self.num_experts else 0

    def _attention_params(self) -> int:
        if self.attention == "csa_hca":
            return sum(self.attention_params_per_layer(r) for r in self.compress_ratios)
        return self.num_layers * self.attention_params_per_layer()

    def _layer_params(self, active: bool) -> int:
        n_moe = self.num_moe_layers
        n_dense = self.num_layers - n_moe
        norms = 2 * self.hidden_size
        return (self._attention_params() + self.num_layers * norms
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

    def routed_expert_params(self) -> int:
        """Parameters of the routed experts (what expert parallelism divides over a shard group)."""
        return self.num_moe_layers * self.num_experts * self._expert_params()

    # ---- FLOPs and bytes ------------------------------------------------------------------
    def _flops_per_entry(self) -> int:
        """FLOPs of one query attending to one key/value entry over the query heads of a layer."""
        return 2 * self.num_q_heads * (self.qk_head_dim + self.value_head_dim)

    def attention_flops_per_pair(self) -> float:
        """FLOPs per causal query-key pair of ``W(R, P)``, over all layers and query heads.

        ``gqa`` / ``mla``: ``2 * layers * q_heads * (qk_dim + v_dim)`` (QK^T and PV); GQA:
        ``4*layers*heads*head_dim``; MLA counted in its prefill (decompressed, multi-head) form.
        ``csa_hca``: the compressed part only (module docstring): per CSA layer the indexer
        scores one compressed entry per r pairs (``2 * index_n_heads * index_head_dim``
        FLOPs), per HCA layer one compressed entry is attended per r pairs.
        """
        if self.attention != "csa_hca":
            return 2 * self.num_layers * self.num_q_heads * (self.qk_head_dim + self.value_head_dim)
        index = 2 * self.index_n_heads * self.index_head_dim
        return (sum(index / r for r in self._layers_with_ratio(True))
                + sum(self._flops_per_entry() / r for r in self._layers_with_ratio(False)))

    def attention_flops_per_token(self) -> int:
        """Attention FLOPs per new token that do not grow with the context (upper bound):
        0 for ``gqa`` / ``mla``; ``csa_hca``: the sliding window on every layer plus the top-k
        compressed entries of each CSA layer (module docstring)."""
        if self.attention != "csa_hca":
            return 0
        entries = self.num_layers * self.sliding_window + len(self._layers_with_ratio(True)) * self.index_topk
        return entries * self._flops_per_entry()

    def linear_flops_per_token(self) -> int:
        """``2 * active non-embedding params`` FLOPs per new token (projections and MLP/experts)."""
        return 2 * self.active_non_embedding_params()

    def prefill_flops(self, num_new_tokens: int, num_cached_tokens: int = 0) -> float:
        """FLOPs of a prefill of R new tokens over P cached ones:
        ``(2 * active_non_embedding_params + attention_flops_per_token) * R
        + attention_flops_per_pair * W(R, P)``."""
        if num_new_tokens < 0 or num_cached_tokens < 0:
            raise ValueError("token counts must be >= 0")
        return ((self.linear_flops_per_token() + self.attention_flops_per_token()) * num_new_tokens
                + self.attention_flops_per_pair() * attention_pairs(num_new_tokens, num_cached_tokens))

    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes of one token over all layers.

        GQA: ``2 (K and V) * layers * kv_heads * head_dim * kv_dtype_bytes``.
        MLA: ``layers * (kv_lora_rank + qk_rope_head_dim) * kv_dtype_bytes`` -- the cache holds the
        compressed latent c_KV and the shared decoupled RoPE key only (DeepSeek-V2 paper,
        arXiv 2405.04434, §2.1, Table 1: (d_c + d_h^R) * l elements per token).
        ``csa_hca``: per layer with ratio r > 0 one shared key-value entry of ``head_dim``
        elements per r tokens, plus on CSA layers one indexer key of ``index_head_dim`` per r
        tokens (rounded up to whole bytes). The sliding-window KV (at most ``sliding_window``
        tokens per request and layer) is per request, not per cached token, and not counted.
        """
        if self.attention == "mla":
            return self.num_layers * (self.kv_lora_rank + self.qk_rope_head_dim) * self.kv_dtype_bytes
        if self.attention == "csa_hca":
            elements = (sum(Fraction(self.head_dim + self.index_head_dim, r) for r in self._layers_with_ratio(True))
                        + sum(Fraction(self.head_dim, r) for r in self._layers_with_ratio(False)))
            return math.ceil(elements * self.kv_dtype_bytes)
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.kv_dtype_bytes

    def config_dict(self) -> dict:
        d = asdict(self)
        d["compress_ratios"] = list(self.compress_ratios)
        return d


def attention_pairs(num_new_tokens: int, num_cached_tokens: int) -> int:
    """``W(R, P) = R*P + R*(R+1)/2`` (paper §2.2); same as ``envs.sim.cost_model.attention_pairs``."""
    r = num_new_tokens
    return r * num_cached_tokens + r * (r + 1) // 2


GPUS: dict[str, GpuSpec] = {
    "H20": GpuSpec(
        "H20", 148e12, 4.0e12, 96_000_000_000, 900e9,
        "NVIDIA HGX H20 specification as widely reported since Nov 2023 (96 GB HBM3, 4.0 TB/s, 148 TFLOP/s dense "
        f"FP16/BF16, {_H20_FP8}, NVLink 900 GB/s); NVIDIA publishes no public H20 datasheet",
        peak_fp8_flops_per_s=296e12),
    "H20-3e": GpuSpec(
        "H20-3e", 148e12, 4.8e12, 141_000_000_000, 900e9,
        "H20-3e (paper §9 testbed GPU): the 141 GB HBM3e version of the H20 (the H20 is sold with 96 GB and with "
        "141 GB, https://www.apetops-us.com/help/ai-293-h20-different-memory-versions-a-deep-analysis-of-performance-"
        "differences-and-large-model-adaptability); NVIDIA publishes no datasheet for either. Compute and NVLink as "
        "the H20 (148 TFLOP/s dense FP16/BF16, 296 TFLOP/s dense INT8/FP8 as reported e.g. at "
        "https://zangshuxian.com/new/674733024499207168, NVLink 900 GB/s; same GH100 die and SM count); 4.8 TB/s is "
        "the bandwidth of the same six-stack 141 GB HBM3e configuration on the H200 (NVIDIA H200 datasheet; "
        "AnandTech, 'NVIDIA at SC23: H200 accelerator with HBM3e'), an assumption for the H20-3e",
        peak_fp8_flops_per_s=296e12),
    "A100-80GB": GpuSpec(
        "A100-80GB", 312e12, 2.039e12, 80_000_000_000, 600e9,
        "NVIDIA A100 Tensor Core GPU datasheet (SXM 80GB: BF16 312 TFLOP/s dense, HBM2e 2,039 GB/s, NVLink 600 GB/s; "
        "no FP8 tensor cores)"),
    "H100": GpuSpec(
        "H100", 989.5e12, 3.35e12, 80_000_000_000, 900e9,
        "NVIDIA H100 Tensor Core GPU datasheet (SXM: BF16 1,979 TFLOP/s with sparsity = 989.5 dense, FP8 3,958 "
        "with sparsity = 1,979 dense, 80 GB HBM3, 3.35 TB/s, NVLink 900 GB/s)",
        peak_fp8_flops_per_s=1979e12),
    "H200": GpuSpec(
        "H200", 989.5e12, 4.8e12, 141_000_000_000, 900e9,
        "NVIDIA H200 Tensor Core GPU datasheet (SXM: BF16 1,979 TFLOP/s with sparsity = 989.5 dense, FP8 3,958 "
        "with sparsity = 1,979 dense, 141 GB HBM3e, 4.8 TB/s, NVLink 900 GB/s)",
        peak_fp8_flops_per_s=1979e12),
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
        dtype="float8", kv_dtype="bfloat16",
        source="huggingface.co/deepseek-ai/DeepSeek-V3 config.json (num_hidden_layers 61, hidden_size 7168, 128 heads, "
               "q_lora_rank 1536, kv_lora_rank 512, qk_nope/rope/v 128/64/128, n_routed_experts 256, top-8, 1 shared, "
               "moe_intermediate_size 2048, first_k_dense_replace 3, vocab 129280; quantization_config fp8 e4m3 with "
               "128x128 block scales, so FP8 weights); 671B total excl. MTP, 37B activated, 128K context (model card). "
               "MLA KV (kv_lora_rank 512 + qk_rope_head_dim 64 per token and layer) counted in BF16, the serving "
               "engines' default KV dtype for it"),
    "DeepSeek-V4-Flash-FP8": ModelSpec(
        name="DeepSeek-V4-Flash-FP8", num_layers=43, hidden_size=4096, num_q_heads=64, num_kv_heads=1, head_dim=512,
        intermediate_size=0, vocab_size=129280, max_prompt_tokens=1048576,
        num_experts=256, num_experts_per_token=6, moe_intermediate_size=2048, num_shared_experts=1, first_dense_layers=0,
        attention="csa_hca", qk_rope_head_dim=64, q_lora_rank=1024, o_lora_rank=1024, o_groups=8,
        compress_ratios=_V4_FLASH_COMPRESS_RATIOS, csa_compress_ratio=4, sliding_window=128,
        index_topk=512, index_n_heads=64, index_head_dim=128, dtype="float8", kv_dtype="float8",
        source="public config huggingface.co/deepseek-ai/DeepSeek-V4-Flash/blob/main/config.json, as quoted verbatim "
               "in public code (a V4-Flash benchmark-shape module's snapshot of that file; a vllm-ascend CSA kernel "
               "validator; the GGUF drafter config of the DSpark model) and summarised by "
               "docs.nvidia.com/nemo/automodel (43-layer all-MoE, 256 routed + 1 shared expert, top-6, SWA/CSA/HCA by "
               "compress_ratios) and docs.vultr.com/models/deepseek-v4 (4096 hidden, 64 heads): "
               "num_hidden_layers 43, hidden_size 4096, 64 heads, 1 KV head, "
               "head_dim 512, qk_rope_head_dim 64, q_lora_rank 1024, o_lora_rank 1024, o_groups 8, 256 routed experts, "
               "top-6, 1 shared, moe_intermediate_size 2048, sliding_window 128, index_topk 512, index_n_heads 64, "
               "index_head_dim 128, compress_ratios [0, 0, 4, 128, ..., 4] (+ MTP), vocab 129280, "
               "max_position_embeddings 1048576; 284B total / 13B activated (model card). The checkpoint stores "
               "routed experts in FP4 and the rest in FP8; the paper's DeepSeek-V4-Flash-FP8 is taken as FP8 for "
               "every weight (1 B/param). KV in FP8 (vLLM's recommended --kv-cache-dtype fp8 for this model). "
               "Hyper-connections (hc_mult 4) and the 3 hash-routed layers are counted as ordinary MoE layers"),
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




