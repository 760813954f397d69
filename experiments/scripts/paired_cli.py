"""What the paired-comparison scripts (``dynamic_paired``, ``runs_paired``) share: the per-pair
change in % with its paired 95 % CI (:func:`pct_change`), and the command line (:func:`paired_main`:
``--a`` / ``--b`` lists, the comparison printed as JSON, a ``ValueError`` as one line on stderr
with exit status 2)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable


def pct_change(a: list[float], b: list[float]) -> dict:
    """Per pair ``100 x (b / a - 1)`` [%] of the paired values ``a`` and ``b`` (same length, > 0)
    and their mean with the 95 % Student-t interval (:func:`policies.routing.protocol.paired_ci`):
    ``{"pct_change", "mean_pct_change", "ci_low", "ci_high"}``."""
    from envs.metrics.stats import paired_ci

    pct = [100.0 * (y / x - 1.0) for x, y in zip(a, b, strict=True)]
    mean, lo, hi = paired_ci(pct)
    return {"pct_change": pct, "mean_pct_change": mean, "ci_low": lo, "ci_high": hi}


def paired_main(prog: str, doc: str, paired: Callable[[list[str], list[str]], dict], a_help: str, b_help: str,
                argv: list[str] | None = None) -> int:
    """Parses ``--a A... --b B...`` (``argv``; default ``sys.argv[1:]``), prints
    ``json.dumps(paired(a, b))`` and returns 0, or prints ``prog: error: ...`` on stderr and
    returns 2 when ``paired`` raises ``ValueError``."""
    p = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0])
    p.add_argument("--a", nargs="+", required=True, help=a_help)
    p.add_argument("--b", nargs="+", required=True, help=b_help)
    args = p.parse_args(argv)
    try:
        out = paired(args.a, args.b)
    except ValueError as exc:
        print(f"{p.prog}: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(out, indent=2))
    return 0
