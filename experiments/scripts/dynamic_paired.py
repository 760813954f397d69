"""Paired comparison of two sets of ``cpgym dynamic`` runs of the adaptive system, seed by seed.

Each run folder (``cpgym dynamic --out-dir DIR``) holds ``dynamic.json``; the two lists are paired
in the order given (the same workload seed at the same position). Prints, as JSON, the
per-seed mean TTFT [s] of ``vertumnus-adaptive`` in each set, the per-seed change ``100 x (b / a - 1)``
[%] and its mean with the 95 % Student-t CI half-width over the pairs
(:func:`policies.routing.evaluate.mean_ci95`)::

    python -m experiments.scripts.dynamic_paired \\
        --a results/dynamic-phases/target-controller/seed{0,1,2,3,4} \\
        --b results/dynamic-phases/transition-lookahead/phases-per-seed/seed{0,1,2,3,4}
"""

from __future__ import annotations

import json
from pathlib import Path

ADAPTIVE = "vertumnus-adaptive"


def adaptive_mean_ttft_s(run_dir: str | Path) -> tuple[int, float]:
    """``(workload seed, mean TTFT [s] of the adaptive system)`` of one ``cpgym dynamic`` run.

    Raises:
        ValueError: naming the folder, when ``dynamic.json`` is missing, unreadable or has no
            adaptive run.
    """
    f = Path(run_dir) / "dynamic.json"
    try:
        doc = json.loads(f.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{f}: not a readable `cpgym dynamic` result ({exc})") from None
    rows = [p for p in doc.get("policies", []) if isinstance(p, dict) and p.get("policy") == ADAPTIVE]
    if len(rows) != 1 or "mean_ttft_s" not in rows[0]:
        raise ValueError(f"{f}: expected one {ADAPTIVE!r} entry with mean_ttft_s under \"policies\"")
    seed = (doc.get("workload") or {}).get("seed")
    if not isinstance(seed, int):
        raise ValueError(f"{f}: expected the workload seed under \"workload\": {{\"seed\": ...}}")
    return seed, float(rows[0]["mean_ttft_s"])


def paired(a_dirs: list[str], b_dirs: list[str]) -> dict:
    """The paired comparison (module docstring) of run folders ``a_dirs`` and ``b_dirs``.

    Raises:
        ValueError: when the lists differ in length, are shorter than 2, or a pair's workload seeds differ.
    """
    from experiments.scripts.paired_cli import pct_change

    if len(a_dirs) != len(b_dirs) or len(a_dirs) < 2:
        raise ValueError(f"--a and --b must list the same number (>= 2) of run folders, got {len(a_dirs)} and {len(b_dirs)}")
    a = [adaptive_mean_ttft_s(d) for d in a_dirs]
    b = [adaptive_mean_ttft_s(d) for d in b_dirs]
    for (sa, _), (sb, _), da, db in zip(a, b, a_dirs, b_dirs):
        if sa != sb:
            raise ValueError(f"{da} (workload seed {sa}) and {db} (workload seed {sb}) are not a pair")
    return {"seeds": [s for s, _ in a], "a_mean_ttft_s": [t for _, t in a], "b_mean_ttft_s": [t for _, t in b],
            **pct_change([t for _, t in a], [t for _, t in b])}


def main(argv: list[str] | None = None) -> int:
    from experiments.scripts.paired_cli import paired_main

    return paired_main("python -m experiments.scripts.dynamic_paired", __doc__, paired,
                       "reference run folders (cpgym dynamic --out-dir)",
                       "compared run folders, same seeds in the same order", argv)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
