"""The :class:`GlobalCacheManager` attachment and :func:`with_global_cache` (paper §7; design and
every rule: docs/cache_manager.md)."""

from __future__ import annotations

from dataclasses import replace

from baselines.cache_manager.config import CacheManagerConfig
from baselines.cache_manager.replication import Replicator, Transfer
from baselines.cache_manager.statistics import DemandStatistics
from baselines.cache_manager.trie import PrefixTrie, TrieNode
from envs.sim.cache import PrefixCache
from envs.sim.events import EventPriority
from envs.sim.request import Request
from envs.sim.simulator import Simulator
from envs.sim.worker import Worker, WorkerState


class GlobalCacheManager:
    """The global prefix-cache manager (paper §7): watches the workers' caches and the dispatch
    decisions, keeps a global prefix trie with per-degree statistics, and every
    ``scan_interval_s`` replicates hot prefixes over the KV links and reclaims underused replicas.
    It never routes. See docs/cache_manager.md.

    Args:
        config: :class:`CacheManagerConfig`.

    Use: ``GlobalCacheManager().attach(sim)`` before the run (``PolicySpec.make_attachments``).
    One instance per run.
    """

    def __init__(self, config: CacheManagerConfig | None = None) -> None:
        self.config = config or CacheManagerConfig()
        self.sim: Simulator | None = None
        self.counters = {"num_scans": 0, "num_inter_degree_replications": 0, "num_intra_degree_replications": 0,
                         "num_replicas_installed": 0, "num_replicas_dropped": 0, "num_blocks_replicated": 0,
                         "num_blocks_reclaimed": 0, "replication_bytes": 0, "matched_tokens": 0, "reused_tokens": 0,
                         "prompt_tokens": 0, "missed_benefit_s": 0.0}
        self.trie = PrefixTrie()
        self.statistics = DemandStatistics(self.config, self.counters)
        self.replicator = Replicator(self.config, self.trie, self.counters, self.statistics)
        self.replicator.transfer_end_handler = self._on_transfer_end  # events name the attachment
        # the caches' listeners are the trie's own methods (one call per block, no forwarding frame):
        # (worker id, block hash) on every insert / eviction
        self._on_insert = self.trie.insert
        self._on_evict = self.trie.evict  # a node dropped from the trie takes its statistics along
        self._caches: dict[int, PrefixCache] = {}  # worker id -> attached cache object
        self._degree: dict[int, int] = {}  # worker id -> degree (of attached workers)
        self._seen_epoch = -1
        self._seen_num_workers = -1
        self._last_arrival_s = 0.0

    @property
    def nodes(self) -> dict[int, TrieNode]:
        """Block hash -> trie node (the trie's own dict)."""
        return self.trie.nodes

    @property
    def log(self) -> list[dict]:
        """One entry per replication started (time, kind, node, degree, src, dst, blocks, bytes, end)."""
        return self.replicator.log

    # ------------------------------------------------------------------ attach / sync
    def attach(self, sim: Simulator) -> None:
        """Subscribes to ``sim``'s caches and dispatches and schedules the first scan.

        Raises:
            RuntimeError: the manager is already attached to a simulator.
        """
        if self.sim is not None:
            raise RuntimeError("a GlobalCacheManager attaches to one simulator only; build one per run")
        self.sim = sim
        self.replicator.sim = sim
        reqs = sim.workload.requests
        self._last_arrival_s = reqs[-1].arrival_time_s if reqs else 0.0
        self._sync_workers()
        sim.dispatch_listeners.append(self._on_dispatch)
        if hasattr(sim, "attachments"):
            sim.attachments["cache_manager"] = self
            sim.extras_providers.append(lambda: {"cache_manager": self.stats()})
        if reqs:
            sim.schedule(self.config.scan_interval_s, EventPriority.CONTROL, self._on_scan, None)

    def _sync_workers(self) -> None:
        """Attaches to caches of new workers, detaches from retired ones (after a reconfiguration)."""
        sim = self.sim
        for wid in list(self._caches):
            w = sim.workers.get(wid)
            cache = self._caches[wid]
            if w is None or w.cache is not cache:
                self._detach(wid, cache)
        for wid in sim.worker_ids:
            w = sim.workers[wid]
            if wid not in self._caches:
                self._caches[wid] = w.cache
                self._degree[wid] = w.degree
                # a worker made by a split/merge or a fault recovery already has the listeners
                # (copied from the worker it replaces, so the trie saw its first blocks): once only
                if self._on_insert not in w.cache.insert_listeners:
                    w.cache.insert_listeners.append(self._on_insert)
                if self._on_evict not in w.cache.evict_listeners:
                    w.cache.evict_listeners.append(self._on_evict)
                # most recently used first: a prefix's head before its tail (the caches touch the
                # head last), so the trie's complete sets grow without walks over the children
                for h in reversed(w.cache.blocks()):
                    self._on_insert(wid, h)
        self._seen_epoch = sim.epoch
        self._seen_num_workers = len(sim.workers)
        caps: dict[int, int] = {}
        for w in sim.workers.values():
            if w.state == WorkerState.ACTIVE:
                caps[w.degree] = max(caps.get(w.degree, 0), w.kv_capacity_tokens)
        self.statistics.degree_caps = sorted(caps.items())

    def _detach(self, wid: int, cache: PrefixCache) -> None:
        if self._on_insert in cache.insert_listeners:
            cache.insert_listeners.remove(self._on_insert)
        if self._on_evict in cache.evict_listeners:
            cache.evict_listeners.remove(self._on_evict)
        for h in cache.blocks():
            self._on_evict(wid, h)
        del self._caches[wid]
        del self._degree[wid]

    def _maybe_sync(self) -> None:
        sim = self.sim
        if sim.epoch != self._seen_epoch or len(sim.workers) != self._seen_num_workers:
            self._sync_workers()

    # ------------------------------------------------------------------ trie queries
    def path_to(self, block_hash: int) -> list[int]:
        """Block hashes from the root to ``block_hash`` (inclusive)."""
        return self.trie.path_to(block_hash)

    def complete_holders(self, block_hash: int) -> set[int]:
        """Workers holding every block of the prefix ending at ``block_hash`` (a new set)."""
        return self.trie.complete_holders(block_hash)

    def replica_count(self, block_hash: int, degree: int) -> int:
        """``ReplicaCount(z, C)`` (paper §7): degree-C workers holding the complete prefix ending at z."""
        return self.trie.replica_count(block_hash, degree, self._degree)

    def holders(self, block_hash: int) -> set[int]:
        """Workers whose cache holds this block (a copy; empty if unknown)."""
        return self.trie.holders(block_hash)

    def register_prefix(self, block_hashes) -> None:
        """Learns the trie shape of one prompt's block hashes (called at every dispatch)."""
        self.trie.register_prefix(block_hashes)

    # ------------------------------------------------------------------ per-request statistics
    def preferred_degree(self, num_prompt_tokens: int, num_cached_tokens: int) -> int:
        """Degree the Vertumnus cost picks with ``q_w = 0`` (docs/cache_manager.md), among the degrees
        of ACTIVE workers able to hold the prompt; 0 if there is none."""
        return self.statistics.preferred_degree(self.sim.cost_model, num_prompt_tokens, num_cached_tokens)

    def _on_dispatch(self, sim: Simulator, req: Request, w: Worker) -> None:
        self._maybe_sync()
        self.trie.register_prefix(req.block_hashes)
        self.statistics.record(self.trie, self._degree, sim.cost_model, sim.kv_block_size_tokens, req.block_hashes,
                               req.num_prompt_tokens, w)

    # ------------------------------------------------------------------ scan
    def _on_scan(self, _payload) -> None:
        sim = self.sim
        self._maybe_sync()
        self.counters["num_scans"] += 1
        self.scan()
        # like the controller's windows: scans continue while arrivals do (the last scan is at most
        # one interval after the last arrival, so it may extend the simulated time by that much)
        if sim.env.now < self._last_arrival_s:
            sim.schedule(self.config.scan_interval_s, EventPriority.CONTROL, self._on_scan, None)

    def scan(self) -> None:
        """One replication/reclamation round, then decay (docs/cache_manager.md "Periodic scan")."""
        budget = self.config.max_replications_per_scan
        started: set[int] = set()
        budget = self._replicate_ranked(self._inter_degree_candidates(), "inter", budget, started)
        self._replicate_ranked(self._intra_degree_candidates(), "intra", budget, started)
        self.replicator.reclaim(self._degree)
        self.statistics.decay()

    def _inter_degree_candidates(self) -> dict[tuple[int, int], float]:
        """(node, degree) -> missed benefit [s] at or above the threshold, no replication in flight.
        Visits the hot ``missed`` entries only (:class:`DemandStatistics`); the order of the
        result does not matter (:meth:`PrefixTrie.deepest` sorts it)."""
        st = self.statistics
        in_flight = self.replicator.in_flight
        out: dict[tuple[int, int], float] = {}
        for h, c, v in st.hot_values(st.hot_missed, "missed", self.config.inter_degree_threshold_s, self.trie.nodes):
            if not in_flight.get((h, c)):
                out[(h, c)] = v
        return out

    def _intra_degree_candidates(self) -> dict[tuple[int, int], float]:
        """(node, degree) -> per-replica demand [decayed requests] at or above the threshold.
        Visits the hot ``access`` entries only (:class:`DemandStatistics`): the same entries, values
        and order as ``hot_values(hot_access, "access", ...)`` followed by :meth:`replica_count`,
        in one loop (a scan's hottest one)."""
        st = self.statistics
        threshold = self.config.intra_degree_threshold
        in_flight = self.replicator.in_flight
        degree_of = self._degree
        nodes = self.trie.nodes
        current = st.current
        epoch = st.epoch
        hot = st.hot_access
        out: dict[tuple[int, int], float] = {}
        cold = []
        for key in hot:
            h, c = key
            node = nodes.get(h)
            if node is None:
                cold.append(key)
                continue
            if node.stats_epoch != epoch:
                current(node)
            v = node.access.get(c)
            if v is None or v < threshold:
                cold.append(key)
                continue
            rc = 0
            for w in node.complete:
                if degree_of.get(w) == c:
                    rc += 1
            if rc == 0:
                continue
            demand = v / (rc + in_flight.get(key, 0))
            if demand >= threshold:
                out[key] = demand
        hot.difference_update(cold)
        return out

    def _replicate_ranked(self, cands: dict[tuple[int, int], float], kind: str, budget: int, started: set[int]) -> int:
        """Replicates the deepest candidates in rank order (one per node per scan) until the budget is
        spent; returns the remaining budget."""
        nodes = self.trie.nodes
        for h, c in self.trie.deepest(cands):
            if budget <= 0:
                break
            if h in started or h not in nodes:
                continue
            if kind == "inter" and self.replica_count(h, c) > 0:
                continue
            if self.replicate(h, c, kind):
                started.add(h)
                budget -= 1
        return budget

    # ------------------------------------------------------------------ replication
    def replicate(self, block_hash: int, degree: int, kind: str = "manual") -> bool:
        """Starts one replication of the prefix ending at ``block_hash`` to a degree-``degree``
        worker (destination and source chosen as in docs/cache_manager.md). The scan calls it
        with ``kind`` "inter" / "intra". Returns whether a transfer started (False: unknown
        prefix, no holder, no destination with room)."""
        return self.replicator.replicate(block_hash, degree, kind)

    def _on_transfer_end(self, t: Transfer) -> None:
        self.replicator.on_transfer_end(t)

    # ------------------------------------------------------------------ reporting
    @property
    def num_transfers_in_flight(self) -> int:
        return len(self.replicator.transfers)

    def stats(self) -> dict:
        """Counters: scans, replications by kind, installed/dropped replicas, blocks and bytes
        replicated, blocks reclaimed, matched vs reused tokens [tokens], missed benefit [s]."""
        return dict(self.counters) | {"num_trie_nodes": len(self.trie.nodes)}


