"""``cpgym dynamic``'s base pool and the arrival-count limits of the workload generators; the bad
``cpgym dynamic`` / ``cpgym cache-ablation`` flags are rows of tests/experiments/test_cli_errors.py."""

from __future__ import annotations

import numpy as np
import pytest


def test_dynamic_base_pool_falls_back_to_a_placeable_degree():
    """--supported-degrees 2,16 on 32 GPUs in nodes of 8: cp16x2 cannot be placed, cp2x16 can."""
    import argparse

    from experiments.commands import dynamic

    p = argparse.ArgumentParser()
    dynamic.add_arguments(p)
    base = dynamic.base_config_from_args(p.parse_args(["--supported-degrees", "2,16", "--pool-gpus", "32"]))
    assert base.pool.composition == "cp2x16"
    assert dynamic.base_config_from_args(p.parse_args([])).pool.composition == "cp4x10"  # the default is unchanged


def test_huge_arrival_counts_are_refused_before_allocating():
    """--rates 1e9 / --duration-s 1e12 died with numpy's ArrayMemoryError traceback (182 GiB);
    --num-phases 1e8 ran out of memory building the per-phase lists."""
    from envs.workloads import get_workload
    from envs.workloads.arrivals import GammaArrivals, PoissonArrivals

    rng = np.random.default_rng(0)
    for proc in (PoissonArrivals(1e9), GammaArrivals(1e9)):
        with pytest.raises(ValueError, match="expected requests, more than 10,000,000"):
            proc.sample(10.0, rng)
    assert PoissonArrivals(1e3).sample(10.0, rng).size > 0
    with pytest.raises(ValueError, match="num_phases x phase_duration_s = 100000000 x 20 s"):
        get_workload("phases", seed=0, num_phases=100_000_000, phase_duration_s=20.0)
