"""Configuration of the KV tiers below HBM (host DRAM per node, a pool-wide store) and of the
fetch path: :class:`TierConfig`, its validation, and the ``--kv-tiers`` list syntax
(:func:`parse_levels`). The fields' ``option`` metadata makes the ``--kv-*`` flags of the CLI
(``envs/sim/options.py``). The model and its formulas are in ``envs/sim/tiers.py``
(:class:`envs.sim.tiers.TieredKV`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from envs.sim.options import option

TIER_NAMES = ("hbm", "dram", "store")
EVICTION_RULES = ("lru", "next-use")
PREFETCH_MODES = ("routing", "queue-head")
FETCH_POLICIES = ("predicted", "always", "never")

def parse_levels(text: str, flag: str = "--kv-tiers") -> tuple[str, ...]:
    """``"hbm,dram,store"`` -> ``("hbm", "dram", "store")`` (the text of ``flag``).

    Raises:
        ValueError: unless the list starts with ``hbm`` and names known tiers in order
            (``hbm``, ``dram``, ``store``) without repeats or empty items (``"hbm,,dram"``, a
            trailing comma: never silently dropped).
    """
    levels = tuple(x.strip() for x in text.split(","))
    if "" in levels and levels != ("",):
        raise ValueError(f"{flag} {text!r}: an empty item (doubled, leading or trailing comma); "
                         "expected e.g. hbm,dram,store")
    _check_levels(tuple(x for x in levels if x), f"{flag} {text!r}")
    return levels


def _check_levels(levels: tuple[str, ...], where: str) -> None:
    order = [TIER_NAMES.index(x) if x in TIER_NAMES else -1 for x in levels]
    if not levels or levels[0] != "hbm" or -1 in order or order != sorted(set(order)):
        raise ValueError(f"{where}: KV tiers must be 'hbm' followed by 'dram' and/or 'store' in that order "
                         f"(e.g. hbm,dram,store), got {','.join(levels) or '(empty)'}")


@dataclass(frozen=True)
class TierConfig:
    """KV tiers below HBM and the fetch path (module docstring: model and formulas).

    Args:
        levels: tiers in use, ``("hbm",)`` (default: tiers off, the simulator is unchanged),
            ``("hbm", "dram")``, ``("hbm", "store")`` or ``("hbm", "dram", "store")``.
        dram_capacity_bytes_per_node: host memory per node given to the KV tier [bytes].
            Default 1 TB: half of the 2 TB host memory of 8-GPU HGX nodes (MLPerf Inference
            v4.1 system descriptions ``H200-SXM-141GBx8`` and Dell ``XE9680_H100_SXM_80GBx8``:
            ``host_memory_capacity: 2 TB``); the other half is left to the OS and the engine.
        dram_bytes_per_s_per_gpu: host-to-GPU bandwidth of one GPU [bytes/s]. Default 50 GB/s:
            PCIe Gen5 x16 (the H20/H100/H200 host interconnect in the same listings) carries
            32 GT/s x 16 lanes x 128/130 = 63 GB/s per direction (PCI-SIG); 50 GB/s assumes
            about 80 % of it for pinned-memory copies.
        store_capacity_bytes: capacity of the pool-wide store [bytes]. Default 8 TB: the pooled
            host memory of four such 2 TB nodes (Mooncake Store pools the nodes' DRAM).
        store_bytes_per_s_per_node: store read bandwidth into one node [bytes/s]; ``None``
            (default) = the inter-node KV link (:class:`envs.sim.links.LinkConfig`, 25 GB/s, one
            200 Gbit/s RDMA NIC per node), which the store traffic shares.
        store_lookup_latency_s: fixed metadata lookup before a store read [s]. Default 0.5 ms:
            Mooncake master ``GetReplicaList`` latencies of 0.45-0.5 ms in the master log quoted
            in LMCache PR #498 (github.com/LMCache/LMCache/pull/498).
        eviction: host-memory eviction rule, ``"lru"`` (default) or ``"next-use"`` (queue-aware).
        prefetch: when a fetch starts: ``"routing"`` (default, overlaps all queueing) or
            ``"queue-head"`` (when the request is within the first ``prefetch_depth_requests``
            queue positions).
        prefetch_depth_requests: queue positions prefetched in ``"queue-head"`` mode (>= 1).
        layerwise: layer-wise loading (compute of a chunk of layers overlaps the read of later
            chunks).
        layerwise_buffer_layers: layers per staging chunk B (>= 1; B >= N is whole-prefix loading).
        num_layers: transformer layers N of the model (default 48, Qwen3-30B-A3B
            ``num_hidden_layers``; 36 for Qwen3-8B).
        fetch_policy: ``"predicted"`` (default: fetch only if predicted faster than recomputing),
            ``"always"`` or ``"never"`` (ablations).

    Raises:
        ValueError: on an invalid tier list, a non-positive capacity/bandwidth, or an unknown rule.
    """

    levels: tuple[str, ...] = option(
        ("hbm",), "KV tiers: hbm (GPU caches only), hbm,dram (host memory per node), hbm,dram,store (plus a "
                  "pool-wide KV store)", flag="--kv-tiers", metavar="hbm[,dram][,store]", parse=parse_levels)
    dram_capacity_bytes_per_node: float = option(1.0e12, "host DRAM per node for KV [GB], half of a 2 TB HGX node",
                                                 flag="--dram-gb-per-node", scale=1e9)
    dram_bytes_per_s_per_gpu: float = option(50e9, "host->GPU bandwidth per GPU [GB/s], PCIe Gen5 x16",
                                             flag="--dram-gbps-per-gpu", scale=1e9)
    store_capacity_bytes: float = option(8.0e12, "remote KV store capacity [GB]", flag="--store-gb", scale=1e9)
    store_bytes_per_s_per_node: float | None = option(
        None, "store read bandwidth into a node [GB/s] (default: the inter-node KV link, 25)", flag="--store-gbps-per-node",
        scale=1e9)
    store_lookup_latency_s: float = option(0.0005, "store metadata lookup latency [ms]", flag="--store-lookup-ms", scale=1e-3)
    eviction: str = option("lru", "host-memory eviction rule", flag="--kv-eviction", choices=EVICTION_RULES)
    prefetch: str = option("routing", "when a fetch starts: at routing or near the head of the worker's queue",
                           flag="--kv-prefetch", choices=PREFETCH_MODES)
    prefetch_depth_requests: int = option(2, "queue positions prefetched in queue-head mode", flag="--kv-prefetch-depth")
    layerwise: bool = option(False, "layer-wise KV loading (compute overlaps the read of later layers)",
                             flag="--kv-layerwise", negatable=False)
    layerwise_buffer_layers: int = option(4, "layers per layer-wise loading chunk", flag="--kv-buffer-layers")
    num_layers: int = option(48, "model layers for layer-wise loading (Qwen3-30B-A3B's by default)", flag="--kv-num-layers")
    fetch_policy: str = option("predicted", "fetch or recompute: by predicted time, always fetch, never fetch",
                               flag="--kv-fetch-policy", choices=FETCH_POLICIES)

    def __post_init__(self) -> None:
        _check_levels(tuple(self.levels), "kv_tiers.levels")
        for name in ("dram_capacity_bytes_per_node", "dram_bytes_per_s_per_gpu", "store_capacity_bytes"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"kv_tiers.{name} must be a finite number > 0, got {v!r}")
        if self.store_bytes_per_s_per_node is not None and not self.store_bytes_per_s_per_node > 0:
            raise ValueError(f"kv_tiers.store_bytes_per_s_per_node must be > 0 or None, "
                             f"got {self.store_bytes_per_s_per_node!r}")
        if not (self.store_lookup_latency_s >= 0 and math.isfinite(self.store_lookup_latency_s)):
            raise ValueError(f"kv_tiers.store_lookup_latency_s must be >= 0, got {self.store_lookup_latency_s!r}")
        for name, allowed in (("eviction", EVICTION_RULES), ("prefetch", PREFETCH_MODES), ("fetch_policy", FETCH_POLICIES)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"kv_tiers.{name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        for name in ("prefetch_depth_requests", "layerwise_buffer_layers", "num_layers"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"kv_tiers.{name} must be an integer >= 1, got {v!r}")

    @property
    def enabled(self) -> bool:
        """True when a tier below HBM is configured."""
        return len(self.levels) > 1


__all__ = ["TierConfig", "parse_levels", "TIER_NAMES", "EVICTION_RULES", "PREFETCH_MODES", "FETCH_POLICIES"]
