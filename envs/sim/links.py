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
            raise ValueError(f"link bandwidths must be > 0, got intra={self.intra_node_bytes_per_s}, "
                             f"inter={self.inter_node_bytes_per_s}")


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
        # link key -> [(start_s, end_s, bandwidth share)] of link faults (envs/sim/faults.py)
        self._faults: dict[tuple[str, int], list[tuple[float, float, float]]] = {}

    def set_fault(self, key: tuple[str, int], start_s: float, end_s: float, share: float) -> None:
        """From ``start_s`` to ``end_s`` the link runs at ``share`` x its bandwidth; ``share = 0``
        is a failed link: a transfer that needs it waits until ``end_s`` (it stalls; the
        alternative path through another node's NIC is not modelled)."""
        self._faults.setdefault(key, []).append((start_s, end_s, share))

    def _fault_adjusted(self, keys, start: float, duration: float) -> tuple[float, float]:
        """(start, duration) after the link faults active at ``start`` on ``keys``."""
        for k in keys:
            for f0, f1, share in self._faults.get(k, ()):
                if f0 <= start < f1:
                    if share == 0.0:
                        start = f1
                    else:
                        duration /= share
        return start, duration

    def reserve(self, now_s: float, src_node: int, dst_node: int, num_bytes: int) -> tuple[float, float]:
        """Reserves the links for one transfer of ``num_bytes`` bytes.

        Returns:
            ``(start_s, end_s)``: when the transfer starts (links free) and completes.
        """
        if src_node == dst_node:
            return self.reserve_keys(now_s, (("intra", src_node),), num_bytes, self.config.intra_node_bytes_per_s, "intra")
        return self.reserve_keys(now_s, (("out", src_node), ("in", dst_node)), num_bytes,
                                 self.config.inter_node_bytes_per_s, "inter")

    def reserve_keys(self, now_s: float, keys: tuple[tuple[str, int], ...], num_bytes: int, bytes_per_s: float,
                     kind: str) -> tuple[float, float]:
        """Reserves the named links for ``num_bytes`` at ``bytes_per_s`` (FIFO, all links held
        together) and accounts the bytes under ``kind``; the one contention rule of every KV
        transfer (replication, reconciliation, tier fetches in ``envs/sim/tiers.py``).

        Returns:
            ``(start_s, end_s)``.

        Raises:
            ValueError: if ``num_bytes`` < 0.
        """
        if num_bytes < 0:
            raise ValueError(f"num_bytes must be >= 0, got {num_bytes}")
        free_at = self._free_at
        start = now_s
        for k in keys:
            t = free_at.get(k, 0.0)
            if t > start:
                start = t
        duration = num_bytes / bytes_per_s
        if self._faults:
            start, duration = self._fault_adjusted(keys, start, duration)
        end = start + duration
        busy = self.busy_s
        for k in keys:
            free_at[k] = end
            busy[k] = busy.get(k, 0.0) + duration
        self.bytes_by_kind[kind] = self.bytes_by_kind.get(kind, 0) + num_bytes
        self.num_transfers += 1
        return start, end

    def cancel(self, keys, now_s: float) -> None:
        """Ends every transfer reserved on ``keys`` at ``now_s`` (an endpoint failed, e.g. a node
        failure, ``envs/sim/faults.py``): the links are free from then on and the busy time reserved
        after ``now_s`` is not counted. A transfer that also held another node's link keeps that
        one reserved to its planned end (transfers are not tracked one by one)."""
        free_at = self._free_at
        busy = self.busy_s
        for k in keys:
            t = free_at.get(k)
            if t is not None and t > now_s:
                free_at[k] = now_s
                b = busy.get(k, 0.0) - (t - now_s)
                busy[k] = b if b > 0.0 else 0.0

    def free_at_s(self, key: tuple[str, int]) -> float:
        """Time [s] at which link ``key`` finishes its reserved transfers (0 if never used)."""
        return self._free_at.get(key, 0.0)

    def utilization(self, elapsed_s: float) -> dict[str, float]:
        """Busy share in [0, 1] of each used link over ``elapsed_s`` seconds, keyed 'intra:0', 'out:1', ..."""
        if elapsed_s <= 0:
            return {}
        return {f"{k[0]}:{k[1]}": min(1.0, v / elapsed_s) for k, v in sorted(self.busy_s.items())}

    @property
    def total_bytes(self) -> int:
        return self.bytes_by_kind["intra"] + self.bytes_by_kind["inter"]
