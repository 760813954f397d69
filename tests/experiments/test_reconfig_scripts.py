"""Helpers of the reconfiguration analysis scripts (experiments/scripts/reconfig_*.py)."""

from __future__ import annotations

import math

import numpy as np


def test_phase_means_average_each_phase_and_skip_unfinished_requests():
    from experiments.scripts.reconfig_gap_analysis import phase_means

    ttft = np.array([1.0, 3.0, np.nan, 0.5, np.nan])
    phase = np.array([0, 0, 1, 1, 2])
    got = phase_means(ttft, phase, 4)
    assert got[:2] == [2.0, 0.5]
    assert math.isnan(got[2]) and math.isnan(got[3])  # only unfinished / no requests


def test_target_runs_collapse_repeated_targets():
    from experiments.scripts.reconfig_gap_analysis import target_runs

    menu = ["cp4x2", "cp4x1,cp2x2", "cp2x4"]
    assert target_runs([0, 0, 2, 2, 0], [0, 0, 0, 1, 1], menu) == [(0, 0, "cp4x2"), (2, 0, "cp2x4"), (4, 1, "cp4x2")]
    assert target_runs([], [], menu) == []