def _config_for(base, config: CacheManagerConfig | None, backlog_bound: bool = False) -> CacheManagerConfig:
    """``config``, or the default one (with ``backlog_bound``) with the base router's beta and
    lambda (when it has them)."""
    if config is not None:
        return config
    params = getattr(base.make_router(), "params", None)
    cfg = CacheManagerConfig(backlog_bound=backlog_bound)
    if params is not None and hasattr(params, "beta") and hasattr(params, "lambda_"):
        cfg = replace(cfg, beta=params.beta, lambda_=params.lambda_)
    return cfg


#: :class:`CacheManagerConfig` fields exposed as policy parameters by :func:`with_global_cache`,
#: each as ``cache_<field>`` (sweepable as ``<policy>.cache_<field>`` in experiment specs).
SWEEPABLE_FIELDS = ("scan_interval_s", "decay", "inter_degree_threshold_s", "intra_degree_threshold", "reclaim_threshold",
                    "max_replications_per_scan", "max_reclamations_per_scan", "max_replica_share")
PARAM_PREFIX = "cache_"


def with_global_cache(base, config: CacheManagerConfig | None = None, name: str | None = None,
                      backlog_bound: bool = False):
    """A copy of the policy spec ``base`` (a ``baselines.registry.PolicySpec``) with a
    :class:`GlobalCacheManager` added to its attachments. The manager's preferred-degree weights
    (beta, lambda) follow the base router's ``params`` when it has them (Vertumnus). Without
    ``config`` the manager has the default settings with ``backlog_bound``
    (:class:`CacheManagerConfig`).

    The result's ``params`` are the base policy's plus ``cache_<field>`` for every field of
    :data:`SWEEPABLE_FIELDS` (the manager's scan period, decay, thresholds and caps), so
    ``spec.with_params(cache_scan_interval_s=5.0)`` and experiment-spec sweeps over
    ``<policy>.cache_scan_interval_s`` change the manager.

    Raises:
        ValueError: from :class:`CacheManagerConfig` or the base policy on invalid parameters.
    """
    cfg = _config_for(base, config, backlog_bound)
    base_attachments = base.make_attachments
    base_router = base.make_router
    new_name = name or f"{base.name}-global-cache"

    def make_attachments() -> list:
        return [*base_attachments(), GlobalCacheManager(cfg)]

    def make_router():
        router = base_router()
        router.name = new_name  # the run's policy label
        return router

    def build_with(**params):  # the base policy with its parameters, plus the manager with its own
        mine = {k[len(PARAM_PREFIX):]: v for k, v in params.items() if k.startswith(PARAM_PREFIX)}
        rest = {k: v for k, v in params.items() if not k.startswith(PARAM_PREFIX)}
        new_base = base.with_params(**rest) if rest else base
        return with_global_cache(new_base, replace(_config_for(new_base, config, backlog_bound), **mine), new_name)

    cache_params = {PARAM_PREFIX + f: getattr(cfg, f) for f in SWEEPABLE_FIELDS}
    return replace(base, name=new_name, make_router=make_router, make_attachments=make_attachments,
                   description=f"{base.description} + global prefix-cache manager (replication/reclamation, "
                               f"{cfg.scan_interval_s:g} s scan)",
                   source=f"{base.source}; paper §7 global prefix-cache manager", build_with=build_with,
                   params={**base.params, **cache_params})
