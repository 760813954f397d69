"""``cpgym kernels calibrate``: roofline calibration of the cost model from a model config and a GPU datasheet.

Prints the derived figures (KV bytes per token, compute-bound 8192-token prefill time,
coefficients, memory fields) and, with ``--out``, writes the calibration file the simulator
reads (``envs.sim.cost_model.Calibration``). The mapping is documented in
:mod:`kernels_ref.roofline`. Pure Python: no torch import.

Regenerate the shipped calibrations (the first one is the simulator's default,
``envs.sim.cost_model.DEFAULT_CALIBRATION``)::

    cpgym kernels calibrate --model Qwen3-30B-A3B --gpu H20-3e --out envs/sim/calibrations/qwen3-30b-a3b__h20-3e.json
    cpgym kernels calibrate --model Qwen3-30B-A3B --gpu H20 --out envs/sim/calibrations/qwen3-30b-a3b__h20.json
    cpgym kernels calibrate --model DeepSeek-V3 --gpu H20-3e --out envs/sim/calibrations/deepseek-v3__h20-3e.json
    cpgym kernels calibrate --model DeepSeek-V4-Flash-FP8 --gpu H20-3e \
        --out envs/sim/calibrations/deepseek-v4-flash-fp8__h20-3e.json
"""

from __future__ import annotations

import argparse
import json

from envs.sim.cost_model import Calibration
from envs.sim.options import check_out_file
from experiments.flags.calibrate import add_arguments  # noqa: F401  (re-exported)
from kernels_ref import roofline, specs


def command_line(args: argparse.Namespace, model: str, gpu: str) -> str:
    """The canonical command recorded in the provenance (non-default options only)."""
    parts = ["cpgym kernels calibrate", f"--model {model}", f"--gpu {gpu}"]
    for flag, value in (("--efficiency", args.efficiency), ("--compute-efficiency", args.compute_efficiency),
                        ("--hbm-efficiency", args.hbm_efficiency), ("--link-efficiency", args.link_efficiency)):
        if value is not None:
            parts.append(f"{flag} {value:g}")
    if args.overhead_s != roofline.DEFAULT_OVERHEAD_S:
        parts.append(f"--overhead-s {args.overhead_s:g}")
    if args.cp_serial_fraction != roofline.DEFAULT_CP_SERIAL_FRACTION:
        parts.append(f"--cp-serial-fraction {args.cp_serial_fraction:g}")
    if args.activation_reserve_gb is not None:
        parts.append(f"--activation-reserve-gb {args.activation_reserve_gb:g}")
    if args.weight_shard_gpus is not None:
        parts.append(f"--weight-shard-gpus {args.weight_shard_gpus}")
    if args.out:
        parts.append(f"--out {args.out}")
    return " ".join(parts)


#: Prompt lengths [tokens] and CP degrees of the parallel-efficiency report of ``cpgym kernels calibrate``.
EFFICIENCY_PROMPT_TOKENS = (8192, 24576, 65536)
EFFICIENCY_DEGREES = (1, 2, 4, 8)


def cp_parallel_efficiency(cal, prompt_tokens=EFFICIENCY_PROMPT_TOKENS, degrees=EFFICIENCY_DEGREES) -> dict:
    """Parallel efficiency of CP prefill under ``cal``'s cost model: for an uncached prompt of
    ``n`` tokens and a degree ``C``, ``E_G(n) * G / (E_C(n) * C)`` with ``E_C`` the service time
    [s] on a degree-``C`` worker (:meth:`envs.sim.cost_model.CostModel.service_time_s`) and ``G``
    the smallest worker degree (the weight shard group, ``cal.weight_shard_gpus``): 1 for perfect
    scaling, lower as the CP-serial share ``a`` (``cp_serial_fraction``, ``kernels_ref.roofline``)
    and the per-step overhead ``d`` weigh. Lengths a degree-``G`` worker cannot serve are left out
    (above ``min(cal.max_prompt_tokens, cal.kv_capacity_tokens(G))``, the simulator's per-worker
    prompt limit: e.g. 49,264 tokens for Qwen3-30B-A3B on one 80 GB H100), and so are degrees that
    are not multiples of ``G``.

    Args:
        cal: an :class:`envs.sim.cost_model.Calibration`.
        prompt_tokens: uncached prompt lengths [tokens].
        degrees: CP degrees [GPUs per worker].

    Returns:
        ``{"base_degree": G, "base_max_prompt_tokens": limit [tokens], "efficiency": {str(n): {C:
        efficiency}}}`` (shares in (0, 1]; ``C`` an int, a string in JSON).
    """
    cm = cal.cost_model()
    base = int(cal.weight_shard_gpus)
    limit = min(int(cal.max_prompt_tokens), int(cal.kv_capacity_tokens(base)))
    out: dict[str, dict[int, float]] = {}
    for n in prompt_tokens:
        if n > limit:
            continue
        t_base = cm.service_time_s(base, n, 0)
        out[str(n)] = {c: t_base * base / (cm.service_time_s(c, n, 0) * c) for c in degrees if c >= base and c % base == 0}
    return {"base_degree": base, "base_max_prompt_tokens": limit, "efficiency": out}


