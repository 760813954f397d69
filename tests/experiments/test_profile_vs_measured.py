"""Helpers of experiments/scripts/profile_vs_measured.py (the capacity profile's error ladder)."""

from __future__ import annotations

import numpy as np


def _workload():
    from envs.sim.request import Request, Workload

    # block size 4: request 1 shares request 0's first block, request 2 both of request 1's, request 3 none
    hashes = [(1, 2), (1, 3, 4), (1, 3, 5), (9,)]
    lengths = [8, 10, 12, 3]
    reqs = tuple(Request(i, 0.5 * i, L, 1, h) for i, (L, h) in enumerate(zip(lengths, hashes)))
    return Workload("toy", reqs, kv_block_size_tokens=4)


def test_per_request_reuse_sums_to_reuse_prefix_tokens():
    from envs.planning.capacity import reuse_prefix_tokens
    from experiments.scripts.profile_vs_measured import per_request_reuse

    wl = _workload()
    got = per_request_reuse(wl)
    assert got.tolist() == [0.0, 4.0, 8.0, 0.0]
    assert np.isclose(got.mean(), reuse_prefix_tokens(wl))


def test_uncached_and_stretched_keep_requests_but_drop_hits():
    from experiments.scripts.profile_vs_measured import per_request_reuse, stretched, uncached

    wl = _workload()
    out = uncached(wl, np.array([8.0, 6.0, 4.0, 0.2]), arrivals_s=np.array([0.0, 1.0, 2.0, 3.0]))
    assert [r.num_prompt_tokens for r in out.requests] == [8, 6, 4, 1]  # floored at 1 token
    assert [r.arrival_time_s for r in out.requests] == [0.0, 1.0, 2.0, 3.0]
    assert per_request_reuse(out).tolist() == [0.0] * 4  # every request uncached
    assert out.kv_block_size_tokens >= 8
    assert [r.arrival_time_s for r in stretched(wl, 10.0).requests] == [0.0, 5.0, 10.0, 15.0]
