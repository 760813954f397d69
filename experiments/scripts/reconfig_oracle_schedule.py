"""How good is the warm start's oracle? Per workload seed of ``matched-phases``: the best fixed
composition of the target menu in hindsight (one simulation each, Vertumnus router) and the mean
TTFT of following the per-phase oracle (``policies.reconfig_oracle.phase_targets``) in the
target-mode environment (the settings of ``policies/checkpoints/reconfig_target``).

    python experiments/scripts/reconfig_oracle_schedule.py SEEDS [TOLERANCE] [GPUS_PER_WINDOW]

e.g. ``0,1,2,3,4,5`` (training seeds) or ``500,501,502`` (validation seeds); prints one line per
seed and the means.
"""

from __future__ import annotations

import sys
from dataclasses import replace


def main(argv: list[str]) -> int:
    from baselines.capacity import CapacityTable
    from envs import workloads
    from envs.metrics import summarize
    from envs.reconfig_env import PrefillReconfigEnv, observation_profile_config
    from envs.sim import Calibration, SimConfig
    from experiments.runner import run_policy
    from policies.reconfig_oracle import phase_at, phase_targets

    if not 1 <= len(argv) <= 3:
        print(__doc__, file=sys.stderr)
        return 2
    seeds = [int(s) for s in argv[0].split(",")]
    tolerance = float(argv[1]) if len(argv) > 1 else 0.1
    budget = float(argv[2]) if len(argv) > 2 else 16.0
    sc = SimConfig()
    table = CapacityTable(sc, Calibration.resolve(sc.calibration_path), observation_profile_config())
    fixed_all, oracle_all = [], []
    for seed in seeds:
        wl = workloads.build_workload(name="matched-phases", seed=seed)
        cfg = replace(sc, seed=seed)
        env = PrefillReconfigEnv([wl], cfg, capacity_features=True, capacity_table=table, action_mode="target",
                                 target_degrees=(2, 4, 8), max_operation_gpus_per_window=budget)
        menu = env.target_compositions
        fixed = {c: summarize(run_policy("vertumnus-router", wl, replace(cfg, pool=replace(cfg.pool, composition=c))))
                 ["mean_ttft_s"] for c in menu}
        best = min(fixed, key=fixed.get)
        targets = phase_targets(wl, cfg, menu, tolerance=tolerance)
        env.reset(seed=seed, options={"window_index": 0, "sim_seed": seed})
        done = False
        while not done:
            _, _, term, trunc, info = env.step(targets[phase_at(wl, env.decision_time_s)])
            done = term or trunc
        oracle = summarize(env.sim.result())["mean_ttft_s"]
        fixed_all.append(fixed[best])
        oracle_all.append(oracle)
        print(f"seed {seed}: best fixed {best} {fixed[best]:.3f} s; per-phase oracle schedule {oracle:.3f} s "
              f"({info['num_operations']} operations: {', '.join(menu[k] for k in targets)})", flush=True)
    print(f"mean over seeds: best fixed in hindsight {sum(fixed_all) / len(seeds):.3f} s, "
          f"oracle schedule {sum(oracle_all) / len(seeds):.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
