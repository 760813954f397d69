"""Roofline calibration of the prefill cost model from a model config and a GPU datasheet.

Pure Python (no torch, no numpy) so that the simulator can import it.

Cost model (paper §2.2 / §3.2, ``../shared/paper/vertumnus-walkthrough.zh.txt``)::

    E_C(R, P) = d + a*R + b*P + (c*R + alpha*W(R, P)) / C,   W(R, P) = R*P + R*(R + 1)/2

Coefficient mapping used here (all in seconds; ``eff_*`` are the efficiency factors of
:class:`Efficiency`, ``peak`` the dense tensor throughput [FLOP/s]
of the weight dtype (``peak_attn`` the BF16 one, used for attention), ``hbm`` the HBM
bandwidth [B/s], ``link`` the intra-node link bandwidth [B/s], ``kv`` the KV bytes of one token
over all layers, :meth:`ModelSpec.kv_bytes_per_token`)::

    c     = (1 - f_serial) * 2 * active_non_embedding_params / (peak * eff_compute)
            + attention_flops_per_token / (peak_attn * eff_compute)
            + moe_all_to_all_s_per_token                                    [s/token]
            (the last two are 0 for dense-pair attention and for G = 1; see below)
    alpha = attention_flops_per_pair / (peak_attn * eff_compute)            [s/pair]
            (= 4 * layers * q_heads * head_dim / (peak_attn * eff_compute) for GQA)
    a     = f_serial * 2 * active_non_embedding_params / (peak * eff_compute)
            + kv / (link * eff_link)                                        [s/token]
            The first term is the share ``f_serial`` (``cp_serial_fraction``, default 0.15) of
            the per-token linear work that CP does not divide: every rank still runs the
            embedding, norms, MoE gating/dispatch bookkeeping and the non-overlapped part of the
            per-layer collectives on its own shard boundaries, and small per-rank GEMMs run at
            lower efficiency. 0.15 is an assumption chosen so that CP-4 on an uncached 8k prompt
            runs ~3.0x faster than one GPU (~75 % parallel efficiency) and ~3.7x at 64k (~92 %;
            Qwen3-30B-A3B on H20-3e, ``cpgym kernels calibrate``), in line with published CP
            prefill scaling (Meta, "Context Parallelism for Scalable Million-Token Inference",
            MLSys 2025: near-linear at 128k, lower for short contexts) and with the
            walk-through's example of CP paying a real GPU-time cost; with f_serial = 0 CP would
            be almost free in GPU time, which no deployment shows. The second term is the KV
            all-gather of the new tokens: each rank receives (C-1)/C of the R new tokens' KV; the
            factor (C-1)/C is bounded by 1 (the cost model has no C-dependent a term), so this is
            the conservative large-C value.
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
With these rules the published figures are reproduced (tests/kernels_ref/test_kernels_roofline.py):
Qwen3-8B BF16 KV = 144 KiB/token, 8192 tokens = 1.125 GiB, hand-off at 25 GB/s = 48.3 ms,
8192-token prefill 0.856 s on A100 (312 TFLOP/s at 50 %) and 1.81 s on H20 (148 TFLOP/s at 50 %).

Weight placement (paper §9 deploys DeepSeek at CP {4, 8}: its weights do not fit one GPU).
A copy of the weights is spread over a *shard group* of G GPUs inside a worker (expert
parallel, EP): the routed-expert weights are divided over the G ranks, everything else
(attention, shared experts, dense MLPs, norms, embeddings) is replicated on every rank, because
under CP every rank runs all attention heads on its own token shard. A CP-C worker holds C/G
shard groups joined at the attention level (C a multiple of G), so split and merge never move
weights (a CP-2G worker is two G-groups). Per rank::

    weight_bytes_per_gpu     = replicated_params * dtype_bytes + routed_expert_params * dtype_bytes / G
    activation_reserve_bytes = SGLang's default reservation for the GPU (:func:`default_activation_reserve_bytes`)
    KV bytes per rank        = HBM capacity - weight_bytes_per_gpu - activation_reserve_bytes
    max_prompt_tokens        = the model's served context (Qwen3: 131072 with YaRN x4)

G defaults to the smallest power of two (1, 2, 4, 8; dividing the expert count) whose per-rank
weights and reserve leave KV memory on the GPU (:func:`default_weight_shard_gpus`). The expert
all-to-all that EP adds (token dispatch to the ranks holding its top-k experts and the combine
back, every MoE layer) costs, per token on a rank::

    moe_all_to_all_s_per_token = moe_layers * top_k * hidden * (dispatch_bytes + combine_bytes)
                                 * (G - 1) / G / (link * eff_link)

with FP8 dispatch (1 B per element) and BF16 combine (2 B), the DeepEP / DeepSeek-V3 scheme
(DeepSeek-V3 Technical Report, arXiv 2412.19437, §3.2.2 and §3.3.1; github.com/deepseek-ai/DeepEP
README); (G-1)/G of the top-k experts of a token sit on another rank of its group. A rank holds
R/C of the new tokens, so the term adds to ``c`` (divided by C). G = 1: no term.

Weight dtype: the weight GEMMs (the ``c`` and ``a`` linear work) run at the tensor-core peak of
the preset's weight dtype (FP8 models: ``peak_fp8_flops_per_s``), attention (activation x
activation products, the ``alpha`` and capped-window work) at the BF16 peak.

Attention kinds. ``gqa`` and ``mla`` compute every causal query-key pair: the work is the dense
pair count W(R, P). ``csa_hca`` (DeepSeek-V4 hybrid attention: every layer attends to a sliding
window of the last ``sliding_window`` tokens; a layer with compression ratio r > 0 also attends
to the sequence compressed r:1 -- CSA layers (r = ``csa_compress_ratio``) score all compressed
entries with a lightning indexer and attend to the top ``index_topk`` of them, HCA layers attend
to all compressed entries) has its own work term, exact up to the caps, mapped onto the same
five coefficients (:meth:`ModelSpec.attention_flops_per_pair`,
:meth:`ModelSpec.attention_flops_per_token`)::

    FLOPs = alpha_flops * W(R, P) + token_flops * R
    alpha_flops = sum_CSA index_heads * index_head_dim * 2 / r + sum_HCA heads * 2 * (qk + v) / r
    token_flops = layers * sliding_window * heads * 2 * (qk + v) + CSA layers * index_topk * heads * 2 * (qk + v)

``token_flops`` is an upper bound (a query near the start of the sequence has fewer than
``sliding_window`` keys and fewer than ``index_topk`` compressed entries); its time joins ``c``.
Any other attention kind is refused at :class:`ModelSpec` construction: the dense count is never
assumed silently.

All bandwidths and capacities are datasheet decimal units (1 GB = 1e9 B, 1 TB/s = 1e12 B/s).
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import asdict, dataclass

from kernels_ref.specs import _MIB, WEIGHT_SHARD_CHOICES, GpuSpec, ModelSpec, attention_pairs

DEFAULT_OVERHEAD_S = 0.015
DEFAULT_CP_SERIAL_FRACTION = 0.15  # share of per-token linear work CP does not divide (module docstring)
DEFAULT_EFFICIENCY = 0.5
REFERENCE_PREFILL_TOKENS = 8192
REFERENCE_KV_BLOCK_TOKENS = 512  # block size of the Mooncake traces, used for the reported block counts


# Expert all-to-all element sizes: FP8 dispatch, BF16 combine (DeepSeek-V3 report §3.3.1; DeepEP README).
MOE_DISPATCH_BYTES_PER_ELEMENT = 1
MOE_COMBINE_BYTES_PER_ELEMENT = 2


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


# ---- presets --------------------------------------------------------------------------------


def calibration_file_name(model: ModelSpec, gpu: GpuSpec) -> str:
    """``"<model>__<gpu>.json"`` in lower case, the name of the shipped calibration files."""
    return f"{model.name.lower()}__{gpu.name.lower()}.json"


# ---- derived figures ------------------------------------------------------------------------

def prefill_compute_time_s(model: ModelSpec, gpu: GpuSpec, num_new_tokens: int, num_cached_tokens: int = 0,
                           compute_efficiency: float = DEFAULT_EFFICIENCY) -> float:
    """Compute-bound prefill time on one GPU [s]: linear FLOPs at the weight dtype's peak plus
    attention FLOPs at the BF16 peak, both times ``compute_efficiency``.

    This is the published-figure convention (no overhead, no communication); the full cost
    model adds ``d + a*R + b*P``. For a BF16 model it is ``prefill_flops / (peak * efficiency)``.
    """
    linear = model.linear_flops_per_token() * num_new_tokens / gpu.peak_flops_per_s(model.dtype)
    attention = (model.prefill_flops(num_new_tokens, num_cached_tokens) - model.linear_flops_per_token() * num_new_tokens)
    return (linear + attention / gpu.peak_bf16_flops_per_s) / compute_efficiency


def kv_transfer_time_s(model: ModelSpec, num_tokens: int, bandwidth_bytes_per_s: float) -> float:
    """Time to move ``num_tokens`` tokens of KV cache at ``bandwidth_bytes_per_s`` [s] (e.g. P/D hand-off)."""
    if bandwidth_bytes_per_s <= 0:
        raise ValueError(f"bandwidth must be > 0, got {bandwidth_bytes_per_s!r}")
    return num_tokens * model.kv_bytes_per_token() / bandwidth_bytes_per_s


# ---- weight placement -----------------------------------------------------------------------

def default_activation_reserve_bytes(gpu: GpuSpec, weight_shard_gpus: int = 1) -> int:
    """Per-GPU memory kept for activations, workspaces and CUDA graphs [bytes]: SGLang's default.

    SGLang (python/sglang/srt/server_args.py, ``_handle_gpu_memory_settings``, PR #10975)
    reserves, in MiB, ``512 + max(chunked_prefill_size, 2048) * 1.5 + cuda_graph_max_bs * 2
    + tp_size / 8 * 1024``, at least 10 GiB on GPUs over 60 GiB, with the per-GPU-class
    defaults chunked_prefill_size 8192 and cuda_graph_max_bs 256 (tp < 4) or 512 for GPUs of
    60-160 GiB ("H100, A100" and "H20, H200" buckets) and 16384 / 512 above. ``tp_size`` is the
    shard group G here. H20-3e, G = 1: 13,440 MiB = 14.09 GB; G = 4: 14,336 MiB; G = 8: 14,848 MiB.
    The simulator does not model activation memory otherwise (its engine steps of up to
    ``EngineConfig.max_batch_tokens`` tokens are assumed to fit this reservation).

    Raises:
        ValueError: for a GPU of 60 GiB or less (SGLang's smaller buckets are not reproduced:
            pass the reserve explicitly) or a shard group < 1.
    """
    if weight_shard_gpus < 1:
        raise ValueError(f"weight_shard_gpus must be >= 1, got {weight_shard_gpus!r}")
    gpu_mem_mib = gpu.hbm_capacity_bytes / _MIB
    if gpu_mem_mib <= 60 * 1024:
        raise ValueError(f"no default activation reserve for {gpu.name} ({gpu.hbm_capacity_bytes / 1e9:g} GB <= 60 GiB); "
                         "pass activation_reserve_bytes")
    chunk, graph_bs = (8192, 256 if weight_shard_gpus < 4 else 512) if gpu_mem_mib < 160 * 1024 else (16384, 512)
    reserved_mib = 512 + max(chunk, 2048) * 1.5 + graph_bs * 2 + weight_shard_gpus / 8 * 1024
    return int(max(reserved_mib, 10 * 1024) * _MIB)


ACTIVATION_RESERVE_SOURCE = (
    "SGLang default memory reservation (python/sglang/srt/server_args.py _handle_gpu_memory_settings, PR #10975): "
    "512 + 1.5*max(chunked_prefill_size, 2048) + 2*cuda_graph_max_bs + tp_size/8*1024 MiB, >= 10 GiB above 60 GiB; "
    "kernels_ref.roofline.default_activation_reserve_bytes")


def weight_bytes_per_gpu(model: ModelSpec, weight_shard_gpus: int) -> int:
    """Weights resident on one rank of a shard group of G GPUs [bytes]: replicated weights
    plus 1/G of the routed experts (module docstring).

    Raises:
        ValueError: if G is not one of :data:`WEIGHT_SHARD_CHOICES`, if G > 1 for a dense model
            (tensor-parallel placement of dense layers is not modelled), or G does not divide
            the expert count.
    """
    g = weight_shard_gpus
    if g not in WEIGHT_SHARD_CHOICES:
        raise ValueError(f"weight_shard_gpus must be one of {list(WEIGHT_SHARD_CHOICES)}, got {g!r}")
    if g > 1 and not model.num_experts:
        raise ValueError(f"{model.name} is dense: weight sharding (G = {g}) is modelled for expert parallelism only")
    if g > 1 and model.num_experts % g:
        raise ValueError(f"{model.name}: {model.num_experts} experts cannot be split evenly over G = {g} GPUs")
    experts = model.routed_expert_params()
    replicated = model.total_params() - experts
    return replicated * model.dtype_bytes + -(-experts * model.dtype_bytes // g)


def moe_all_to_all_s_per_token(model: ModelSpec, gpu: GpuSpec, weight_shard_gpus: int,
                               efficiency: Efficiency = Efficiency()) -> float:
    """Expert-parallel dispatch + combine time per token on a rank [s] (module docstring);
    0 for G = 1 or a dense model."""
    g = weight_shard_gpus
    if g <= 1 or not model.num_experts:
        return 0.0
    bytes_per_token = (model.num_moe_layers * model.num_experts_per_token * model.hidden_size
                       * (MOE_DISPATCH_BYTES_PER_ELEMENT + MOE_COMBINE_BYTES_PER_ELEMENT) * (g - 1) / g)
    return bytes_per_token / (gpu.link_bandwidth_bytes_per_s * efficiency.link)


def default_weight_shard_gpus(model: ModelSpec, gpu: GpuSpec, activation_reserve_bytes: int | None = None) -> int:
    """Smallest G of :data:`WEIGHT_SHARD_CHOICES` (G = 1 for a dense model) whose per-rank
    weights plus the activation reserve leave KV memory on ``gpu``.

    Raises:
        ValueError: if no G fits, naming the per-rank weights at the largest G.
    """
    choices = [g for g in WEIGHT_SHARD_CHOICES if g == 1 or (model.num_experts and model.num_experts % g == 0)]
    for g in choices:
        reserve = default_activation_reserve_bytes(gpu, g) if activation_reserve_bytes is None else activation_reserve_bytes
        if weight_bytes_per_gpu(model, g) + reserve < gpu.hbm_capacity_bytes:
            return g
    g = choices[-1]
    raise ValueError(f"{model.name} weights do not fit a {gpu.name} ({gpu.hbm_capacity_bytes / 1e9:.0f} GB) even sharded "
                     f"over G = {g} GPUs ({weight_bytes_per_gpu(model, g) / 1e9:.1f} GB per rank plus the activation reserve)")


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
                          cp_serial_fraction: float = DEFAULT_CP_SERIAL_FRACTION,
                          weight_shard_gpus: int = 1) -> RooflineCoefficients:
    """Cost-model coefficients by the mapping in the module docstring.

    Raises:
        ValueError: if ``overhead_s`` < 0, ``cp_serial_fraction`` is outside [0, 1], the GPU
            lacks the model's weight dtype, or the shard group is invalid (see
            :func:`weight_bytes_per_gpu`).
    """
    if not overhead_s >= 0:
        raise ValueError(f"overhead_s must be >= 0, got {overhead_s!r}")
    if not 0.0 <= cp_serial_fraction <= 1.0:
        raise ValueError(f"cp_serial_fraction must be in [0, 1], got {cp_serial_fraction!r}")
    weight_bytes_per_gpu(model, weight_shard_gpus)  # validates G
    compute = gpu.peak_flops_per_s(model.dtype) * efficiency.compute
    compute_attn = gpu.peak_bf16_flops_per_s * efficiency.compute
    link = gpu.link_bandwidth_bytes_per_s * efficiency.link
    hbm = gpu.hbm_bandwidth_bytes_per_s * efficiency.hbm
    kv = model.kv_bytes_per_token()
    linear = model.linear_flops_per_token() / compute
    return RooflineCoefficients(
        d_s=float(overhead_s),
        a_s_per_token=cp_serial_fraction * linear + kv / link,
        b_s_per_token=kv / hbm + kv / link,
        c_s_per_token=((1.0 - cp_serial_fraction) * linear + model.attention_flops_per_token() / compute_attn
                       + moe_all_to_all_s_per_token(model, gpu, weight_shard_gpus, efficiency)),
        alpha_s_per_pair=model.attention_flops_per_pair() / compute_attn,
    )


def memory_fields(model: ModelSpec, gpu: GpuSpec, weight_shard_gpus: int | None = None,
                  activation_reserve_bytes: int | None = None) -> dict:
    """The calibration's memory fields [bytes / tokens / GPUs], see the module docstring.

    Args:
        weight_shard_gpus: shard group G; ``None`` = :func:`default_weight_shard_gpus`.
        activation_reserve_bytes: per-GPU reserve; ``None`` = :func:`default_activation_reserve_bytes`.

    Raises:
        ValueError: if the reserve is negative, G is invalid, or the per-rank weights plus the
            reserve leave no KV memory on the GPU.
    """
    if activation_reserve_bytes is not None and not activation_reserve_bytes >= 0:
        raise ValueError(f"activation_reserve_bytes must be >= 0, got {activation_reserve_bytes!r}")
    g = default_weight_shard_gpus(model, gpu, activation_reserve_bytes) if weight_shard_gpus is None else weight_shard_gpus
    weights = weight_bytes_per_gpu(model, g)
    reserve = default_activation_reserve_bytes(gpu, g) if activation_reserve_bytes is None else int(activation_reserve_bytes)
    if weights + reserve >= gpu.hbm_capacity_bytes:
        raise ValueError(
            f"{model.name} weights ({weights / 1e9:.1f} GB per rank with G = {g}) plus the activation reserve "
            f"({reserve / 1e9:.1f} GB) do not fit a {gpu.name} ({gpu.hbm_capacity_bytes / 1e9:.0f} GB)")
    return {
        "kv_bytes_per_token": model.kv_bytes_per_token(),
        "gpu_memory_bytes": int(gpu.hbm_capacity_bytes),
        "weight_bytes_per_gpu": int(weights),
        "weight_shard_gpus": g,
        "activation_reserve_bytes": reserve,
        "max_prompt_tokens": model.max_prompt_tokens,
    }


COEFFICIENT_MAPPING = {
    "c_s_per_token": "(1 - cp_serial_fraction) * 2 * active_non_embedding_params / (peak_flops(weight dtype) * eff_compute) "
                     "+ attention_flops_per_token / (peak_bf16 * eff_compute) + moe_all_to_all_s_per_token",
    "alpha_s_per_pair": "attention_flops_per_pair / (peak_bf16 * eff_compute)  [gqa/mla: 2 * layers * q_heads * "
                        "(qk_head_dim + v_head_dim); csa_hca: compressed part, kernels_ref/roofline.py docstring]",
    "a_s_per_token": "cp_serial_fraction * 2 * active_non_embedding_params / (peak_flops(weight dtype) * eff_compute) "
                     "+ kv_bytes_per_token / (link_bandwidth * eff_link)  "
                     "[CP-undivided share of per-token work + KV all-gather of new tokens, (C-1)/C <= 1]",
    "b_s_per_token": "kv_bytes_per_token / (hbm_bandwidth * eff_hbm) + kv_bytes_per_token / (link_bandwidth * eff_link)",
    "d_s": "overhead_s (assumed fixed per-step overhead)",
    "moe_all_to_all_s_per_token": "moe_layers * top_k * hidden * (1 B FP8 dispatch + 2 B BF16 combine) * (G-1)/G "
                                  "/ (link_bandwidth * eff_link)",
}


def build_calibration_dict(model: ModelSpec, gpu: GpuSpec, efficiency: Efficiency = Efficiency(),
                           overhead_s: float = DEFAULT_OVERHEAD_S,
                           command: str | None = None, created: str | None = None,
                           cp_serial_fraction: float = DEFAULT_CP_SERIAL_FRACTION,
                           weight_shard_gpus: int | None = None,
                           activation_reserve_bytes: int | None = None) -> dict:
    """The calibration file content (``envs.sim.cost_model.Calibration`` JSON format 1) as a dict.

    ``created`` defaults to today's date (ISO, UTC). ``weight_shard_gpus`` and
    ``activation_reserve_bytes`` as :func:`memory_fields`. Raises ValueError as
    :func:`memory_fields` / :func:`roofline_coefficients`.
    """
    gpu.peak_flops_per_s(model.dtype)  # fail first on a GPU without the model's weight dtype
    memory = memory_fields(model, gpu, weight_shard_gpus, activation_reserve_bytes)
    g = memory["weight_shard_gpus"]
    coeff = roofline_coefficients(model, gpu, efficiency, overhead_s, cp_serial_fraction, g)
    if created is None:
        created = _dt.datetime.now(_dt.timezone.utc).date().isoformat()
    experts = model.routed_expert_params()
    provenance = {
        "method": "roofline",
        "source": "kernels_ref.roofline: FLOPs / (peak * efficiency), bytes / (bandwidth * efficiency)",
        "created": created,
        "tool": "cpgym kernels calibrate",
        "command": command or f"cpgym kernels calibrate --model {model.name} --gpu {gpu.name}",
        "datasheet": asdict(gpu),
        "model_config": model.config_dict(),
        "efficiency": asdict(efficiency),
        "overhead_s": float(overhead_s),
        "cp_serial_fraction": float(cp_serial_fraction),
        "activation_reserve": {
            "bytes": memory["activation_reserve_bytes"],
            "source": ACTIVATION_RESERVE_SOURCE if activation_reserve_bytes is None else "given on the command line",
        },
        "placement": {
            "weight_shard_gpus": g,
            "rule": "routed experts divided over the G ranks of a shard group (expert parallel), all other weights "
                    "replicated on every rank; a CP-C worker is C/G shard groups (C a multiple of G)",
            "replicated_weight_bytes": (model.total_params() - experts) * model.dtype_bytes,
            "routed_expert_weight_bytes": experts * model.dtype_bytes,
            "moe_all_to_all_s_per_token": moe_all_to_all_s_per_token(model, gpu, g, efficiency),
            "moe_all_to_all_source": "DeepSeek-V3 Technical Report (arXiv 2412.19437) §3.2.2/§3.3.1 and the DeepEP README: "
                                     "FP8 dispatch, BF16 combine",
        },
        "coefficient_mapping": COEFFICIENT_MAPPING,
        "derived": {
            "total_params": model.total_params(),
            "non_embedding_params": model.non_embedding_params(),
            "active_non_embedding_params": model.active_non_embedding_params(),
            "linear_flops_per_token": model.linear_flops_per_token(),
            "attention_flops_per_pair": model.attention_flops_per_pair(),
            "attention_flops_per_token": model.attention_flops_per_token(),
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