def efficiency_line(eff_table: dict, prompt_tokens=EFFICIENCY_PROMPT_TOKENS, degrees=EFFICIENCY_DEGREES) -> str:
    """The table's "CP efficiency" line of a :func:`cp_parallel_efficiency` result asked for
    ``prompt_tokens`` [tokens] and ``degrees``: the lengths left out are named with the worker's
    limit; with nothing to compare (every degree is the shard group's, or no length fits) the line
    says why instead of being left out."""
    base = eff_table["base_degree"]
    limit = eff_table["base_max_prompt_tokens"]
    lengths = list(eff_table["efficiency"])
    head = "  CP efficiency       "
    if not lengths:
        return (f"{head}none: no uncached prompt of {' / '.join(map(str, prompt_tokens))} tokens fits a CP-{base} worker "
                f"({limit}-token prompt limit)")
    shown = [c for c in eff_table["efficiency"][lengths[0]] if c != base]
    if not shown:
        return (f"{head}none: CP-{base} (the weight shard group) is the smallest worker and there is no larger multiple "
                f"of it among degrees {', '.join(map(str, degrees))}")
    per_degree = ", ".join(f"CP-{c} " + " / ".join(f"{eff_table['efficiency'][n][c]:.2f}" for n in lengths) for c in shown)
    left_out = [str(n) for n in prompt_tokens if str(n) not in eff_table["efficiency"]]
    note = f" ({' / '.join(left_out)} tokens left out: above the {limit}-token prompt limit of a CP-{base} worker)" \
        if left_out else ""
    return f"{head}vs CP-{base}, uncached {' / '.join(lengths)} tokens: {per_degree}{note}"


def check_flags(args: argparse.Namespace) -> None:
    """Each numeric flag in its range, the error naming the flag (the roofline's own checks name
    its fields, e.g. 'efficiency compute', 'overhead_s'; an infinite reserve was an OverflowError).

    Raises:
        ValueError: ``--FLAG must be ..., got VALUE``.
    """
    import math

    for dest in ("efficiency", "compute_efficiency", "hbm_efficiency", "link_efficiency"):
        v = getattr(args, dest)
        if v is not None and not 0 < v <= 1:
            raise ValueError(f"--{dest.replace('_', '-')} must be a fraction in (0, 1], got {v}")
    if not 0 <= args.overhead_s < math.inf:
        raise ValueError(f"--overhead-s must be a finite number of seconds >= 0, got {args.overhead_s}")
    if not 0 <= args.cp_serial_fraction <= 1:
        raise ValueError(f"--cp-serial-fraction must be a fraction in [0, 1], got {args.cp_serial_fraction}")
    if args.activation_reserve_gb is not None and not 0 <= args.activation_reserve_gb < math.inf:
        raise ValueError(f"--activation-reserve-gb must be a finite number of GB >= 0, got {args.activation_reserve_gb}")
    if args.weight_shard_gpus is not None and args.weight_shard_gpus not in specs.WEIGHT_SHARD_CHOICES:
        raise ValueError(f"--weight-shard-gpus must be one of {', '.join(map(str, specs.WEIGHT_SHARD_CHOICES))}, "
                         f"got {args.weight_shard_gpus}")


