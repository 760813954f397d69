"""Synthetic generators: determinism, prefix consistency, statistics; arrival processes; registry."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_prefix_consistent, assert_prefix_consistent_pairwise
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envs.workloads import (
    WORKLOADS,
    BlockHasher,
    GammaArrivals,
    InhomogeneousPoissonArrivals,
    MMPPArrivals,
    PoissonArrivals,
    TruncatedLogNormal,
    get_workload,
    inter_arrival_cv,
    long_document_questions,
    mixed_workload,
    multi_turn_sessions,
    phase_changes,
    system_prompt_requests,
    tool_agent_sessions,
    windows,
    workload_stats,
)

# small, fast configurations of every generator (seed is passed separately)
SMALL = {
    "system_prompts": lambda seed: system_prompt_requests(duration_s=20.0, arrivals=PoissonArrivals(20.0), seed=seed),
    "multi_turn": lambda seed: multi_turn_sessions(duration_s=60.0, session_arrivals=PoissonArrivals(2.0),
                                                   num_system_prompts=2, seed=seed),
    "tool_agent": lambda seed: tool_agent_sessions(duration_s=30.0, session_arrivals=PoissonArrivals(1.0), seed=seed),
    "tool_agent_full_history": lambda seed: tool_agent_sessions(duration_s=60.0, session_arrivals=PoissonArrivals(1.0),
                                                                history_window_steps=None, max_prompt_tokens=20000,
                                                                seed=seed),
    "tool_agent_w3": lambda seed: tool_agent_sessions(duration_s=30.0, session_arrivals=PoissonArrivals(1.0),
                                                      history_window_steps=3, seed=seed),
    "long_documents": lambda seed: long_document_questions(duration_s=30.0, doc_arrivals=PoissonArrivals(1.0), seed=seed),
    "phases": lambda seed: phase_changes(num_phases=3, phase_duration_s=10.0, short_phase_rate_rps=20.0,
                                         long_phase_rate_rps=5.0, rising_rate=True, seed=seed),
    "mixed": lambda seed: mixed_workload(duration_s=15.0, system_prompt_rate_rps=5.0, multi_turn_session_rate=1.0,
                                         long_document_rate=0.5, tool_agent_session_rate=0.5, seed=seed),
}


@pytest.mark.parametrize("gen", sorted(SMALL))
def test_deterministic_and_seed_dependent(gen):
    a, b, c = SMALL[gen](7), SMALL[gen](7), SMALL[gen](8)
    assert a.num_requests > 5
    assert a == b  # same seed -> identical workload (name, requests, block size, source)
    assert a.requests != c.requests
    assert_prefix_consistent(a)
    assert all(0.0 <= r.arrival_time_s for r in a.requests)


@pytest.mark.parametrize("gen", sorted(SMALL))
def test_no_global_rng_use(gen):
    state = np.random.get_state()
    SMALL[gen](1)
    after = np.random.get_state()
    assert state[0] == after[0] and np.array_equal(state[1], after[1]) and state[2:] == after[2:]


@pytest.mark.parametrize("gen", sorted(SMALL))
@pytest.mark.parametrize("seed", [None, -1, 1.5, True, "3"])
def test_seed_that_is_not_a_non_negative_integer_is_refused(gen, seed):
    # seed=None drew fresh OS entropy: a different workload on every call
    with pytest.raises(ValueError, match="seed must be an integer >= 0 or a numpy.random.SeedSequence"):
        SMALL[gen](seed)


def test_numpy_integer_and_seed_sequence_seeds_are_accepted():
    assert SMALL["phases"](np.int64(7)) == SMALL["phases"](7)
    assert SMALL["phases"](np.random.SeedSequence(7)).requests == SMALL["phases"](np.random.SeedSequence(7)).requests


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    gen=st.sampled_from(sorted(SMALL)),
    seed=st.integers(0, 2**32 - 1),
)
def test_generators_prefix_consistent_property(gen, seed):
    w = SMALL[gen](seed)
    assert_prefix_consistent_pairwise(w)
    # and hashes are really shared (the property is not vacuous)
    assert len({h for r in w.requests for h in r.block_hashes}) < sum(len(r.block_hashes) for r in w.requests)


@settings(max_examples=60, deadline=None)
@given(
    block=st.integers(1, 6),
    seg_lengths=st.lists(st.integers(1, 9), min_size=1, max_size=5),
    prompts=st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=5), min_size=1, max_size=8),
)
def test_prompt_context_hash_iff_same_prefix(block, seg_lengths, prompts):
    """Property: two blocks at position k have equal hashes iff the prompts agree on tokens [0, end of block k)."""
    hasher = BlockHasher(block)
    seg_ids = [hasher.new_segment_id() for _ in seg_lengths]
    rows = []
    for p in prompts:
        ctx = hasher.context()
        tokens = []
        for i, j in enumerate(p):
            s = j % len(seg_lengths)
            ctx.append(seg_ids[s], seg_lengths[s])
            tokens += [(s, t) for t in range(seg_lengths[s])]
            if i % 2 == 0:
                ctx.block_hashes()  # interleave incremental hashing with appends
        hashes = ctx.block_hashes()
        assert len(hashes) == -(-len(tokens) // block)
        rows.append((hashes, tokens))
    for ha, ta in rows:
        for hb, tb in rows:
            for k in range(min(len(ha), len(hb))):
                same = ta[: (k + 1) * block] == tb[: (k + 1) * block]
                assert (ha[k] == hb[k]) == same
                if ha[k] == hb[k]:
                    assert ha[:k] == hb[:k]


def test_fork_does_not_change_parent():
    h = BlockHasher(4)
    base = h.context()
    base.append_new(10)
    before = base.block_hashes()
    child = base.fork()
    child.append_new(7)
    assert child.block_hashes()[:2] == before[:2]
    assert base.block_hashes() == before and base.num_tokens == 10


def test_multi_turn_extends_previous_turn():
    w = multi_turn_sessions(duration_s=120.0, session_arrivals=PoissonArrivals(1.0), seed=3)
    by_session: dict[int, list] = {}
    for r in w.requests:
        assert r.session_id >= 0
        by_session.setdefault(r.session_id, []).append(r)
    assert any(len(v) >= 3 for v in by_session.values())
    bs = w.kv_block_size_tokens
    for turns in by_session.values():
        for prev, cur in zip(turns, turns[1:]):
            assert cur.num_prompt_tokens > prev.num_prompt_tokens + prev.num_output_tokens
            full = prev.num_prompt_tokens // bs
            assert cur.block_hashes[:full] == prev.block_hashes[:full]


def test_system_prompts_shared():
    w = system_prompt_requests(duration_s=10.0, arrivals=PoissonArrivals(30.0), seed=0)
    sp = w.metadata["system_prompt_tokens"]
    groups: dict[int, set] = {}
    for r, k in zip(w.requests, w.metadata["system_prompt_of_request"]):
        groups.setdefault(k, set()).add(r.block_hashes[: sp[k] // w.kv_block_size_tokens])
    assert all(len(g) == 1 for g in groups.values())
    assert all(1500 <= n <= 6000 for n in sp)


def test_tool_agent_sessions_live_minutes_on_few_shared_prefixes():
    """Paper §9 Tool-Agent: tool definitions / system prompts shared across sessions living minutes."""
    w = tool_agent_sessions(duration_s=900.0, session_arrivals=PoissonArrivals(0.5), seed=3)
    by_session: dict[int, list] = {}
    for r in w.requests:
        by_session.setdefault(r.session_id, []).append(r)
    # sessions fully inside the window (started after t = 0 and before the last 10 minutes)
    lifetimes = [v[-1].arrival_time_s - v[0].arrival_time_s for v in by_session.values()
                 if v[0].arrival_time_s > 60.0 and v[0].arrival_time_s < 300.0]
    assert float(np.mean(lifetimes)) >= 90.0  # minutes, not one 20 s scan
    agent_tokens = w.metadata["agent_prompt_tokens"]
    assert len(agent_tokens) == 8
    # every call starts with its session's shared agent prompt: the first full blocks of the
    # agent prompt are identical across the sessions that chose it
    first_block_by_prompt: dict[int, set] = {}
    for sid, reqs in by_session.items():
        k = w.metadata["agent_prompt_of_session"][sid]
        first_block_by_prompt.setdefault(k, set()).update(r.block_hashes[0] for r in reqs)
    assert all(len(v) == 1 for v in first_block_by_prompt.values())
    assert len(set().union(*first_block_by_prompt.values())) == len(first_block_by_prompt) <= 8


def test_tool_agent_warm_start_is_steady_and_cold_start_ramps():
    warm = tool_agent_sessions(duration_s=240.0, session_arrivals=PoissonArrivals(1.0), seed=5)
    cold = tool_agent_sessions(duration_s=240.0, session_arrivals=PoissonArrivals(1.0), warm_start_s=0.0, seed=5)
    for wl in (warm, cold):
        assert min(r.arrival_time_s for r in wl.requests) >= 0.0

    def first_to_last_quarter(wl):
        t = np.array([r.arrival_time_s for r in wl.requests])
        return np.sum(t < 60.0) / np.sum(t >= 180.0)
    assert first_to_last_quarter(warm) > 0.8
    assert first_to_last_quarter(cold) < 0.6
    with pytest.raises(ValueError, match="warm_start_s"):
        tool_agent_sessions(warm_start_s=-1.0)


def test_tool_agent_reuse_plausible():
    """Mooncake FAST'25 Table 2, tool&agent: average input 8,596, average output 182, cache ratio 59 %."""
    w = tool_agent_sessions(duration_s=120.0, session_arrivals=PoissonArrivals(6.0), seed=11)
    s = workload_stats(w)
    assert 0.50 <= s["ideal_reuse_fraction"] <= 0.68
    assert 7_000 <= s["input_mean_tokens"] <= 10_500
    assert 150 <= s["output_mean_tokens"] <= 215
    # seconds-scale reuse: consecutive calls of a session a few seconds apart (decode + tool)
    by_session: dict[int, list[float]] = {}
    for r in w.requests:
        by_session.setdefault(r.session_id, []).append(r.arrival_time_s)
    gaps = np.concatenate([np.diff(v) for v in by_session.values() if len(v) > 1])
    assert 4.0 <= float(np.median(gaps)) <= 8.0
    full = workload_stats(tool_agent_sessions(duration_s=120.0, session_arrivals=PoissonArrivals(3.0),
                                              history_window_steps=None, seed=11))
    assert full["ideal_reuse_fraction"] > s["ideal_reuse_fraction"] + 0.1
    assert all(r.num_prompt_tokens <= 65536 for r in w.requests)


