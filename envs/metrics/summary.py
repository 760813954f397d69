"""Run metrics: per-request table and summary (paper §3 objectives).

* TTFT = queueing + prefill + KV hand-off to decode + first decode step [s].
* Token-weighted TTFT SLO attainment = sum of L over requests meeting their TTFT SLO / sum of
  L over all requests (paper §3); request-level attainment counts requests instead.
  Requests unfinished at the horizon (or rejected) count as misses and are reported.
* Prefix hit rate (token-weighted) = sum of cached tokens / sum of prompt tokens over the
  requests that started.
* With KV tiers (``envs/sim/tiers.py``): hit rate per tier (``hbm_hit_rate`` + ``dram_hit_rate``
  + ``store_hit_rate`` = ``prefix_hit_rate``, same denominator), bytes fetched and demoted per
  tier, fetches and recompute decisions, fetch time hidden behind queueing vs exposed, and
  link utilisation (busy share of each PCIe / NIC link).
* GPU-time = sum over engine steps of step time x CP degree [GPU s]; utilisation = GPU-time /
  (num_gpus x simulated time).
"""

from __future__ import annotations

import math

import numpy as np

from envs.sim.simulator import SimResult

SUMMARY_KEYS = (
    "policy", "workload", "num_requests", "num_unfinished", "mean_ttft_s", "p50_ttft_s", "p90_ttft_s", "p99_ttft_s",
    "slo_attainment_token_weighted", "slo_attainment_requests", "prefix_hit_rate", "mean_queueing_delay_s",
    "p90_queueing_delay_s", "gpu_time_s", "utilization", "sim_time_s", "wall_time_s",
)


#: summary keys of runs with a fault model: requests whose running/queued work a fault hit (or
#: whose step a straggler slowed), engine-step GPU time lost to failures [GPU s], the longest
#: fault -> capacity-restored time [s] (envs/sim/faults.py FaultRecord.recovery_time_s).
FAULT_KEYS = ("num_faults", "num_fault_affected_requests", "recompute_gpu_time_s", "recovery_time_s", "num_unrecovered_faults")


