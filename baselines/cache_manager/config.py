"""Parameters of the global prefix-cache manager (paper §7; design: docs/cache_manager.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class CacheManagerConfig:
    """Parameters of the global prefix-cache manager.

    Defaults come from two sensitivity sweeps on tool-agent at 48 req/s (40 H20-3e GPUs
    ``cp4x6,cp2x8``; tuning seeds 0-2; seeds 3-5 are held out for the evaluation, ``cpgym
    reproduce --experiments cache``):

    1. ``experiments/specs/cache-manager-sweep.yaml`` (``results/cache-ablation/manager-sweep/``):
       scan period x inter-degree x intra-degree x reclaim thresholds at the then per-scan cap of
       8: scan 5 s and inter-degree 0.05 s (every 5 s setting beat every 20 s one);
    2. ``experiments/specs/cache-manager-replication-sweep.yaml``
       (``results/cache-ablation/manager-replication-sweep/``): per-scan cap {8, 32, 128, 512} x
       intra-degree threshold {2, 1, 0.5, 0.3} at reclaim 0.1: cap 512, intra-degree 0.3 had the
       best mean-TTFT change (−12.3 ± 6.4 % vs local caches only; the first sweep's best, cap 8 /
       intra 2, −4.7 ± 1.1 %). The cap of 8 and the threshold of 2 requests per replica per scan
       were sized for a few hot shared prefixes; Tool-Agent's within-session prefixes (agent
       prompt + task, one call every ~5.5 s, a few hundred sessions alive at once) stayed below
       them, so a session's calls could only keep their prefix hit on the one worker holding it
       and queued behind it. A second replica per live session gives the router a choice of
       cache-preserving placements (paper §9: "replication expands cache-preserving placement
       choices"); this costs KV-link traffic (~0.8 TB per 300 s at 48 req/s vs 0.07 TB).

    The first sweep's defaults stay available as ``CACHE_MANAGER_SETTINGS["sweep-1"]``, the
    paper's 20 s scan with this implementation's earliest thresholds as ``"paper-20s"``. The
    paper gives no threshold or cap values.

    Args:
        scan_interval_s: period of the replication/reclamation scan [s]. Paper §7/§8: fixed
            interval; 20 s in the paper's deployment. Default 5 s (sweep above): a replica
            requested at one scan is installed before the next, while the Tool-Agent sessions
            that asked for it still run.
        decay: factor in (0, 1] applied to every statistic at every scan. 0.5 halves the weight
            of older windows each scan (half-life = one scan interval), so a decayed count just
            after a scan is about one window's worth of steady-state demand.
        inter_degree_threshold_s: missed benefit [s of predicted service time] a node needs at a
            degree without replica to trigger a first replica there. Default 0.05 s (sweep above;
            0.2 s, the earlier default, is within the CI): a prefix block saves roughly
            0.01-0.03 s per request on the shipped calibration, so a few missed requests per scan.
        intra_degree_threshold: per-replica demand [decayed requests] that triggers one more
            replica at the same degree. Default 0.3 (sweep 2 above): a prefix asked for about
            once per scan by its session (decayed count ~0.5-1.8) gets a second replica; 2 (sweep
            1) reached only the shared agent prompts.
        reclaim_threshold: per-replica demand [decayed requests] below which a duplicate
            replica is reclaimed. Default 0.1 (below the replication threshold: hysteresis; a
            session's replica is reclaimed about two scans after its last call; 0.25 / 1.0 made
            no difference in sweep 1).
        max_replications_per_scan: cap on replications started per scan (paper: per-round cap).
            Default 512 (sweep 2; 128 was within 0.6 pp, 8 and 32 bound the replication of
            session prefixes).
        max_reclamations_per_scan: cap on blocks reclaimed per scan.
        max_replica_share: a replica may need at most this share of the destination's capacity
            in new blocks (keeps a replication from flushing the destination's cache).
        beta, lambda_: weights of the Vertumnus cost used for the preferred degree (paper §5;
            defaults of :class:`baselines.vertumnus.VertumnusParams`).
        cross_degree_bytes_factor: multiplies the bytes of a copy between different CP degrees
            (shard repartitioning; docs/cache_manager.md). Default 1.0.
        backlog_bound: when True, a replication skips destinations with more than
            ``scan_interval_s`` of outstanding work (the horizon of the demand that asks for the
            replica; derivation and measurement: docs/cache_manager.md "Replication"). Default
            False: the manager the cache sweeps above measured (``vertumnus-global-cache``,
            ``vertumnus-paper-rule``, ``vertumnus-lookahead``); ``vertumnus`` sets it (issue #40,
            do no harm under overload).

    Raises:
        ValueError: naming the offending field.
    """

    scan_interval_s: float = 5.0
    decay: float = 0.5
    inter_degree_threshold_s: float = 0.05
    intra_degree_threshold: float = 0.3
    reclaim_threshold: float = 0.1
    max_replications_per_scan: int = 512
    max_reclamations_per_scan: int = 64
    max_replica_share: float = 0.25
    beta: float = 1.0
    lambda_: float = 1.0
    cross_degree_bytes_factor: float = 1.0
    backlog_bound: bool = False

    def __post_init__(self) -> None:
        def check(ok: bool, msg: str) -> None:
            if not ok:
                raise ValueError(f"cache manager {msg}")

        check(self.scan_interval_s > 0 and math.isfinite(self.scan_interval_s),
              f"scan_interval_s must be a finite number > 0, got {self.scan_interval_s!r}")
        check(0 < self.decay <= 1, f"decay must be in (0, 1], got {self.decay!r}")
        check(self.inter_degree_threshold_s > 0,
              f"inter_degree_threshold_s must be > 0, got {self.inter_degree_threshold_s!r}")
        check(self.intra_degree_threshold > 0, f"intra_degree_threshold must be > 0, got {self.intra_degree_threshold!r}")
        check(0 <= self.reclaim_threshold < self.intra_degree_threshold,
              f"reclaim_threshold must be >= 0 and below intra_degree_threshold ({self.intra_degree_threshold}), "
              f"got {self.reclaim_threshold!r}")
        check(isinstance(self.max_replications_per_scan, int) and self.max_replications_per_scan >= 0,
              f"max_replications_per_scan must be an integer >= 0, got {self.max_replications_per_scan!r}")
        check(isinstance(self.max_reclamations_per_scan, int) and self.max_reclamations_per_scan >= 0,
              f"max_reclamations_per_scan must be an integer >= 0, got {self.max_reclamations_per_scan!r}")
        check(0 < self.max_replica_share <= 1, f"max_replica_share must be in (0, 1], got {self.max_replica_share!r}")
        check(self.beta >= 1 and math.isfinite(self.beta), f"beta must be a finite number >= 1 (paper §5), got {self.beta!r}")
        check(self.lambda_ >= 0 and math.isfinite(self.lambda_),
              f"lambda_ must be a finite number >= 0 (paper §5), got {self.lambda_!r}")
        check(isinstance(self.backlog_bound, bool), f"backlog_bound must be a bool, got {self.backlog_bound!r}")
        check(self.cross_degree_bytes_factor >= 1,
              f"cross_degree_bytes_factor must be >= 1, got {self.cross_degree_bytes_factor!r}")


#: Named manager settings: ``"default"`` (the sweep-chosen defaults above), ``"sweep-1"`` (the
#: first sweep's choice: intra-degree 2, reclaim 0.25, cap 8) and ``"paper-20s"`` (the paper's
#: 20 s scan, paper §8, with this implementation's earliest thresholds: inter-degree 0.2 s,
#: intra-degree 8, reclaim 0.5, cap 8). The registry's ``vertumnus-global-cache-20s`` uses the latter.
CACHE_MANAGER_SETTINGS: dict[str, CacheManagerConfig] = {
    "default": CacheManagerConfig(),
    "sweep-1": CacheManagerConfig(intra_degree_threshold=2.0, reclaim_threshold=0.25, max_replications_per_scan=8),
    "paper-20s": CacheManagerConfig(scan_interval_s=20.0, inter_degree_threshold_s=0.2, intra_degree_threshold=8.0,
                                    reclaim_threshold=0.5, max_replications_per_scan=8),
}
