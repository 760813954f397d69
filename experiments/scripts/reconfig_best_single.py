"""Which single fixed composition would a user pick in advance for ``matched-phases``? Ranks the
compositions of a per-phase TTFT cache (``policies.reconfig.oracle.save_phase_ttft``: the
``oracle_phase_ttft.json`` of ``policies/checkpoints/reconfig_target``, made on the training seeds)
by their whole-workload mean TTFT [s] (:func:`policies.reconfig.oracle.fixed_mean_ttft`: the phase
means weighted by the phase's requests, the same number as one whole-run simulation), averaged
over the given seeds (default: every seed of the file). Prints the ``--top`` best, one per line::

    python -m experiments.scripts.reconfig_best_single policies/checkpoints/reconfig_target/oracle_phase_ttft.json
    python -m experiments.scripts.reconfig_best_single FILE --seeds 0,1,...,19
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np


def ranking(path: str, seeds: list[int] | None = None) -> tuple[list[tuple[str, float]], list[int]]:
    """``([(composition, mean over seeds of its mean TTFT [s])], seeds)``, best first, with the
    seeds averaged over (default: every seed of the file).

    Raises:
        ValueError: naming the file, on a malformed cache (:func:`policies.reconfig.oracle.load_phase_ttft`),
            a seed it does not hold, or no seed.
    """
    from policies.reconfig.oracle import fixed_mean_ttft, load_phase_ttft

    try:
        menu = json.loads(open(path).read())["compositions"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a per-phase TTFT cache ({exc})") from None
    tables = load_phase_ttft(path, menu)
    seeds = sorted(tables) if seeds is None else seeds
    missing = [s for s in seeds if s not in tables]
    if missing or not seeds:
        raise ValueError(f"{path}: no entry for seed(s) {missing or seeds}; it holds {sorted(tables)}")
    mean = np.mean([fixed_mean_ttft(*tables[s]) for s in seeds], axis=0)
    return sorted(((c, float(m)) for c, m in zip(menu, mean)), key=lambda x: x[1]), seeds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.scripts.reconfig_best_single",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("cache", help="per-phase TTFT cache (oracle_phase_ttft.json)")
    p.add_argument("--seeds", default=None, help="comma-separated workload seeds (default: every seed of the file)")
    p.add_argument("--top", type=int, default=5, help="how many compositions to print (default 5)")
    args = p.parse_args(argv)
    try:
        seeds = None if args.seeds is None else [int(s) for s in args.seeds.split(",")]
    except ValueError:
        p.error(f"--seeds: expected comma-separated integers, got {args.seeds!r}")
    if args.top < 1:
        p.error(f"--top: expected an integer >= 1, got {args.top}")
    try:
        ranked, seeds = ranking(args.cache, seeds)
    except (ValueError, FileNotFoundError) as exc:
        print(f"{p.prog}: error: {exc}", file=sys.stderr)
        return 2
    for comp, ttft in ranked[:args.top]:
        print(f"{comp}\t{ttft:.4f} s (mean over {len(seeds)} seeds, {seeds[0]}-{seeds[-1]})")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
