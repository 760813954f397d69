"""vLLM's data-parallel balancer over tensor-parallel workers (paper §9 vLLM baseline; vllm
``DPLBAsyncMPClient``), with the TP-4 cost form of its workers.

Part of the industry baselines (:mod:`baselines.industry`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from envs.sim.cost_model import Calibration, CostCoefficients
from envs.sim.request import Request
from envs.sim.router import PoolView, Router


@dataclass(frozen=True)
class TensorParallelCostForm:
    """Cost form of a tensor-parallel (TP) worker expressed in the CP cost model (``vllm-tp4``).

    The simulator knows only ``E_C(R,P) = d + a*R + b*P + (c*R + alpha*W)/C``. A TP-t worker on t
    GPUs splits the linear layers (projections, experts) and the attention heads t ways, so ``c``
    and ``alpha`` are divided by t exactly like CP (the worker has degree t in the pool), and the
    CP-undivided share of the per-token work (``cp_serial_fraction`` of the roofline calibration,
    ``kernels_ref/roofline.py``: smaller per-rank GEMMs, norms, routing) is kept in ``a`` as well.
    TP does *not* all-gather KV across ranks (each rank owns its KV heads), so the CP KV
    all-gather terms ``kv_bytes_per_token / link`` are removed from ``a`` and ``b``; instead every
    token pays two all-reduces per layer of its hidden-size activations (after attention and after
    the MLP; Megatron-LM, Shoeybi et al. 2019, §3), a ring all-reduce moving ``2 (t-1)/t`` of the
    buffer per GPU::

        gather = kv_bytes_per_token / link_bytes_per_s
        a_TP   = max(0, a - gather) + 2 * num_layers * hidden_size * dtype_bytes * 2 (t-1)/t / link_bytes_per_s
        b_TP   = max(0, b - gather)      (keep the HBM read of the prefix)

    ``link_bytes_per_s`` defaults to the link the calibration used for the CP all-gather: its
    provenance ``datasheet.link_bandwidth_bytes_per_s * efficiency.link`` (roofline calibrations),
    else ``kv_bytes_per_token / a`` (all of ``a`` taken as the all-gather). Defaults: Qwen3-30B-A3B
    (48 layers, hidden 2048, bf16; its Hugging Face ``config.json``), t = 4 (paper §9 vLLM baseline).

    Raises:
        ValueError: on non-positive sizes.
    """

    tp_degree: int = 4
    num_layers: int = 48
    hidden_size: int = 2048
    dtype_bytes: int = 2
    link_bytes_per_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("tp_degree", "num_layers", "hidden_size", "dtype_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"TensorParallelCostForm.{name} must be >= 1, got {getattr(self, name)}")
        if self.link_bytes_per_s is not None and not self.link_bytes_per_s > 0:
            raise ValueError(f"TensorParallelCostForm.link_bytes_per_s must be > 0, got {self.link_bytes_per_s}")

    def allreduce_bytes_per_token(self) -> float:
        t = self.tp_degree
        return 2 * self.num_layers * self.hidden_size * self.dtype_bytes * 2 * (t - 1) / t

    @staticmethod
    def calibration_link_bytes_per_s(calibration: Calibration) -> float:
        """Effective inter-GPU link bandwidth of the calibration's CP all-gather [bytes/s]."""
        prov = calibration.provenance
        try:
            link = float(prov["datasheet"]["link_bandwidth_bytes_per_s"]) * float(prov.get("efficiency", {}).get("link", 1.0))
            if link > 0:
                return link
        except (KeyError, TypeError, ValueError):
            pass
        a = calibration.coefficients.a_s_per_token
        if a <= 0:
            raise ValueError("TensorParallelCostForm: the calibration has a = 0 and no datasheet link bandwidth; "
                             "set link_bytes_per_s")
        return calibration.kv_bytes_per_token / a

    def __call__(self, calibration: Calibration) -> Calibration:
        co = calibration.coefficients
        link = self.link_bytes_per_s or self.calibration_link_bytes_per_s(calibration)
        gather = calibration.kv_bytes_per_token / link
        a_tp = max(0.0, co.a_s_per_token - gather) + self.allreduce_bytes_per_token() / link
        b_tp = max(0.0, co.b_s_per_token - gather)
        coeff = CostCoefficients(d_s=co.d_s, a_s_per_token=a_tp, b_s_per_token=b_tp, c_s_per_token=co.c_s_per_token,
                                 alpha_s_per_pair=co.alpha_s_per_pair)
        prov = dict(calibration.provenance)
        prov["tensor_parallel_transform"] = {"tp_degree": self.tp_degree, "num_layers": self.num_layers,
                                             "hidden_size": self.hidden_size, "link_bytes_per_s": link}
        return replace(calibration, coefficients=coeff, provenance=prov)


@dataclass(frozen=True)
class VllmDPParams:
    """Weights of vLLM's data-parallel balancer score ``waiting_weight * waiting + running_weight *
    running`` (vllm-project/vllm ``vllm/v1/engine/core_client.py``
    ``DPLBAsyncMPClient.get_core_engine_for_request``: the hard-coded ``waiting * 4 + running``,
    so defaults 4 and 1). Only their ratio changes the choice (the minimum is scale invariant).

    Raises:
        ValueError: on a negative or non-finite weight, or both zero.
    """

    waiting_weight: float = 4.0
    running_weight: float = 1.0

    def __post_init__(self) -> None:
        for name in ("waiting_weight", "running_weight"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"vllm {name} must be a finite number >= 0, got {v!r}")
        if self.waiting_weight == 0 and self.running_weight == 0:
            raise ValueError("vllm waiting_weight and running_weight cannot both be 0")


class VllmDPRouter(Router):
    """vLLM data-parallel load balancer (vllm-project/vllm ``vllm/v1/engine/core_client.py``
    ``DPLBAsyncMPClient.get_core_engine_for_request``): the engine with the least
    ``4 * waiting + running`` requests (weights: :class:`VllmDPParams`); not cache-aware (each
    engine still reuses its own prefix cache). Ties: pool order (upstream scans from
    ``eng_start_index``, 0 with one API server, keeping the first minimum). Upstream reads the
    counts from the DP coordinator's ~100 ms snapshots plus its own optimistic ``waiting += 1`` per
    routed request; cpgym reads the exact counts (both agree between snapshots for a single front
    end)."""

    name = "vllm-dp"

    def __init__(self, params: VllmDPParams | None = None) -> None:
        self.params = params or VllmDPParams()

    def route(self, request: Request, view: PoolView) -> int:
        ww, rw = self.params.waiting_weight, self.params.running_weight
        best, best_score = -1, math.inf
        for w in view.eligible_worker_ids(request):
            waiting = view.num_queued_requests(w)
            running = view.num_inflight_requests(w) - waiting
            score = ww * waiting + rw * running
            if score < best_score:
                best, best_score = w, score
        return best
