"""Hysteresis on a learned target-composition controller's choices, measured on validation
seeds: a sustained condition (paper §6's "conditions must persist for several windows") or a
probability margin.

``--sustained-windows K1,K2,...``: the wrapped policy keeps its current target until the
checkpoint names the same other target in ``k`` consecutive windows (``k = 1``: the checkpoint as
shipped). ``--probability-margins M1,M2,...`` instead: it moves to the checkpoint's choice only
when that choice's action probability exceeds the current target's by at least ``m`` (``m = 0``:
as shipped), so confident moves are not delayed. Either way the first choice of an episode is
taken at once: the initial composition is the deployment's, not the policy's.
``--max-operation-gpus-per-window B1,B2,...`` instead: the checkpoint as shipped, deployed with
another GPU budget for the operations started per window (trained with 16). Analysis only;
nothing here is part of the shipped policy.

    python -m experiments.scripts.reconfig_sustained_target --sustained-windows 1,2,3 \\
        --seeds 500,501,502,503,504,505,506,507,508,509 \\
        --out results/learned-reconfig/validation-seeds/sustained_target.csv

Prints, per ``k`` (or ``m``), the mean TTFT over the seeds and the paired % difference to the
first value.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from policies.reconfig.evaluate import LearnedReconfig


class SustainedTarget(LearnedReconfig):
    """A target-menu checkpoint whose target changes only after ``sustained_windows``
    consecutive windows name the same new one.

    Raises:
        ValueError: when the checkpoint is not a target-menu one, or ``sustained_windows`` < 1.
    """

    def __init__(self, path: str, sustained_windows: int) -> None:
        super().__init__(path)
        if self.env_kwargs.get("action_mode") != "target":
            raise ValueError(f"{path}: not a target-composition checkpoint (action_mode 'target')")
        if sustained_windows < 1:
            raise ValueError(f"--sustained-windows must be integers >= 1, got {sustained_windows}")
        self.sustained_windows = sustained_windows
        self._held = self._candidate = None
        self._count = 0

    def act(self, obs: dict, mask) -> int:
        choice = super().act(obs, mask)
        if self._held is None or choice == self._held:
            self._held, self._candidate, self._count = choice, None, 0
            return choice
        self._count = self._count + 1 if choice == self._candidate else 1
        self._candidate = choice
        if self._count >= self.sustained_windows:
            self._held, self._candidate, self._count = choice, None, 0
        return self._held if mask[self._held] else choice

    def run(self, *args, **kwargs):
        self._held, self._candidate, self._count = None, None, 0
        return super().run(*args, **kwargs)


class MarginGatedTarget(LearnedReconfig):
    """A target-menu checkpoint that leaves its current target only for a choice whose masked
    action probability exceeds the current target's by at least ``margin`` (0: the checkpoint as
    shipped).

    Raises:
        ValueError: when the checkpoint is not a target-menu one, or ``margin`` is not in [0, 1].
    """

    def __init__(self, path: str, margin: float) -> None:
        super().__init__(path)
        if self.env_kwargs.get("action_mode") != "target":
            raise ValueError(f"{path}: not a target-composition checkpoint (action_mode 'target')")
        if not 0.0 <= margin <= 1.0:
            raise ValueError(f"--probability-margins must be numbers in [0, 1], got {margin}")
        self.margin = margin
        self._held = None

    def act(self, obs: dict, mask) -> int:
        from experiments.scripts.reconfig_ensemble_check import action_probabilities

        probs = action_probabilities(self, obs, mask)
        choice = int(probs.argmax())
        if self._held is None or not mask[self._held] or probs[choice] - probs[self._held] >= self.margin:
            self._held = choice
        return self._held

    def run(self, *args, **kwargs):
        self._held = None
        return super().run(*args, **kwargs)


def with_operation_budget(path: str, gpus_per_window: float) -> LearnedReconfig:
    """The checkpoint at ``path`` deployed with ``gpus_per_window`` as the environment's
    ``max_operation_gpus_per_window`` (its policy unchanged).

    Raises:
        ValueError: when the checkpoint is not a target-menu one, the budget is not > 0, or it is
            below one operation of the menu (:func:`envs.reconfig_env.check_operation_budget`).
    """
    policy = LearnedReconfig(path)
    if policy.env_kwargs.get("action_mode") != "target":
        raise ValueError(f"{path}: not a target-composition checkpoint (action_mode 'target')")
    if not gpus_per_window > 0:
        raise ValueError(f"--max-operation-gpus-per-window must be numbers > 0, got {gpus_per_window}")
    from envs.reconfig_env import check_operation_budget, target_menu
    from envs.sim import SimConfig

    pool = SimConfig().pool  # the pool evaluate_and_report runs on
    check_operation_budget(pool, target_menu(pool, policy.env_kwargs["target_degrees"]), float(gpus_per_window))
    policy.env_kwargs = dict(policy.env_kwargs, max_operation_gpus_per_window=float(gpus_per_window))
    return policy


def evaluate_and_report(policies: dict, seeds: list[int], label: str, out: str | None = None) -> list[dict]:
    """One whole-workload ``matched-phases`` episode per (policy, seed) (the default pool,
    simulator seed = workload seed, as ``cpgym evaluate``): rows ``{label: name, seed, mean_ttft_s,
    slo_attainment_token_weighted, num_target_changes}``, written to ``out`` (CSV) if given; prints
    each policy's mean TTFT and its paired % difference to the first policy (95 % CI)."""
    from envs import workloads
    from envs.metrics import summarize
    from envs.metrics.stats import mean_ci95
    from envs.sim import SimConfig

    rows = []
    for name, pol in policies.items():
        for seed in seeds:
            wl = workloads.build_workload(name="matched-phases", seed=seed)
            result, actions = pol.run(wl, replace(SimConfig(), seed=seed), seed)
            s = summarize(result)
            rows.append({label: name, "seed": seed, "mean_ttft_s": s["mean_ttft_s"],
                         "slo_attainment_token_weighted": s["slo_attainment_token_weighted"],
                         "num_target_changes": sum(a != b for a, b in zip(actions, actions[1:]))})
            print(f"{label} {name} seed {seed}: mean TTFT {s['mean_ttft_s']:.4f} s", file=sys.stderr)
    if out:
        from pathlib import Path

        import pandas as pd

        Path(out).parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).to_csv(out, index=False)
    first = next(iter(policies))
    base = {r["seed"]: r["mean_ttft_s"] for r in rows if r[label] == first}
    for name in policies:
        rs = [r for r in rows if r[label] == name]
        m, _ = mean_ci95([r["mean_ttft_s"] for r in rs])
        d, h = mean_ci95([100 * (r["mean_ttft_s"] / base[r["seed"]] - 1) for r in rs])
        print(f"{label} {name}: mean TTFT {m:.4f} s; vs {first} {d:+.1f} % [{d - h:+.1f}, {d + h:+.1f}]")
    return rows


