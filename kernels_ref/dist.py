"""Launch a function on a local ``torch.distributed`` process group (one host).

``launch(fn, world_size, args)`` starts ``world_size`` fresh processes (:func:`start_method`),
initialises a process group over a ``FileStore`` in a private temporary directory (no ports to
pick, nothing reachable from outside), runs ``fn(rank, world_size, *args)`` in each and returns
the per-rank results (pickled through the same directory). Backend: gloo for ``device="cpu"``
(every worker sets ``torch.set_num_threads(1)``: ranks share the host's cores), nccl for
``device="cuda"`` with rank r on ``cuda:r`` (written for GPU hosts; not exercised in CPU CI).

Each caller should create its sub-groups (``torch.distributed.new_group``) inside ``fn`` to
run several CP degrees in one launch: process start-up dominates small runs.
"""

from __future__ import annotations

import os
import pickle
import sys
import tempfile
from datetime import timedelta
from typing import Any, Callable


def _worker(rank: int, fn: Callable, world_size: int, tmp: str, device: str, timeout_s: float, args: tuple) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    if device == "cuda":
        torch.cuda.set_device(rank)
        backend = "nccl"
    else:
        backend = "gloo"
        if sys.platform.startswith("linux"):
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # single host: stay on loopback
    dist.init_process_group(backend, init_method=f"file://{tmp}/store", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=timeout_s))
    try:
        result = fn(rank, world_size, *args)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    with open(os.path.join(tmp, f"result_{rank}.pkl"), "wb") as f:
        pickle.dump(result, f)


_PRELOAD = ["torch", "torch.distributed", "kernels_ref.cp_attention", "kernels_ref.layer"]


def start_method() -> str:
    """``"forkserver"`` where available (with torch preloaded), else ``"spawn"``.

    A fresh ``spawn`` child imports torch itself (seconds each, all ranks competing for the
    cores); the forkserver imports it once, before any thread pool or CUDA context exists, and
    forks clean children from that state, and it is reused by later launches of this process.
    Both give children with no inherited process-group or RNG state.
    """
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return "spawn"
    multiprocessing.get_context("forkserver").set_forkserver_preload(_PRELOAD)
    return "forkserver"


#: Most CPU ranks one launch starts: each is a process importing torch, so ``--degrees 99999``
#: would try to start 99,999 of them. The paper's CP degrees reach 8.
MAX_CPU_RANKS = 16


def launch(fn: Callable[..., Any], world_size: int, args: tuple = (), device: str = "cpu",
           timeout_s: float = 600.0) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` spawned ranks; returns results in rank order.

    ``fn`` and ``args`` must be picklable (``fn`` a module-level function).

    Raises:
        ValueError: on ``world_size < 1``, an unknown device, more CPU ranks than
            :data:`MAX_CPU_RANKS`, or more ranks than GPUs.
        torch.multiprocessing.ProcessRaisedException: re-raised from a failing rank (with its traceback).
    """
    import torch
    import torch.multiprocessing as mp

    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if device == "cpu" and world_size > MAX_CPU_RANKS:
        raise ValueError(f"{world_size} CPU ranks (one process each) is more than {MAX_CPU_RANKS}; "
                         f"expected a CP degree <= {MAX_CPU_RANKS} on device 'cpu'")
    if device == "cuda" and (not torch.cuda.is_available() or torch.cuda.device_count() < world_size):
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        raise ValueError(f"device 'cuda' with {world_size} ranks needs {world_size} GPUs, found {n}")
    method = start_method()
    with tempfile.TemporaryDirectory(prefix="cpgym-dist-") as tmp:
        mp.start_processes(_worker, args=(fn, world_size, tmp, device, timeout_s, args), nprocs=world_size,
                           join=True, start_method=method)
        results = []
        for rank in range(world_size):
            with open(os.path.join(tmp, f"result_{rank}.pkl"), "rb") as f:
                results.append(pickle.load(f))
    return results
