"""A sweep's finished cells as per-episode rows (one per policy setting and seed), for paired
deltas over seeds between the sweep's policies and settings (how the controller settings in
``results/dynamic-phases/`` were compared; their READMEs' ``cpgym evaluate --from-csv`` step ran
at the commit they name: ``cpgym evaluate`` is now a view of the benchmark protocol).

One row per cell: ``policy`` is the cell's policy, followed by its swept policy parameters in
``cell.json``'s order (sorted by name: ``vertumnus-adaptive[target_replay_sample=True,target_sample=latest]``);
``seed`` the cell's seed; the metrics from its ``summary.json``; ``num_operations`` /
``num_committed_operations`` from its ``extras.json`` (0 for a cell whose extras list no
operation; NaN, shown as "-", for a cell without ``extras.json``, whose operations are unknown).
The folder must be a sweep's output (``sweep.json``) with every cell finished, and each (label,
seed) pair unique (another axis, e.g. a second rate, would be averaged silently otherwise).

Usage (repo root)::

    python -m experiments.sweep_rows runs/sweeps/conversation-steady-replay-seeds --out rows.csv
"""

from __future__ import annotations

import argparse
import json
import sys
from math import nan
from pathlib import Path

from envs.metrics.table import metric_names
from envs.sim.options import check_out_file
from experiments.paper_experiments.cache_sensitivity import load_runs

#: The ``summary.json`` numbers of a row (the others: ``policy``, ``seed`` and the operation counts).
SUMMARY_METRICS = metric_names("mean_ttft_s", "p90_ttft_s", "slo_attainment_token_weighted", "num_unfinished", "wall_time_s")


def cell_label(policy: str, params: dict) -> str:
    """``policy`` or ``policy[k=v,...]`` (the cell's swept policy parameters, in ``cell.json``'s order)."""
    if not params:
        return policy
    return policy + "[" + ",".join(f"{k}={v}" for k, v in params.items()) + "]"


def sweep_rows(sweep_dir: str | Path) -> list[dict]:
    """Per-episode rows (module docstring) of the finished cells of ``sweep_dir``, read by the one
    reader of a sweep's cells (:func:`experiments.paper_experiments.cache_sensitivity.load_runs`,
    which also checks each ``cell.json`` and ``summary.json``).

    Raises:
        ValueError: naming the folder, when it is not a folder or has no ``sweep.json`` (not a
            sweep's output), has no finished cell, some cell has not finished (``sweep.json``
            lists more cells), or two cells share a (label, seed); naming the file, on a malformed
            cell.
    """
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise ValueError(f"{sweep_dir}: {'not a folder' if sweep_dir.exists() else 'no such folder'} "
                         f"(expected the output folder of `cpgym sweep`)")
    manifest = sweep_dir / "sweep.json"
    if not manifest.is_file():
        raise ValueError(f"{sweep_dir}: no sweep.json, so not the output folder of `cpgym sweep` (whose cells it lists)")
    rows, seen = [], {}
    for run in load_runs(sweep_dir, SUMMARY_METRICS):
        run_dir = run["run_dir"]
        extras_file = run_dir / "extras.json"
        extras = json.loads(extras_file.read_text()) if extras_file.is_file() else None
        label = cell_label(run["policy"], run["params"])
        pair = (label, int(run["seed"]))
        if pair in seen:
            raise ValueError(f"{sweep_dir}: cells {seen[pair]} and {run_dir.name} are both {label} seed {pair[1]}; "
                             f"one row per (policy, seed) is needed for paired deltas (sweep one other axis at a time)")
        seen[pair] = run_dir.name
        rows.append({"policy": label, "seed": pair[1], "wall_s": run["wall_time_s"], "mean_ttft_s": run["mean_ttft_s"],
                     "p90_ttft_s": run["p90_ttft_s"], "slo_attainment_token_weighted": run["slo_attainment_token_weighted"],
                     "num_operations": nan if extras is None else len(extras.get("reconfig_operations") or []),
                     "num_committed_operations": nan if extras is None else int(extras.get("num_reconfigurations", 0)),
                     "num_unfinished": int(run["num_unfinished"]), "composition": ""})
    expected = len(json.loads(manifest.read_text()).get("cells", []))
    if expected != len(rows):
        raise ValueError(f"{sweep_dir}: {len(rows)} of {expected} cells finished; re-run the sweep to finish them")
    return rows


def main(argv: list[str] | None = None) -> int:
    import pandas as pd

    p = argparse.ArgumentParser(prog="python -m experiments.sweep_rows", description=__doc__.split("\n\n")[0])
    p.add_argument("sweep_dir", help="output folder of `cpgym sweep`")
    p.add_argument("--out", required=True, help="CSV to write")
    args = p.parse_args(argv)

    try:
        check_out_file(args.out, "--out")
        rows = sweep_rows(args.sweep_dir)
    except ValueError as exc:
        p.error(str(exc))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(args.out, index=False)
    print(f"{len(rows)} rows -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
