"""Rows of the dynamic, cache and reconfiguration results (schema of ``cpgym reproduce``)."""

from __future__ import annotations

import math

import pytest

from experiments.paper_experiments.paper_rows import (
    best_fixed_label,
    cache_rows,
    dynamic_comparisons,
    dynamic_rows,
    operation_times_s,
    reconfiguration_rows,
)

KEYS = {"experiment", "workload", "model", "metric", "paper_value", "cpgym_value", "ci_low", "ci_high", "load_fraction",
        "strongest_baseline"}


def _summary(adaptive: float, initial: str = "cp4x6,cp2x8") -> dict:
    # per phase (short, long): cp4x10 is best on the long phase, the mixed pool overall
    fixed = {"cp4x10": (3.0, 1.0), "cp4x6,cp2x8": (0.5, 1.5), "cp2x20": (4.0, 4.0)}
    return {"policies": [{"policy": "vertumnus-adaptive", "mean_ttft_s": adaptive, "phase_mean_ttft_s": [adaptive, 1.2]}]
            + [{"policy": f"fixed {c}", "mean_ttft_s": sum(v) / 2, "phase_mean_ttft_s": list(v)} for c, v in fixed.items()],
            "initial_composition": initial, "best_fixed_composition": "cp4x6,cp2x8",
            "phases": [{"kind": "short"}, {"kind": "long"}]}


def test_dynamic_comparisons_and_rows():
    c = dynamic_comparisons(_summary(0.9), 40, (2, 4))
    assert c.pop("best_fixed_composition") == "cp4x6,cp2x8"
    assert c == pytest.approx({"mean_ttft_pct_vs_best_fixed": -10.0, "mean_ttft_pct_vs_homogeneous_cp2": -77.5,
                               "mean_ttft_pct_vs_homogeneous_cp4": -55.0, "mean_ttft_pct_vs_initial": -10.0})
    long = dynamic_comparisons(_summary(0.9), 40, (2, 4), phase_kind="long")
    assert long["best_fixed_composition"] == "cp4x10" and long["mean_ttft_pct_vs_best_fixed"] == pytest.approx(20.0)
    assert long["mean_ttft_pct_vs_initial"] == pytest.approx(100.0 * (1.2 / 1.5 - 1.0))
    with pytest.raises(ValueError, match="kind 'medium'"):
        dynamic_comparisons(_summary(0.9), 40, (2, 4), phase_kind="medium")
    rows = dynamic_rows("rising-rates", [_summary(0.9), _summary(1.1)], "qwen3", paper_value=-19.6)
    assert all(set(r) == KEYS and r["experiment"] == "dynamic" for r in rows)
    best = rows[0]
    assert best["metric"] == "mean_ttft_pct_vs_best_fixed" and best["paper_value"] is None
    assert best["cpgym_value"] == pytest.approx(0.0) and best["ci_low"] < 0 < best["ci_high"]
    assert rows[1]["paper_value"] == -19.6 and best["strongest_baseline"] == "cp4x6,cp2x8"
    with pytest.raises(ValueError, match="cp4x9"):
        dynamic_comparisons(_summary(0.9, initial="cp4x9,cp2x2"), 40, (2, 4))
    assert all(r["load_fraction"] is None for r in rows)  # absolute phase rates: no measured capacity


def test_dynamic_rows_name_the_best_fixed_composition_of_every_seed():
    # seed 1's best pool is all-CP-2: the row must not name seed 0's pool alone
    other = _summary(1.1)
    for r in other["policies"]:
        if r["policy"] == "fixed cp2x20":
            r["mean_ttft_s"] = 0.1
    rows = dynamic_rows("rising-rates", [_summary(0.9), other, _summary(1.0)], "q")
    assert {r["strongest_baseline"] for r in rows} == {"cp4x6,cp2x8 (2/3 seeds); cp2x20 (1/3 seeds)"}
    assert best_fixed_label(["b", "a"]) == "a (1/2 seeds); b (1/2 seeds)"
    assert best_fixed_label(["a", "a"]) == "a"
    with pytest.raises(ValueError, match="at least one"):
        best_fixed_label([])


def test_dynamic_rows_state_the_load_relative_to_measured_capacity():
    def measured(short_rps, long_rps):
        s = _summary(0.9)
        s["phase_capacities"] = {"short": {"capacity_rps": 64.0}, "long": {"capacity_rps": 10.0}}
        s["phase_mean_rates_rps"] = {"short": short_rps, "long": long_rps}
        return s

    runs = [measured(32.0, 5.0), measured(38.4, 6.0)]  # loads short 0.5 / 0.6, long 0.5 / 0.6
    assert dynamic_rows("rising-rates", runs, "q", phase_kind="short")[0]["load_fraction"] == pytest.approx(0.55)
    runs = [measured(32.0, 7.0), measured(38.4, 6.0)]  # whole run: the higher kind per seed, 0.7 and 0.6
    assert dynamic_rows("phases-all", runs, "q")[0]["load_fraction"] == pytest.approx(0.65)
    assert dynamic_rows("phases-all", [runs[0], _summary(1.0)], "q")[0]["load_fraction"] is None


