"""The one table of per-run metrics: every number a run's summary (:func:`envs.metrics.summarize`),
a sweep cell's ``summary.json`` or an evaluation's per-episode row reports, with its unit, which
direction is better, its range and a short label.

Each view (``cpgym evaluate``'s rows, ``cpgym report``, the paper experiments, the controller
selection) still chooses which metrics it shows, as a named tuple next to its use, built with
:func:`metric_names` so that a name not in this table fails at import.

Paired comparisons of two policies (``experiments.reproduce.METRICS``: changes in percent or
percentage points) are not per-run metrics and are not listed here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Directions of :attr:`Metric.better`: lower is better, higher is better, or neither (a size or a
#: setting of the run, e.g. its number of requests or GPUs).
DIRECTIONS = ("lower", "higher", "neither")


@dataclass(frozen=True)
class Metric:
    """One per-run metric.

    Args:
        name: the key in summaries, ``summary.json`` and CSV rows (unit in the name where it has one).
        unit: ``"s"``, ``"GPU s"``, ``"bytes"``, ``"requests/s"``, ``"share"`` (a fraction in
            [0, 1]) or ``"count"``.
        better: one of :data:`DIRECTIONS`.
        label: short label for tables and figure axes.

    Raises:
        ValueError: an empty name or label, or ``better`` not in :data:`DIRECTIONS`.
    """

    name: str
    unit: str
    better: str
    label: str

    def __post_init__(self) -> None:
        if not self.name or not self.label:
            raise ValueError(f"metric {self.name!r}: name and label must be non-empty")
        if self.better not in DIRECTIONS:
            raise ValueError(f"metric {self.name!r}: better must be one of {', '.join(DIRECTIONS)}, got {self.better!r}")

    @property
    def is_share(self) -> bool:
        """True for a fraction in [0, 1] (attainment, hit rate, utilization)."""
        return self.unit == "share"

    @property
    def bounds(self) -> tuple[float, float]:
        """The metric's range: ``(0, 1)`` for a share, ``(0, inf)`` for the rest (times, bytes, counts)."""
        return (0.0, 1.0) if self.is_share else (0.0, math.inf)


#: Every per-run metric, in the order of :data:`envs.metrics.SUMMARY_KEYS` and then the extra keys
#: of :func:`envs.metrics.summarize`, of a sweep cell's ``summary.json`` (``experiments.sweep.execute``)
#: and of a benchmark episode row (``benchmark.protocol``).
METRIC_ROWS: tuple[Metric, ...] = (
    Metric("num_requests", "count", "neither", "requests"),
    Metric("num_unfinished", "count", "lower", "unfinished requests"),
    Metric("mean_ttft_s", "s", "lower", "mean TTFT [s]"),
    Metric("p50_ttft_s", "s", "lower", "P50 TTFT [s]"),
    Metric("p90_ttft_s", "s", "lower", "P90 TTFT [s]"),
    Metric("p99_ttft_s", "s", "lower", "P99 TTFT [s]"),
    Metric("slo_attainment_token_weighted", "share", "higher", "SLO attainment (token-weighted)"),
    Metric("slo_attainment_requests", "share", "higher", "SLO attainment (requests)"),
    Metric("prefix_hit_rate", "share", "higher", "prefix hit rate"),
    Metric("mean_queueing_delay_s", "s", "lower", "mean queueing delay [s]"),
    Metric("p90_queueing_delay_s", "s", "lower", "P90 queueing delay [s]"),
    Metric("gpu_time_s", "GPU s", "lower", "GPU time [GPU s]"),
    Metric("utilization", "share", "neither", "GPU utilization"),
    Metric("sim_time_s", "s", "neither", "simulated time [s]"),
    Metric("wall_time_s", "s", "lower", "wall time [s]"),
    Metric("num_rejected", "count", "lower", "rejected requests"),
    Metric("kv_transfer_bytes", "bytes", "lower", "KV transferred [bytes]"),
    Metric("num_redirected", "count", "neither", "redirected requests"),
    Metric("num_gpus", "count", "neither", "GPUs"),
    Metric("requests_per_wall_s", "requests/s", "higher", "simulated requests per wall second"),
    Metric("workload_rate_rps", "requests/s", "neither", "request rate [requests/s]"),
    Metric("num_kv_transfers", "count", "lower", "KV transfers"),
    Metric("num_workers_final", "count", "neither", "workers at the end"),
    Metric("num_operations", "count", "neither", "reconfiguration operations"),
    Metric("num_committed_operations", "count", "neither", "committed reconfigurations"),
)

#: ``{name: Metric}`` of :data:`METRIC_ROWS` (names are unique: tests/envs/test_metric_table.py).
METRIC_TABLE: dict[str, Metric] = {m.name: m for m in METRIC_ROWS}


def metric(name: str) -> Metric:
    """The table's row of ``name``.

    Raises:
        KeyError: ``name`` is not in :data:`METRIC_ROWS` (the message names it).
    """
    try:
        return METRIC_TABLE[name]
    except KeyError:
        raise KeyError(f"{name!r} is not a metric of envs.metrics.table") from None


def metric_names(*names: str) -> tuple[str, ...]:
    """``names`` as a tuple, each checked against the table: how a view declares the metrics it shows.

    Raises:
        KeyError: a name not in :data:`METRIC_ROWS`.
    """
    for n in names:
        metric(n)
    return names


__all__ = ["DIRECTIONS", "Metric", "METRIC_ROWS", "METRIC_TABLE", "metric", "metric_names"]
