"""Global prefix-cache manager (paper §7, ``../shared/DESIGN.md`` "Global prefix-cache manager").

An attachment (``GlobalCacheManager().attach(sim)``) that keeps a global prefix trie of the
workers' caches with per-degree demand statistics and, every ``scan_interval_s``, replicates hot
prefixes over the KV links and reclaims underused replicas; it never routes. The design — trie,
per-request statistics, the periodic scan, replication and cross-degree copies — is described in
``docs/cache_manager.md``.

Modules: :mod:`~baselines.cache_manager.config` (:class:`CacheManagerConfig`),
:mod:`~baselines.cache_manager.trie` (the prefix trie), :mod:`~baselines.cache_manager.statistics`
(per-request demand statistics), :mod:`~baselines.cache_manager.replication` (transfers and
reclamation), :mod:`~baselines.cache_manager.manager` (:class:`GlobalCacheManager`,
:func:`with_global_cache`). Every public name is re-exported here.

Source: paper §7/§8 (``../shared/paper/vertumnus-summary.en.txt``,
``vertumnus-walkthrough.zh.txt``); the paper gives no threshold values, so the defaults of
:class:`CacheManagerConfig` are this implementation's (documented there).
"""

from baselines.cache_manager.config import CACHE_MANAGER_SETTINGS, CacheManagerConfig
from baselines.cache_manager.manager import GlobalCacheManager, with_global_cache
from baselines.cache_manager.replication import Replicator, Transfer
from baselines.cache_manager.statistics import DemandStatistics
from baselines.cache_manager.trie import PrefixTrie, TrieNode

__all__ = ["CacheManagerConfig", "CACHE_MANAGER_SETTINGS", "GlobalCacheManager", "with_global_cache", "PrefixTrie",
           "TrieNode", "DemandStatistics", "Replicator", "Transfer"]