def test_long_documents_match_leval_stats():
    w = long_document_questions(duration_s=300.0, doc_arrivals=PoissonArrivals(3.0), seed=5)
    s = workload_stats(w)
    # SOURCES.md (derived L-Eval lengths): mean 10,174, p50 6,962, p90 20,206
    assert 8_500 <= s["input_mean_tokens"] <= 12_000
    assert 6_000 <= s["input_p50_tokens"] <= 8_000
    assert 16_000 <= s["input_p90_tokens"] <= 24_000
    assert s["input_min_tokens"] >= 5_000 and s["input_max_tokens"] <= 61_024
    # questions per document (mean 7, L-Eval: 2,074 / 299 = 6.9); short gaps so few sessions are cut by the end
    quick = long_document_questions(duration_s=300.0, doc_arrivals=PoissonArrivals(1.0),
                                    question_gap_s=TruncatedLogNormal(1.0, 0.1, 0.5, 2.0), seed=5)
    assert workload_stats(quick)["num_requests"] / workload_stats(quick)["num_sessions"] == pytest.approx(7.0, rel=0.25)


def test_phase_changes_alternate():
    w = phase_changes(num_phases=4, phase_duration_s=30.0, seed=2)
    assert w.metadata["phase_kinds"] == ["short", "long", "short", "long"]
    eps = windows(w, 30.0)
    means = [workload_stats(e)["input_mean_tokens"] for e in eps]
    assert means[1] > 3 * means[0] and means[3] > 3 * means[2]
    rising = phase_changes(num_phases=2, phase_duration_s=60.0, rising_rate=True, seed=2)
    t = np.array([r.arrival_time_s for r in rising.requests])
    first_half = np.sum(t % 60.0 < 30.0)
    assert np.sum(t % 60.0 >= 30.0) > 1.5 * first_half  # rate ramps 0.5x -> 1.5x within each phase
    with pytest.raises(ValueError):
        phase_changes(first_phase="medium")


