"""Fault injection and recovery (envs/sim/faults.py): exact timelines, loading, metrics."""

import math

import numpy as np
import pytest

from baselines.simple import RoundRobinRouter
from envs.sim import PoolConfig, SimConfig, Simulator
from envs.sim.fault_config import LLAMA3_GPU_FAILURE_RATE_PER_GPU_HOUR, FaultConfig, FaultEvent, load_fault_config
from envs.sim.faults import decompose_span
from envs.sim.router import LeastWorkRouter
from envs.sim.worker import WorkerState
from tests.factories import make_workload

ONE_CP2 = PoolConfig(num_gpus=2, gpus_per_node=2, composition="cp2@0", supported_degrees=(1, 2))


def _names(trace, prefix=("fault", "stop", "detect", "repair", "rebuilt", "step_", "arrival")):
    return [(n, pytest.approx(t)) for n, t in trace if n.startswith(prefix)]


def test_single_worker_exact_recovery_timeline_and_recompute_cost(toy_cal):
    # E_C = 1 + 0.1 R / C. r0 (20 tokens) starts on the CP-2 worker at 0 (predicted 2 s); GPU 1
    # fails at 1.5: the step is lost after 1.5 s on 2 GPUs = 3.0 GPU s of recompute work.
    # r1 arrives at 2.0, before detection: the worker still looks ACTIVE, r1 waits on it.
    # Detection at 1.5 + 3 = 4.5: both requests are re-routed, GPU 0 is re-formed as CP-1@0,
    # REBUILDING for 10 s -> ACTIVE at 14.5 (epoch 1): r0 runs 1 + 0.1*20 = 3.0 s (14.5..17.5),
    # r1 1.4 s (17.5..18.9). GPU 1 is repaired at 4.5 + 5 = 9.5; it rejoins as CP-1@1, rebuilt
    # by 19.5 (epoch 2); r2 at 30 goes to the least-loaded worker.
    wl = make_workload([(0.0, 20, None), (2.0, 4, None), (30.0, 4, None)])
    faults = FaultConfig(events=(FaultEvent("gpu_failure", 1.5, gpu=1),), detection_delay_s=3.0, rebuild_s=10.0, repair_s=5.0)
    sim = Simulator(wl, SimConfig(pool=ONE_CP2, record_events=True, faults=faults), toy_cal)
    res = sim.run(LeastWorkRouter())
    assert _names(sim.trace) == [
        ("arrival:0", 0.0), ("step_start:w0:n1", 0.0), ("fault:gpu_failure:1", 1.5), ("stop:w0", 1.5),
        ("arrival:1", 2.0), ("detect:fault0", 4.5), ("repair:fault0", 9.5), ("rebuilt:fault0:epoch1", 14.5),
        ("step_start:w0:n1", 14.5), ("step_end:w0", 17.5), ("step_start:w0:n1", 17.5), ("step_end:w0", 18.9),
        ("rebuilt:fault0:epoch2", 19.5), ("arrival:2", 30.0), ("step_start:w0:n1", 30.0), ("step_end:w0", 31.4),
    ]
    f = res.extras["faults"][0]
    assert f["recompute_gpu_time_s"] == pytest.approx(3.0)
    assert res.extras["recompute_gpu_time_s"] == pytest.approx(3.0)
    assert (f["detected_s"], f["rebuilt_s"], f["repaired_s"], f["rejoined_s"]) == pytest.approx((4.5, 14.5, 9.5, 19.5))
    assert f["recovery_time_s"] == pytest.approx(13.0) and f["full_recovery_time_s"] == pytest.approx(18.0)
    assert res.extras["num_fault_affected_requests"] == 2
    assert res.records["num_routings"].tolist() == [2, 2, 1]
    assert res.records["finish_s"].tolist() == pytest.approx([17.5, 18.9, 31.4])
    assert res.records["first_dispatch_s"].tolist() == pytest.approx([0.0, 2.0, 30.0])
    # GPU time: the lost 3.0 GPU s plus the three steps on CP-1 workers
    assert res.gpu_time_s == pytest.approx(3.0 + 3.0 + 1.4 + 1.4)
    assert sorted((w.degree, w.first_gpu) for w in sim.workers.values()) == [(1, 0), (1, 1)]
    assert sim.epoch == 2
    assert res.extras["num_failed_gpus"] == 0 and res.extras["num_healthy_gpus"] == 2


