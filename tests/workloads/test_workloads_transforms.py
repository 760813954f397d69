"""Workload transforms: rate scaling, windows, splits, episode windows, merge."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import assert_prefix_consistent

from envs.sim.request import Request, Workload
from envs.workloads import (
    load_trace,
    merge,
    scale_rate,
    scale_to_rate,
    split,
    window,
    windows,
)


def _toy(n=50, gap_s=1.0, name="toy", session=-1) -> Workload:
    reqs = tuple(Request(i, i * gap_s, 600 + i, 5, (i, 1000 + i), session) for i in range(n))
    return Workload(name, reqs, 512, "toy", {"x": 1})


@pytest.fixture(scope="module")
def conversation(traces_dir):
    return load_trace(traces_dir / "conversation_trace.jsonl")


def _same_content(a: Workload, b: Workload) -> bool:
    key = lambda r: (r.num_prompt_tokens, r.num_output_tokens, r.block_hashes, r.session_id)  # noqa: E731
    return [key(r) for r in a.requests] == [key(r) for r in b.requests]


@pytest.mark.parametrize("target_rps", [1.0, 10.0, 37.5])
def test_scale_to_rate(conversation, target_rps):
    w = scale_to_rate(conversation, target_rps)
    assert w.mean_rate_rps == pytest.approx(target_rps, rel=0.01)
    assert _same_content(w, conversation)
    assert [r.request_id for r in w.requests] == list(range(w.num_requests))
    assert conversation.mean_rate_rps == pytest.approx(3.40, abs=0.01)  # input unchanged


def test_scale_rate(conversation):
    w = scale_rate(conversation, 2.5)
    assert w.mean_rate_rps == pytest.approx(2.5 * conversation.mean_rate_rps, rel=0.01)
    assert w.duration_s == pytest.approx(conversation.duration_s / 2.5)
    assert _same_content(w, conversation)
    assert w.metadata["transforms"] == ["scale_rate(2.5)"]


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, "fast"])
def test_scale_invalid(bad):
    with pytest.raises(ValueError):
        scale_rate(_toy(), bad)
    with pytest.raises(ValueError):
        scale_to_rate(_toy(), bad)


def test_scale_to_rate_needs_a_rate():
    one = _toy(1)
    with pytest.raises(ValueError, match="no defined arrival rate"):
        scale_to_rate(one, 5.0)


def test_window():
    w = window(_toy(50), 10.0, 20.0)
    assert w.num_requests == 10
    assert [r.arrival_time_s for r in w.requests] == [float(i) for i in range(10)]
    assert [r.request_id for r in w.requests] == list(range(10))
    assert w.requests[0].num_prompt_tokens == 610
    assert w.metadata["window_start_s"] == 10.0 and w.metadata["x"] == 1
    assert window(_toy(50), 100.0, 200.0).num_requests == 0
    assert window(_toy(50), 45.5).num_requests == 4
    for a, b in [(5.0, 5.0), (5.0, 1.0), (math.nan, 3.0), (0.0, math.nan)]:
        with pytest.raises(ValueError):
            window(_toy(), a, b)


def test_split_by_fraction(conversation):
    train, ev = split(conversation, 0.2)
    assert train.num_requests + ev.num_requests == conversation.num_requests
    assert ev.num_requests == round(0.2 * conversation.num_requests)
    assert ev.requests[0].arrival_time_s == 0.0
    t_split = ev.metadata["split_time_s"]
    assert train.requests[-1].arrival_time_s <= t_split
    assert [r.block_hashes for r in train.requests + ev.requests] == [r.block_hashes for r in conversation.requests]
    assert [r.request_id for r in ev.requests] == list(range(ev.num_requests))


def test_split_by_time():
    train, ev = split(_toy(50), split_time_s=30.0)
    assert train.num_requests == 30 and ev.num_requests == 20
    assert ev.requests[0].arrival_time_s == 0.0 and ev.requests[0].num_prompt_tokens == 630


@pytest.mark.parametrize("kwargs", [{}, {"eval_fraction": 0.5, "split_time_s": 3.0}, {"eval_fraction": 0.0},
                                    {"eval_fraction": 1.0}, {"split_time_s": 0.0}, {"split_time_s": 1e9},
                                    {"eval_fraction": math.nan}])
def test_split_invalid(kwargs):
    with pytest.raises(ValueError):
        split(_toy(50), **kwargs)


def test_windows(conversation):
    eps = windows(conversation, 300.0)
    assert sum(e.num_requests for e in eps) == conversation.num_requests
    for e in eps:
        assert all(0.0 <= r.arrival_time_s < 300.0 for r in e.requests)
        assert [r.request_id for r in e.requests] == list(range(e.num_requests))
    assert [e.metadata["window_index"] for e in eps] == list(range(len(eps)))  # no empty windows here
    full = windows(conversation, 300.0, include_partial=False)
    assert len(full) == len(eps) - 1
    assert windows(_toy(10, gap_s=100.0), 50.0, min_num_requests=1)[1].metadata["window_index"] == 2
    with pytest.raises(ValueError):
        windows(conversation, 0.0)


def test_merge_disjoint():
    a = _toy(20, 1.0, "a", session=0)
    b = _toy(10, 2.0, "b", session=0)
    m = merge([a, b], name="ab")
    assert m.num_requests == 30
    assert m.metadata["sources"] == ["a", "b"]
    src = np.array(m.metadata["source_index"])
    hashes_a = {h for r, s in zip(m.requests, src) if s == 0 for h in r.block_hashes}
    hashes_b = {h for r, s in zip(m.requests, src) if s == 1 for h in r.block_hashes}
    assert not hashes_a & hashes_b
    assert {r.session_id for r, s in zip(m.requests, src) if s == 0} == {0}
    assert {r.session_id for r, s in zip(m.requests, src) if s == 1} == {1}
    assert_prefix_consistent(m)
    shared = merge([a, a], disjoint=False)
    assert len({h for r in shared.requests for h in r.block_hashes}) == len({h for r in a.requests for h in r.block_hashes})
    with pytest.raises(ValueError):
        merge([])
    with pytest.raises(ValueError):
        merge([a, Workload("c", (), 256)])


def test_per_request_metadata_follow_requests():
    a = _toy(20, 1.0, "a")
    b = _toy(10, 2.0, "b")
    m = merge([a, b])
    w = window(m, 5.0, 15.0)
    assert len(w.metadata["source_index"]) == w.num_requests
    expected = [s for r, s in zip(m.requests, m.metadata["source_index"]) if 5.0 <= r.arrival_time_s < 15.0]
    assert list(w.metadata["source_index"]) == expected
    train, ev = split(m, 0.5)
    assert train.metadata["source_index"] + ev.metadata["source_index"] == m.metadata["source_index"]
