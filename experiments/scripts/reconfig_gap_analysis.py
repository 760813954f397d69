"""Where does a learned target-composition controller lose against fixed compositions? Per
workload seed of ``matched-phases`` and per phase: the mean TTFT of the learned controller's
requests next to that of a fixed pool of each reference composition, the controller's targets
per phase and its operations, and the cost of the start from the initial composition (the
"go to X at the first decision and stay" schedule of the target-mode environment).

    python experiments/scripts/reconfig_gap_analysis.py CHECKPOINT SEEDS REFERENCE[,REFERENCE...]

e.g. ``policies/checkpoints/reconfig_target 500,501,502 cp4x9+cp2x2,cp4x10`` (``+`` or ``,``
between the groups of one composition is accepted as in ``--against fixed:...``; compositions
separated by ``;`` when written with commas). Prints one block per seed and the means.
"""

from __future__ import annotations

import sys
from dataclasses import replace

import numpy as np

from baselines.envs import make_reconfig_env


def phase_means(ttft_s: np.ndarray, phase: np.ndarray, num_phases: int) -> list[float]:
    """Mean TTFT [s] of the requests of each phase (NaN for a phase without finished requests).

    Args:
        ttft_s: ``(num_requests,)`` per-request TTFT [s], NaN when unfinished.
        phase: ``(num_requests,)`` phase index of each request (by arrival).
        num_phases: number of phases.
    """
    out = []
    for p in range(num_phases):
        sel = ttft_s[phase == p]
        out.append(float(np.nanmean(sel)) if len(sel) and not np.isnan(sel).all() else float("nan"))
    return out


def target_runs(actions: list[int], phases: list[int], menu: list[str]) -> list[tuple[int, int, str]]:
    """Collapses a per-window action sequence into ``(first_window, phase, composition)`` runs of
    equal consecutive targets (``phases[i]``: the phase of window ``i``'s decision time)."""
    runs = []
    for i, a in enumerate(actions):
        if not runs or menu[a] != runs[-1][2]:
            runs.append((i, phases[i], menu[a]))
    return runs


def main(argv: list[str]) -> int:
    from baselines.runner import run_policy
    from envs import workloads
    from envs.metrics import summarize
    from envs.sim import SimConfig
    from policies.reconfig.evaluate import LearnedReconfig
    from policies.reconfig.oracle import phase_at

    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    ckpt = LearnedReconfig(argv[0])
    seeds = [int(s) for s in argv[1].split(",")]
    refs = [r.replace("+", ",") for r in (argv[2].split(";") if ";" in argv[2] else argv[2].split(","))]
    sc = SimConfig()
    sums: dict[str, list[float]] = {}
    for seed in seeds:
        wl = workloads.build_workload(name="matched-phases", seed=seed)
        cfg = replace(sc, seed=seed)
        phase = np.asarray(wl.metadata["phase_of_request"])
        num_phases = len(wl.metadata["phase_boundaries_s"]) - 1
        env = make_reconfig_env([wl], cfg, window_s=ckpt.window_s, **ckpt.env_kwargs)  # own table per seed
        menu = env.target_compositions
        obs, _ = env.reset(seed=seed, options={"window_index": 0, "sim_seed": seed})
        actions, phases, done, info = [], [], False, {}
        while not done:
            phases.append(phase_at(wl, env.decision_time_s))
            actions.append(ckpt.act(obs, env.action_masks()))
            obs, _, term, trunc, info = env.step(actions[-1])
            done = term or trunc
        learned = env.sim.result()
        rows = {"learned": (summarize(learned)["mean_ttft_s"], phase_means(learned.records["ttft_s"], phase, num_phases))}
        for ref in refs:
            res = run_policy("vertumnus-router", wl, replace(cfg, pool=replace(cfg.pool, composition=ref)))
            rows[f"fixed {ref}"] = (summarize(res)["mean_ttft_s"], phase_means(res.records["ttft_s"], phase, num_phases))
            if ref in menu:  # the same composition reached from the initial one at the first decision
                env.reset(seed=seed, options={"window_index": 0, "sim_seed": seed})
                done = False
                while not done:
                    _, _, term, trunc, _ = env.step(menu.index(ref))
                    done = term or trunc
                res = env.sim.result()
                rows[f"go-to {ref}"] = (summarize(res)["mean_ttft_s"],
                                        phase_means(res.records["ttft_s"], phase, num_phases))
        counts = np.bincount(phase, minlength=num_phases)
        print(f"seed {seed}: {num_phases} phases, requests per phase {counts.tolist()}, "
              f"{info.get('num_operations', 0)} operations of the learned controller", flush=True)
        for first, p, comp in target_runs(actions, phases, menu):
            print(f"  window {first:3d} (phase {p}): target {comp}")
        for name, (mean, per_phase) in rows.items():
            sums.setdefault(name, []).append(mean)
            print(f"  {name:32s} {mean:.3f} s | per phase " + " ".join(f"{x:.3f}" for x in per_phase))
    print("mean over seeds: " + ", ".join(f"{k} {np.mean(v):.3f} s" for k, v in sums.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
