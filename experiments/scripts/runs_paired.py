"""Paired comparison of two sets of training runs, each evaluated on the same workload seeds.

A run is ``CSV:POLICY`` (either may contain ``:``: :func:`split_spec`): the rows of ``POLICY`` in a
per-episode CSV with the columns ``policy``, ``seed`` and ``mean_ttft_s`` (``cpgym evaluate --out``,
``experiments.scripts.reconfig_ensemble_check --out``). The two lists are paired in the order given
(e.g. the same training seeds with and without an option). Prints, as JSON, per pair the mean TTFT
[s] of each run and the per-seed change ``100 x (b / a - 1)`` [%] with its mean and 95 % Student-t CI
over the seeds (:func:`experiments.scripts.paired_cli.pct_change`); then the same for the per-seed mean over the
runs of each set (``"mean_of_runs"``), which averages out the training seed::

    V=results/learned-reconfig/validation-seeds
    python -m experiments.scripts.runs_paired \\
        --a "$V/ensemble_check.csv:single:policies/checkpoints/reconfig_target" \\
            "$V/ensemble_check.csv:single:RUN_A (train seeds 10/11)" \\
        --b "$V/history_features.csv:history features (train seeds 0/1)" \\
            "$V/history_features.csv:history features (train seeds 10/11)"
"""

from __future__ import annotations

import os
import sys

import numpy as np


def split_spec(spec: str) -> tuple[str, str]:
    """``(CSV path, policy)`` of a run ``CSV:POLICY``. Both may contain ``:`` (policies such as
    ``single:policies/checkpoints/reconfig_target``): the path is the shortest part before a
    ``:`` that names an existing file, else the part before the first ``:``.

    Raises:
        ValueError: naming the spec, without ``:`` or with an empty path or policy.
    """
    cuts = [i for i, ch in enumerate(spec) if ch == ":"]
    if not cuts:
        raise ValueError(f"{spec!r}: expected CSV:POLICY")
    cut = next((i for i in cuts if os.path.isfile(spec[:i])), cuts[0])
    path, policy = spec[:cut], spec[cut + 1:]
    if not path or not policy:
        raise ValueError(f"{spec!r}: expected CSV:POLICY")
    return path, policy


def run_mean_ttft_s(spec: str) -> dict[int, float]:
    """``{workload seed: mean TTFT [s]}`` of the run ``spec`` = ``CSV:POLICY`` (:func:`split_spec`).

    Raises:
        ValueError: naming the spec or file, without ``:``, on an unreadable CSV, a missing
            column, no row of the policy, a seed that is not an integer >= 0 or is listed twice,
            or a mean TTFT that is not a finite number > 0 [s].
    """
    import pandas as pd

    path, policy = split_spec(spec)
    try:  # policy as text: policies named 0, 1, ... would be read as integers and never match
        df = pd.read_csv(path, dtype={"policy": str})
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable CSV ({exc})") from None
    missing = [c for c in ("policy", "seed", "mean_ttft_s") if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}; expected per-episode rows (policy, seed, mean_ttft_s)")
    rows = df[df["policy"] == policy]
    if rows.empty:
        raise ValueError(f"{path}: no rows of policy {policy!r}; policies: {sorted(df['policy'].dropna().unique())}")
    seeds = pd.to_numeric(rows["seed"], errors="coerce")
    bad = ~((seeds >= 0) & (seeds == seeds.round()))  # NaN (empty, text) compares False
    if bad.any():
        raise ValueError(f"{path}: policy {policy!r}: seed must be integers >= 0, got {rows['seed'][bad].tolist()}")
    if seeds.duplicated().any():
        raise ValueError(f"{path}: policy {policy!r} has seeds listed twice")
    ttft = pd.to_numeric(rows["mean_ttft_s"], errors="coerce")
    bad = ~(np.isfinite(ttft) & (ttft > 0))
    if bad.any():
        raise ValueError(f"{path}: policy {policy!r}: mean_ttft_s must be finite numbers > 0 [s], got "
                         f"{rows['mean_ttft_s'][bad].tolist()} at seed(s) {rows['seed'][bad].tolist()}")
    return {int(s): float(t) for s, t in zip(seeds, ttft)}


def _compare(a: dict[int, float], b: dict[int, float]) -> dict:
    from experiments.scripts.paired_cli import pct_change

    seeds = sorted(a)
    change = pct_change([a[s] for s in seeds], [b[s] for s in seeds])
    del change["pct_change"]  # per seed: not part of this script's output
    return {"a_mean_ttft_s": float(np.mean([a[s] for s in seeds])), "b_mean_ttft_s": float(np.mean([b[s] for s in seeds])),
            **change}


def paired(a_specs: list[str], b_specs: list[str]) -> dict:
    """The paired comparison (module docstring) of runs ``a_specs`` and ``b_specs``.

    Raises:
        ValueError: when the lists differ in length or are empty, or the runs do not cover the
            same seeds (at least 2).
    """
    if len(a_specs) != len(b_specs) or not a_specs:
        raise ValueError(f"--a and --b must list the same number (>= 1) of runs, got {len(a_specs)} and {len(b_specs)}")
    a = [run_mean_ttft_s(s) for s in a_specs]
    b = [run_mean_ttft_s(s) for s in b_specs]
    seeds = sorted(a[0])
    for spec, run in zip(a_specs + b_specs, a + b):
        if sorted(run) != seeds:
            raise ValueError(f"{spec!r} covers seeds {sorted(run)}, the first run {seeds}: not paired")
    if len(seeds) < 2:
        raise ValueError(f"a paired CI needs at least 2 seeds, got {seeds}")
    out = {"seeds": seeds, "pairs": [{"a": sa, "b": sb, **_compare(ra, rb)}
                                     for sa, sb, ra, rb in zip(a_specs, b_specs, a, b)]}
    mean_a = {s: float(np.mean([r[s] for r in a])) for s in seeds}
    mean_b = {s: float(np.mean([r[s] for r in b])) for s in seeds}
    out["mean_of_runs"] = _compare(mean_a, mean_b)
    return out


def main(argv: list[str] | None = None) -> int:
    from experiments.scripts.paired_cli import paired_main

    return paired_main("python -m experiments.scripts.runs_paired", __doc__, paired, "reference runs, each CSV:POLICY",
                       "compared runs, each CSV:POLICY, paired with --a in order", argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
