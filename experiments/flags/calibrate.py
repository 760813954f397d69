"""``cpgym kernels calibrate`` flags: the declarations the parser reads (the run: :mod:`experiments.commands.calibrate`)."""

from __future__ import annotations

import argparse

from kernels_ref import roofline, specs


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help=f"model preset: {', '.join(specs.MODELS)}")
    p.add_argument("--gpu", required=True, help=f"GPU preset: {', '.join(specs.GPUS)}")
    p.add_argument("--efficiency", type=float, default=None,
                   help="fraction of the datasheet peaks reached, for compute, HBM and link "
                        f"(default {roofline.DEFAULT_EFFICIENCY})")
    p.add_argument("--compute-efficiency", type=float, default=None, help="override --efficiency for tensor-core FLOP/s")
    p.add_argument("--hbm-efficiency", type=float, default=None, help="override --efficiency for HBM bandwidth")
    p.add_argument("--link-efficiency", type=float, default=None, help="override --efficiency for the intra-node link")
    p.add_argument("--overhead-s", type=float, default=roofline.DEFAULT_OVERHEAD_S,
                   help=f"fixed per-step overhead d [s] (default {roofline.DEFAULT_OVERHEAD_S})")
    p.add_argument("--cp-serial-fraction", type=float, default=roofline.DEFAULT_CP_SERIAL_FRACTION,
                   help="share of per-token linear work that CP does not divide across ranks "
                        "(default 0.15; see kernels_ref/roofline.py)")
    p.add_argument("--activation-reserve-gb", type=float, default=None,
                   help="HBM kept per GPU for activations, workspaces and CUDA graphs [GB] (default: SGLang's default "
                        "reservation for the GPU and shard group, e.g. 14.09 GB on an H20-3e with G = 1)")
    p.add_argument("--weight-shard-gpus", type=int, default=None, metavar="G",
                   help="GPUs over which one copy of the weights is spread (expert parallel: routed experts divided, "
                        "the rest replicated); every worker CP degree must be a multiple of G "
                        "(default: the smallest of 1, 2, 4, 8 that leaves KV memory)")
    p.add_argument("--out", metavar="FILE", help="write the calibration JSON file")
    p.add_argument("--format", choices=("table", "json"), default="table", help="stdout format (default table)")
