from __future__ import annotations

import numpy as np
import pytest

from envs.sim import Calibration, CostCoefficients, PoolConfig, Request, SimConfig, Workload

SMALL_POOL = PoolConfig(num_gpus=8, gpus_per_node=8, composition="cp4x1,cp2x2", supported_degrees=(1, 2, 4))


def toy_calibration() -> Calibration:
    """E_C(R,P) = 1 + 0.1*R / C  [s]; 1,000 blocks of 4 tokens per GPU."""
    return Calibration(
        model="toy", gpu_type="toy",
        coefficients=CostCoefficients(d_s=1.0, a_s_per_token=0.0, b_s_per_token=0.0, c_s_per_token=0.1, alpha_s_per_pair=0.0),
        kv_bytes_per_token=1, gpu_memory_bytes=4000, weight_bytes_per_gpu=0, activation_reserve_bytes=0,
        max_prompt_tokens=10_000,
    )


def random_workload(n: int, rate_rps: float, seed: int, block: int = 4, name: str = "rand") -> Workload:
    """``n`` Poisson arrivals; prompts of 4..80 tokens, half of them sharing one of 3 prefixes."""
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1.0 / rate_rps, n))
    reqs = []
    nxt = 1_000_000
    for i in range(n):
        L = int(rng.integers(4, 81))
        nb = -(-L // block)
        if rng.random() < 0.5:
            p = int(rng.integers(3))
            hashes = tuple(p * 1000 + j for j in range(nb))
        else:
            hashes = tuple(range(nxt, nxt + nb))
            nxt += nb
        reqs.append(Request(i, float(t[i]), L, 1, hashes))
    return Workload(name, tuple(reqs), kv_block_size_tokens=block)


@pytest.fixture(scope="session")
def toy_cal() -> Calibration:
    return toy_calibration()


@pytest.fixture
def small_config() -> SimConfig:
    return SimConfig(pool=SMALL_POOL)
