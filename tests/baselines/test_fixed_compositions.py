"""Fixed-pool references of a reconfiguration task (baselines/fixed_compositions.py): the best
fixed composition on training workloads and the per-phase hindsight oracle, on tiny inputs."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

import baselines.fixed_compositions as fc
from baselines.runner import run_policy
from envs.sim import SimConfig
from envs.sim.pool import PoolConfig
from envs.workloads.production_day import production_day

SMALL = SimConfig(pool=PoolConfig(num_gpus=8, gpus_per_node=8, composition="cp2x4", supported_degrees=(2, 4, 8)))


def test_per_phase_oracle_takes_each_phase_best_weighted_by_requests():
    ttft = np.array([[1.0, 4.0, 2.0],
                     [3.0, 2.0, 2.0]])
    mean, schedule = fc.per_phase_oracle_ttft(ttft, np.array([1, 3, 0]))
    assert schedule == [0, 1, 0]  # the tie in phase 2 goes to the earlier composition
    assert mean == pytest.approx((1.0 * 1 + 2.0 * 3) / 4)  # phase 2 has no request
    assert np.isnan(fc.per_phase_oracle_ttft(ttft, np.zeros(3))[0])
    with pytest.raises(ValueError, match="num_requests"):
        fc.per_phase_oracle_ttft(ttft, np.ones(2))


def _fake_run(ttft_by_composition):
    """A stand-in for run_policy: every request of the workload gets its composition's TTFTs."""
    def run(router, workload, config):
        values = ttft_by_composition[config.pool.composition]
        return SimpleNamespace(records={"ttft_s": np.resize(np.asarray(values, float), workload.num_requests)})
    return run


def test_best_fixed_composition_lowest_mean_over_workloads(monkeypatch):
    wls = [production_day(duration_s=5.0, peak_rate_rps=4.0, seed=s) for s in (0, 1)]
    monkeypatch.setattr(fc, "run_policy", _fake_run({"cp2x4": [0.3], "cp4x2": [0.2], "cp8x1": [np.nan],
                                                     "cp4x1,cp2x2": [0.2]}))
    comp, scores = fc.best_fixed_composition(wls, SMALL, ["cp2x4", "cp8x1", "cp4x2", "cp4x1,cp2x2"])
    assert comp == "cp4x2"  # tie with cp4x1,cp2x2: the earlier; cp8x1 (nothing finished) never wins
    assert np.allclose(scores[[0, 2, 3]], [0.3, 0.2, 0.2]) and np.isnan(scores[1])
    with pytest.raises(ValueError, match="at least one workload"):
        fc.best_fixed_composition([], SMALL, ["cp2x4"])


def test_best_fixed_composition_scores_are_the_runs_mean_ttft():
    wls = [production_day(duration_s=6.0, peak_rate_rps=6.0, seed=s) for s in (0, 1)]
    menu = ["cp8x1", "cp4x2", "cp2x4"]
    comp, scores = fc.best_fixed_composition(wls, SMALL, menu)
    direct = [np.mean([np.nanmean(run_policy("vertumnus-router", wl, replace(SMALL, pool=replace(SMALL.pool, composition=c)))
                                  .records["ttft_s"]) for wl in wls]) for c in menu]
    assert np.allclose(scores, direct)
    assert comp == menu[int(np.argmin(direct))]


def test_fixed_and_oracle_rows(monkeypatch):
    wl = production_day(duration_s=8.0, peak_rate_rps=3.0, num_phases=2, seed=0)
    phase = np.array(wl.metadata["phase_of_request"])
    # per composition: TTFT 1 s in phase 0, 2 s in phase 1 for cp4x2; the reverse for cp8x1; cp2x4 (the start) 3 s
    table = {"cp4x2": np.where(phase == 0, 1.0, 2.0), "cp8x1": np.where(phase == 0, 2.0, 1.0),
             "cp2x4": np.full(phase.size, 3.0)}
    monkeypatch.setattr(fc, "run_policy", _fake_run(table))
    (row,) = fc.fixed_and_oracle_rows([wl], SMALL, ["cp4x2", "cp8x1"], fixed="cp4x2")
    n0, n1 = (phase == 0).sum(), (phase == 1).sum()
    assert row["fixed_mean_ttft_s"] == pytest.approx((n0 * 1.0 + n1 * 2.0) / (n0 + n1))
    assert row["no_reconfiguration_mean_ttft_s"] == pytest.approx(3.0)  # cp2x4, added to the menu
    assert row["oracle_mean_ttft_s"] == pytest.approx(1.0)
    assert row["oracle_schedule"] == ["cp4x2", "cp8x1"]


def test_headroom_paired_percent_differences():
    rows = [{"fixed_mean_ttft_s": 1.0, "oracle_mean_ttft_s": 0.8, "no_reconfiguration_mean_ttft_s": 1.1},
            {"fixed_mean_ttft_s": 2.0, "oracle_mean_ttft_s": 1.8, "no_reconfiguration_mean_ttft_s": 2.0}]
    h = fc.headroom(rows)
    assert h["num_workloads"] == 2 and h["fixed_mean_ttft_s"] == pytest.approx(1.5)
    mean, low, high = h["oracle_vs_fixed_pct"]
    assert mean == pytest.approx(-15.0) and low < -15.0 < high  # -20 % and -10 %
    assert h["no_reconfiguration_vs_fixed_pct"][0] == pytest.approx(5.0)
    with pytest.raises(ValueError, match="at least one row"):
        fc.headroom([])
