"""Ablation of the ``dynamo-kv`` tie-break: Dynamo's (fewest cached blocks, then the seeded
generator; :meth:`baselines.industry.DynamoKVRouter.break_tie`) vs cpgym's earlier pool order
(the first worker of the pool: a CP-4 worker of the default ``cp4x6,cp2x8``), same logit, on the
low-load points of ``results/end-to-end/industry-routers`` (0.5 of the strongest static pool's
capacity, 300 s of the synthetic workload, seeds 0-2). Prints the mean TTFT [s] of each per seed
and the paired change [%] with its 95 % Student-t CI::

    python -m experiments.scripts.dynamo_tie_break
"""

from __future__ import annotations

#: (workload, rate [req/s]): the 0.5 load points of results/end-to-end/industry-routers/*/summary.csv
POINTS = (("leval-like", 12.016294316898724), ("tool-agent", 27.55260885032882))


def main() -> int:
    from baselines.industry import DynamoKVRouter
    from baselines.registry import PolicySpec
    from baselines.runner import run_policy
    from envs.metrics import summarize
    from envs.metrics.stats import mean_ci95
    from envs.sim import SimConfig
    from envs.workloads.source import build_workload

    class PoolOrderTies(DynamoKVRouter):
        def break_tie(self, ties, view):
            return ties[0]

    for name, rate in POINTS:
        changes = []
        for seed in (0, 1, 2):
            wl = build_workload(name=name, seed=seed, params=(("duration_s", 300.0),), target_rps=rate)
            ttft = {}
            for label, make in (("upstream", DynamoKVRouter), ("pool_order", PoolOrderTies)):
                spec = PolicySpec(name="dynamo-kv", make_router=make, description=label, source="ablation")
                ttft[label] = summarize(run_policy(spec, wl, SimConfig(seed=seed)))["mean_ttft_s"]
            changes.append(100.0 * (ttft["upstream"] / ttft["pool_order"] - 1.0))
            print(f"{name} seed {seed}: mean TTFT upstream ties {ttft['upstream']:.3f} s, pool-order ties "
                  f"{ttft['pool_order']:.3f} s")
        m, h = mean_ci95(changes)
        print(f"{name} @ {rate:.2f} req/s: upstream vs pool-order ties {m:+.1f} % [{m - h:+.1f}, {m + h:+.1f}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