# --------------------------------------------------------------------------------------------
# arrival processes


def test_poisson_rate_and_cv():
    t = PoissonArrivals(50.0).sample(200.0, np.random.default_rng(0))
    assert t.size / 200.0 == pytest.approx(50.0, rel=0.03)
    assert inter_arrival_cv(t) == pytest.approx(1.0, abs=0.05)
    assert np.all(np.diff(t) >= 0) and t[-1] < 200.0


def test_gamma_is_bursty():
    t = GammaArrivals(20.0, cv=3.0).sample(2000.0, np.random.default_rng(1))
    assert t.size / 2000.0 == pytest.approx(20.0, rel=0.1)
    assert inter_arrival_cv(t) == pytest.approx(3.0, rel=0.15)


def test_mmpp_mean_rate():
    p = MMPPArrivals((2.0, 20.0), (60.0, 10.0))
    t = p.sample(20_000.0, np.random.default_rng(2))
    assert t.size / 20_000.0 == pytest.approx(p.mean_rate_rps, rel=0.1)
    assert inter_arrival_cv(t) > 1.2


def test_inhomogeneous_poisson():
    p = InhomogeneousPoissonArrivals(lambda t: 10.0 * t / 100.0, 10.0)
    t = p.sample(100.0, np.random.default_rng(3))
    assert np.sum(t >= 50) > 2 * np.sum(t < 50)
    with pytest.raises(ValueError):
        InhomogeneousPoissonArrivals(lambda t: 20.0 + 0 * t, 10.0).sample(10.0, np.random.default_rng(0))


