"""The one capacity module (envs/planning/capacity_definitions.py): the rate search on a known
threshold, the registry of named definitions, and the callers' defaults matching it."""

import inspect
import math

import pytest

from envs.planning.capacity_definitions import (
    CAPACITY_DEFINITIONS,
    CapacityBracketError,
    CapacityDefinition,
    FaultDrainDefinition,
    KVTiersQueueingDefinition,
    ProfiledSLODefinition,
    ProtocolQueueingDefinition,
    RateSearch,
    search_capacity,
)


def _threshold(capacity: float):
    """``ok`` accepting rates up to ``capacity``, and the probes it saw."""
    probes = []

    def ok(rate: float) -> bool:
        probes.append(rate)
        return rate <= capacity

    return ok, probes


def test_registry_names_every_definition_once():
    assert list(CAPACITY_DEFINITIONS) == ["sustainable-slo", "profiled-slo-per-degree", "protocol-queueing-delay",
                                          "fault-drain-time", "kv-tiers-queueing-delay"]
    for name, d in CAPACITY_DEFINITIONS.items():
        assert d.name == name and isinstance(d.search, RateSearch)
        doc = inspect.getdoc(type(d))
        assert doc.startswith(f"``{name}``") and "Criterion" in doc and "Search" in doc


def test_doubling_then_geometric_bisection_to_a_relative_tolerance():
    ok, probes = _threshold(10.0)
    lo, hi = search_capacity(ok, RateSearch("doubling", "geometric", rel_tol=0.01, max_doublings=24), 1.0)
    assert probes[:5] == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert lo <= 10.0 < hi and hi / lo - 1.0 <= 0.01 and lo == max(p for p in probes if p <= 10.0)
    assert probes[5] == math.sqrt(8.0 * 16.0)  # geometric midpoint of the bracket [8, 16]


def test_doubling_start_that_fails():
    ok, probes = _threshold(0.5)
    assert search_capacity(ok, RateSearch("doubling", "geometric", rel_tol=0.01), 1.0) == (0.0, 1.0)
    assert probes == [1.0]  # capacity 0: no bisection below a failing start
    ok, probes = _threshold(0.5)
    lo, hi = search_capacity(ok, RateSearch("doubling", "arithmetic", num_steps=2, fallback_divisor=64.0), 1.0)
    assert probes == [1.0, 1.0 / 64, (1.0 / 64 + 1.0) / 2, (1.0 / 64 + probes[2]) / 2]
    with pytest.raises(CapacityBracketError) as exc:
        search_capacity(_threshold(0.001)[0], RateSearch("doubling", "arithmetic", num_steps=2, fallback_divisor=64.0), 1.0)
    assert (exc.value.end, exc.value.rate) == ("low", 1.0 / 64)


def test_doubling_gives_up_after_max_doublings():
    with pytest.raises(CapacityBracketError) as exc:
        search_capacity(_threshold(math.inf)[0], RateSearch("doubling", "geometric", rel_tol=0.01, max_doublings=3), 1.0)
    assert (exc.value.end, exc.value.rate) == ("high", 8.0)


def test_checked_and_given_brackets():
    ok, probes = _threshold(100.0)
    assert search_capacity(ok, RateSearch("checked", "geometric", num_steps=7), 1.0, 64.0) == (64.0, 64.0)
    assert probes == [1.0, 64.0]  # a passing high end is the capacity
    with pytest.raises(CapacityBracketError) as exc:
        search_capacity(_threshold(0.5)[0], RateSearch("checked", "geometric", num_steps=7), 1.0, 64.0)
    assert exc.value.end == "low"
    ok, probes = _threshold(3.0)
    lo, hi = search_capacity(ok, RateSearch("given", "arithmetic", num_steps=3), 0.0, 8.0)
    assert probes == [4.0, 2.0, 3.0] and (lo, hi) == (3.0, 4.0)  # neither end probed


@pytest.mark.parametrize("kw, match", [
    ({"bracket": "halving", "midpoint": "geometric", "num_steps": 1}, "search.bracket"),
    ({"bracket": "given", "midpoint": "harmonic", "num_steps": 1}, "search.midpoint"),
    ({"bracket": "given", "midpoint": "geometric"}, "num_steps or rel_tol"),
    ({"bracket": "doubling", "midpoint": "geometric", "rel_tol": 0.0}, "search.rel_tol"),
    ({"bracket": "doubling", "midpoint": "geometric", "num_steps": 1, "fallback_divisor": 1.0}, "fallback_divisor"),
])
def test_rate_search_rejects_bad_settings(kw, match):
    with pytest.raises(ValueError, match=match):
        RateSearch(**kw)


def test_profiled_criterion_falls_back_to_mean_ttft_without_zero_load_attainment():
    d = ProfiledSLODefinition()
    assert d.accepts(0.9, 99.0, 1.0, 1.0) and not d.accepts(0.89, 0.0, 1.0, 1.0)
    assert d.accepts(0.0, 2.0, 0.0, 1.0) and not d.accepts(1.0, 2.01, 0.0, 1.0)


def test_callers_build_the_registered_definitions_at_their_defaults():
    """Each caller's own defaults are those of its registered definition (the registry's
    thresholds are the numbers the callers use)."""
    from baselines.capacity import find_capacity
    from envs.planning.capacity import ProfileConfig
    from experiments.faults import FaultExperimentSpec
    from experiments.kv_tiers import estimate_capacity_rps
    from policies.routing.protocol import capacity_rps

    assert inspect.signature(find_capacity).parameters["definition"].default == CAPACITY_DEFINITIONS["sustainable-slo"]
    assert ProfileConfig().definition == CAPACITY_DEFINITIONS["profiled-slo-per-degree"]
    p = inspect.signature(capacity_rps).parameters
    assert ProtocolQueueingDefinition(p["max_queueing_delay_s"].default, p["num_iterations"].default) == \
        CAPACITY_DEFINITIONS["protocol-queueing-delay"]
    f = {k: v.default for k, v in inspect.signature(FaultExperimentSpec).parameters.items()}
    assert FaultDrainDefinition(f["capacity_drain_s"], f["capacity_iterations"]) == CAPACITY_DEFINITIONS["fault-drain-time"]
    k = inspect.signature(estimate_capacity_rps).parameters
    assert KVTiersQueueingDefinition(k["queue_delay_bound_s"].default, k["iterations"].default) == \
        CAPACITY_DEFINITIONS["kv-tiers-queueing-delay"]
    assert isinstance(CAPACITY_DEFINITIONS["sustainable-slo"], CapacityDefinition)
