"""Property tests over random fault schedules, with random split/merge operations in flight:
no request lost or completed twice, GPU count conserved, no dispatch to a worker that is not
ACTIVE, no engine step on a stopped worker, epochs increasing."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from baselines.simple import RoundRobinRouter
from envs.sim import SimConfig, Simulator
from envs.sim.events import EventPriority
from envs.sim.fault_config import FaultConfig, FaultEvent
from envs.sim.reconfig import ReconfigConfig, get_reconfigurator
from envs.sim.router import LeastWorkRouter
from envs.sim.worker import WorkerState
from tests.factories import HETERO_POOL_2_NODES, make_workload, toy_calibration

CAL = toy_calibration(d_s=0.2, c_s_per_token=0.05)

event = st.one_of(
    st.builds(lambda t, g: FaultEvent("gpu_failure", t, gpu=g), st.floats(0, 30), st.integers(0, 7)),
    st.builds(lambda t, n: FaultEvent("node_failure", t, node=n), st.floats(0, 30), st.integers(0, 1)),
    st.builds(lambda t, g, f, d: FaultEvent("straggler", t, gpu=g, factor=f, duration_s=d),
              st.floats(0, 30), st.integers(0, 7), st.floats(1, 4), st.floats(0.5, 10)),
)


class Invariants:
    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.completions: dict[int, int] = {}
        self.epochs: list[int] = []
        sim.dispatch_listeners.append(self.on_dispatch)
        sim.finish_listeners.append(self.on_finish)

    def check_pool(self) -> None:
        sim = self.sim
        fm = sim.attachments["faults"]
        gpus = [g for w in sim.workers.values() for g in w.gpus]
        assert len(gpus) == len(set(gpus)), "a GPU in two workers"
        live = {g for w in sim.workers.values() if not w.stopped for g in w.gpus}
        assert not (live & fm.failed), "a failed GPU in a running worker"
        c = fm.gpu_counts()
        assert c["num_healthy_gpus"] + c["num_failed_gpus"] + c["num_rebuilding_gpus"] == HETERO_POOL_2_NODES.num_gpus
        assert min(c.values()) >= 0
        # counted independently: healthy = non-failed GPUs that are in no REBUILDING worker
        # (serving, spare, or surviving ranks of a stopped worker)
        rebuilding = {g for w in sim.workers.values() if w.state == WorkerState.REBUILDING and not w.stopped for g in w.gpus}
        assert not (rebuilding & fm.failed)
        healthy = [g for g in range(HETERO_POOL_2_NODES.num_gpus) if g not in fm.failed and g not in rebuilding]
        counts = (c["num_healthy_gpus"], c["num_failed_gpus"], c["num_rebuilding_gpus"])
        assert counts == (len(healthy), len(fm.failed), len(rebuilding))
        for w in sim.workers.values():
            assert w.epoch <= sim.epoch
        if self.epochs:
            assert sim.epoch >= self.epochs[-1], "epoch went back"
        self.epochs.append(sim.epoch)

    def on_dispatch(self, sim, req, w) -> None:
        assert sim.workers.get(w.worker_id) is w and w.state == WorkerState.ACTIVE, f"dispatch to {w}"
        self.check_pool()

    def on_finish(self, sim, batch, w) -> None:
        assert not w.stopped
        for r in batch:
            self.completions[r.request_id] = self.completions.get(r.request_id, 0) + 1
        self.check_pool()


def _steps_on_stopped_workers(trace) -> list:
    stopped: dict[str, float] = {}
    bad = []
    for name, t in trace:
        if name.startswith("stop:"):
            stopped[name.split(":")[1]] = t
        elif name.startswith("detect:"):
            stopped.clear()
        elif name.startswith("step_start:") and name.split(":")[1] in stopped:
            bad.append((name, t))
    return bad


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(event, max_size=5), ops=st.lists(st.integers(0, 30), max_size=6),
       seed=st.integers(0, 5), router=st.sampled_from([RoundRobinRouter, LeastWorkRouter]))
def test_random_fault_schedules_keep_the_invariants(events, ops, seed, router):
    rng = np.random.default_rng(seed)
    n = 60
    wl = make_workload([(float(t), int(L), None) for t, L in zip(np.sort(rng.uniform(0, 40, n)), rng.integers(1, 60, n))])
    faults = FaultConfig(events=tuple(events), detection_delay_s=1.5, rebuild_s=2.0, repair_s=5.0)
    sim = Simulator(wl, SimConfig(pool=HETERO_POOL_2_NODES, seed=seed, faults=faults, record_events=True), CAL)
    inv = Invariants(sim)
    reconf = get_reconfigurator(sim)
    r = router()
    r.reset(sim.view, sim.policy_rng)
    k = 0
    while (req := sim.run_until_decision()) is not None:
        sim.decide(r.route(req, sim.view))
        k += 1
        if k in ops:  # a split or merge in flight while faults happen
            eligible = reconf.eligible_operations()
            if eligible:
                reconf.apply(eligible[k % len(eligible)])
    res = sim.result()  # raises if a request is lost (accounting)
    assert all(v == 1 for v in inv.completions.values()), "a request completed twice"
    # repairs bring every GPU back, so every request finishes
    assert len(inv.completions) == n and not np.isnan(res.records["finish_s"]).any()
    assert (res.records["finish_s"] >= res.records["arrival_s"]).all()
    assert _steps_on_stopped_workers(sim.trace) == []
    inv.check_pool()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(st.tuples(st.floats(0, 30), st.floats(0, 1.5), st.integers(0, 7)), min_size=1, max_size=4),
       events=st.lists(event, max_size=2), seed=st.integers(0, 5))
def test_operations_started_at_any_instant_never_strand_a_worker(ops, events, seed):
    # Operations start at arbitrary instants (controller windows), not only right after a routing
    # decision, each followed within 1.5 s by a GPU failure, so faults land in the drain, the
    # step-boundary sync (0.3 s), the switch (0.9 s) and the confirmation. At the end every worker
    # is ACTIVE, REBUILDING, stopped, or part of an operation still uncommitted: a worker left
    # DRAINING/SWITCHING by an aborted operation is out of service for good.
    rng = np.random.default_rng(seed)
    n = 40
    wl = make_workload([(float(t), int(L), None) for t, L in zip(np.sort(rng.uniform(0, 40, n)), rng.integers(1, 60, n))])
    op_times = [t for t, _, _ in ops]
    events = [*events, *(FaultEvent("gpu_failure", t + dt, gpu=g) for t, dt, g in ops)]
    faults = FaultConfig(events=tuple(events), detection_delay_s=1.5, rebuild_s=2.0, repair_s=5.0)
    sim = Simulator(wl, SimConfig(pool=HETERO_POOL_2_NODES, seed=seed, faults=faults), CAL)
    inv = Invariants(sim)
    reconf = get_reconfigurator(sim, ReconfigConfig(drain_sync_s=0.3))

    def start(k: int) -> None:
        eligible = reconf.eligible_operations()
        if eligible:
            reconf.apply(eligible[k % len(eligible)])

    for k, t in enumerate(op_times):
        sim.schedule(t, EventPriority.CONTROL, start, k)
    res = sim.run(LeastWorkRouter())
    assert all(v == 1 for v in inv.completions.values()), "a request completed twice"
    assert len(inv.completions) == n and not np.isnan(res.records["finish_s"]).any()
    busy = {wid for rec in reconf.uncommitted() for wid in (*rec.old_worker_ids, *rec.new_worker_ids)}
    for w in sim.workers.values():
        assert (w.state in (WorkerState.ACTIVE, WorkerState.REBUILDING) or w.stopped
                or w.worker_id in busy), f"{w} stranded at {sim.env.now} s"
    inv.check_pool()