def test_run_ends_when_work_is_done_even_if_repair_is_pending(toy_cal):
    wl = make_workload([(0.0, 20, None)])
    faults = FaultConfig(events=(FaultEvent("gpu_failure", 1.0, gpu=1),), detection_delay_s=1.0, rebuild_s=2.0)
    res = Simulator(wl, SimConfig(pool=ONE_CP2, faults=faults), toy_cal).run(RoundRobinRouter())
    # rebuilt at 4.0, runs 3.0 s on CP-1: the run ends at 7.0, not at the repair (3601 s)
    assert res.records["finish_s"][0] == pytest.approx(7.0)
    assert res.sim_time_s == pytest.approx(7.0)
    assert res.extras["num_failed_gpus"] == 1
    assert math.isnan(res.extras["faults"][0]["rejoined_s"])
    assert res.extras["recovery_time_s"] == pytest.approx(3.0)


def test_straggler_multiplies_steps_that_start_in_its_window(toy_cal):
    pool = PoolConfig(num_gpus=2, gpus_per_node=2, composition="cp1@0,cp1@1", supported_degrees=(1, 2))
    wl = make_workload([(0.0, 10, None), (0.5, 10, None), (5.0, 10, None)])
    faults = FaultConfig(events=(FaultEvent("straggler", 0.2, gpu=1, factor=3.0, duration_s=4.0),))
    res = Simulator(wl, SimConfig(pool=pool, faults=faults), toy_cal).run(RoundRobinRouter())
    # E_1 = 2.0 s. r0 on GPU 0 (normal), r1 on GPU 1 inside the window (x3), r2 on GPU 0 at 5.
    assert res.records["worker_id"].tolist() == [0, 1, 0]
    assert res.records["finish_s"].tolist() == pytest.approx([2.0, 0.5 + 6.0, 7.0])
    f = res.extras["faults"][0]
    assert f["num_affected_requests"] == 1 and f["recovery_time_s"] == pytest.approx(4.0)


def test_node_failure_stops_every_worker_of_the_node_and_reroutes(toy_cal):
    pool = PoolConfig(num_gpus=4, gpus_per_node=2, composition="cp2@0,cp2@2", supported_degrees=(1, 2))
    wl = make_workload([(0.0, 20, None), (0.1, 20, None), (0.2, 20, None)])
    faults = FaultConfig(events=(FaultEvent("node_failure", 0.5, node=0),), detection_delay_s=1.0, rebuild_s=1.0, repair_s=2.0)
    sim = Simulator(wl, SimConfig(pool=pool, faults=faults, record_events=True), toy_cal)
    res = sim.run(RoundRobinRouter())
    f = res.extras["faults"][0]
    assert f["gpus"] == [0, 1] and f["worker_ids"] == [0]
    assert f["num_rebuilt_workers"] == 0  # no survivor on the node
    # r0 ran 0..0.5 on the CP-2 worker of node 0: 1.0 GPU s lost
    assert f["recompute_gpu_time_s"] == pytest.approx(1.0)
    assert f["repaired_s"] == pytest.approx(3.5) and f["rejoined_s"] == pytest.approx(4.5)
    assert f["recovery_time_s"] == pytest.approx(1.0)  # no survivor: recovered as far as possible at detection
    assert f["full_recovery_time_s"] == pytest.approx(4.0)
    assert not np.isnan(res.records["finish_s"]).any()
    assert res.records["num_routings"][0] == 2


