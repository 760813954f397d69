"""The paper §9 prefix-cache ablation (paper §7 manager; §9 "Prefix-Cache Ablation") as a library
function: :func:`run_cache_ablation` (``cpgym cache-ablation`` is a thin wrapper;
``experiments/paper/cache-ablation.yaml`` is the same experiment as a spec, tested to agree).

* Workload: the named ``tool-agent`` workload (``envs.workloads``) with ``duration_s`` seconds
  of sessions; its session rate is set to ``rate / 30`` (the generator's 30 calls per session on
  average, so the calls keep their seconds-scale gaps) and the result is time-scaled to exactly ``rate``
  requests/s.
* Policies: ``base_policy`` (default ``vertumnus-router``) and the same policy with a
  :class:`baselines.cache_manager.GlobalCacheManager` attached
  (:func:`baselines.cache_manager.with_global_cache`; ``vertumnus-global-cache`` in the registry).
* Reported per policy and rate: mean / P90 TTFT [s], token-weighted SLO attainment, token-weighted
  prefix hit rate, KV-transfer bytes (replication traffic), link utilisation (busy share of the
  busiest link and the mean over the links used, over the simulated time), replications started.

Paper reference (at its highest rate, 60 requests/s on its testbed): the full manager cut mean
TTFT by 10.3 % and P90 by 18.7 % with a modest token hit-rate gain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from baselines.cache_manager import CACHE_MANAGER_SETTINGS, GlobalCacheManager, with_global_cache
from baselines.capacity import CapacityDefinition, RatedWorkload, find_capacity
from baselines.registry import get_policy
from baselines.runner import build_simulator
from envs.metrics import summarize
from envs.sim.options import option as _opt
from envs.workloads import WorkloadSource
from envs.workloads.arrivals import PoissonArrivals
from envs.workloads.synthetic import tool_agent_sessions

DEFAULT_RATES_RPS = (20.0, 30.0, 40.0, 50.0, 55.0)


def _default_mean_calls() -> float:
    import inspect

    return float(inspect.signature(tool_agent_sessions).parameters["mean_calls"].default)


MEAN_CALLS_PER_SESSION = _default_mean_calls()  # tool_agent_sessions' default mean_calls (30)



@dataclass(frozen=True)
class CacheAblationConfig:
    """Settings of the cache ablation (one ``cpgym cache-ablation`` flag per field).

    Raises:
        ValueError: naming the field, on an empty rate list, a repeated rate, a rate, duration or
            scan interval that is not a finite number > 0, or a negative seed.
    """

    rates_rps: tuple[float, ...] = _opt(DEFAULT_RATES_RPS, "request rates [requests/s]", flag="--rates", metavar="R1,R2,...")
    duration_s: float = _opt(300.0, "simulated seconds of tool-agent sessions")
    workload_seed: int = _opt(0, "seed of the tool-agent generator")
    base_policy: str = _opt("vertumnus-router", "policy run with local caches only")
    manager_setting: str = _opt("default", "named cache-manager setting (baselines.cache_manager.CACHE_MANAGER_SETTINGS): "
                                           "default (5 s scan, swept thresholds and cap), sweep-1 (the first sweep's choice) "
                                           "or paper-20s (the paper's 20 s scan)")
    scan_interval_s: float | None = _opt(None, "cache-manager scan period [s] overriding the setting's")

    def __post_init__(self) -> None:
        object.__setattr__(self, "rates_rps", tuple(float(r) for r in self.rates_rps))
        if not self.rates_rps or not all(r > 0 and math.isfinite(r) for r in self.rates_rps):
            raise ValueError(f"cache-ablation: rates_rps must be finite numbers > 0, got {list(self.rates_rps)}")
        if len(set(self.rates_rps)) < len(self.rates_rps):  # each rate ran again and was reported twice
            raise ValueError(f"cache-ablation: rates_rps must be distinct rates, got {list(self.rates_rps)}")
        if not (self.duration_s > 0 and math.isfinite(self.duration_s)):
            raise ValueError(f"cache-ablation: duration_s must be a finite number > 0, got {self.duration_s}")
        if self.workload_seed < 0:
            raise ValueError(f"cache-ablation: workload_seed must be >= 0, got {self.workload_seed}")

        if self.manager_setting not in CACHE_MANAGER_SETTINGS:
            raise ValueError(f"cache-ablation: manager_setting must be one of {sorted(CACHE_MANAGER_SETTINGS)}, "
                             f"got {self.manager_setting!r}")
        if self.scan_interval_s is not None and not (self.scan_interval_s > 0 and math.isfinite(self.scan_interval_s)):
            raise ValueError(f"cache-ablation: scan_interval_s must be a finite number > 0, got {self.scan_interval_s}")

    def workload_source(self, rate_rps: float):
        """The :class:`~envs.workloads.WorkloadSource` at one rate: ``rate_rps / MEAN_CALLS_PER_SESSION`` sessions/s,
        time-scaled to exactly ``rate_rps``."""
        return WorkloadSource(name="tool-agent", seed=self.workload_seed, target_rps=rate_rps,
                              params=(("duration_s", self.duration_s),
                                      ("session_arrivals", PoissonArrivals(rate_rps / MEAN_CALLS_PER_SESSION))))


@dataclass(frozen=True)
class CacheAblationResult:
    """Outcome of :func:`run_cache_ablation`: ``rows``, one dict per (rate, policy) in run order
    (local caches first) with the ``envs.metrics.summarize`` metrics plus ``rate_rps``,
    ``policy``, ``kv_transfer_bytes``, ``max_link_utilization``, ``mean_link_utilization``,
    ``num_replications`` and ``manager`` (the manager's counters, empty without one)."""

    rows: list


#: Native rate of :class:`ToolAgentRated` [requests/s]: the ``tool-agent`` generator's default
#: session rate (3.1 sessions/s) x its mean calls per session (30) — the default workload's rate.
TOOL_AGENT_REFERENCE_RATE_RPS = 3.1 * MEAN_CALLS_PER_SESSION
#: Pool size the reference rate belongs to (the default pool: 40 GPUs, ``cp4x6,cp2x8``).
TOOL_AGENT_REFERENCE_NUM_GPUS = 40
#: Lowest rate factor of the capacity search on :class:`ToolAgentRated`: 0.25 x 93 = 23 req/s,
#: ~0.8 sessions/s, ~100 sessions alive at once (0.4-0.45 of the capacities measured with it on
#: 40 GPUs), so every probe holds many sessions.
TOOL_AGENT_MIN_RATE_SCALE = 0.25


def _rated_base():
    return RatedWorkload


@dataclass(frozen=True)
class ToolAgentRated(_rated_base()):
    """The cache ablation's tool-agent workload at any rate, for the capacity search
    (:func:`baselines.capacity.find_capacity`, the machinery of ``cpgym capacity``): rate factor
    ``x`` is :meth:`CacheAblationConfig.workload_source` at ``x * reference_rate_rps`` — sessions
    start ``x`` times as often and the calls keep their seconds-scale gaps (a plain
    :class:`~baselines.capacity.RatedWorkload` of ``tool-agent`` would stretch the gaps by
    ``1 / x``), so a capacity measured here is the capacity of the workload the ablation runs.

    The search starts at ``min_rate_scale`` (default :data:`TOOL_AGENT_MIN_RATE_SCALE`) instead of
    the definition's ~100-request light load: there a 600 s window holds a handful of sessions,
    and the thirds' mean slowdowns (TTFT over the *uncached* isolated TTFT) differ by 1.4-1.5x
    through their sessions' prefix hits alone (measured: seed 4, 0.34 req/s, SLO 1.0, judged
    overloaded), which stopped the doubling at 0.3-1.3 req/s.

    Args:
        arrival_window_length_s: simulated seconds of sessions (the ablation's ``duration_s``), > 0.
        seed: workload seed.
        reference_rate_rps: the rate at factor 1 [requests/s] (default
            :data:`TOOL_AGENT_REFERENCE_RATE_RPS`), > 0.
        min_rate_scale: lowest factor probed (:class:`~baselines.capacity.RatedWorkload`).

    Raises:
        ValueError: on a bad window, ``start_s != 0`` or a reference rate <= 0.
    """

    name: str | None = "tool-agent"
    min_rate_scale: float = TOOL_AGENT_MIN_RATE_SCALE
    reference_rate_rps: float = TOOL_AGENT_REFERENCE_RATE_RPS

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.name != "tool-agent" or self.base is not None or self.start_s != 0.0:
            raise ValueError("ToolAgentRated is the tool-agent workload from t = 0 (no trace, name or start_s)")
        if not (self.reference_rate_rps > 0 and math.isfinite(self.reference_rate_rps)):
            raise ValueError(f"reference_rate_rps must be a finite number > 0, got {self.reference_rate_rps}")

    def at_scale(self, rate_scale: float):
        """The ablation's workload at ``rate_scale * reference_rate_rps`` requests/s."""
        return tool_agent_at_rate(rate_scale * self.reference_rate_rps, self.arrival_window_length_s, self.seed)

    def fingerprint(self) -> dict:
        return {"family": "cache-ablation tool-agent", "seed": self.seed, "window_s": self.arrival_window_length_s,
                "reference_rate_rps": self.reference_rate_rps, "mean_calls": MEAN_CALLS_PER_SESSION,
                "min_rate_scale": self.min_rate_scale}


def tool_agent_capacity(config, duration_s: float = 300.0, seed: int = 0, base_policy: str = "vertumnus-router",
                        definition=None, cache_dir=None, log=None):
    """Capacity (sustainable rate, :mod:`baselines.capacity`) of ``base_policy`` with local
    caches only on the ablation's tool-agent workload (:class:`ToolAgentRated`, reference rate
    :data:`TOOL_AGENT_REFERENCE_RATE_RPS` x pool GPUs / 40), on ``config`` (pool, SLO; its seed is
    replaced by ``seed``).

    Returns:
        :class:`baselines.capacity.CapacityResult`.

    Raises:
        ValueError: on an unknown policy or a window with too few requests.
    """
    # the reference rate follows the pool size (the default 93 req/s is ~0.6 of the 40-GPU pool's
    # capacity), so the search's floor (TOOL_AGENT_MIN_RATE_SCALE) is the same share of any pool's
    reference = TOOL_AGENT_REFERENCE_RATE_RPS * config.pool.num_gpus / TOOL_AGENT_REFERENCE_NUM_GPUS
    rated = ToolAgentRated(arrival_window_length_s=duration_s, seed=seed, reference_rate_rps=reference)
    return find_capacity(base_policy, rated, replace(config, seed=seed), definition=definition or CapacityDefinition(),
                         cache_dir=cache_dir, log=log)


def tool_agent_at_rate(rate_rps: float, duration_s: float, seed: int):
    """The ``tool-agent`` workload with ``rate_rps / MEAN_CALLS_PER_SESSION`` sessions/s, time-scaled to ``rate_rps``."""
    cfg = CacheAblationConfig(rates_rps=(rate_rps,), duration_s=duration_s, workload_seed=seed)
    return cfg.workload_source(rate_rps).build()


def run_one(spec, workload, config) -> dict:
    """Runs one policy; returns its summary plus transfer bytes, link utilisation and the
    manager's counters (if attached)."""
    sim, spec = build_simulator(spec, workload, config)
    managers: list[GlobalCacheManager] = []
    for fn in sim.dispatch_listeners:
        owner = getattr(fn, "__self__", None)
        if isinstance(owner, GlobalCacheManager):
            managers.append(owner)
    result = sim.run(spec.make_router())
    s = summarize(result)
    util = sim.links.utilization(result.sim_time_s)
    s["kv_transfer_bytes"] = int(sim.links.total_bytes)
    s["max_link_utilization"] = max(util.values()) if util else 0.0
    s["mean_link_utilization"] = sum(util.values()) / len(util) if util else 0.0
    stats = managers[0].stats() if managers else {}
    s["num_replications"] = stats.get("num_inter_degree_replications", 0) + stats.get("num_intra_degree_replications", 0)
    s["manager"] = stats
    return s


def policies(cfg: CacheAblationConfig):
    """``(local caches, with the global manager)`` policy specs of ``cfg``.

    Raises:
        ValueError: on an unknown base policy.
    """
    base = get_policy(cfg.base_policy)
    mgr_cfg = CACHE_MANAGER_SETTINGS[cfg.manager_setting]
    if cfg.scan_interval_s is not None:
        mgr_cfg = replace(mgr_cfg, scan_interval_s=cfg.scan_interval_s)
    params = getattr(base.make_router(), "params", None)
    if params is not None and hasattr(params, "lambda_"):
        mgr_cfg = replace(mgr_cfg, beta=params.beta, lambda_=params.lambda_)
    # the router's managed variant keeps its registry name
    return base, with_global_cache(base, mgr_cfg, "vertumnus-global-cache" if base.name == "vertumnus-router" else None)


def cache_ablation_plan(cfg: CacheAblationConfig, config) -> list[tuple]:
    """The runs of :func:`run_cache_ablation` without running them: ``(WorkloadSource, SimConfig,
    policy name)`` per rate and policy, in run order."""
    names = [spec.name for spec in policies(cfg)]
    return [(cfg.workload_source(rate), config, name) for rate in cfg.rates_rps for name in names]


def run_cache_ablation(cfg: CacheAblationConfig, config, on_row=None) -> CacheAblationResult:
    """Runs both policies at every rate of ``cfg`` on the simulator ``config`` (pool, seed, SLO);
    ``on_row``: optional ``callable(rows)`` called after each run with the rows so far
    (``cpgym cache-ablation --out`` writes them, so a run stopped midway keeps its finished runs).

    Raises:
        ValueError: on an unknown base policy or a composition the pool rejects.
    """
    specs = policies(cfg)
    rows = []
    for rate in cfg.rates_rps:
        wl = cfg.workload_source(rate).build()
        for spec in specs:
            s = run_one(spec, wl, config)
            s["rate_rps"] = rate
            s["policy"] = spec.name
            rows.append(s)
            if on_row is not None:
                on_row(list(rows))
    return CacheAblationResult(rows=rows)
