"""``cpgym profile``: time CP prefill over an (R, P, C) grid, fit the cost model, write a calibration.

On CPU (default) each rank's CPU time is measured (the ranks share the host's cores, so wall
time cannot show a CP speed-up); on ``--device cuda`` CUDA-event wall time (nccl; written for
GPU hosts, not exercised in CPU CI). See :mod:`kernels_ref.profile` and :mod:`kernels_ref.fit`.
The default grid (R in 64..2048, P in 0..4096, C in 1, 2, 4, one small layer, 5 repeats) takes a few
minutes on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import sys

from envs.sim.cost_model import Calibration
from envs.sim.options import check_out_file
from experiments.commands.kernels import parse_degrees, parse_int_list
from experiments.flags.profile import add_arguments  # noqa: F401  (re-exported)
from kernels_ref import specs
from kernels_ref.config import LayerConfig
from kernels_ref.fit import format_fit_table
from kernels_ref.profile import PROFILE_DTYPES, ProfileConfig, build_profile_calibration, profile_and_fit


def warn_length_independent(coefficients: dict, out: str, file=None) -> bool:
    """One warning line on stderr (or ``file``) when the fit found no cost per new token (``a``,
    ``c`` and ``alpha`` all 0): every prefill then takes the fixed overhead ``d`` whatever its
    length, so the calibration cannot rank CP degrees or saturate a pool. Happens when the grid's
    timings are overhead-dominated (short ``--new-tokens``, a tiny layer). Returns whether it warned."""
    if coefficients["a_s_per_token"] + coefficients["c_s_per_token"] + coefficients["alpha_s_per_pair"] > 0:
        return False
    print(f"warning: {out}: the fit found no cost per new token (a, c and alpha are 0), so every prefill takes "
          f"d = {coefficients['d_s']:.3g} s whatever its length; profile longer prompts (--new-tokens) or a larger layer",
          file=file or sys.stderr, flush=True)
    return True


def check_flags(args: argparse.Namespace) -> None:
    """Each integer flag of the layer geometry, the repeats and the dtype in its range, the error
    naming the flag (they failed in ``LayerConfig`` / ``ProfileConfig`` with messages naming their
    fields: ``--layers 0`` was 'num_layers, repeats and block_tokens must be >= 1 and warmup >= 0').

    Raises:
        ValueError: ``--FLAG must be ..., got VALUE``.
    """
    for dest in ("layers", "hidden", "q_heads", "kv_heads", "head_dim", "intermediate", "repeats"):
        if getattr(args, dest) < 1:
            raise ValueError(f"--{dest.replace('_', '-')} must be an integer >= 1, got {getattr(args, dest)}")
    if args.warmup < 0:
        raise ValueError(f"--warmup must be an integer >= 0, got {args.warmup}")
    if args.q_heads % args.kv_heads:
        raise ValueError(f"--q-heads {args.q_heads} must be a multiple of --kv-heads {args.kv_heads} (GQA)")
    if args.head_dim % 2:
        raise ValueError(f"--head-dim must be even (rotate-half RoPE), got {args.head_dim}")
    if args.experts < 0:
        raise ValueError(f"--experts must be an integer >= 0 (0: dense MLP), got {args.experts}")
    if args.experts and not 1 <= args.top_k <= args.experts:
        raise ValueError(f"--top-k must be in [1, --experts = {args.experts}], got {args.top_k}")
    if args.experts and args.moe_intermediate < 1:
        raise ValueError(f"--moe-intermediate must be an integer >= 1 with --experts, got {args.moe_intermediate}")
    allowed = PROFILE_DTYPES[args.device]
    if args.dtype is not None and args.dtype not in allowed:
        raise ValueError(f"--dtype on --device {args.device} must be one of {', '.join(allowed)}, got {args.dtype!r}")


def run(args: argparse.Namespace) -> int:
    check_flags(args)
    specs.get_model(args.model), specs.get_gpu(args.gpu)  # fail fast on a typo
    check_out_file(args.out)  # before the profiling grid (minutes), not when the file is written
    layer = LayerConfig(hidden_size=args.hidden, num_q_heads=args.q_heads, num_kv_heads=args.kv_heads, head_dim=args.head_dim,
                        intermediate_size=args.intermediate, num_experts=args.experts,
                        num_experts_per_token=args.top_k if args.experts else 0,
                        moe_intermediate_size=args.moe_intermediate if args.experts else 0)

    config = ProfileConfig(
        num_new_tokens=parse_int_list(args.new_tokens, "--new-tokens", 1),
        num_cached_tokens=parse_int_list(args.cached_tokens, "--cached-tokens", 0),
        degrees=parse_degrees(args.degrees, args.device),
        layer=layer, num_layers=args.layers, algorithm=args.algorithm, impl=args.impl,
        dtype=args.dtype or ("bfloat16" if args.device == "cuda" else "float32"), device=args.device,
        warmup=args.warmup, repeats=args.repeats, seed=args.seed)

    samples, fit = profile_and_fit(config)
    command = _command_line(sys.argv)
    data = build_profile_calibration(samples, fit, config, args.model, args.gpu, command=command)
    Calibration.from_dict(data, source="profile").save(args.out)
    warn_length_independent(fit.coefficients, args.out)
    if args.format == "json":
        print(json.dumps({"out": args.out, "coefficients": fit.coefficients, "fit_error": fit.summary(),
                          "samples": data["provenance"]["samples"]}, indent=2))
        return 0
    print(f"{'R':>6} {'P':>6} {'C':>2} {'time_s':>9} {'pred_s':>9} {'err %':>7}")
    for s, e in zip(samples, fit.rel_errors):
        print(f"{s.num_new_tokens:>6} {s.num_cached_tokens:>6} {s.degree:>2} "
              f"{s.time_s:9.4f} {s.time_s * (1 + e):9.4f} {100 * e:7.1f}")
    print(format_fit_table(fit))
    print(f"wrote {args.out}")
    return 0


def _command_line(argv: list[str]) -> str | None:
    """The command recorded in the provenance: ``cpgym kernels profile ...`` (also when called through
    the deprecated ``cpgym profile`` alias); ``None`` when not run from the command line."""
    rest = list(argv[1:])
    while rest and rest[0].startswith("-"):  # global options such as --traceback
        rest.pop(0)
    for head in (["kernels", "profile"], ["profile"]):
        if rest[:len(head)] == head:
            return "cpgym kernels profile " + " ".join(rest[len(head):])
    return None
