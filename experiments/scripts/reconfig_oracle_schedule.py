"""How good is the warm start's oracle? Per workload seed of ``matched-phases``: the best fixed
composition of the target menu in hindsight (one simulation each, Vertumnus router) and the mean
TTFT of following the oracle schedule (``policies.reconfig.oracle.select_targets``: per phase
within a tolerance, or by dynamic programming with a cost per GPU moved) in the target-mode
environment (the settings of ``policies/checkpoints/reconfig_target``).

    python experiments/scripts/reconfig_oracle_schedule.py SEEDS [TOLERANCE] [GPUS_PER_WINDOW]
        [--switch-costs C1,C2,...] [--window-s S] [--cache FILE] [--out-csv FILE [--with-rows CSV [--with-policies P1,P2,...]]]

e.g. ``0,1,2,3,4,5`` (training seeds) or ``500,501,502`` (validation seeds); prints one line per
seed and schedule, and the means. ``--switch-costs`` (request-seconds per GPU moved, 0 = the
per-phase rule with TOLERANCE) evaluates several oracles on the same per-phase TTFTs;
``--cache`` reads/writes those TTFTs (``policies.reconfig.oracle.save_phase_ttft``: the file
``cpgym train reconfig --oracle-phase-ttft`` reads), so a second call simulates no fixed pool.
``--out-csv`` writes one per-episode row per seed and schedule (policy
``oracle-schedule:switch-cost-<C>``, the columns of ``cpgym evaluate --kind reconfig --out``),
after the rows of ``--with-rows`` (an evaluation CSV of the same seeds; only the policies of
``--with-policies`` if given), so that ``cpgym evaluate --from-csv FILE --reference
oracle-schedule:switch-cost-5`` gives the paired gap of each evaluated policy to the oracle.
``--window-s`` sets the environment's decision window [s] (default 20, the paper's and the
checkpoint's): the schedule changes target at the first decision after a phase boundary, so a
shorter window measures how much of the oracle's lead a faster-reacting controller could keep.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from baselines.envs import make_reconfig_env


def rows_with(path: str | None, policies: str | None, seeds: list[int]) -> list[dict]:
    """The per-episode rows of the evaluation CSV ``path`` (none without one) of ``seeds``, only
    those of the comma-separated ``policies`` if given.

    Raises:
        ValueError: naming the file, when it is not a reconfiguration evaluation CSV, or a policy
            of ``policies`` has no row for one of ``seeds``.
    """
    from policies.episode_rows import read_episode_rows

    if path is None:
        if policies:
            raise ValueError("--with-policies needs --with-rows")
        return []
    _, rows = read_episode_rows(path, "reconfig")
    rows = [r for r in rows if int(r["seed"]) in seeds]
    if policies:
        wanted = [p.strip() for p in policies.split(",") if p.strip()]
        for p in wanted:
            missing = sorted(set(seeds) - {int(r["seed"]) for r in rows if r["policy"] == p})
            if missing:
                raise ValueError(f"{path}: policy {p!r} has no row for seed(s) {missing}")
        rows = [r for r in rows if r["policy"] in wanted]
    return rows


def write_rows(path: str, rows: list[dict]) -> None:
    """Writes ``rows`` as a per-episode CSV (``cpgym evaluate --from-csv`` reads it)."""
    import pandas as pd

    pd.DataFrame(rows).to_csv(path, index=False)


def _float_list(text: str) -> list[float]:
    return [float(x) for x in text.split(",")]


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[int], list[float], list[dict]]:
    """The arguments of :func:`main`, validated before any simulation: ``(namespace, seeds,
    switch costs, rows of --with-rows)``; a bad value exits (status 2) with one line naming the
    argument (argparse's ``error``)."""
    import math

    ap = argparse.ArgumentParser(prog="reconfig_oracle_schedule.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("seeds", help="comma-separated matched-phases workload seeds")
    ap.add_argument("tolerance", nargs="?", type=float, default=0.1,
                    help="per-phase rule (switch cost 0): share of a phase's best mean TTFT counted as a tie (default 0.1)")
    ap.add_argument("gpus_per_window", nargs="?", type=float, default=16.0,
                    help="GPUs the operations started in one decision window may use (default 16)")
    ap.add_argument("--switch-costs", default="0")
    ap.add_argument("--window-s", type=float, default=20.0,
                    help="the environment's decision window [s] (default 20, the paper's and the checkpoint's)")
    ap.add_argument("--cache", default=None)
    ap.add_argument("--out-csv", default=None)
    ap.add_argument("--with-rows", default=None)
    ap.add_argument("--with-policies", default=None)
    a = ap.parse_args(argv)
    try:
        seeds = [int(s) for s in a.seeds.split(",")]
    except ValueError:
        ap.error(f"SEEDS: expected comma-separated integers, got {a.seeds!r}")
    try:
        costs = _float_list(a.switch_costs)
    except ValueError:
        ap.error(f"--switch-costs: expected comma-separated numbers, got {a.switch_costs!r}")
    if not all(math.isfinite(c) and c >= 0 for c in costs):
        ap.error(f"--switch-costs: expected finite numbers >= 0, got {a.switch_costs!r}")
    if not (math.isfinite(a.tolerance) and a.tolerance >= 0):
        ap.error(f"TOLERANCE: expected a finite number >= 0, got {a.tolerance}")
    if not (math.isfinite(a.window_s) and a.window_s > 0):
        ap.error(f"--window-s: expected a finite number > 0 [s], got {a.window_s}")
    if not a.gpus_per_window > 0:
        ap.error(f"GPUS_PER_WINDOW: expected a number > 0, got {a.gpus_per_window}")
    if a.with_rows and not a.out_csv:
        ap.error("--with-rows needs --out-csv")
    if a.with_policies and not a.with_rows:
        ap.error("--with-policies needs --with-rows")
    for flag, path in (("--out-csv", a.out_csv), ("--cache", a.cache)):
        if path is not None and (Path(path).is_dir() or not Path(path).parent.is_dir()):
            ap.error(f"{flag} {path}: expected a file in an existing folder")
    try:
        rows = rows_with(a.with_rows, a.with_policies, seeds)
    except (ValueError, OSError) as e:
        ap.error(f"--with-rows: {e}")
    return a, seeds, costs, rows


def main(argv: list[str]) -> int:
    from envs import workloads
    from envs.planning.capacity import CapacityTable
    from envs.planning.composition import degree_counts
    from envs.reconfig_env import observation_profile_config
    from envs.sim import Calibration, SimConfig
    from policies.reconfig.oracle import (
        fixed_mean_ttft,
        follow_schedule,
        load_phase_ttft,
        phase_ttft,
        save_phase_ttft,
        select_targets,
    )

    a, seeds, costs, out_rows = parse_args(argv)
    sc = SimConfig()
    table = CapacityTable(sc, Calibration.resolve(sc.calibration_path), observation_profile_config())
    menu = None
    tables: dict = {}
    fixed_all, sched_all = [], {c: [] for c in costs}
    for seed in seeds:
        wl = workloads.build_workload(name="matched-phases", seed=seed)
        cfg = replace(sc, seed=seed)
        env = make_reconfig_env([wl], cfg, capacity_features=True, capacity_table=table, action_mode="target",
                                 target_degrees=(2, 4, 8), max_operation_gpus_per_window=a.gpus_per_window,
                                 window_s=a.window_s)
        if menu is None:
            menu = env.target_compositions
            if a.cache and Path(a.cache).is_file():
                tables = load_phase_ttft(a.cache, menu)
        if seed not in tables:
            tables[seed] = phase_ttft(wl, cfg, menu)
            if a.cache:
                save_phase_ttft(a.cache, tables, menu)
        ttft, num = tables[seed]
        totals = fixed_mean_ttft(ttft, num)
        best = int(totals.argmin())
        fixed_all.append(float(totals[best]))
        counts = [degree_counts(c, sc.pool) for c in menu]
        line = [f"seed {seed}: best fixed {menu[best]} {totals[best]:.3f} s"]
        for c in costs:
            targets = select_targets(ttft, num, counts, degree_counts(sc.pool.composition, sc.pool), a.tolerance, c)
            row = follow_schedule(env, wl, seed, targets)
            schedule = " / ".join(menu[k] for k in targets)
            sched_all[c].append(row["mean_ttft_s"])
            out_rows.append({"policy": f"oracle-schedule:switch-cost-{c:g}", "seed": seed, **row, "composition": schedule})
            line.append(f"switch cost {c:g}: {row['mean_ttft_s']:.3f} s ({row['num_operations']} ops: {schedule})")
        print("; ".join(line), flush=True)
        if a.out_csv:
            write_rows(a.out_csv, out_rows)
    n = len(seeds)
    print(f"mean over seeds: best fixed in hindsight {sum(fixed_all) / n:.4f} s; "
          + ", ".join(f"oracle schedule (switch cost {c:g}) {sum(v) / n:.4f} s" for c, v in sched_all.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
