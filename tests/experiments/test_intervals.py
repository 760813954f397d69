"""One Student-t interval for every table (issue #43 item 6): equal values over seeds give exactly
a zero half-width and no printed interval (was ``1.528 [1.528, 1.528]``, half-width 6.8e-16),
and a bound clipped to the quantity's range is marked (was a silent ``[0.000, 4576.191]``)."""

from __future__ import annotations

import math

import pytest


@pytest.mark.parametrize("value", [1.528, 0.1, 1057.789, 0.7])
def test_equal_values_give_an_exact_zero_half_width(value):
    from envs.metrics.stats import mean_ci95
    from experiments.report import ci95_halfwidth, ci95_interval

    for n in (2, 3, 5, 10):
        assert mean_ci95([value] * n) == (value, 0.0)
        assert ci95_halfwidth([value] * n) == 0.0
        assert ci95_interval([value] * n) == (value, value)
    assert math.isnan(mean_ci95([value])[1])


def test_report_and_evaluate_share_one_interval():
    from envs.metrics.stats import mean_ci95
    from experiments import report

    vals = [1.0, 2.5, 2.0, 7.0]
    assert report.ci95_halfwidth(vals) == mean_ci95(vals)[1]
    assert not hasattr(report, "_T975")  # no second t table to drift from the first


def _row(values, metric="mean_ttft_s"):
    """A report table row of ``values`` over seeds (as :func:`experiments.report._aggregate` builds it)."""
    from experiments.report import ci95_halfwidth, ci95_interval
    from experiments.report_runs import metric_bounds

    row = {metric: sum(values) / len(values), metric + "_ci95": ci95_halfwidth(values)}
    row[metric + "_ci95_low"], row[metric + "_ci95_high"] = ci95_interval(values, *metric_bounds(metric))
    return row


def test_report_cells_print_no_interval_for_equal_seeds_and_mark_clipped_bounds():
    from experiments.report import CLIPPED_MARK, _fmt

    assert _fmt(_row([1.528] * 3), "mean_ttft_s") == "1.528"
    # two seeds: the t interval 1057.8 ± 3518.4 reaches below 0; clipped there, and marked
    assert _fmt(_row([780.8805, 1334.6975]), "mean_ttft_s") == f"1057.789 [0.000{CLIPPED_MARK}, 4576.188]"
    # a share clipped at both ends: hit rate 5 % and 68 %
    assert _fmt(_row([0.05, 0.68], "prefix_hit_rate"), "prefix_hit_rate", 100, 1) == \
        f"36.5 [0.0{CLIPPED_MARK}, 100.0{CLIPPED_MARK}]"
    # an interval inside the range is not marked
    assert _fmt(_row([1.0, 1.2, 1.1]), "mean_ttft_s") == "1.100 [0.852, 1.348]"


def test_evaluate_cells_print_no_interval_for_equal_episodes():
    from envs.metrics.stats import ci_text, mean_ci95

    assert ci_text(*mean_ci95([1.528] * 4)) == "1.528"
    assert ci_text(*mean_ci95([1.0, 2.0, 3.0])) == "2.000 ± 2.484"
    assert ci_text(*mean_ci95([0.5])) == "0.500"
    assert ci_text(math.nan, math.nan) == "-"


def test_values_apart_by_rounding_only_give_a_zero_half_width():
    from envs.metrics.stats import mean_ci95

    a, b = 0.1 + 0.2, 0.3  # one share computed two ways: 5.6e-17 apart
    assert a != b
    m, h = mean_ci95([a, b, a])
    assert h == 0.0 and m == pytest.approx(0.3)
    assert mean_ci95([0.3, 0.3 + 1e-9])[1] > 0  # a real (if small) spread keeps its interval
