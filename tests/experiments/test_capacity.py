"""Sustainable-rate search (baselines/capacity.py, ``cpgym capacity``)."""

import json
import math
from dataclasses import replace

import pytest

from baselines.capacity import CapacityDefinition, RatedWorkload, find_capacity, is_overloaded, rates_for_loads, thirds_growth
from envs.sim import Calibration, PoolConfig, Request, SimConfig, SLOConfig, Workload
from envs.sim.cost_model import CostCoefficients

D_S = 0.5  # constant service time [s]
L_TOKENS = 1000


def _single_worker(tmp_path=None):
    # one CP-1 worker whose every request takes exactly D_S inside a step (d = 0, a = D/L, the
    # rest 0): batching gains nothing, so the worker is a D/D/1 server of capacity 1/D
    cal = replace(Calibration.default(), coefficients=CostCoefficients(0.0, D_S / L_TOKENS, 0.0, 0.0, 0.0))
    cfg = SimConfig(pool=PoolConfig(num_gpus=1, gpus_per_node=1, composition="cp1x1", supported_degrees=(1,)),
                    slo=SLOConfig(kind="fixed", ttft_slo_s=1e6))
    nb = -(-L_TOKENS // 512)
    reqs = tuple(Request(i, float(i), L_TOKENS, 1, tuple(range(10 * i, 10 * i + nb))) for i in range(240))
    return cal, cfg, Workload("uniform", reqs, kv_block_size_tokens=512)


def test_bisection_finds_one_over_d_on_a_single_worker(tmp_path):
    cal, cfg, wl = _single_worker()
    rated = RatedWorkload(arrival_window_length_s=240.0, base=wl)  # native rate 1 req/s, capacity 1/D = 2 req/s
    res = find_capacity("least-work", rated, cfg, cal, CapacityDefinition(rel_tol=0.005), cache_dir=tmp_path)
    assert res.capacity_rps == pytest.approx(1.0 / D_S, rel=0.01)
    assert res.capacity_rps <= 1.0 / D_S * (1 + 1e-9)  # the reported rate is a sustainable one
    assert all(p.sustainable == (p.rate_rps <= 1.0 / D_S + 1e-9) for p in res.probes)
    assert not res.cached
    # cached on disk: the second call simulates nothing and returns the same number
    again = find_capacity("least-work", rated, cfg, cal, CapacityDefinition(rel_tol=0.005), cache_dir=tmp_path)
    assert again.cached and again.capacity_rps == res.capacity_rps
    # the key covers the definition, the settings and the calibration: any change is a new entry
    files = set(tmp_path.glob("*.json"))
    find_capacity("least-work", rated, cfg, cal, CapacityDefinition(rel_tol=0.05), cache_dir=tmp_path)
    slower = replace(cal, coefficients=CostCoefficients(0.0, 2 * D_S / L_TOKENS, 0.0, 0.0, 0.0))
    r2 = find_capacity("least-work", rated, cfg, slower, CapacityDefinition(rel_tol=0.005), cache_dir=tmp_path)
    assert not r2.cached and r2.capacity_rps == pytest.approx(0.5 / D_S, rel=0.01)
    assert len(set(tmp_path.glob("*.json")) - files) == 2
    entry = json.loads(next(iter(files)).read_text())
    assert entry["result"]["definition"]["version"] >= 1


def test_slo_threshold_limits_capacity():
    # an SLO just above the service time: queueing at rates near 1/D breaks it before the backlog grows
    cal, cfg, wl = _single_worker()
    cfg = replace(cfg, slo=SLOConfig(kind="fixed", ttft_slo_s=D_S + 0.05))
    res = find_capacity("least-work", RatedWorkload(arrival_window_length_s=240.0, base=wl), cfg, cal)
    assert 0 < res.capacity_rps <= 1.0 / D_S
    assert all(p.slo_attainment_token_weighted >= 0.9 for p in res.probes if p.sustainable)


def test_thirds_growth_and_labels():
    t = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert thirds_growth(t, [1, 1, 1, 1, 2, 2]) == pytest.approx(2.0)
    assert thirds_growth(t, [1, 1, 1, 1, 2, 2], [1, 1, 1, 1, 2, 2]) == pytest.approx(1.0)  # slowdown: mix removed
    assert math.isnan(thirds_growth([0.0, 1.0], [1.0, 1.0]))
    assert is_overloaded(10.0, 9.0) and not is_overloaded(9.0, 9.0) and not is_overloaded(9.0, None)


def test_rates_for_loads_use_the_strongest_static_baseline():
    from baselines.capacity import CapacityResult

    caps = {p: CapacityResult(p, "w", c, 1.0, 1.0, [], {}) for p, c in (("a", 10.0), ("b", 20.0), ("vertumnus", 40.0))}
    rates, best, cap = rates_for_loads([0.5, 0.95], caps, ["a", "b"])
    assert best == "b" and cap == 20.0 and rates == pytest.approx([10.0, 19.0])
    with pytest.raises(ValueError, match="loads"):
        rates_for_loads([0.0], caps, ["a"])
    with pytest.raises(ValueError, match="window"):
        find_capacity("least-work", RatedWorkload(arrival_window_length_s=1.0, base=_single_worker()[2]), _single_worker()[1],
                      _single_worker()[0])


@pytest.mark.slow
def test_compare_loads_are_fractions_of_the_strongest_static_capacity(tmp_path, capsys):
    from experiments.cli import main

    rc = main(["compare", "--workload", "leval-like", "--arrival-window-s", "0", "40", "--suite",
               "homogeneous-cp4,homogeneous-cp2",
               "--loads", "0.5,1.5", "--pool-gpus", "8", "--pool-composition", "cp4x1,cp2x2", "--supported-degrees", "2,4",
               "--rel-tol", "0.2", "--cache-dir", str(tmp_path), "--format", "json"])
    assert rc == 0
    rows = json.loads(capsys.readouterr().out)
    caps = {r["policy"]: r["capacity_rps"] for r in rows}
    strongest = max(caps.values())
    for r in rows:
        assert r["rate_rps"] == pytest.approx(r["load_fraction"] * strongest)
        assert r["overloaded"] == (r["rate_rps"] > r["capacity_rps"])
    assert any(r["overloaded"] for r in rows if r["load_fraction"] == 1.5)
    assert list(tmp_path.glob("*.json"))  # capacities cached


def test_capacity_cli_json(tmp_path, capsys):
    from experiments.cli import main

    args = ["capacity", "--workload", "leval-like", "--arrival-window-s", "0", "40", "--policy", "homogeneous-cp4,vertumnus",
            "--pool-gpus", "8", "--pool-composition", "cp4x1,cp2x2", "--supported-degrees", "2,4", "--rel-tol", "0.2",
            "--cache-dir", str(tmp_path), "--format", "json", "--quiet"]
    assert main(args) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in rows] == ["homogeneous-cp4", "vertumnus"]
    assert all(r["capacity_rps"] > 0 and not r["cached"] and r["definition"]["drain_ratio"] == 1.2 for r in rows)
    assert main(args) == 0
    again = json.loads(capsys.readouterr().out)
    assert all(r["cached"] for r in again) and [r["capacity_rps"] for r in again] == [r["capacity_rps"] for r in rows]
    assert main(["capacity", "--workload", "leval-like", "--target-rps", "5"]) == 2
    assert "--target-rps" in capsys.readouterr().err


