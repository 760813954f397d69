"""``cpgym calibrate``: roofline calibration of the cost model from a model config and a GPU datasheet.

Prints the derived figures (KV bytes per token, compute-bound 8192-token prefill time,
coefficients, memory fields) and, with ``--out``, writes the calibration file the simulator
reads (``envs.sim.cost_model.Calibration``). The mapping is documented in
:mod:`kernels_ref.roofline`. Pure Python: no torch import.

Regenerate the simulator's default::

    cpgym calibrate --model Qwen3-30B-A3B --gpu H20 --out envs/sim/calibrations/qwen3-30b-a3b__h20.json
"""

from __future__ import annotations

import argparse
import json


def add_arguments(p: argparse.ArgumentParser) -> None:
    from kernels_ref import roofline

    p.add_argument("--model", required=True, help=f"model preset: {', '.join(roofline.MODELS)}")
    p.add_argument("--gpu", required=True, help=f"GPU preset: {', '.join(roofline.GPUS)}")
    p.add_argument("--efficiency", type=float, default=None,
                   help=f"fraction of the datasheet peaks reached, for compute, HBM and link (default {roofline.DEFAULT_EFFICIENCY})")
    p.add_argument("--compute-efficiency", type=float, default=None, help="override --efficiency for tensor-core FLOP/s")
    p.add_argument("--hbm-efficiency", type=float, default=None, help="override --efficiency for HBM bandwidth")
    p.add_argument("--link-efficiency", type=float, default=None, help="override --efficiency for the intra-node link")
    p.add_argument("--overhead-s", type=float, default=roofline.DEFAULT_OVERHEAD_S,
                   help=f"fixed per-step overhead d [s] (default {roofline.DEFAULT_OVERHEAD_S})")
    p.add_argument("--cp-serial-fraction", type=float, default=roofline.DEFAULT_CP_SERIAL_FRACTION,
                   help="share of per-token linear work that CP does not divide across ranks (default 0.15; see kernels_ref/roofline.py)")
    p.add_argument("--activation-reserve-fraction", type=float, default=roofline.DEFAULT_ACTIVATION_RESERVE_FRACTION,
                   help=f"fraction of HBM kept for activations (default {roofline.DEFAULT_ACTIVATION_RESERVE_FRACTION})")
    p.add_argument("--out", metavar="FILE", help="write the calibration JSON file")
    p.add_argument("--format", choices=("table", "json"), default="table", help="stdout format (default table)")


def command_line(args: argparse.Namespace, model: str, gpu: str) -> str:
    """The canonical command recorded in the provenance (non-default options only)."""
    from kernels_ref import roofline

    parts = ["cpgym calibrate", f"--model {model}", f"--gpu {gpu}"]
    for flag, value in (("--efficiency", args.efficiency), ("--compute-efficiency", args.compute_efficiency),
                        ("--hbm-efficiency", args.hbm_efficiency), ("--link-efficiency", args.link_efficiency)):
        if value is not None:
            parts.append(f"{flag} {value:g}")
    if args.overhead_s != roofline.DEFAULT_OVERHEAD_S:
        parts.append(f"--overhead-s {args.overhead_s:g}")
    if args.cp_serial_fraction != roofline.DEFAULT_CP_SERIAL_FRACTION:
        parts.append(f"--cp-serial-fraction {args.cp_serial_fraction:g}")
    if args.activation_reserve_fraction != roofline.DEFAULT_ACTIVATION_RESERVE_FRACTION:
        parts.append(f"--activation-reserve-fraction {args.activation_reserve_fraction:g}")
    if args.out:
        parts.append(f"--out {args.out}")
    return " ".join(parts)


def run(args: argparse.Namespace) -> int:
    from envs.sim.cost_model import Calibration
    from kernels_ref import roofline

    model = roofline.get_model(args.model)
    gpu = roofline.get_gpu(args.gpu)
    base = roofline.DEFAULT_EFFICIENCY if args.efficiency is None else args.efficiency
    eff = roofline.Efficiency(
        compute=base if args.compute_efficiency is None else args.compute_efficiency,
        hbm=base if args.hbm_efficiency is None else args.hbm_efficiency,
        link=base if args.link_efficiency is None else args.link_efficiency,
    )
    data = roofline.build_calibration_dict(model, gpu, eff, overhead_s=args.overhead_s,
                                           activation_reserve_fraction=args.activation_reserve_fraction,
                                           cp_serial_fraction=args.cp_serial_fraction,
                                           command=command_line(args, model.name, gpu.name))
    cal = Calibration.from_dict(data, source=f"roofline {model.name}/{gpu.name}")
    if args.out:
        cal.save(args.out)
    n = roofline.REFERENCE_PREFILL_TOKENS
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
    print(f"  params              {model.total_params() / 1e9:.2f} B total, {model.active_non_embedding_params() / 1e9:.2f} B active non-embedding")
    for key, value in data["coefficients"].items():
        print(f"  {key:<20}{value:.6g}")
    print(f"  memory              {cal.gpu_memory_bytes / 1e9:g} GB HBM, weights {cal.weight_bytes_per_gpu / 1e9:.2f} GB, "
          f"reserve {cal.activation_reserve_bytes / 1e9:.2f} GB, KV {cal.kv_capacity_tokens(1)} tokens per GPU")
    if args.out:
        print(f"wrote {args.out}")
    return 0
