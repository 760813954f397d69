"""Decisions/s of the optimised routers vs their direct reference implementations
(``experiments/scripts/reference_routers.py``, the oracles of ``tests/baselines/*_fast.py``) on the
default workload (``mixed-default``, seed 0) and pool. Run: ``python -m experiments.scripts.router_speed``."""

from __future__ import annotations

import time

from baselines.industry import DynamoKVRouter, LlmdRouter
from baselines.vertumnus import VertumnusParams, VertumnusRouter
from envs.sim import SimConfig, Simulator
from envs.sim.router import LeastWorkRouter, Router
from envs.workloads import build_workload
from experiments.scripts.reference_routers import RefDynamo, ReferenceVertumnus, RefLlmd


class RefV(Router):
    name = "ref-vertumnus"

    def reset(self, view, rng):
        self.r = ReferenceVertumnus(VertumnusParams(), None)

    def route(self, req, view):
        return self.r.route(req, view)


ROUTERS = [("least-work", LeastWorkRouter), ("vertumnus (reference)", RefV), ("vertumnus", VertumnusRouter),
           ("llm-d (reference)", RefLlmd), ("llm-d", LlmdRouter), ("dynamo-kv (reference)", RefDynamo),
           ("dynamo-kv", DynamoKVRouter)]


def main() -> None:
    wl = build_workload(name="mixed-default", seed=0)
    for name, make in ROUTERS:
        best = 1e9
        for _ in range(2):
            sim = Simulator(wl, SimConfig())
            t = time.perf_counter()
            sim.run(make())
            best = min(best, time.perf_counter() - t)
        print(f"{name:24s} {wl.num_requests / best:8.0f} decisions/s  ({best:.2f} s for {wl.num_requests} requests)")


if __name__ == "__main__":
    main()
