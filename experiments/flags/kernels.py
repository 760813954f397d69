"""``cpgym kernels check`` flags: the declarations the parser reads (the run: :mod:`experiments.commands.kernels`)."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--degrees", default="1,2,4", help="comma-separated CP degrees (default 1,2,4)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cpu (default): gloo, fp32/fp64; cuda: nccl, adds bf16 cases (needs one GPU per rank)")
    p.add_argument("--format", choices=("table", "json"), default="table", help="stdout format (default table)")