def parse_values(flag: str, text: str, kind: type) -> list:
    """The comma-separated ``kind`` values of ``flag``; ValueError naming the flag on a bad list or
    a value given twice (one policy per value: a repeat would silently be dropped)."""
    from envs.sim.options import split_number_list

    try:
        values = [kind(v) for v in split_number_list(text, kind)]
    except ValueError as exc:
        raise ValueError(f"{flag}: {exc}") from None
    twice = next((v for i, v in enumerate(values) if v in values[:i]), None)
    if twice is not None:
        raise ValueError(f"{flag} lists {twice:g} twice: {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    from envs.sim.options import check_out_file
    from policies.common.checkpoint import SHIPPED_RECONFIG

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", default=SHIPPED_RECONFIG, help="target-menu checkpoint (default: shipped-reconfig)")
    p.add_argument("--sustained-windows", help="comma-separated k values (default 1,2,3)")
    p.add_argument("--probability-margins", help="comma-separated margins in [0, 1] (instead of --sustained-windows)")
    p.add_argument("--max-operation-gpus-per-window", help="comma-separated GPU budgets > 0 of the operations "
                                                           "started per window (instead of --sustained-windows)")
    p.add_argument("--seeds", default="500,501,502,503,504,505,506,507,508,509",
                   help="matched-phases workload seeds (default: the validation seeds 500-509)")
    p.add_argument("--out", help="CSV of one row per (k, m or budget; seed)")
    args = p.parse_args(argv)
    try:
        seeds = parse_values("--seeds", args.seeds, int)
        modes = [f for f, v in (("--sustained-windows", args.sustained_windows),
                                ("--probability-margins", args.probability_margins),
                                ("--max-operation-gpus-per-window", args.max_operation_gpus_per_window)) if v is not None]
        if len(modes) > 1:
            raise ValueError(f"give one of --sustained-windows, --probability-margins and "
                             f"--max-operation-gpus-per-window, got {' and '.join(modes)}")
        check_out_file(args.out)
        if args.max_operation_gpus_per_window is not None:
            label = "max_operation_gpus_per_window"
            policies = {b: with_operation_budget(args.checkpoint, b)
                        for b in parse_values("--max-operation-gpus-per-window", args.max_operation_gpus_per_window, float)}
        elif args.probability_margins is not None:
            label = "probability_margin"
            margins = parse_values("--probability-margins", args.probability_margins, float)
            policies = {m: MarginGatedTarget(args.checkpoint, m) for m in margins}
        else:
            label = "sustained_windows"
            ks = parse_values("--sustained-windows", args.sustained_windows or "1,2,3", int)
            policies = {k: SustainedTarget(args.checkpoint, k) for k in ks}
    except (ValueError, FileNotFoundError) as exc:
        print(f"reconfig_sustained_target: error: {exc}", file=sys.stderr)
        return 2
    evaluate_and_report(policies, seeds, label, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