def test_dynamic_load_fraction_of_partly_measured_or_malformed_runs():
    from experiments.paper_experiments.paper_rows import dynamic_load_fraction

    def measured(**caps):
        s = _summary(0.9)
        s["phase_capacities"] = {k: {"capacity_rps": c} for k, c in caps.items()}
        s["phase_mean_rates_rps"] = {"short": 32.0, "long": 5.0}
        return s

    only_long = [measured(long=10.0)]  # cpgym dynamic --long-load only: the short phases at an absolute rate
    assert dynamic_load_fraction(only_long, "long") == pytest.approx(0.5)
    assert dynamic_load_fraction(only_long, "short") is None  # was a KeyError
    assert dynamic_load_fraction(only_long) is None  # the short phases' load is unknown: not the long one's 0.5
    assert [r["load_fraction"] for r in dynamic_rows("rising-rates", only_long, "q", phase_kind="short")] == [None] * 4
    for s, match in [(measured(short=64.0, long=0.0), r"phase_capacities\['long'\]\['capacity_rps'\].*got 0.0"),
                     (measured(short=64.0, long=None), r"phase_capacities\['long'\]\['capacity_rps'\].*got None")]:
        with pytest.raises(ValueError, match=match):
            dynamic_load_fraction([measured(short=64.0, long=10.0), s])
    no_rate = measured(short=64.0, long=10.0)
    del no_rate["phase_mean_rates_rps"]["long"]
    with pytest.raises(ValueError, match=r"summary 0: phase_mean_rates_rps\['long'\]"):
        dynamic_load_fraction([no_rate], "long")
    with pytest.raises(ValueError, match="no phase of kind 'medium'"):
        dynamic_load_fraction([measured(short=64.0, long=10.0)], "medium")


def test_cache_rows_paired_per_seed():
    pairs = [({"mean_ttft_s": 1.0, "p90_ttft_s": 2.0, "prefix_hit_rate": 0.5},
              {"mean_ttft_s": 0.9, "p90_ttft_s": 1.6, "prefix_hit_rate": 0.51}),
             ({"mean_ttft_s": 2.0, "p90_ttft_s": 4.0, "prefix_hit_rate": 0.5},
              {"mean_ttft_s": 1.6, "p90_ttft_s": 3.2, "prefix_hit_rate": 0.53})]
    rows = {r["metric"]: r for r in cache_rows(pairs, "qwen3", load_fraction=0.95)}
    assert rows["mean_ttft_pct"]["cpgym_value"] == pytest.approx(-15.0) and rows["mean_ttft_pct"]["paper_value"] == -10.3
    p90 = rows["p90_ttft_pct"]
    assert p90["cpgym_value"] == pytest.approx(-20.0) and p90["ci_low"] == pytest.approx(-20.0)
    assert rows["hit_rate_pp"]["cpgym_value"] == pytest.approx(2.0) and rows["hit_rate_pp"]["paper_value"] is None
    assert rows["mean_ttft_pct"]["load_fraction"] == 0.95


def test_reconfiguration_rows_percentiles_and_errors():
    summary = {"operations": [{"total_s": t, "commit_s": 1.0} for t in (1.0, 2.0, 3.0, 4.0, 5.0)]
               + [{"total_s": math.nan, "commit_s": math.nan}]}
    times = operation_times_s(summary)
    assert times == [1.0, 2.0, 3.0, 4.0, 5.0]
    (p10, p90) = reconfiguration_rows([times], "qwen3")
    assert (p10["cpgym_value"], p90["cpgym_value"]) == pytest.approx((1.4, 4.6))
    assert math.isnan(p10["ci_low"]) and p10["paper_value"] == 1.1 and p90["paper_value"] == 5.1
    with pytest.raises(ValueError, match="committed"):
        reconfiguration_rows([[]], "qwen3")


def test_rows_cli_labels_rows_with_the_model_the_runs_used(tmp_path, capsys):
    import json

    from experiments.paper_experiments.paper_rows import main

    def write(name, model):
        s = {**_summary(0.9), "pool": {"num_gpus": 40, "supported_degrees": [2, 4]},
             "operations": [{"total_s": 1.2, "commit_s": 5.0}]}
        if model is not None:
            s["calibration"] = {"model": model, "gpu_type": "H20-3e", "path": f"{model}.json"}
        (tmp_path / name).write_text(json.dumps(s))
        return str(tmp_path / name)

    a, b = write("a.json", "DeepSeek-V4-Flash-FP8"), write("b.json", "DeepSeek-V4-Flash-FP8")
    assert main(["dynamic", a, b]) == 0
    assert {r["model"] for r in json.loads(capsys.readouterr().out)} == {"DeepSeek-V4-Flash-FP8"}
    assert main(["reconfiguration", a, b]) == 0
    assert {r["model"] for r in json.loads(capsys.readouterr().out)} == {"DeepSeek-V4-Flash-FP8"}
    old = write("old.json", None)  # written before the summary recorded its calibration: the default's model
    assert main(["dynamic", old]) == 0
    assert {r["model"] for r in json.loads(capsys.readouterr().out)} == {"Qwen3-30B-A3B"}
    assert main(["dynamic", a, old]) == 2
    err = capsys.readouterr().err
    assert "different models" in err and "DeepSeek-V4-Flash-FP8" in err and "old.json: Qwen3-30B-A3B" in err
    (tmp_path / "a.json").write_text(json.dumps({**json.loads((tmp_path / "a.json").read_text()), "operations": []}))
    assert main(["reconfiguration", a]) == 2  # a row builder's own error: one line, no traceback
    assert "at least one committed operation" in capsys.readouterr().err