@pytest.mark.parametrize(
    "make",
    [
        lambda: PoissonArrivals(0.0),
        lambda: PoissonArrivals(float("nan")),
        lambda: GammaArrivals(1.0, cv=0.0),
        lambda: MMPPArrivals((1.0,), (1.0, 2.0)),
        lambda: TruncatedLogNormal(100.0, 1.0, 10.0, 5.0),
        lambda: PoissonArrivals(1.0).sample(0.0, np.random.default_rng(0)),
        lambda: system_prompt_requests(duration_s=-1.0),
        lambda: multi_turn_sessions(mean_turns=0.5),
        lambda: tool_agent_sessions(mean_calls=0.0),
        lambda: long_document_questions(max_questions_per_doc=0),
        lambda: mixed_workload(component_overrides={"nope": {}}),
    ],
)
def test_invalid_arguments(make):
    with pytest.raises(ValueError):
        make()


# --------------------------------------------------------------------------------------------
# registry


def test_registry_names():
    for name in ["mixed-default", "tool-agent", "leval-like", "phases", "multi-turn", "system-prompts"]:
        assert name in WORKLOADS and WORKLOADS[name].__doc__
    with pytest.raises(ValueError) as ei:
        get_workload("nope")
    for name in WORKLOADS:
        assert name in str(ei.value)
    with pytest.raises(ValueError, match="unknown parameter"):
        get_workload("tool-agent", rate=3)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_registry_short_runs(name):
    short = {"phases": {"phase_duration_s": 5.0}}.get(name, {"duration_s": 5.0})
    a = get_workload(name, seed=4, **short)
    assert a.num_requests > 0 and a.name == name
    assert a == get_workload(name, seed=4, **short)
    assert a.requests != get_workload(name, seed=5, **short).requests
    assert_prefix_consistent(a)


def test_mixed_default_sizing():
    """5 min of ~50 req/s, prompts ~500..~64k; on the default pool it loads but does not saturate."""
    from baselines.runner import run_policy
    from envs.metrics import summarize
    from envs.sim import SimConfig

    w = get_workload("mixed-default")
    s = workload_stats(w)
    assert 290.0 <= s["duration_s"] <= 300.0
    assert 40 <= s["mean_rate_rps"] <= 60
    assert s["input_min_tokens"] >= 400 and 30_000 <= s["input_max_tokens"] <= 65_536
    assert set(w.metadata["source_index"]) == {0, 1, 2, 3}
    assert_prefix_consistent(w)
    summary = summarize(run_policy("least-work", w, SimConfig()))
    assert summary["num_unfinished"] == 0
    assert 0.5 <= summary["utilization"] <= 0.95


