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

import numpy as np

from policies.reconfig.evaluate import LearnedReconfig


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
    from envs.sim.options import check_out_file
    from experiments.scripts.reconfig_sustained_target import evaluate_and_report, parse_values

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoints", required=True, help="comma-separated target-composition checkpoint folders")
    p.add_argument("--seeds", default="500,501,502,503,504,505,506,507,508,509",
                   help="matched-phases workload seeds (default: the validation seeds 500-509)")
    p.add_argument("--out", help="CSV of one row per (policy, seed)")
    args = p.parse_args(argv)
    paths = [s.strip() for s in args.checkpoints.split(",") if s.strip()]
    try:
        seeds = parse_values("--seeds", args.seeds, int)
        check_out_file(args.out)
        policies = {f"single:{path}": LearnedReconfig(path) for path in paths}
        policies["ensemble"] = ProbabilityEnsemble(paths)
    except (ValueError, FileNotFoundError) as exc:
        print(f"reconfig_ensemble_check: error: {exc}", file=sys.stderr)
        return 2
    evaluate_and_report(policies, seeds, "policy", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
