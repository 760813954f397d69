"""Profile CP prefill over an (R, P, C) grid, fit the cost model, write a calibration file.

For every CP degree C (a sub-group of ranks ``0..C-1`` of one spawned process group, see
:mod:`kernels_ref.dist`) and every ``(R, P)`` of the grid, each rank runs a prefill step of
``num_layers`` :class:`kernels_ref.layer.PrefillDecoderLayer` on its zigzag shard of R new
tokens over its shard of a P-token cached prefix, after a barrier of the C ranks. The grid is
swept ``warmup`` (untimed) plus ``repeats`` (timed) times, round-robin: each pass visits every
point once, so a change in the host's load during the run spreads over all points. Timing:

* CPU (gloo): per-rank CPU time ``time.process_time()`` (all threads of the rank, so gloo's
  communication threads count too). The ranks share the host's few cores, so wall time shows
  no CP speed-up; per-rank CPU time measures each rank's own work, which is what the cost
  model's ``1/C`` terms describe.
* GPU (nccl): CUDA-event wall time of the step on each rank (written for GPU hosts, not
  exercised in CPU CI).

A grid point's time is the slowest rank's median over the repeats (``max_r median_k t_{r,k}``;
taking the median per rank before the max keeps one noisy repeat on one rank from setting the
point, which matters on a shared CPU host). ``Sample.repeats_s`` keeps the per-repeat maxima.
The fit is :func:`kernels_ref.fit.fit_cost_model`. The calibration's memory fields come from
the roofline presets of a model and a GPU (:mod:`kernels_ref.roofline`), since a profile of a
small reference layer on this host says nothing about the served model's memory.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from kernels_ref import roofline, specs
from kernels_ref.config import LayerConfig
from kernels_ref.dist import launch
from kernels_ref.fit import fit_cost_model
from kernels_ref.layout import ZigzagLayout

if TYPE_CHECKING:  # numpy and torch are imported where used, so the CLI can build its parser cheaply
    from kernels_ref.fit import FitResult

#: dtypes a profile may run in, per device.
PROFILE_DTYPES = {"cpu": ("float32", "float64"), "cuda": ("bfloat16", "float16", "float32")}

DEFAULT_PROFILE_LAYER = LayerConfig(hidden_size=512, num_q_heads=8, num_kv_heads=2, head_dim=64, intermediate_size=1024)


@dataclass(frozen=True)
class ProfileConfig:
    """What to profile.

    Attributes:
        num_new_tokens: R values [tokens]. num_cached_tokens: P values [tokens]. degrees: C values.
        layer: layer geometry; num_layers: layers per step.
        algorithm: ``"allgather"`` or ``"ring"``; impl: all-gather attention impl, default
            ``"sdpa"`` (fused, key-tiled kernel: per-pair cost close to constant, as in a flash
            kernel; ``"matmul"`` materialises score blocks whose per-pair cost grows once they
            spill out of cache, which the cost model cannot represent).
        dtype: ``"float32"``/``"float64"`` on CPU, ``"bfloat16"`` on GPU.
        device: ``"cpu"`` or ``"cuda"``.
        warmup, repeats: untimed and timed runs per grid point.
        block_tokens: query block of the attention kernels.
        seed: weights and inputs.

    Raises:
        ValueError: on empty, non-positive or repeated grid values, unknown algorithm/dtype/device, repeats < 1, or
            a grid with fewer than 2 distinct values of R, P or C (the fit could not determine the
            coefficients, :func:`kernels_ref.fit.check_identifiable`).
    """

    num_new_tokens: tuple[int, ...] = (64, 256, 1024, 2048)
    num_cached_tokens: tuple[int, ...] = (0, 1024, 4096)
    degrees: tuple[int, ...] = (1, 2, 4)
    layer: LayerConfig = DEFAULT_PROFILE_LAYER
    num_layers: int = 1
    algorithm: str = "allgather"
    impl: str = "sdpa"
    dtype: str = "float32"
    device: str = "cpu"
    warmup: int = 1
    repeats: int = 5
    block_tokens: int = 256
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.num_new_tokens or min(self.num_new_tokens) < 1:
            raise ValueError(f"num_new_tokens must be a non-empty list of values >= 1, got {self.num_new_tokens}")
        if not self.num_cached_tokens or min(self.num_cached_tokens) < 0:
            raise ValueError(f"num_cached_tokens must be a non-empty list of values >= 0, got {self.num_cached_tokens}")
        if not self.degrees or min(self.degrees) < 1:
            raise ValueError(f"degrees must be a non-empty list of values >= 1, got {self.degrees}")
        if self.algorithm not in ("allgather", "ring"):
            raise ValueError(f"algorithm must be 'allgather' or 'ring', got {self.algorithm!r}")
        if self.impl not in ("matmul", "sdpa"):
            raise ValueError(f"impl must be 'matmul' or 'sdpa', got {self.impl!r}")
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda', got {self.device!r}")
        allowed = PROFILE_DTYPES[self.device]
        if self.dtype not in allowed:
            raise ValueError(f"dtype on {self.device} must be one of {allowed}, got {self.dtype!r}")
        if self.num_layers < 1 or self.warmup < 0 or self.repeats < 1 or self.block_tokens < 1:
            raise ValueError("num_layers, repeats and block_tokens must be >= 1 and warmup >= 0")
        grid_flags = (("num_new_tokens", "--new-tokens"), ("num_cached_tokens", "--cached-tokens"), ("degrees", "--degrees"))
        for key, flag in grid_flags:
            values = getattr(self, key)
            repeated = sorted({v for v in values if values.count(v) > 1})
            if repeated:  # the grid point was measured on two passes per repeat and counted twice in the fit
                raise ValueError(f"{key} ({flag}) lists {repeated[0]} twice: {','.join(map(str, values))}; "
                                 "expected distinct values")
        if len(self.grid()) < 5:
            raise ValueError(f"the grid has {len(self.grid())} points; the fit of 5 coefficients needs at least 5")
        for key, flag, why in (("degrees", "--degrees", "to separate a (not divided by CP) from c (divided by C)"),
                               ("num_cached_tokens", "--cached-tokens", "to determine b"),
                               ("num_new_tokens", "--new-tokens", "to separate a from d")):
            if len(set(getattr(self, key))) < 2:  # kernels_ref.fit.check_identifiable, before any rank starts
                raise ValueError(f"{key} ({flag}) needs at least 2 distinct values for the fit {why}, "
                                 f"got {','.join(map(str, getattr(self, key)))}")

    def estimated_peak_bytes_per_rank(self) -> int:
        """A rough upper estimate of one rank's peak memory [bytes]: the layers' weights in
        ``dtype`` plus the largest weight once more in float64 (they are drawn in float64, then
        cast), the KV of the longest prompt (``max(R) + max(P)`` tokens, every layer: the
        all-gather holds it whole), and twice the activations of ``max(R)`` new tokens (residual,
        QKV, attention output, the MLP's or the top-k experts' gate/up/down). Used to refuse a
        grid that cannot fit before any rank starts (a ``--layers`` or ``--hidden`` typo ran out of
        memory inside torch)."""
        import math

        elem = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2}[self.dtype]
        c = self.layer
        shapes = c.weight_shapes()
        weights = self.num_layers * sum(math.prod(s) for s in shapes) * elem + max(math.prod(s) for s in shapes) * 8
        r, tokens = max(self.num_new_tokens), max(self.num_new_tokens) + max(self.num_cached_tokens)
        kv = self.num_layers * tokens * 2 * c.num_kv_heads * c.head_dim * elem
        width = c.num_experts_per_token * c.moe_intermediate_size + c.num_experts if c.num_experts else c.intermediate_size
        act = 2 * r * (4 * c.hidden_size + (2 * c.num_q_heads + 2 * c.num_kv_heads) * c.head_dim + 3 * width) * elem
        if self.impl == "matmul":  # score blocks of one query block against every key
            act += 2 * min(self.block_tokens, r) * tokens * c.num_q_heads * elem
        return int(weights + kv + act)

    def check_memory(self, available_bytes: int, where: str) -> None:
        """Raises ValueError, naming the flags that size the grid, if ``max(degrees)`` ranks of
        :meth:`estimated_peak_bytes_per_rank` (CPU: every rank is a process of this host) or one
        rank (CUDA: one GPU per rank) exceed ``available_bytes`` (``where``: what that is)."""
        per_rank = self.estimated_peak_bytes_per_rank()
        ranks = max(self.degrees) if self.device == "cpu" else 1
        if per_rank * ranks > available_bytes:
            gib = 2.0 ** 30
            raise ValueError(f"the profile grid needs about {per_rank / gib:.3g} GiB per rank x {ranks} rank(s) = "
                             f"{per_rank * ranks / gib:.3g} GiB, more than {where} ({available_bytes / gib:.3g} GiB); "
                             "lower --layers, --hidden, --intermediate, --experts / --moe-intermediate, --q-heads / "
                             "--kv-heads / --head-dim, --new-tokens or --cached-tokens")

    def grid(self) -> list[tuple[int, int, int]]:
        """``[(R, P, C), ...]`` in run order."""
        return [(r, p, c) for c in self.degrees for r in self.num_new_tokens for p in self.num_cached_tokens]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["layer"] = asdict(self.layer)
        return d


@dataclass
class Sample:
    """One grid point: ``time_s`` = max over ranks of the rank's median step time [s];
    ``rank_median_s`` per rank; ``repeats_s`` the per-repeat slowest-rank times."""

    num_new_tokens: int
    num_cached_tokens: int
    degree: int
    time_s: float
    rank_median_s: list[float] = field(default_factory=list)
    repeats_s: list[float] = field(default_factory=list)


def _profile_worker(rank: int, world_size: int, config: ProfileConfig) -> dict:
    import torch
    import torch.distributed as dist

    from kernels_ref.cp_attention import shard_new_tokens, shard_prefix  # lazy: torch
    from kernels_ref.layer import PrefillDecoderLayer  # lazy: torch

    device = torch.device(f"cuda:{rank}") if config.device == "cuda" else torch.device("cpu")
    dtype = getattr(torch, config.dtype)
    groups = {c: dist.new_group(list(range(c))) for c in sorted(set(config.degrees))}
    cfg = config.layer
    layers = [PrefillDecoderLayer(cfg, seed=config.seed + i, dtype=dtype, device=device) for i in range(config.num_layers)]
    times: dict[tuple[int, int, int], list[float]] = {}
    inputs: dict[tuple[int, int, int], tuple] = {}

    def prepare(r_tokens: int, p_tokens: int, c: int) -> tuple:
        layout = ZigzagLayout(r_tokens, p_tokens, c)
        gen = torch.Generator().manual_seed(config.seed * 1_000_003 + r_tokens * 7919 + p_tokens)
        x_full = torch.randn(r_tokens, cfg.hidden_size, generator=gen).to(dtype)
        x = shard_new_tokens(x_full, layout, rank).to(device)
        prefix = []
        for _ in range(config.num_layers):
            kv = torch.randn(2, p_tokens, cfg.num_kv_heads, cfg.head_dim, generator=gen).to(dtype)
            prefix.append((shard_prefix(kv[0], layout, rank).to(device), shard_prefix(kv[1], layout, rank).to(device)))
        return layout, x, prefix

    with torch.inference_mode():
        # Round-robin: every pass visits the whole grid once, so slow drifts in the host's load
        # spread over all points instead of biasing the points measured during a busy spell.
        for rep in range(config.warmup + config.repeats):
            for key in config.grid():
                r_tokens, p_tokens, c = key
                if rank >= c:
                    continue
                if key not in inputs:
                    inputs[key] = prepare(r_tokens, p_tokens, c)
                layout, x, prefix = inputs[key]
                group = groups[c]
                dist.barrier(group=group)
                if config.device == "cuda":
                    torch.cuda.synchronize(device)
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                else:
                    t0 = time.process_time()
                h = x
                for layer, (kp, vp) in zip(layers, prefix):
                    h, _, _ = layer(h, kp, vp, layout, rank, group=group, algorithm=config.algorithm, impl=config.impl,
                                    block_tokens=config.block_tokens)
                if config.device == "cuda":
                    end.record()
                    torch.cuda.synchronize(device)
                    elapsed = start.elapsed_time(end) / 1e3
                else:
                    elapsed = time.process_time() - t0
                if rep >= config.warmup:
                    times.setdefault(key, []).append(elapsed)
    return times


def run_profile(config: ProfileConfig) -> list[Sample]:
    """Measure every grid point (one spawned group of ``max(degrees)`` ranks).

    Raises:
        ValueError: from :class:`ProfileConfig` / :func:`kernels_ref.dist.launch` (e.g. too few GPUs),
            or a grid whose estimated memory does not fit (:meth:`ProfileConfig.check_memory`).
    """
    config.check_memory(*_available_memory_bytes(config.device))
    per_rank = launch(_profile_worker, max(config.degrees), args=(config,), device=config.device, timeout_s=3600)
    samples = []
    for key in config.grid():
        r_tokens, p_tokens, c = key
        runs = [per_rank[rank][key] for rank in range(c)]
        rank_median = [statistics.median(rr) for rr in runs]
        step = [max(rank_runs[i] for rank_runs in runs) for i in range(config.repeats)]
        samples.append(Sample(r_tokens, p_tokens, c, max(rank_median), rank_median, step))
    return samples


def _available_memory_bytes(device: str) -> tuple[int, str]:
    """``(bytes, description)``: the host's physical memory for ``"cpu"``, GPU 0's for ``"cuda"``
    (when CUDA is unavailable: unbounded; :func:`kernels_ref.dist.launch` reports that)."""
    if device == "cuda":
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_properties(0).total_memory, "the memory of GPU 0"
        return 2 ** 62, "no GPU"
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this host's physical memory"


def hardware_description(device: str) -> dict:
    """Host/GPU description for the provenance (no network, no credentials)."""
    import torch

    info = {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "torch": torch.__version__, "python": platform.python_version()}
    if device == "cuda" and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["cuda"] = torch.version.cuda
    return info


def build_profile_calibration(samples: list[Sample], fit: FitResult, config: ProfileConfig, model: str, gpu: str,
                              command: str | None = None, created: str | None = None) -> dict:
    """Calibration file content (``envs.sim.cost_model.Calibration`` format 1) from a profile.

    Coefficients: the fit. Memory fields: the roofline presets ``model`` / ``gpu``
    (:func:`kernels_ref.roofline.memory_fields`). Provenance: method "profile", hardware,
    dtype, torch version, date, grid, per-sample times and the fit error table.

    Raises:
        ValueError: on an unknown preset name or weights that do not fit the GPU.
    """
    model_spec, gpu_spec = specs.get_model(model), specs.get_gpu(gpu)
    memory = roofline.memory_fields(model_spec, gpu_spec)
    timing = "CUDA-event wall time per rank" if config.device == "cuda" else "per-rank CPU time (time.process_time)"
    provenance = {
        "method": "profile",
        "source": f"kernels_ref.profile: {config.algorithm} CP prefill of {config.num_layers} reference layers, "
                  f"{timing}, slowest rank's median of {config.repeats} repeats after {config.warmup} warm-up; "
                  "relative-error NNLS fit (kernels_ref.fit)",
        "created": created or _dt.datetime.now(_dt.timezone.utc).date().isoformat(),
        "tool": "cpgym profile",
        "command": command or "cpgym profile",
        "hardware": hardware_description(config.device),
        "profile_dtype": config.dtype,
        "config": config.to_dict(),
        "grid": {"num_new_tokens": list(config.num_new_tokens), "num_cached_tokens": list(config.num_cached_tokens),
                 "degrees": list(config.degrees)},
        "fit_error": fit.summary(),
        "samples": [{"R": s.num_new_tokens, "P": s.num_cached_tokens, "C": s.degree, "time_s": s.time_s,
                     "rel_err": e, "rank_median_s": s.rank_median_s} for s, e in zip(samples, fit.rel_errors)],
        "memory_fields_from": {"method": "roofline", "model": model_spec.name, "gpu": gpu_spec.name,
                               "dtype": model_spec.dtype, "weight_shard_gpus": memory["weight_shard_gpus"],
                               "activation_reserve_bytes": memory["activation_reserve_bytes"],
                               "activation_reserve_source": roofline.ACTIVATION_RESERVE_SOURCE},
        "note": "coefficients describe the profiled reference layers on this host, not the named model/GPU",
    }
    return {
        "format_version": 1,
        "model": model_spec.name,
        "gpu_type": gpu_spec.name,
        "dtype": config.dtype,
        "coefficients": dict(fit.coefficients),
        **memory,
        "provenance": provenance,
    }


def samples_for_fit(samples: list[Sample]) -> list[tuple[int, int, int, float]]:
    return [(s.num_new_tokens, s.num_cached_tokens, s.degree, s.time_s) for s in samples]


def profile_and_fit(config: ProfileConfig) -> tuple[list[Sample], FitResult]:
    """:func:`run_profile` then :func:`kernels_ref.fit.fit_cost_model`."""
    samples = run_profile(config)
    return samples, fit_cost_model(samples_for_fit(samples))