@pytest.mark.parametrize("param, value, expected", [("duration_s", "abc", "duration_s must be a number"),
                                                    ("num_system_prompts", "x", "num_system_prompts must be a number"),
                                                    ("rising_rate", 3, "rising_rate must be true or false")])
def test_registry_override_of_the_wrong_type_names_the_parameter(param, value, expected):
    name = "phases" if param in ("rising_rate", "num_system_prompts") else "tool-agent"
    with pytest.raises(ValueError, match=f"workload '{name}': parameter {expected}, got"):
        get_workload(name, **{param: value})


def test_value_checks_name_the_field_for_non_numbers():
    from envs.workloads.synthetic import _check_count, _check_positive

    with pytest.raises(ValueError, match="duration_s must be a finite number > 0, got 'abc'"):
        _check_positive("duration_s", "abc")
    with pytest.raises(ValueError, match="num_docs must be an integer >= 1, got 'x'"):
        _check_count("num_docs", "x")


# ---------------------------------------------------------------- matched-load reconfiguration scenarios
def _max_load_fraction(w) -> float:
    """The largest measured arrival rate of any phase, relative to that phase's capacity."""
    import numpy as np

    m = w.metadata
    bounds = np.asarray(m["phase_boundaries_s"])
    t = np.array([r.arrival_time_s for r in w.requests])
    worst = 0.0
    for i, cap in enumerate(m["phase_capacity_rps"]):
        lo, hi = bounds[i], bounds[i + 1]
        n = np.sum((t >= lo) & (t < hi))
        worst = max(worst, n / (hi - lo) / cap)
    return worst


def test_matched_load_phases_is_deterministic_per_seed_and_differs_across_seeds():
    a = get_workload("matched-phases", seed=3)
    b = get_workload("matched-phases", seed=3)
    c = get_workload("matched-phases", seed=4)
    key = lambda w: [(r.arrival_time_s, r.num_prompt_tokens) for r in w.requests]  # noqa: E731
    assert key(a) == key(b) and a.metadata["phase_boundaries_s"] == b.metadata["phase_boundaries_s"]
    assert key(a) != key(c)
    assert a.metadata["phase_boundaries_s"] != c.metadata["phase_boundaries_s"]


def test_matched_load_phases_stays_below_capacity_with_alternating_mixes():
    import numpy as np

    from envs.workloads import matched_load_phases, mixed_capacity_rps

    scenarios = set()
    for seed in range(8):
        w = matched_load_phases(seed=seed, load_fraction_range=(0.5, 0.9), phase_duration_s_range=(60.0, 90.0))
        m = w.metadata
        scenarios.add(m["scenario"])
        loads = np.asarray(m["phase_load_fraction"])
        assert loads.min() >= 0.5 - 1e-9 and loads.max() <= 0.9 + 1e-9
        assert _max_load_fraction(w) < 1.0  # measured phase rates stay below the mix's capacity
        kinds = m["phase_kinds"]
        assert all(x != y for x, y in zip(kinds, kinds[1:]))  # short- and long-heavy alternate
        lf = np.asarray(m["phase_long_fraction"])
        for k, f in zip(kinds, lf):
            assert (0.0 <= f <= 0.1) if k == "short" else (0.4 <= f <= 0.7)
        np.testing.assert_allclose(m["phase_capacity_rps"], mixed_capacity_rps(lf))
        if m["scenario"] == "rising":
            assert np.all(np.diff(loads[:, 0]) > 0)
    assert scenarios == {"alternating", "rising"}


def test_matched_load_phases_duration_rescales_the_phases():
    w = get_workload("matched-phases", seed=2, duration_s=90.0)
    assert w.metadata["phase_boundaries_s"][-1] == pytest.approx(90.0)
    assert max(r.arrival_time_s for r in w.requests) < 90.0


@pytest.mark.parametrize("kw", [{"load_fraction_range": (0.5, 1.0)}, {"scenario": "ramp"},
                                {"num_phases_range": (4, 2)}, {"capacity_long_rps": 0.0}])
def test_matched_load_phases_rejects_saturating_or_bad_parameters(kw):
    from envs.workloads import matched_load_phases

    with pytest.raises(ValueError, match=next(iter(kw))):
        matched_load_phases(seed=0, **kw)
