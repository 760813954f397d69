"""``cpgym compare`` and the prediction-error accounting."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from baselines.prediction_error import COLUMNS, summarize_prediction_errors
from baselines.runner import run_policy, write_run
from envs.metrics import summarize
from envs.sim import PoolConfig, PredictionErrorConfig, SimConfig
from experiments.cli import main
from experiments.paper_experiments.end_to_end import resolve_suite, strongest_baseline_changes
from tests.factories import prefix_document_workload


def test_prediction_errors_by_bucket(small_prefix_workload, tmp_path):
    # a CP-4-only bias of 1.2 shows up as +20% service error on CP-4 and ~0 on CP-2 (batches of
    # one at this light load are exactly predicted without bias)
    cfg = SimConfig(pool=PoolConfig(num_gpus=8, composition="cp4x1,cp2x2"),
                    prediction_error=PredictionErrorConfig(degree_bias=((4, 1.2),)))
    res = run_policy("vertumnus-router", small_prefix_workload, cfg)
    df = summarize_prediction_errors(res)
    assert list(df.columns) == list(COLUMNS)
    assert set(df["group_by"]) == {"all", "degree", "cache_ratio", "length"}
    by = df.set_index(["group_by", "bucket"])
    n = by.loc[("all", "all"), "num_requests"]
    assert n == small_prefix_workload.num_requests
    for g in ("degree", "cache_ratio", "length"):
        assert by.loc[g, "num_requests"].sum() == n
    assert by.loc[("degree", "cp4"), "mean_service_rel_error"] >= 0.2 - 1e-9
    assert by.loc[("degree", "cp2"), "mean_service_rel_error"] < by.loc[("degree", "cp4"), "mean_service_rel_error"]
    d = write_run(tmp_path, res, summarize(res))
    assert pd.read_csv(d / "prediction_errors.csv").shape[0] == len(df)


def test_resolve_suite_and_errors():
    assert resolve_suite("paper")[0] == "vertumnus"
    assert resolve_suite("vertumnus,llm-d,vertumnus") == ["vertumnus", "llm-d"]
    with pytest.raises(ValueError, match="unknown suite or policy"):
        resolve_suite("nope")


def test_strongest_baseline_change():
    s = pd.DataFrame({"policy": ["vertumnus", "a", "b", "vertumnus-lambda0"], "rate_rps": [10.0] * 4,
                      "mean_ttft_s": [0.8, 1.0, 2.0, 0.1], "p90_ttft_s": [1.0, 2.0, 1.0, 0.1],
                      "slo_attainment_token_weighted": [0.9, 0.8, 0.95, 1.0]})
    (ch,) = strongest_baseline_changes(s)
    assert ch["baseline"] == "a"
    assert ch["mean_ttft_change_pct"] == pytest.approx(-20.0)
    assert ch["p90_ttft_change_pct"] == pytest.approx(-50.0)
    assert ch["slo_change_pp"] == pytest.approx(10.0)
    assert ch["vertumnus"] == "vertumnus"


def test_strongest_baseline_change_of_a_suite_with_the_router_alone():
    # a suite with vertumnus-router and no full system had no comparison at all (an empty
    # vertumnus_vs_strongest.csv: results/kv-tiers, results/end-to-end/industry-routers)
    s = pd.DataFrame({"policy": ["vertumnus-router", "a", "b"], "rate_rps": [10.0] * 3, "mean_ttft_s": [0.8, 1.0, 2.0],
                      "p90_ttft_s": [1.0, 2.0, 1.0], "slo_attainment_token_weighted": [0.9, 0.8, 0.95]})
    (ch,) = strongest_baseline_changes(s)
    assert (ch["vertumnus"], ch["baseline"]) == ("vertumnus-router", "a")
    assert ch["mean_ttft_change_pct"] == pytest.approx(-20.0)
    both = pd.concat([s, s.iloc[:1].assign(policy="vertumnus", mean_ttft_s=0.5)])
    assert strongest_baseline_changes(both)[0]["vertumnus"] == "vertumnus"  # the full system first
    assert strongest_baseline_changes(s[s["policy"] != "vertumnus-router"]) == []


def test_compare_cli_json_and_outputs(tmp_path, capsys, monkeypatch):
    import envs.workloads as W

    wl = prefix_document_workload()
    monkeypatch.setattr(W, "get_workload", lambda name, seed=0: wl)
    monkeypatch.setitem(W.WORKLOADS, "small", lambda seed=0: wl)  # a name the workload source accepts
    rc = main(["compare", "--workload", "small", "--suite", "vertumnus-router,least-work,homogeneous-cp4", "--rates", "20,40",
               "--seeds", "0,1", "--jobs", "2", "--out", str(tmp_path), "--format", "json"])
    assert rc == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 6
    for key in ("policy", "rate_rps", "mean_ttft_s", "p90_ttft_s", "slo_attainment_token_weighted", "prefix_hit_rate"):
        assert all(key in r for r in rows)
    assert {r["rate_rps"] for r in rows} == {20.0, 40.0}
    tidy = pd.read_csv(tmp_path / "results.csv")
    assert len(tidy) == 12 and set(tidy["seed"]) == {0, 1}
    assert (tmp_path / "compare.png").stat().st_size > 1000
    assert (tmp_path / "results.parquet").exists()


def test_compare_beta_lambda_sweep(tmp_path, capsys, monkeypatch, small_prefix_workload):
    import envs.workloads as W

    monkeypatch.setattr(W, "get_workload", lambda name, seed=0: small_prefix_workload)
    monkeypatch.setitem(W.WORKLOADS, "small", lambda seed=0: small_prefix_workload)
    rc = main(["compare", "--workload", "small", "--suite", "least-work", "--rates", "60", "--beta", "1,3",
               "--lambda", "0", "--out", str(tmp_path), "--format", "json"])
    assert rc == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in rows] == ["least-work", "vertumnus-router[beta=1,lambda=0]",
                                           "vertumnus-router[beta=3,lambda=0]"]
    sweep = pd.read_csv(tmp_path / "sweep.csv")
    assert set(sweep["variant"]) == {"vertumnus-router[beta=1,lambda=0]", "vertumnus-router[beta=3,lambda=0]"}
    assert set(sweep["baseline"]) == {"least-work", "mean over rates"}
    # beta=1, lambda=0 is exactly mooncake-ttft (q + s), so its change equals mooncake-ttft's
    from baselines.runner import run_policy
    from envs.sim import SimConfig
    from envs.workloads import scale_to_rate

    wl = scale_to_rate(small_prefix_workload, 60)
    mk = summarize(run_policy("mooncake-ttft", wl, SimConfig()))["mean_ttft_s"]
    lw = summarize(run_policy("least-work", wl, SimConfig()))["mean_ttft_s"]
    row = (sweep["variant"] == "vertumnus-router[beta=1,lambda=0]") & sweep["rate_rps"].notna()
    got = sweep[row]["mean_ttft_change_pct"].item()
    assert got == pytest.approx(100 * (mk - lw) / lw)


def test_compare_beta_lambda_variants_are_named_for_the_router_they_run():
    """They were 'vertumnus[beta=..]' while `vertumnus` names the full system: the variant with the
    default (3, 1) matched `vertumnus-router`, not the `vertumnus` row beside it."""
    from baselines.vertumnus import VertumnusParams
    from experiments.paper_experiments.end_to_end import vertumnus_variants

    d = VertumnusParams()
    assert vertumnus_variants(None, "0") == [(f"vertumnus-router[beta={d.beta:g},lambda=0]", d.beta, 0.0)]


def test_list_policies_tells_every_policy_apart(capsys):
    # vertumnus-global-cache and vertumnus-global-cache-20s used to print the same description
    assert main(["simulate", "--list-policies"]) == 0
    lines = capsys.readouterr().out.splitlines()
    descriptions = [line.split(None, 1)[1] for line in lines]
    assert len(lines) >= 20 and len(set(descriptions)) == len(descriptions)
    by_name = dict(line.split(None, 1) for line in lines)
    assert "20 s scan" in by_name["vertumnus-global-cache-20s"] and "5 s scan" in by_name["vertumnus-global-cache"]


def test_compare_labels_a_saturated_rate_without_capacities(capsys):
    """`--rates 20,150` of tool-agent (capacity ~55 req/s): the 150 rows showed 47 s mean TTFT
    with no sign that the backlog grew (only --loads / --label-overload labelled anything)."""
    argv = ["compare", "--workload", "tool-agent", "--workload-param", "duration_s=60", "--suite", "round-robin",
            "--rates", "20,150"]
    assert main([*argv, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["rate_rps"], r["saturated"]) for r in rows] == [(20.0, False), (150.0, True)]
    assert main(argv) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "│ 150 │ round-robin (saturated) │" in out and "│ 20 │ round-robin │" in out
    assert "(saturated): past this policy's saturation in this run" in out


def test_compare_says_its_ttft_columns_leave_out_unfinished_requests(capsys):
    """`--horizon-s` shorter than the window: thousands of unfinished requests, the TTFT columns over
    the finished ones only, and no saturation label (the last third never finished) — the caption
    said none of it (cpgym simulate's did)."""
    argv = ["compare", "--workload", "tool-agent", "--workload-param", "duration_s=20", "--suite", "round-robin",
            "--rates", "10", "--horizon-s", "10"]
    assert main(argv) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("mean / P90 TTFT: finished requests only (the unfinished ones count as SLO misses, not in the TTFT columns); "
            "a run whose last third of arrivals has no finished request is not judged saturated") in out
    assert main([*argv[:-2]]) == 0  # every request finished: no such caption
    assert "finished requests only" not in capsys.readouterr().out


def test_load_fraction_survives_the_mean_over_seeds_of_the_rate():
    # the 0.5 load of the conversation trace: 0.5 x 12.266994826616607 req/s, averaged over three
    # seeds by the summary, differs from the requested rate in the last digit; an exact lookup left
    # that row's load_fraction empty (results/end-to-end/industry-routers, first run)
    import numpy as np
    import pandas as pd

    from experiments.commands.compare import _label_overload

    rate = 0.5 * 12.266994826616607
    summary = pd.DataFrame({"policy": ["a", "a"], "rate_rps": [float(np.mean([rate] * 3)), 11.0]})
    assert summary["rate_rps"][0] != rate
    _label_overload(summary, {"a": 12.0}, {rate: 0.5, 11.0: 0.9})
    assert summary["load_fraction"].tolist() == [0.5, 0.9]
    assert summary["overloaded"].tolist() == [False, False]
