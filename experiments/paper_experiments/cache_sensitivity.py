"""Sensitivity table of the global prefix-cache manager's settings from a sweep's output
(``experiments/specs/cache-manager-sweep.yaml``): per manager setting, the change of mean TTFT,
P90 TTFT and prefix hit rate against local caches only, paired by seed.

Usage (after ``cpgym sweep``)::

    python -m experiments.paper_experiments.cache_sensitivity runs/sweeps/cache-manager-sweep

Reads every finished run folder (``cell.json`` + ``summary.json``) below the sweep folder that its
``manifest.json`` lists (not the cells of an earlier version of the spec run into the same folder). The
run of the policy without a manager (``local_policy``) with seed s is the reference of every
manager run with seed s; a setting is the run's swept policy parameters (its ``cell.json``
``policy_params``). Per setting: mean over seeds of the paired % changes with the 95 % Student-t
half-width (:func:`experiments.report.ci95_halfwidth`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from envs.metrics.stats import ci95_halfwidth, ci_text
from envs.metrics.table import metric_names
from envs.sim.options import is_int, is_number
from experiments.sweep.manifest import finished_cells

#: The ``summary.json`` numbers a cache-sensitivity run reads by default (names of :mod:`envs.metrics.table`).
METRICS = metric_names("mean_ttft_s", "p90_ttft_s", "prefix_hit_rate", "slo_attainment_token_weighted", "kv_transfer_bytes")


def load_runs(sweep_dir: str | Path, metrics: tuple[str, ...] = METRICS) -> list[dict]:
    """``[{policy, seed, params (dict), run_dir (Path), **metrics}]`` of the finished cells under ``sweep_dir``
    (:func:`experiments.sweep.manifest.finished_cells`); ``metrics``: the ``summary.json`` numbers read
    (default :data:`METRICS`).

    Raises:
        ValueError: naming the file, if ``sweep_dir`` holds no finished cell, a ``cell.json`` is
            not a cell document (``policy`` string, integer ``seed``, ``policy_params`` object), or
            a finished cell's ``summary.json`` is missing, not a JSON object or lacks a number for
            one of ``metrics`` (it used to count as 0: a best-looking setting).
    """
    runs = []
    for run_dir, cell in finished_cells(sweep_dir, strict=True, current_only=True):  # not an edited spec's old cells
        policy, seed, params = cell.get("policy"), cell.get("seed"), cell.get("policy_params") or {}
        if not isinstance(policy, str) or not is_int(seed) or not isinstance(params, dict):
            raise ValueError(f"{run_dir / 'cell.json'}: expected \"policy\" (a string), \"seed\" (an integer) and "
                             f"\"policy_params\" (an object), got {policy!r}, {seed!r}, {params!r}")
        summary_file = run_dir / "summary.json"
        try:
            summary = json.loads(summary_file.read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"{summary_file}: cannot read the finished cell's summary ({exc})") from None
        if not isinstance(summary, dict):
            raise ValueError(f"{summary_file}: expected a JSON object, got {type(summary).__name__}")
        bad = next((k for k in metrics if not is_number(summary.get(k))), None)
        if bad is not None:
            got = f"is {summary[bad]!r}" if bad in summary else "is missing"
            raise ValueError(f"{summary_file}: {bad} {got}; expected a number "
                             f"(a finished run's summary has {', '.join(metrics)})")
        runs.append({"policy": policy, "seed": seed, "params": dict(params), "run_dir": run_dir,
                     **{k: float(summary[k]) for k in metrics}})
    if not runs:
        raise ValueError(f"{sweep_dir}: no finished sweep cell (no */cell.json); run `cpgym sweep` first")
    return runs


def sensitivity_rows(runs: list[dict], local_policy: str | None = None) -> list[dict]:
    """One row per manager setting, sorted by the mean-TTFT change (best first).

    ``local_policy`` (local caches only) defaults to the one policy of the sweep whose runs have
    no ``cache_*`` parameter (``vertumnus`` or ``vertumnus-router``).

    Row keys: ``params`` (the setting), ``num_seeds``, ``mean_ttft_pct`` / ``p90_ttft_pct``
    (manager vs local, %, negative = lower TTFT) and their ``*_ci`` half-widths,
    ``hit_rate_pp`` (percentage points), ``min_slo_attainment`` (lowest token-weighted SLO
    attainment over the seeds), ``kv_transfer_gb`` (mean over seeds).

    Raises:
        ValueError: if there is no run of ``local_policy`` or a manager run has no local run with
            its seed.
    """
    if local_policy is None:
        plain = sorted({r["policy"] for r in runs if not any(k.startswith("cache_") for k in r["params"])})
        local_policy = plain[0] if len(plain) == 1 else "vertumnus-router"
    local = {r["seed"]: r for r in runs if r["policy"] == local_policy}
    if not local:
        found = sorted({r["policy"] for r in runs})
        raise ValueError(f"no run of the local-caches policy {local_policy!r} (policies: {found})")
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        if r["policy"] == local_policy:
            continue
        if r["seed"] not in local:
            raise ValueError(f"{r['policy']} seed {r['seed']} has no {local_policy} run with that seed to pair with")
        groups.setdefault(tuple(sorted(r["params"].items())), []).append(r)
    rows = []
    for params, rs in groups.items():
        mean_pct = [100.0 * (r["mean_ttft_s"] / local[r["seed"]]["mean_ttft_s"] - 1.0) for r in rs]
        p90_pct = [100.0 * (r["p90_ttft_s"] / local[r["seed"]]["p90_ttft_s"] - 1.0) for r in rs]
        hit_pp = [100.0 * (r["prefix_hit_rate"] - local[r["seed"]]["prefix_hit_rate"]) for r in rs]
        n = len(rs)
        rows.append({"params": dict(params), "num_seeds": n,
                     "mean_ttft_pct": sum(mean_pct) / n, "mean_ttft_pct_ci": ci95_halfwidth(mean_pct),
                     "p90_ttft_pct": sum(p90_pct) / n, "p90_ttft_pct_ci": ci95_halfwidth(p90_pct),
                     "hit_rate_pp": sum(hit_pp) / n,
                     "min_slo_attainment": min(r["slo_attainment_token_weighted"] for r in rs),
                     "kv_transfer_gb": sum(r["kv_transfer_bytes"] for r in rs) / n / 1e9})
    rows.sort(key=lambda row: row["mean_ttft_pct"])
    return rows


def to_markdown(rows: list[dict]) -> str:
    """The rows as a Markdown table (one column per swept parameter)."""
    keys = sorted({k for r in rows for k in r["params"]})
    head = [k.removeprefix("cache_") for k in keys] + ["seeds", "mean TTFT %", "P90 TTFT %", "hit rate pp", "min SLO tok",
                                                        "transfer GB"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [f"{r['params'].get(k, '')}" for k in keys]
        # no interval for one seed or a zero-width one, as in cpgym report (was '± nan', '± 0.0')
        cells += [str(r["num_seeds"]), ci_text(r["mean_ttft_pct"], r["mean_ttft_pct_ci"], "{:+.1f}"),
                  ci_text(r["p90_ttft_pct"], r["p90_ttft_pct_ci"], "{:+.1f}"), f"{r['hit_rate_pp']:+.2f}",
                  f"{r['min_slo_attainment']:.3f}", f"{r['kv_transfer_gb']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m experiments.paper_experiments.cache_sensitivity SWEEP_DIR", file=sys.stderr)
        return 2
    print(to_markdown(sensitivity_rows(load_runs(argv[0]))), end="")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