def run(args: argparse.Namespace) -> int:
    check_flags(args)
    check_out_file(args.out)  # '--out DIR is a folder', not 'DIR: Is a directory'
    model = specs.get_model(args.model)
    gpu = specs.get_gpu(args.gpu)
    base = roofline.DEFAULT_EFFICIENCY if args.efficiency is None else args.efficiency
    eff = roofline.Efficiency(
        compute=base if args.compute_efficiency is None else args.compute_efficiency,
        hbm=base if args.hbm_efficiency is None else args.hbm_efficiency,
        link=base if args.link_efficiency is None else args.link_efficiency,
    )
    reserve = None if args.activation_reserve_gb is None else int(round(args.activation_reserve_gb * 1e9))
    data = roofline.build_calibration_dict(model, gpu, eff, overhead_s=args.overhead_s,
                                           cp_serial_fraction=args.cp_serial_fraction,
                                           weight_shard_gpus=args.weight_shard_gpus, activation_reserve_bytes=reserve,
                                           command=command_line(args, model.name, gpu.name))
    cal = Calibration.from_dict(data, source=f"roofline {model.name}/{gpu.name}")
    if args.out:
        cal.save(args.out)
    n = roofline.REFERENCE_PREFILL_TOKENS
    block = roofline.REFERENCE_KV_BLOCK_TOKENS
    placement = data["provenance"]["placement"]
    kv = model.kv_bytes_per_token()
    report = {
        "model": model.name,
        "gpu": gpu.name,
        "efficiency": data["provenance"]["efficiency"],
        "kv_bytes_per_token": kv,
        f"kv_bytes_{n}_tokens": kv * n,
        f"kv_handoff_time_s_{n}_at_25GBps": roofline.kv_transfer_time_s(model, n, 25e9),
        f"prefill_time_s_{n}": roofline.prefill_compute_time_s(model, gpu, n, 0, eff.compute),
        f"predicted_service_time_s_{n}_C1": cal.cost_model().service_time_s(1, n, 0),
        "coefficients": data["coefficients"],
        "total_params": model.total_params(),
        "active_non_embedding_params": model.active_non_embedding_params(),
        "gpu_memory_bytes": cal.gpu_memory_bytes,
        "weight_bytes_per_gpu": cal.weight_bytes_per_gpu,
        "activation_reserve_bytes": cal.activation_reserve_bytes,
        "kv_bytes_per_gpu": cal.kv_bytes_per_gpu,
        "kv_capacity_tokens_per_gpu": cal.kv_capacity_tokens(1),
        "max_prompt_tokens": cal.max_prompt_tokens,
        "placement": {
            "weight_shard_gpus": cal.weight_shard_gpus,
            "weight_bytes_per_rank": cal.weight_bytes_per_gpu,
            "replicated_weight_bytes": placement["replicated_weight_bytes"],
            "routed_expert_weight_bytes": placement["routed_expert_weight_bytes"],
            "activation_reserve_bytes_per_rank": cal.activation_reserve_bytes,
            "kv_bytes_per_rank": cal.kv_bytes_per_gpu,
            "kv_capacity_tokens_per_rank": cal.kv_capacity_tokens(1),
            f"kv_capacity_blocks_per_rank_{block}": cal.kv_capacity_blocks(1, block),
            "moe_all_to_all_s_per_token": placement["moe_all_to_all_s_per_token"],
            "min_worker_degree": cal.weight_shard_gpus,
        },
        "cp_parallel_efficiency": cp_parallel_efficiency(cal),
        "out": args.out,
    }
    if args.format == "json":
        print(json.dumps(report, indent=2))
        return 0
    print(f"{model.name} on {gpu.name} (roofline; efficiency compute {eff.compute:g}, HBM {eff.hbm:g}, link {eff.link:g})")
    print(f"  KV cache            {kv} B/token = {kv / 1024:g} KiB/token; {n} tokens = {kv * n / 2**30:.4g} GiB; "
          f"hand-off at 25 GB/s {1e3 * report[f'kv_handoff_time_s_{n}_at_25GBps']:.1f} ms")
    print(f"  prefill {n} tokens  {report[f'prefill_time_s_{n}']:.3f} s compute-bound; cost model E_1 = "
          f"{report[f'predicted_service_time_s_{n}_C1']:.3f} s")
    print(f"  params              {model.total_params() / 1e9:.2f} B total, "
          f"{model.active_non_embedding_params() / 1e9:.2f} B active non-embedding")
    for key, value in data["coefficients"].items():
        print(f"  {key:<20}{value:.6g}")
    print(f"  memory              {cal.gpu_memory_bytes / 1e9:g} GB HBM per rank: "
          f"weights {cal.weight_bytes_per_gpu / 1e9:.2f} GB "
          f"(shard group G = {cal.weight_shard_gpus}), reserve {cal.activation_reserve_bytes / 1e9:.2f} GB, "
          f"KV {cal.kv_bytes_per_gpu / 1e9:.2f} GB = {cal.kv_capacity_tokens(1)} tokens = "
          f"{cal.kv_capacity_blocks(1, block)} blocks of {block}")
    print(efficiency_line(report["cp_parallel_efficiency"]))
    if cal.weight_shard_gpus > 1:
        print(f"  placement           every worker CP degree must be a multiple of {cal.weight_shard_gpus}; expert all-to-all "
              f"{1e6 * placement['moe_all_to_all_s_per_token']:.3g} us per token on a rank (in c)")
    if args.out:
        print(f"wrote {args.out}")
    return 0