def test_fault_during_split_aborts_the_operation(toy_cal):
    from envs.sim.reconfig import Operation, get_reconfigurator

    pool = PoolConfig(num_gpus=4, gpus_per_node=4, composition="cp4@0", supported_degrees=(1, 2, 4))
    wl = make_workload([(0.0, 40, None), (0.1, 8, None), (20.0, 8, None)])
    faults = FaultConfig(events=(FaultEvent("gpu_failure", 0.5, gpu=3),), detection_delay_s=1.0, rebuild_s=1.0, repair_s=1.0)
    sim = Simulator(wl, SimConfig(pool=pool, faults=faults), toy_cal)
    r = get_reconfigurator(sim)
    router = RoundRobinRouter()
    router.reset(sim.view, sim.policy_rng)
    started = False
    while (req := sim.run_until_decision()) is not None:
        sim.decide(router.route(req, sim.view))
        if not started:
            r.apply(Operation.split(0))  # drains: waits for r0's step (0..2.0), the fault comes first
            started = True
    res = sim.result()
    op = res.extras["reconfig_operations"][0]
    assert op["aborted_s"] == pytest.approx(0.5) and math.isnan(op["commit_s"])
    assert res.extras["faults"][0]["aborted_operations"] == [0]
    assert not np.isnan(res.records["finish_s"]).any()
    # survivors re-formed as CP-2@0 + CP-1@2; the repaired GPU 3 rejoins as CP-1@3 (merging them
    # back is the controller's decision, not the recovery's)
    assert sorted((w.degree, w.first_gpu, w.state) for w in sim.workers.values()) == [
        (1, 2, WorkerState.ACTIVE), (1, 3, WorkerState.ACTIVE), (2, 0, WorkerState.ACTIVE)]


def test_fault_during_the_step_boundary_sync_leaves_the_surviving_sibling_active(toy_cal):
    # merge(0, 2) of two idle CP-2 workers: the drain ends at once, the switch would start after
    # drain_sync_s = 0.2 s. GPU 3 fails at 0.1, inside that sync: the merge aborts and worker 0
    # resumes. The switch-start event still fired at 0.2 and made worker 0 SWITCHING for good
    # (no switch end, no commit): two healthy GPUs out of service for the rest of the run.
    from envs.sim.reconfig import Operation, get_reconfigurator

    pool = PoolConfig(num_gpus=4, gpus_per_node=4, composition="cp2@0,cp2@2", supported_degrees=(1, 2, 4))
    wl = make_workload([(1.0, 8, None), (2.0, 8, None), (3.0, 8, None)])
    faults = FaultConfig(events=(FaultEvent("gpu_failure", 0.1, gpu=3),), detection_delay_s=1.0, rebuild_s=1.0, repair_s=100.0)
    sim = Simulator(wl, SimConfig(pool=pool, faults=faults), toy_cal)
    get_reconfigurator(sim).apply(Operation.merge(0, 2))
    res = sim.run(LeastWorkRouter())
    assert sim.workers[0].state == WorkerState.ACTIVE and sim.workers[0].degree == 2
    # r0 at 1.0 on worker 0 (E_2(8, 0) = 1.4 s), the only ACTIVE worker then
    assert res.records["worker_id"][0] == 0 and res.records["finish_s"][0] == pytest.approx(2.4)
    assert math.isnan(res.extras["reconfig_operations"][0]["drain_end_s"])


def test_decompose_span_uses_split_placement_rules():
    pool = PoolConfig(num_gpus=8, gpus_per_node=8, composition="cp8@0", supported_degrees=(2, 4, 8))
    assert decompose_span(pool, 0, 8, {3}) == [(2, 0), (4, 4)]  # GPU 2 has no valid group: a spare
    assert decompose_span(pool, 0, 8, set()) == [(8, 0)]
    assert decompose_span(pool, 4, 4, {4, 5, 6, 7}) == []


def test_empty_fault_config_is_byte_identical(toy_cal):
    from baselines.vertumnus import VertumnusRouter

    pool = PoolConfig(num_gpus=4, gpus_per_node=4, composition="cp2@0,cp1@2,cp1@3", supported_degrees=(1, 2))
    wl = make_workload([(0.1 * i, 5 + 7 * (i % 5), None) for i in range(40)])
    a = Simulator(wl, SimConfig(pool=pool, seed=3), toy_cal).run(VertumnusRouter())
    b = Simulator(wl, SimConfig(pool=pool, seed=3, faults=FaultConfig()), toy_cal).run(VertumnusRouter())
    for k in a.records:
        assert a.records[k].tobytes() == b.records[k].tobytes(), k
    assert a.sim_time_s == b.sim_time_s and a.gpu_time_s == b.gpu_time_s


