"""Tuned heuristic split/merge controller (``vertumnus-adaptive-tuned``): the setting of the
controller's parameters with the lowest mean TTFT on a sweep's training seeds.

The heuristic controller (``baselines.controller``, paper §6 with the look-ahead ``"target"``
decision) has thresholds chosen on ``cpgym dynamic``'s phases; a learned reconfiguration policy is
trained on other workloads (``matched-phases`` seeds). For a fair comparison the heuristic is tuned
on the learned policy's training data too (DESIGN.md, "Learned vs heuristic": baselines are tuned
on training data as carefully as the learned policy):

1. ``cpgym sweep experiments/specs/controller-matched-phases-tuning.yaml --out DIR`` runs every
   setting of the grid (``vertumnus-adaptive.<parameter>`` axes: ``ControllerConfig`` fields and
   ``lookahead.<field>``) on the training seeds (workload seed = run seed);
2. ``python -m experiments.tune_controller DIR [DIR2 ...] --out FILE`` picks the setting with the
   lowest mean over seeds of the episode's mean TTFT (every setting must have run on the same
   seeds: the comparison is paired; ties: the first setting in sorted order; several folders:
   rounds of a coordinate search, pooled) and writes ``FILE``;
3. ``cpgym evaluate --kind reconfig --against vertumnus-adaptive-tuned --tuned FILE`` runs the
   tuned controller on held-out seeds (:func:`tuned_controller_spec`).

``FILE`` (JSON): ``heuristic`` (``"vertumnus-adaptive"``), ``params`` (the selected
``ControllerConfig`` overrides), ``workload``, ``seeds``, ``metric``, ``grid`` (per setting:
``params``, ``num_seeds``, ``mean_ttft_s``, ``p90_ttft_s``, ``slo_attainment_token_weighted``,
``delta_mean_ttft_pct_vs_default`` with its 95 % CI half-width when the default setting was in
the grid), ``sweep`` (the folders) and ``argv``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from baselines.tuned_controller import HEURISTIC, default_params, tunable_params
from envs.metrics.stats import ci95_halfwidth, ci_text
from envs.metrics.table import metric_names
from experiments.paper_experiments.cache_sensitivity import load_runs
from experiments.sweep.manifest import finished_cells

METRIC = "mean_ttft_s"
#: The ``summary.json`` numbers of each run the selection reads (and reports per setting).
SELECTION_METRICS = metric_names("mean_ttft_s", "p90_ttft_s", "slo_attainment_token_weighted")


def select_controller_setting(sweep_dir: str | Path | list, policy: str = HEURISTIC) -> dict:
    """The tuned-controller document (module docstring) from the finished runs of ``policy`` under
    ``sweep_dir`` (``cpgym sweep`` output: ``*/cell.json`` + ``*/summary.json``), or under several
    sweep folders (rounds of a coordinate search on the same seeds): every setting is completed with
    the policy's defaults of the parameters swept anywhere, so a setting run in two
    rounds is one setting.

    Raises:
        ValueError: naming the folder, when it has no run of ``policy``, a swept parameter is not
            a parameter of ``vertumnus-adaptive``, or the settings did not all run on the same seeds.
    """
    dirs = [sweep_dir] if isinstance(sweep_dir, (str, Path)) else list(sweep_dir)
    sweep_dir = ", ".join(map(str, dirs))
    runs = [r for d in dirs for r in load_runs(d, SELECTION_METRICS) if r["policy"] == policy]
    if not runs:
        raise ValueError(f"{sweep_dir}: no finished run of {policy!r}; run `cpgym sweep` with a spec over it first")
    unknown = sorted({k for r in runs for k in r["params"]} - set(tunable_params()))
    if unknown:
        raise ValueError(f"{sweep_dir}: swept parameter(s) {', '.join(unknown)} are not parameters of {HEURISTIC} "
                         f"(ControllerConfig fields, lookahead.<LookaheadConfig field>, beta, lambda)")
    defaults = json.loads(json.dumps(default_params(sorted({k for r in runs for k in r["params"]}))))
    groups: dict[str, dict[int, dict]] = {}  # JSON of the setting (a list-valued parameter is not hashable) -> runs
    for r in runs:
        groups.setdefault(json.dumps({**defaults, **r["params"]}, sort_keys=True), {})[r["seed"]] = r
    seed_sets = {tuple(sorted(g)) for g in groups.values()}
    if len(seed_sets) != 1:
        raise ValueError(f"{sweep_dir}: the settings ran on different seeds ({sorted(seed_sets)}); finish the sweep "
                         "(re-running `cpgym sweep` resumes) so that every setting has the same seeds")
    seeds = list(seed_sets.pop())
    names = sorted({k for key in groups for k in json.loads(key)})
    default = groups.get(json.dumps(default_params(names), sort_keys=True))  # tuples compare as JSON lists
    grid = []
    for key in sorted(groups):
        by_seed = groups[key]
        row = {"params": json.loads(key), "num_seeds": len(seeds)}
        for m in SELECTION_METRICS:
            row[m] = sum(by_seed[s][m] for s in seeds) / len(seeds)
        if default is not None:
            pct = [100.0 * (by_seed[s][METRIC] / default[s][METRIC] - 1.0) for s in seeds]
            row["delta_mean_ttft_pct_vs_default"] = sum(pct) / len(pct)
            row["delta_mean_ttft_pct_vs_default_ci95"] = ci95_halfwidth(pct)
        grid.append(row)
    # min keeps the first of equal values; a NaN mean (a seed with no finished request) never wins
    # (NaN compares false both ways, so a NaN first in sorted order used to be kept as the minimum)
    best = min(grid, key=lambda row: (math.isnan(row[METRIC]), row[METRIC]))
    workloads = sorted({str((cell.get("workload") or {}).get("name"))
                        for d in dirs for _, cell in finished_cells(d, current_only=True)})
    return {"heuristic": policy, "params": best["params"], "workload": ",".join(workloads), "seeds": seeds,
            "metric": METRIC, "grid": grid, "sweep": [str(d) for d in dirs]}


def main(argv: list[str] | None = None) -> int:
    """``python -m experiments.tune_controller SWEEP_DIR --out FILE``: select and write (module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m experiments.tune_controller",
                                 description="select the heuristic controller setting with the lowest mean TTFT "
                                             "from a `cpgym sweep` folder and write the tuned-controller JSON")
    ap.add_argument("sweep_dir", metavar="SWEEP_DIR", nargs="+",
                    help="output folder(s) of `cpgym sweep` (several: rounds on the same seeds, pooled)")
    ap.add_argument("--out", required=True, metavar="FILE", help="tuned-controller JSON to write")
    ap.add_argument("--policy", default=HEURISTIC, help=f"swept policy (default {HEURISTIC})")
    args = ap.parse_args(argv)

    def fail(message: str) -> int:  # bad input: one line, exit status 2 (as cpgym's commands)
        print(f"{ap.prog}: error: {message}", file=sys.stderr)
        return 2

    for d in args.sweep_dir:
        if not Path(d).is_dir():
            return fail(f"SWEEP_DIR {d}: no such folder")
    out = Path(args.out)
    if out.is_dir() or any(q.exists() and not q.is_dir() for q in out.parents):
        return fail(f"--out {out}: expected a file path whose parent folders are folders")
    try:
        doc = select_controller_setting(args.sweep_dir, args.policy)
    except ValueError as exc:
        return fail(str(exc))
    doc["argv"] = ["python", "-m", "experiments.tune_controller", *(sys.argv[1:] if argv is None else argv)]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    for row in doc["grid"]:
        delta = row.get("delta_mean_ttft_pct_vs_default")
        half = row.get("delta_mean_ttft_pct_vs_default_ci95")
        extra = "" if delta is None else f"  {ci_text(delta, half, '{:+.1f}')} % vs default"
        print(f"{json.dumps(row['params'], sort_keys=True)}  mean TTFT {row['mean_ttft_s']:.3f} s{extra}")
    print(f"selected: {json.dumps(doc['params'], sort_keys=True)} -> {out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
