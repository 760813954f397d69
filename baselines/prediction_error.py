"""Prediction-error accounting of a run (paper §5; walk-through: "monitor prediction error and
real waiting, bucketed by CP degree, cache ratio and request length").

Per request (from ``SimResult.records``):

* service: predicted ``predicted_service_s`` (router's ``E_C(R, P)`` at routing, with the hit
  seen at routing) vs actual ``actual_service_s`` (compute time of the engine step that ran it; in
  a batched step this includes its batch-mates' work, so batching shows up as under-prediction;
  the step's wait for fetched or reconciled KV is not in it but in ``kv_fetch_wait_s``, which
  neither prediction covers);
* wait: predicted ``predicted_wait_s`` (``q_w`` at routing) vs actual ``start_s -
  first_dispatch_s`` (time from the last routing to the step start; equals queueing for requests
  routed once).

Relative error = ``actual / predicted - 1`` (positive: under-predicted). Buckets:
CP degree of the worker that ran it; cache ratio ``routed_cached_tokens / L`` in
``[0, .25) [.25, .5) [.5, .75) [.75, 1]``; prompt length L in ``<1k, 1k-4k, 4k-16k, 16k-64k,
>=64k`` tokens. Requests that never started are excluded (counted in ``num_excluded``).
"""

from __future__ import annotations

import numpy as np

from envs.sim.simulator import SimResult

CACHE_RATIO_EDGES = (0.0, 0.25, 0.5, 0.75)
CACHE_RATIO_LABELS = ("0-25%", "25-50%", "50-75%", "75-100%")
LENGTH_EDGES_TOKENS = (0, 1024, 4096, 16384, 65536)
LENGTH_LABELS = ("<1k", "1k-4k", "4k-16k", "16k-64k", ">=64k")

COLUMNS = ("group_by", "bucket", "num_requests", "mean_predicted_service_s", "mean_actual_service_s",
           "mean_service_rel_error", "mean_abs_service_rel_error", "mean_predicted_wait_s", "mean_actual_wait_s",
           "mean_wait_error_s", "mean_abs_wait_error_s")


def request_errors(result: SimResult):
    """Per-request predicted/actual service and wait with the bucket labels (pandas DataFrame)."""
    import pandas as pd

    r = result.records
    started = ~np.isnan(r["start_s"]) & ~np.isnan(r["actual_service_s"])
    L = r["num_prompt_tokens"][started]
    ratio = r["routed_cached_tokens"][started] / np.maximum(L, 1)
    df = pd.DataFrame({
        "request_id": r["request_id"][started],
        "degree": r["degree"][started],
        "num_prompt_tokens": L,
        "cache_ratio": ratio,
        "predicted_service_s": r["predicted_service_s"][started],
        "actual_service_s": r["actual_service_s"][started],
        "predicted_wait_s": r["predicted_wait_s"][started],
        "actual_wait_s": (r["start_s"] - r["first_dispatch_s"])[started],
    })
    df["cache_bucket"] = np.array(CACHE_RATIO_LABELS)[np.searchsorted(CACHE_RATIO_EDGES, ratio, side="right") - 1]
    df["length_bucket"] = np.array(LENGTH_LABELS)[np.searchsorted(LENGTH_EDGES_TOKENS, L, side="right") - 1]
    df["service_rel_error"] = df["actual_service_s"] / df["predicted_service_s"] - 1.0
    df["wait_error_s"] = df["actual_wait_s"] - df["predicted_wait_s"]
    return df


def summarize_prediction_errors(result: SimResult):
    """Prediction errors summarised by CP degree, cache-ratio bucket and length bucket, plus an
    ``all`` row.

    Returns:
        pandas DataFrame with :data:`COLUMNS` (times [s]; relative errors as fractions), one row
        per (group_by, bucket), ``group_by`` in ``all | degree | cache_ratio | length``.
    """
    import pandas as pd

    df = request_errors(result)
    rows = []

    def add(group_by: str, bucket: str, g) -> None:
        rows.append({
            "group_by": group_by, "bucket": bucket, "num_requests": int(len(g)),
            "mean_predicted_service_s": float(g["predicted_service_s"].mean()),
            "mean_actual_service_s": float(g["actual_service_s"].mean()),
            "mean_service_rel_error": float(g["service_rel_error"].mean()),
            "mean_abs_service_rel_error": float(g["service_rel_error"].abs().mean()),
            "mean_predicted_wait_s": float(g["predicted_wait_s"].mean()),
            "mean_actual_wait_s": float(g["actual_wait_s"].mean()),
            "mean_wait_error_s": float(g["wait_error_s"].mean()),
            "mean_abs_wait_error_s": float(g["wait_error_s"].abs().mean()),
        })

    if len(df):
        add("all", "all", df)
    for deg, g in df.groupby("degree", sort=True):
        add("degree", f"cp{int(deg)}", g)
    for label in CACHE_RATIO_LABELS:
        g = df[df["cache_bucket"] == label]
        if len(g):
            add("cache_ratio", label, g)
    for label in LENGTH_LABELS:
        g = df[df["length_bucket"] == label]
        if len(g):
            add("length", label, g)
    out = pd.DataFrame(rows, columns=list(COLUMNS))
    out.attrs["num_excluded"] = int(result.num_requests - len(df))
    return out


__all__ = ["request_errors", "summarize_prediction_errors", "COLUMNS"]