def test_random_faults_are_seeded(toy_cal):
    pool = PoolConfig(num_gpus=4, gpus_per_node=2, composition="cp2@0,cp2@2", supported_degrees=(1, 2))
    wl = make_workload([(1.0 * i, 8, None) for i in range(200)])
    faults = FaultConfig(gpu_failure_rate_per_gpu_hour=10.0, straggler_rate_per_gpu_hour=10.0, detection_delay_s=1.0,
                         rebuild_s=2.0, repair_s=20.0)
    runs = [Simulator(wl, SimConfig(pool=pool, seed=s, faults=faults), toy_cal).run(LeastWorkRouter())
            for s in (1, 1, 2)]
    assert repr(runs[0].extras["faults"]) == repr(runs[1].extras["faults"])
    assert repr(runs[0].extras["faults"]) != repr(runs[2].extras["faults"])
    assert runs[0].extras["num_faults"] > 0
    assert 0 < LLAMA3_GPU_FAILURE_RATE_PER_GPU_HOUR < 1e-4


def test_event_outside_pool_is_rejected(toy_cal):
    wl = make_workload([(0.0, 8, None)])
    with pytest.raises(ValueError, match=r"events\[0\].*gpu 7 is outside the pool of 2 GPUs"):
        faults = FaultConfig(events=(FaultEvent("gpu_failure", 1.0, gpu=7),))
        Simulator(wl, SimConfig(pool=ONE_CP2, faults=faults), toy_cal)


def test_fault_schedule_of_random_processes_alone_needs_no_events(tmp_path):
    f = tmp_path / "f.yaml"
    f.write_text("gpu_failure_rate_per_gpu_hour: 0.5\n")  # '{}' is refused (no events, no random process)
    c = load_fault_config(f)
    assert c.events == () and c.has_random


def test_load_fault_config_yaml_and_json(tmp_path):
    y = tmp_path / "f.yaml"
    y.write_text("detection_delay_s: 10\nevents:\n  - {kind: gpu_failure, time_s: 5, gpu: 1}\n"
                 "  - {kind: straggler, time_s: 6, gpu: 0, factor: 2.5, duration_s: 30}\n")
    c = load_fault_config(y)
    assert c.detection_delay_s == 10 and c.events[1] == FaultEvent("straggler", 6, gpu=0, factor=2.5, duration_s=30)
    j = tmp_path / "f.json"
    j.write_text('{"events": [{"kind": "node_failure", "time_s": 1, "node": 0}]}')
    assert load_fault_config(j).events == (FaultEvent("node_failure", 1, node=0),)
    e = tmp_path / "empty.yaml"
    e.write_text("events: []\n")
    assert load_fault_config(e).is_empty


