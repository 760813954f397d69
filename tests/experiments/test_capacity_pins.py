"""Pins of every capacity search (envs/planning/capacity_search.py): each caller's probes and result
on a tiny workload, captured on the code before the five searches were merged into one module
(issue #38 item 3), must stay exactly the same (same probes in the same order, same floats)."""

import pytest

from tests.experiments import capacity_pin_cases as cases
from tests.factories import RECONFIG_POOL, tiny_trace

# captured on 082a31e (before the merge), by running each case of capacity_pin_cases.py
PINNED = {'sustainable_slo': (1.9820118583378685,
                     1.9820118583378685,
                     ((0.8333333333333334, 0.8333333333333334, 1.0, True),
                      (1.6666666666666667, 1.666666666666667, 1.0, True),
                      (3.3333333333333335, 3.333333333333334, 3.359988641118769, False),
                      (2.3570226039551585, 2.3570226039551585, 4.117739900281687, False),
                      (1.9820118583378685, 1.9820118583378685, 0.9999999999999998, True),
                      (2.161399257751683, 2.161399257751683, 3.9432231090634553, False),
                      (2.0697630201224735, 2.0697630201224735, 3.077972937319466, False))),
 'sustainable_slo_tight': (1.9820118583378685,
                           ((0.8333333333333334, 1.0, True),
                            (1.6666666666666667, 1.0, True),
                            (3.3333333333333335, 0.008333333333333333, False),
                            (2.3570226039551585, 0.008333333333333333, False),
                            (1.9820118583378685, 1.0, True),
                            (2.161399257751683, 0.008333333333333333, False),
                            (2.0697630201224735, 0.008333333333333333, False))),
 'profiled_slo_per_degree': (((2, 6.198422180009019, 1.0), (4, 10.315432347475408, 1.0)), 10),
 'profiled_slo_per_degree_ttft': (((2, 6.198422180009019, 0.0), (4, 8.940041367812022, 0.0)), 10),
 'protocol_queueing_delay': (69.79249489057649,
                             ((0.25, 0.0, True),
                              (2048.0, 1.7883364833502018, False),
                              (22.627416997969522, 0.00018896284842694354, True),
                              (215.26948230495094, 0.40829070013277263, False),
                              (69.79249489057649, 0.003585100233516865, True))),
 'fault_drain_time': (41.5,
                      ((34.0, 0.024881420185520753, True),
                       (49.0, 0.026687107187420622, False),
                       (41.5, 0.025947428174593945, True))),
 'kv_tiers_queueing_delay': (112.0,
                             ((4.0, True),
                              (8.0, True),
                              (16.0, True),
                              (32.0, True),
                              (64.0, True),
                              (128.0, False),
                              (96.0, True),
                              (112.0, True))),
 'kv_tiers_queueing_delay_from_above': (15.625,
                                        ((1000.0, False), (15.625, True), (507.8125, False), (261.71875, False)))}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_capacity_search_keeps_its_pinned_probes_and_result(name, tmp_path):
    case = getattr(cases, name)
    got = case(tmp_path) if case.__code__.co_argcount else case()
    assert got == PINNED[name]


def test_protocol_capacity_refuses_an_overloaded_low_end(tmp_path):
    from envs import workloads
    from envs.sim import SimConfig
    from policies.routing.protocol import capacity_rps

    base = workloads.load_trace(tiny_trace(tmp_path / "p.jsonl", num_requests=100))
    with pytest.raises(ValueError, match=r"^capacity: 5000.0 requests/s is already overloaded under least-work$"):
        capacity_rps(lambda r: workloads.scale_to_rate(base, r), SimConfig(pool=RECONFIG_POOL), "least-work",
                     low_rps=5000.0, high_rps=6000.0, max_queueing_delay_s=0.001)


def test_kv_tiers_capacity_refuses_a_pool_that_never_drains(tmp_path):
    from envs.sim import SimConfig
    from experiments.kv_tiers import estimate_capacity_rps

    trace_k = tiny_trace(tmp_path / "k.jsonl", num_requests=200)
    with pytest.raises(ValueError, match=r"^least-work does not drain the window even at 15.625 requests/s$"):
        estimate_capacity_rps(str(trace_k), SimConfig(pool=RECONFIG_POOL), "least-work",
                              (0.0, 10.0), start_rps=1000.0, queue_delay_bound_s=1e-6, iterations=2)


def test_policy_capacity_refuses_a_pool_it_cannot_overload():
    from baselines.capacity import CapacityDefinition, RatedWorkload, find_capacity

    cal, cfg, wl = cases.single_worker()
    with pytest.raises(ValueError, match=r"^no overloaded rate up to 1.66667x the native rate; is the pool too large"):
        find_capacity("least-work", RatedWorkload(arrival_window_length_s=120.0, base=wl), cfg, cal,
                      CapacityDefinition(rel_tol=0.05, max_bracket_steps=1, drain_ratio=1e9))
