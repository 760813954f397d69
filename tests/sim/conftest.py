from __future__ import annotations

import pytest

from envs.sim import Calibration, CostCoefficients, Request, Workload


def make_workload(specs, block=4, name="tiny") -> Workload:
    """specs: list of (arrival_s, num_prompt_tokens, block_hashes or None)."""
    reqs = []
    nxt = 10_000
    for i, (t, L, hashes) in enumerate(specs):
        n = -(-L // block)
        if hashes is None:
            hashes = tuple(range(nxt, nxt + n))
            nxt += n
        reqs.append(Request(i, float(t), L, 1, tuple(hashes)))
    return Workload(name, tuple(reqs), kv_block_size_tokens=block)


@pytest.fixture(scope="session")
def simple_calibration() -> Calibration:
    """E_C(R,P) = 1 + 0.1*R / C  [s]: easy to compute by hand; 1,000 blocks of 4 tokens per GPU."""
    return Calibration(
        model="toy", gpu_type="toy",
        coefficients=CostCoefficients(d_s=1.0, a_s_per_token=0.0, b_s_per_token=0.0, c_s_per_token=0.1, alpha_s_per_pair=0.0),
        kv_bytes_per_token=1, gpu_memory_bytes=4000, weight_bytes_per_gpu=0, activation_reserve_bytes=0,
        max_prompt_tokens=10_000,
    )
