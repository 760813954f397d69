"""KV-transfer links between workers (paper §6.2/§7/§8: asynchronous KV transfers).

Topology: every node has one intra-node fabric (NVLink-class) and one RDMA NIC direction each
way. A transfer between workers on the same node uses that node's fabric; a transfer between
nodes uses the source node's egress and the destination node's ingress. Each link is a FIFO
channel: a transfer starts when all links it needs are free and holds them for
``bytes / bandwidth`` seconds, so concurrent transfers over a shared link queue behind each
other (contention) — O(1) per transfer.

Defaults: intra-node 450 GB/s per direction (H20/H100 NVLink 4: 900 GB/s bidirectional, NVIDIA
datasheets); inter-node 25 GB/s = one 200 Gbit/s RDMA NIC per node direction (the figure the
issue and the paper's deployment class use).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LinkConfig:
    """Bandwidths of the KV-transfer links [bytes/s]."""

    intra_node_bytes_per_s: float = 450e9
    inter_node_bytes_per_s: float = 25e9

    def __post_init__(self) -> None:
        if not (self.intra_node_bytes_per_s > 0 and self.inter_node_bytes_per_s > 0):
            raise ValueError(f"link bandwidths must be > 0, got intra={self.intra_node_bytes_per_s}, inter={self.inter_node_bytes_per_s}")


class KVLinks:
    """FIFO link reservations and transfer accounting.

    Args:
        num_nodes: number of topology groups.
        config: bandwidths.
    """

    def __init__(self, num_nodes: int, config: LinkConfig | None = None) -> None:
        self.config = config or LinkConfig()
        self.num_nodes = num_nodes
        # link key -> time it becomes free [s]; keys: ("intra", n), ("out", n), ("in", n)
        self._free_at: dict[tuple[str, int], float] = {}
        self.busy_s: dict[tuple[str, int], float] = {}
        self.bytes_by_kind = {"intra": 0, "inter": 0}
        self.num_transfers = 0

    def reserve(self, now_s: float, src_node: int, dst_node: int, num_bytes: int) -> tuple[float, float]:
        """Reserves the links for one transfer of ``num_bytes`` bytes.

        Returns:
            ``(start_s, end_s)``: when the transfer starts (links free) and completes.
        """
        if num_bytes < 0:
            raise ValueError(f"num_bytes must be >= 0, got {num_bytes}")
        if src_node == dst_node:
            keys = (("intra", src_node),)
            bw = self.config.intra_node_bytes_per_s
            kind = "intra"
        else:
            keys = (("out", src_node), ("in", dst_node))
            bw = self.config.inter_node_bytes_per_s
            kind = "inter"
        start = max([now_s] + [self._free_at.get(k, 0.0) for k in keys])
        duration = num_bytes / bw
        end = start + duration
        for k in keys:
            self._free_at[k] = end
            self.busy_s[k] = self.busy_s.get(k, 0.0) + duration
        self.bytes_by_kind[kind] += num_bytes
        self.num_transfers += 1
        return start, end

    def utilization(self, elapsed_s: float) -> dict[str, float]:
        """Busy share in [0, 1] of each used link over ``elapsed_s`` seconds, keyed 'intra:0', 'out:1', ..."""
        if elapsed_s <= 0:
            return {}
        return {f"{k[0]}:{k[1]}": min(1.0, v / elapsed_s) for k, v in sorted(self.busy_s.items())}

    @property
    def total_bytes(self) -> int:
        return self.bytes_by_kind["intra"] + self.bytes_by_kind["inter"]
