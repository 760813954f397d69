"""Does averaging several target-composition checkpoints help? Each checkpoint alone and their
ensemble on matched-phases seeds (validation seeds by default).

The ensemble takes, in each window, the action with the highest mean of the members' masked
action probabilities (each member normalises the observation with its own ``VecNormalize``
statistics). With one member it is that member's deterministic policy. Analysis only; the
shipped policy is a single checkpoint.

    python -m experiments.scripts.reconfig_ensemble_check \\
        --checkpoints policies/checkpoints/reconfig_target,RUN_A,RUN_B \\
        --out results/learned-reconfig/validation-seeds/ensemble_check.csv

Prints each policy's mean TTFT over the seeds and its paired % difference to the first checkpoint.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

import numpy as np

from policies.evaluate_reconfig import LearnedReconfig


def action_probabilities(member: LearnedReconfig, obs: dict, mask) -> np.ndarray:
    """The member's masked action probabilities for one raw observation, shape ``(num_actions,)``."""
    import torch

    o = member.vecnormalize.normalize_obs(obs) if member.vecnormalize is not None else obs
    t, _ = member.model.policy.obs_to_tensor(o)
    with torch.no_grad():
        dist = member.model.policy.get_distribution(t, action_masks=np.asarray(mask, dtype=bool)[None])
    return dist.distribution.probs.numpy()[0]


class ProbabilityEnsemble(LearnedReconfig):
    """Several checkpoints of one observation and action space, acting on their mean action
    probabilities (the first checkpoint supplies the environment arguments).

    Raises:
        ValueError: when the checkpoints' environment arguments differ.
    """

    def __init__(self, paths: list[str]) -> None:
        super().__init__(paths[0])
        self.members = [LearnedReconfig(p) for p in paths]
        for p, m in zip(paths, self.members):
            if m.env_kwargs != self.env_kwargs or m.window_s != self.window_s:
                raise ValueError(f"{p}: its environment ({m.env_kwargs}, window {m.window_s:g} s) differs from "
                                 f"{paths[0]}'s ({self.env_kwargs}, window {self.window_s:g} s)")

    def act(self, obs: dict, mask) -> int:
        return int(np.argmax(np.mean([action_probabilities(m, obs, mask) for m in self.members], axis=0)))


def main(argv: list[str] | None = None) -> int:
    from envs import workloads
    from envs.metrics import summarize
    from envs.sim import SimConfig
    from experiments.config_args import split_number_list
    from policies.evaluate import mean_ci95

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoints", required=True, help="comma-separated target-composition checkpoint folders")
    p.add_argument("--seeds", default="500,501,502,503,504,505,506,507,508,509",
                   help="matched-phases workload seeds (default: the validation seeds 500-509)")
    p.add_argument("--out", help="CSV of one row per (policy, seed)")
    args = p.parse_args(argv)
    paths = [s.strip() for s in args.checkpoints.split(",") if s.strip()]
    try:
        seeds = [int(s) for s in split_number_list(args.seeds, int)]
        policies = {f"single:{path}": LearnedReconfig(path) for path in paths}
        policies["ensemble"] = ProbabilityEnsemble(paths)
    except (ValueError, FileNotFoundError) as exc:
        print(f"reconfig_ensemble_check: error: {exc}", file=sys.stderr)
        return 2
    rows = []
    for name, pol in policies.items():
        for seed in seeds:
            wl = workloads.build_workload(name="matched-phases", seed=seed)
            result, _ = pol.run(wl, replace(SimConfig(), seed=seed), seed)
            s = summarize(result)
            rows.append({"policy": name, "seed": seed, "mean_ttft_s": s["mean_ttft_s"],
                         "slo_attainment_token_weighted": s["slo_attainment_token_weighted"]})
            print(f"{name} seed {seed}: mean TTFT {s['mean_ttft_s']:.4f} s", file=sys.stderr)
    if args.out:
        import pandas as pd

        pd.DataFrame(rows).to_csv(args.out, index=False)
    first = f"single:{paths[0]}"
    base = {r["seed"]: r["mean_ttft_s"] for r in rows if r["policy"] == first}
    for name in policies:
        rs = [r for r in rows if r["policy"] == name]
        m, _ = mean_ci95([r["mean_ttft_s"] for r in rs])
        d, h = mean_ci95([100 * (r["mean_ttft_s"] / base[r["seed"]] - 1) for r in rs])
        print(f"{name}: mean TTFT {m:.4f} s; vs {first} {d:+.1f} % [{d - h:+.1f}, {d + h:+.1f}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