def _pct(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if len(x) else math.nan


def summarize(result: SimResult) -> dict:
    """Summary metrics of a run.

    Returns:
        dict with ``SUMMARY_KEYS`` (TTFT statistics over finished requests [s]; attainment and
        hit rate as shares in [0, 1]; ``gpu_time_s`` [GPU s]; ``utilization`` in [0, 1]) plus
        ``num_rejected``, ``kv_transfer_bytes`` (KV moved over the links [bytes], 0 when none),
        ``num_redirected``, ``num_gpus`` and ``requests_per_wall_s``.
    """
    r = result.records
    ttft = r["ttft_s"]
    finished = ~np.isnan(ttft)
    L = r["num_prompt_tokens"].astype(float)
    met = finished & (ttft <= r["ttft_slo_s"])
    started = ~np.isnan(r["start_s"])
    t = ttft[finished]
    wait = (r["start_s"] - r["arrival_s"])[started]
    n = result.num_requests
    sim_time = result.sim_time_s
    out = {
        "policy": result.policy,
        "workload": result.workload,
        "num_requests": int(n),
        "num_unfinished": int(n - finished.sum()),
        "mean_ttft_s": float(t.mean()) if len(t) else math.nan,
        "p50_ttft_s": _pct(t, 50),
        "p90_ttft_s": _pct(t, 90),
        "p99_ttft_s": _pct(t, 99),
        "slo_attainment_token_weighted": float(L[met].sum() / L.sum()) if n else math.nan,
        "slo_attainment_requests": float(met.sum() / n) if n else math.nan,
        "prefix_hit_rate": float(r["num_cached_tokens"][started].sum() / L[started].sum()) if started.any() else math.nan,
        "mean_queueing_delay_s": float(wait.mean()) if len(wait) else math.nan,
        "p90_queueing_delay_s": _pct(wait, 90),
        "gpu_time_s": float(result.gpu_time_s),
        "utilization": float(result.gpu_time_s / (result.num_gpus * sim_time)) if sim_time > 0 else 0.0,
        "sim_time_s": float(sim_time),
        "wall_time_s": float(result.wall_time_s),
        "num_rejected": int(result.extras.get("num_rejected", 0)),
        # KV bytes moved over the links (replication + reconciliation); 0 when nothing moved
        "kv_transfer_bytes": float(result.extras.get("kv_transfer_bytes", 0)),
        "num_redirected": int((r["num_routings"] > 1).sum()),
        "num_gpus": int(result.num_gpus),
        "requests_per_wall_s": float(n / result.wall_time_s) if result.wall_time_s > 0 else math.nan,
    }
    if "kv_tiers" in result.extras:
        out.update(tier_summary(result, started, L))
    if "faults" in result.extras:  # runs with a fault model (envs/sim/faults.py)
        out.update({k: result.extras[k] for k in FAULT_KEYS})
    return out


TIER_SUMMARY_KEYS = ("hbm_hit_rate", "dram_hit_rate", "store_hit_rate", "dram_fetch_bytes", "store_fetch_bytes",
                     "dram_demoted_bytes", "store_demoted_bytes", "num_fetches", "num_recompute_decisions",
                     "mean_fetch_hidden_s", "mean_fetch_exposed_s", "max_link_utilization")


def tier_summary(result: SimResult, started: np.ndarray, L: np.ndarray) -> dict:
    """Per-run KV-tier metrics (``TIER_SUMMARY_KEYS``); shares in [0, 1], bytes, seconds."""
    r = result.records
    t = result.extras["kv_tiers"]
    denom = L[started].sum()
    fetched = r["kv_fetch_decision"] == 1
    done = fetched & ~np.isnan(r["fetch_exposed_s"])
    util = t["link_utilization"]
    tier_links = {k: v for k, v in util.items() if k.startswith(("pcie", "in", "out"))}
    out = {f"{tier}_hit_rate": float(r[f"{tier}_hit_tokens"][started].sum() / denom) if denom else math.nan
           for tier in ("hbm", "dram", "store")}
    out.update({
        "dram_fetch_bytes": int(t["dram_fetch_bytes"]), "store_fetch_bytes": int(t["store_fetch_bytes"]),
        "dram_demoted_bytes": int(t["dram_demoted_bytes"]), "store_demoted_bytes": int(t["store_demoted_bytes"]),
        "num_fetches": int(fetched.sum()), "num_recompute_decisions": int((r["kv_fetch_decision"] == 2).sum()),
        "mean_fetch_hidden_s": float(r["fetch_hidden_s"][done].mean()) if done.any() else 0.0,
        "mean_fetch_exposed_s": float(r["fetch_exposed_s"][done].mean()) if done.any() else 0.0,
        "max_link_utilization": max(tier_links.values()) if tier_links else 0.0,
        "link_utilization": tier_links,
    })
    return out


def measured_summary(result: SimResult, measure_from_s: float = 0.0) -> dict:
    """Mean / P90 TTFT [s] and token-weighted SLO attainment of the requests arriving at or after
    ``measure_from_s`` (unfinished ones count as SLO misses, as in ``envs.metrics.summarize``)."""
    r = result.records
    keep = r["arrival_s"] >= measure_from_s - 1e-9
    ttft = r["ttft_s"][keep]
    finished = ~np.isnan(ttft)
    L = r["num_prompt_tokens"][keep].astype(float)
    met = finished & (ttft <= r["ttft_slo_s"][keep])
    t = ttft[finished]
    return {"num_requests": int(keep.sum()), "num_unfinished": int((~finished).sum()),
            "mean_ttft_s": float(t.mean()) if len(t) else math.nan,
            "p90_ttft_s": float(np.percentile(t, 90)) if len(t) else math.nan,
            "slo_attainment_token_weighted": float(L[met].sum() / L.sum()) if L.sum() > 0 else math.nan}


def request_table(result: SimResult):
    """Per-request records as a pandas DataFrame (one row per request, columns with units): the
    :class:`SimResult` record arrays plus ``queueing_delay_s`` (start - arrival [s]),
    ``actual_wait_s`` (start - first dispatch [s], the wait that ``predicted_wait_s`` predicts at
    routing; as in ``baselines.prediction_error``), ``met_slo`` and ``policy``."""
    import pandas as pd

    df = pd.DataFrame(result.records)
    df["queueing_delay_s"] = df["start_s"] - df["arrival_s"]
    df["actual_wait_s"] = df["start_s"] - df["first_dispatch_s"]
    df["met_slo"] = df["ttft_s"] <= df["ttft_slo_s"]
    df["policy"] = result.policy
    return df
