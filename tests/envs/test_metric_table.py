"""The one metric table (envs.metrics.table) and the views that choose their metrics from it."""

import math

import pytest

from envs.metrics import SUMMARY_KEYS
from envs.metrics.table import METRIC_ROWS, METRIC_TABLE, Metric, metric, metric_names


def _views() -> dict[str, tuple[str, ...]]:
    from benchmark import protocol
    from experiments import report, sweep_rows
    from experiments.paper_experiments import cache_sensitivity, end_to_end
    from experiments.sweep import execute

    return {"benchmark.protocol.METRICS": protocol.METRICS,
            "experiments.report.METRICS": report.METRICS,
            "experiments.paper_experiments.cache_sensitivity.METRICS": cache_sensitivity.METRICS,
            "experiments.paper_experiments.end_to_end.METRICS": end_to_end.METRICS,
            "experiments.sweep_rows.SUMMARY_METRICS": sweep_rows.SUMMARY_METRICS,
            "experiments.sweep.execute.RESULT_METRICS": execute.RESULT_METRICS}


def test_every_metric_a_view_shows_is_in_the_table():
    unknown = {view: [m for m in names if m not in METRIC_TABLE] for view, names in _views().items()}
    assert {v: ms for v, ms in unknown.items() if ms} == {}
    assert all(len(set(names)) == len(names) for names in _views().values())


def test_a_name_not_in_the_table_is_refused():
    assert metric_names("mean_ttft_s", "utilization") == ("mean_ttft_s", "utilization")
    with pytest.raises(KeyError, match="'mean_ttft' is not a metric"):
        metric_names("mean_ttft_s", "mean_ttft")
    with pytest.raises(ValueError, match="better must be one of"):
        Metric("x_s", "s", "smaller", "x")


def test_the_table_names_each_metric_once_and_covers_the_run_summary():
    assert len(METRIC_TABLE) == len(METRIC_ROWS)
    assert [k for k in SUMMARY_KEYS if k not in ("policy", "workload") and k not in METRIC_TABLE] == []


def test_shares_are_bounded_by_one_and_the_rest_only_below():
    shares = tuple(m.name for m in METRIC_ROWS if m.is_share)
    assert shares == ("slo_attainment_token_weighted", "slo_attainment_requests", "prefix_hit_rate", "utilization")
    assert metric("prefix_hit_rate").bounds == (0.0, 1.0)
    assert metric("kv_transfer_bytes").bounds == (0.0, math.inf)
    assert metric("mean_ttft_s").better == "lower" and metric("slo_attainment_requests").better == "higher"


def test_report_bounds_read_the_table():
    from experiments.report_runs import metric_bounds

    assert all(metric_bounds(m.name) == m.bounds for m in METRIC_ROWS)
    with pytest.raises(KeyError):
        metric_bounds("not_a_metric")
