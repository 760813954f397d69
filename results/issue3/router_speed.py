"""Decisions/s of the optimised routers vs their direct reference implementations (tests/baselines/*_fast.py)
on the default workload and pool. Run: PYTHONPATH=. python results/issue3/router_speed.py"""
import time
from envs import workloads
from envs.sim import SimConfig, Simulator
from baselines.vertumnus import VertumnusRouter, VertumnusParams
from baselines.industry import LlmdRouter, DynamoKVRouter
from baselines.simple import LeastWorkRouter
from tests.baselines.test_vertumnus_fast import ReferenceVertumnus
from tests.baselines.test_industry_fast import RefLlmd, RefDynamo
from baselines.registry import get_policy
from envs.sim.router import Router

class RefV(Router):
    name = "ref-vertumnus"
    def reset(self, view, rng):
        self.r = ReferenceVertumnus(VertumnusParams(), None)
    def route(self, req, view):
        return self.r.route(req, view)

wl = workloads.get_workload("mixed-default", seed=0)
for name, mk in [("least-work", LeastWorkRouter), ("vertumnus (reference)", RefV), ("vertumnus", VertumnusRouter),
                 ("llm-d (reference)", RefLlmd), ("llm-d", LlmdRouter), ("dynamo-kv (reference)", RefDynamo), ("dynamo-kv", DynamoKVRouter)]:
    best = 1e9
    for _ in range(2):
        sim = Simulator(wl, SimConfig())
        t = time.perf_counter(); sim.run(mk()); best = min(best, time.perf_counter() - t)
    print(f"{name:24s} {wl.num_requests / best:8.0f} decisions/s  ({best:.2f} s for {wl.num_requests} requests)")