@pytest.mark.parametrize("text, match", [
    ("events:\n  - {kind: gpu_failure, time_s: 5}\n", r"f.yaml:2: events\[0\]: gpu: a gpu_failure needs a GPU index"),
    ("events:\n  - {kind: gpu_failure, time_s: 5, gpu: 1}\n  - {kind: meteor, time_s: 1}\n",
     r"f.yaml:3: events\[1\]: kind: expected one of"),
    ("events:\n  - {kind: straggler, time_s: 5, gpu: 1, factor: 0.5, duration_s: 3}\n", r"f.yaml:2: .*factor"),
    ("rebuild: 3\n", r"f.yaml:1: rebuild: unknown field"),
    ("{}\n", r"f.yaml:1: events: missing, and no random fault process is set; expected a mapping with 'events'"),
    ("rebuild_s: 3\n", r"f.yaml:1: events: missing, .*\(write 'events: \[\]' for a run without faults\)"),
    ("detection_delay_s: -1\n", r"f.yaml:1: faults.detection_delay_s: expected a finite number >= 0"),
    ("events:\n  - {kind: gpu_failure, time_s: 5, gpu: 1, colour: red}\n", r"f.yaml:2: events\[0\].colour: unknown field"),
    ("events: [\n", r"f.yaml:\d+: not valid YAML/JSON"),
    ("", r"f.yaml:1: the file has no fault schedule \(empty\)"),  # were a silently fault-free run
    # a second 'events' replaced the first without a word
    ("events:\n  - {kind: gpu_failure, time_s: 5, gpu: 1}\nevents:\n  - {kind: gpu_failure, time_s: 9, gpu: 2}\n",
     r"f.yaml:3:1: key 'events' given twice in one mapping \(first on line 1\); expected each key once"),
    ("events:\n  - {kind: gpu_failure, time_s: 5, gpu: 1, gpu: 3}\n", r"f.yaml:2:44: key 'gpu' given twice"),
    ("# no events yet\n", r"f.yaml:1: the file has no fault schedule \(empty\).*events: \[\]"),
    # the same fault listed twice was accepted without a word
    ("events:\n  - {kind: straggler, time_s: 5, gpu: 1, factor: 2, duration_s: 3}\n"
     "  - {kind: gpu_failure, time_s: 5, gpu: 2}\n  - {kind: straggler, time_s: 5.0, gpu: 1, factor: 2, duration_s: 3}\n",
     r"f.yaml:4: events\[2\]: repeats events\[0\] \(same kind, time, target and settings\); expected each fault once"),
])
def test_load_fault_config_errors_name_file_line_field(tmp_path, text, match):
    p = tmp_path / "f.yaml"
    p.write_text(text)
    with pytest.raises(ValueError, match=match):
        load_fault_config(p)


def test_link_failure_stalls_transfers():
    from envs.sim.links import KVLinks

    links = KVLinks(2)
    links.set_fault(("intra", 0), 1.0, 5.0, 0.0)
    links.set_fault(("out", 0), 0.0, 10.0, 0.5)
    assert links.reserve(2.0, 0, 0, 450_000_000_000) == pytest.approx((5.0, 6.0))
    assert links.reserve(0.0, 0, 1, 25_000_000_000) == pytest.approx((0.0, 2.0))


def test_run_policy_progress_counts_a_rerouted_request_once(toy_cal):
    """``cpgym simulate``'s progress: requests re-routed at fault detection (or by a
    reconfiguration) were counted again, so the bar ended past its total (``15003/?`` for
    ``vertumnus`` on the default workload)."""
    from baselines.runner import run_policy

    wl = make_workload([(0.0, 20, None), (2.0, 4, None), (30.0, 4, None)])
    faults = FaultConfig(events=(FaultEvent("gpu_failure", 1.5, gpu=1),), detection_delay_s=3.0, rebuild_s=10.0, repair_s=5.0)
    counted = []
    res = run_policy("least-work", wl, SimConfig(pool=ONE_CP2, faults=faults), toy_cal, progress=counted.append)
    assert res.records["num_routings"].tolist() == [2, 2, 1]  # two requests routed twice
    assert sum(counted) == wl.num_requests == 3


def test_fault_schedule_reads_exponent_numbers(tmp_path):
    """`time_s: 1e2` (a number in YAML 1.2 and JSON) was the string '1e2' to PyYAML and failed as
    "expected a finite number >= 0, got '1e2'"; a quoted "1e2" stays text."""
    from envs.sim.fault_config import load_fault_config

    p = tmp_path / "f.yaml"
    p.write_text("gpu_failure_rate_per_gpu_hour: 1e-3\nevents:\n  - {kind: gpu_failure, time_s: 1e2, gpu: 1}\n")
    cfg = load_fault_config(p)
    assert cfg.events[0].time_s == 100.0 and cfg.gpu_failure_rate_per_gpu_hour == 1e-3
    p.write_text('events:\n  - {kind: gpu_failure, time_s: "1e2", gpu: 1}\n')
    with pytest.raises(ValueError, match="time_s: expected a finite number >= 0, got '1e2'"):
        load_fault_config(p)
