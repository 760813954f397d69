"""``cpgym kernels check``: run the CP attention correctness suite and print a table.

Runs :func:`kernels_ref.check.run_check_suite` (zigzag all-gather and ring pass-KV CP
attention, and a CP decoder layer, against float64 references, for C = 1, 2, 4 on one
spawned gloo process group). Exit status 0 when every case passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json

from envs.sim.options import split_number_list
from experiments.flags.kernels import add_arguments  # noqa: F401  (re-exported)
from kernels_ref.check import default_cases, format_table, run_check_suite
from kernels_ref.dist import MAX_CPU_RANKS


def parse_degrees(text: str, device: str) -> tuple[int, ...]:
    """``--degrees``: distinct integers >= 1, on ``cpu`` at most :data:`kernels_ref.dist.MAX_CPU_RANKS`
    (one process per rank; checked before anything starts)."""
    degrees = parse_int_list(text, "--degrees", minimum=1)
    repeated = sorted({d for d in degrees if degrees.count(d) > 1})
    if repeated:  # every case of that degree ran twice and counted twice in 'N/N passed'
        raise ValueError(f"--degrees lists {repeated[0]} twice: {text!r}; expected distinct CP degrees")
    if device == "cpu" and max(degrees) > MAX_CPU_RANKS:
        raise ValueError(f"--degrees {max(degrees)} on --device cpu would start {max(degrees)} processes; "
                         f"expected CP degrees <= {MAX_CPU_RANKS} (one gloo rank per process)")
    return degrees


def parse_int_list(text: str, name: str, minimum: int = 0) -> tuple[int, ...]:
    """``"1,2,4" -> (1, 2, 4)``; raises ValueError naming the option on bad input (an empty item
    included, :func:`envs.sim.options.split_number_list`)."""
    try:
        values = tuple(split_number_list(text, int))
    except ValueError as e:
        raise ValueError(f"{name} {e}") from None
    if min(values) < minimum:
        raise ValueError(f"{name} must be non-empty integers >= {minimum}, got {text!r}")
    return values


def run(args: argparse.Namespace) -> int:
    import time

    degrees = parse_degrees(args.degrees, args.device)
    t0 = time.perf_counter()
    results = run_check_suite(default_cases(degrees, device=args.device), device=args.device)
    elapsed = time.perf_counter() - t0
    if args.format == "json":
        print(json.dumps([r.row() for r in results], indent=2))
    else:
        print(format_table(results))
        print(f"({elapsed:.1f} s)")
    return 0 if all(r.passed for r in results) else 1