@pytest.mark.parametrize("quiet", [False, True])
@pytest.mark.parametrize("fmt", ["table", "json"])
@pytest.mark.slow
def test_compare_quiet_drops_the_capacity_probe_lines(quiet, fmt, tmp_path, capsys):
    """Only --quiet silences the probe lines: with --format json they were dropped too, so a long
    --loads run in JSON showed nothing for minutes (capacity, dynamic and reproduce log in both formats)."""
    from experiments.cli import main

    args = ["compare", "--workload", "leval-like", "--arrival-window-s", "0", "40", "--suite", "homogeneous-cp4", "--loads",
            "0.5",
            "--pool-gpus", "8", "--pool-composition", "cp4x1,cp2x2", "--supported-degrees", "2,4", "--rel-tol", "0.2",
            "--cache-dir", str(tmp_path), "--format", fmt] + ["--quiet"] * quiet
    assert main(args) == 0
    out, err = capsys.readouterr()
    if fmt == "json":
        assert [r["policy"] for r in json.loads(out)] == ["homogeneous-cp4"]  # stdout stays pure JSON
    err = [line for line in err.splitlines() if line.strip()]
    stated = [line for line in err if line.startswith("loads relative to homogeneous-cp4: ")]
    assert len(stated) == 1  # the capacity the loads refer to is stated either way
    assert (err == stated) == quiet  # the per-probe progress lines only without --quiet


def test_capacity_of_a_short_trace_prints_the_span_it_has_and_warns(tmp_path, capsys):
    """A 50-request trace (~15 s) searched over the default 600 s window: the header no longer
    claims a 600 s window it does not fill; each row gives the span its arrivals cover at the
    capacity rate, and one warning line on stderr says the trace is much shorter than the window."""
    from envs import workloads
    from experiments.cli import main

    lines = (workloads.default_traces_dir() / "conversation_trace.jsonl").read_text().splitlines()[:50]
    trace = tmp_path / "short.jsonl"
    trace.write_text("\n".join(lines) + "\n")
    args = ["capacity", "--trace", str(trace), "--policy", "least-work", "--rel-tol", "0.2", "--no-cache", "--quiet"]
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert "(600 s window)" not in out and "window 0-600 s of the rate-scaled trace" in out
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "much shorter than the 600 s window (--arrival-window-s)" in warnings[0]
    assert main([*args, "--format", "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert 0 < row["arrival_span_s"] < 20.0 / row["rate_scale"] + 1e-9  # the trace's ~15-18 s, compressed by the factor
    assert f"{row['arrival_span_s']:8.1f}" in out.splitlines()[-1]


def test_capacity_measures_the_workload_its_workload_params_make(tmp_path, capsys):
    """--workload-param reaches the capacity's generator, as in every other command: it was
    dropped, so a capacity (and compare --loads' rates) was silently that of the unmodified
    workload, and a typo'd parameter ran without a word."""
    from experiments.cli import main

    base = ["capacity", "--workload", "leval-like", "--arrival-window-s", "0", "40", "--policy", "homogeneous-cp4",
            "--pool-gpus", "8", "--pool-composition", "cp4x1,cp2x2", "--supported-degrees", "2,4", "--rel-tol", "0.2",
            "--no-cache", "--format", "json", "--quiet"]
    assert main(base) == 0
    (plain,) = json.loads(capsys.readouterr().out)
    assert main([*base, "--workload-param", "mean_questions_per_doc=1"]) == 0  # 7 -> 1 question per document
    (slow,) = json.loads(capsys.readouterr().out)
    assert slow["native_rate_rps"] < 0.8 * plain["native_rate_rps"]
    # a typo'd, a window-setting and a trace's --workload-param: rows of tests/experiments/test_cli_errors.py

