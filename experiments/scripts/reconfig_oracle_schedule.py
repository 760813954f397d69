"""How good is the warm start's oracle? Per workload seed of ``matched-phases``: the best fixed
composition of the target menu in hindsight (one simulation each, Vertumnus router) and the mean
TTFT of following the oracle schedule (``policies.reconfig_oracle.select_targets``: per phase
within a tolerance, or by dynamic programming with a cost per GPU moved) in the target-mode
environment (the settings of ``policies/checkpoints/reconfig_target``).

    python experiments/scripts/reconfig_oracle_schedule.py SEEDS [TOLERANCE] [GPUS_PER_WINDOW]
        [--switch-costs C1,C2,...] [--cache FILE]

e.g. ``0,1,2,3,4,5`` (training seeds) or ``500,501,502`` (validation seeds); prints one line per
seed and schedule, and the means. ``--switch-costs`` (request-seconds per GPU moved, 0 = the
per-phase rule with TOLERANCE) evaluates several oracles on the same per-phase TTFTs;
``--cache`` reads/writes those TTFTs (``policies.reconfig_oracle.save_phase_ttft``: the file
``cpgym train reconfig --oracle-phase-ttft`` reads), so a second call simulates no fixed pool.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path


def follow_schedule(env, workload, seed: int, targets: list[int]) -> tuple[float, int]:
    """Mean TTFT [s] and operations of following ``targets[phase]`` in the target-mode ``env``."""
    from envs.metrics import summarize
    from policies.reconfig_oracle import phase_at

    env.reset(seed=seed, options={"window_index": 0, "sim_seed": seed})
    done, info = False, {}
    while not done:
        _, _, term, trunc, info = env.step(targets[phase_at(workload, env.decision_time_s)])
        done = term or trunc
    return summarize(env.sim.result())["mean_ttft_s"], int(info.get("num_operations", 0))


def main(argv: list[str]) -> int:
    from baselines.capacity import CapacityTable
    from baselines.composition import degree_counts
    from envs import workloads
    from envs.reconfig_env import PrefillReconfigEnv, observation_profile_config
    from envs.sim import Calibration, SimConfig
    from policies.reconfig_oracle import load_phase_ttft, phase_ttft, save_phase_ttft, select_targets

    ap = argparse.ArgumentParser(usage=__doc__)
    ap.add_argument("seeds")
    ap.add_argument("tolerance", nargs="?", type=float, default=0.1)
    ap.add_argument("gpus_per_window", nargs="?", type=float, default=16.0)
    ap.add_argument("--switch-costs", default="0")
    ap.add_argument("--cache", default=None)
    a = ap.parse_args(argv)
    seeds = [int(s) for s in a.seeds.split(",")]
    costs = [float(c) for c in a.switch_costs.split(",")]
    sc = SimConfig()
    table = CapacityTable(sc, Calibration.resolve(sc.calibration_path), observation_profile_config())
    menu = None
    tables: dict = {}
    fixed_all, sched_all = [], {c: [] for c in costs}
    for seed in seeds:
        wl = workloads.build_workload(name="matched-phases", seed=seed)
        cfg = replace(sc, seed=seed)
        env = PrefillReconfigEnv([wl], cfg, capacity_features=True, capacity_table=table, action_mode="target",
                                 target_degrees=(2, 4, 8), max_operation_gpus_per_window=a.gpus_per_window)
        if menu is None:
            menu = env.target_compositions
            if a.cache and Path(a.cache).is_file():
                tables = load_phase_ttft(a.cache, menu)
        if seed not in tables:
            tables[seed] = phase_ttft(wl, cfg, menu)
            if a.cache:
                save_phase_ttft(a.cache, tables, menu)
        ttft, num = tables[seed]
        totals = (ttft * num).sum(axis=1) / num.sum()  # whole-workload mean TTFT of each fixed composition
        best = int(totals.argmin())
        fixed_all.append(float(totals[best]))
        counts = [degree_counts(c, sc.pool) for c in menu]
        line = [f"seed {seed}: best fixed {menu[best]} {totals[best]:.3f} s"]
        for c in costs:
            targets = select_targets(ttft, num, counts, degree_counts(sc.pool.composition, sc.pool), a.tolerance, c)
            mean, ops = follow_schedule(env, wl, seed, targets)
            sched_all[c].append(mean)
            line.append(f"switch cost {c:g}: {mean:.3f} s ({ops} ops: {' / '.join(menu[k] for k in targets)})")
        print("; ".join(line), flush=True)
    n = len(seeds)
    print(f"mean over seeds: best fixed in hindsight {sum(fixed_all) / n:.4f} s; "
          + ", ".join(f"oracle schedule (switch cost {c:g}) {sum(v) / n:.4f} s" for c, v in sched_all.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
