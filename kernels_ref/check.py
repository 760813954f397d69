"""Correctness suite of the CP kernels against float64 single-device references.

One launch (:func:`kernels_ref.dist.launch`) with ``max(degrees)`` ranks runs every case:
a sub-group per CP degree C (ranks ``0..C-1``), identical seeded full-sequence inputs on every
rank, each rank comparing its own zigzag shard with the float64 reference. A case passes when
``|out - ref| <= atol + rtol * |ref|`` element-wise on every rank, where the tolerance comes
from the dtype (:data:`TOLERANCES`), and -- for attention cases -- the per-rank query-key pair
counts the kernel reports equal the layout's analytic ones and sum to ``W(R, P)``.

Used by ``cpgym kernels check`` and ``tests/kernels_ref``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from kernels_ref.dist import launch
from kernels_ref.layout import ZigzagLayout

TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-12, 1e-12),
    "float32": (1e-5, 1e-5),
    "bfloat16": (3e-2, 3e-2),  # GPU only: bf16 has an 8-bit mantissa (unit roundoff 2^-8 = 3.9e-3)
}
"""dtype -> (atol, rtol) of the comparison against the float64 reference."""


@dataclass(frozen=True)
class CheckCase:
    """One correctness case.

    Attributes:
        kind: ``"attention"`` (random q/k/v) or ``"layer"`` (:class:`PrefillDecoderLayer`).
        algorithm: ``"allgather"`` or ``"ring"``.
        impl: all-gather attention implementation (``"matmul"`` / ``"sdpa"``).
        dtype: ``"float64"``, ``"float32"`` or (GPU) ``"bfloat16"``.
        degree: C. num_new_tokens: R. num_cached_tokens: P.
        num_q_heads, num_kv_heads, head_dim: attention geometry (GQA ratio = q/kv).
        num_experts: layer cases: 0 = dense MLP, else a top-2 MoE.
        seed: input seed.
    """

    kind: str
    algorithm: str
    dtype: str
    degree: int
    num_new_tokens: int
    num_cached_tokens: int
    num_q_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 16
    impl: str = "matmul"
    num_experts: int = 0
    seed: int = 0

    @property
    def name(self) -> str:
        extra = f"/{self.impl}" if self.algorithm == "allgather" and self.impl != "matmul" else ""
        moe = f" moe{self.num_experts}" if self.num_experts else ""
        return (f"{self.kind}/{self.algorithm}{extra} {self.dtype} C={self.degree} R={self.num_new_tokens} "
                f"P={self.num_cached_tokens} H={self.num_q_heads}/{self.num_kv_heads}{moe}")


@dataclass
class CheckResult:
    """Outcome of one case over its ranks (max over ranks)."""

    case: CheckCase
    max_abs_err: float
    max_rel_err: float
    atol: float
    rtol: float
    within_tolerance: bool
    rank_pairs: list[int] = field(default_factory=list)
    expected_pairs: list[int] = field(default_factory=list)
    balance_ok: bool = True

    @property
    def passed(self) -> bool:
        return self.within_tolerance and self.balance_ok

    def row(self) -> dict:
        d = {"case": self.case.name, **{k: v for k, v in asdict(self).items() if k != "case"}, "passed": self.passed}
        return d


def default_cases(degrees: tuple[int, ...] = (1, 2, 4), device: str = "cpu") -> list[CheckCase]:
    """The quick suite: P = 0 and P > 0, R not divisible by 2C (padding), R < 2C, GQA ratios
    1, 2, 4 and 8 (MQA), both algorithms, fp64 and fp32, the SDPA path, dense and MoE layers.
    On ``device="cuda"`` bf16 cases are added."""
    cases: list[CheckCase] = []
    for c in degrees:
        for alg in ("allgather", "ring"):
            cases += [
                CheckCase("attention", alg, "float64", c, 32, 0, 4, 4, 8, seed=1),
                CheckCase("attention", alg, "float64", c, 21, 13, 4, 2, 8, seed=2),
                CheckCase("attention", alg, "float64", c, 37, 50, 8, 1, 16, seed=3),
                CheckCase("attention", alg, "float64", c, 3, 5, 4, 1, 8, seed=4),
                CheckCase("attention", alg, "float32", c, 45, 30, 8, 2, 16, seed=5),
                CheckCase("layer", alg, "float64", c, 19, 11, 4, 2, 16, seed=6),
                CheckCase("layer", alg, "float32", c, 24, 7, 4, 1, 16, num_experts=4, seed=7),
            ]
            if device == "cuda":
                cases.append(CheckCase("attention", alg, "bfloat16", c, 1000, 600, 8, 2, 64, seed=8))
        cases.append(CheckCase("attention", "allgather", "float64", c, 29, 17, 4, 2, 8, impl="sdpa", seed=9))
        if device == "cuda":
            cases.append(CheckCase("attention", "allgather", "bfloat16", c, 1000, 600, 8, 2, 64, impl="sdpa", seed=10))
    return cases


def _nanmax(values) -> float:
    """``max`` that returns NaN if any value is NaN (Python's ``max(0.0, nan)`` is 0.0: a kernel
    returning NaN was reported with ``max_abs_err`` 0)."""
    values = [float(v) for v in values]
    return math.nan if any(math.isnan(v) for v in values) else max(values, default=0.0)


def _run_case(case: CheckCase, rank: int, group, device: str) -> dict:
    import torch

    from kernels_ref.attention import reference_attention  # lazy: torch

    # lazy: torch
    # lazy: torch
    # lazy: torch
    from kernels_ref.cp_attention import ring_attention, shard_new_tokens, shard_prefix, zigzag_allgather_attention
    from kernels_ref.layer import LayerConfig, PrefillDecoderLayer  # lazy: torch

    dtype = getattr(torch, case.dtype)
    layout = ZigzagLayout(case.num_new_tokens, case.num_cached_tokens, case.degree)
    gen = torch.Generator().manual_seed(case.seed)
    R, P = case.num_new_tokens, case.num_cached_tokens

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype).to(device)

    pairs = None
    if case.kind == "attention":
        q = randn(R, case.num_q_heads, case.head_dim)
        k, v = randn(P + R, case.num_kv_heads, case.head_dim), randn(P + R, case.num_kv_heads, case.head_dim)
        ref = reference_attention(q.double(), k.double(), v.double())
        args = (shard_new_tokens(q, layout, rank), shard_new_tokens(k[P:], layout, rank),
                shard_new_tokens(v[P:], layout, rank), shard_prefix(k[:P], layout, rank), shard_prefix(v[:P], layout, rank),
                layout)
        if case.algorithm == "allgather":
            res = zigzag_allgather_attention(*args, group=group, impl=case.impl, count_pairs=True, block_tokens=16)
        elif case.algorithm == "ring":
            res = ring_attention(*args, group=group, count_pairs=True, block_tokens=16)
        else:
            raise ValueError(f"unknown algorithm {case.algorithm!r}")
        got, want, pairs = [res.out], [ref], res.pairs
    elif case.kind == "layer":
        hd = case.head_dim
        cfg = LayerConfig(hidden_size=case.num_q_heads * hd, num_q_heads=case.num_q_heads, num_kv_heads=case.num_kv_heads,
                          head_dim=hd, intermediate_size=96, num_experts=case.num_experts,
                          num_experts_per_token=2 if case.num_experts else 0,
                          moe_intermediate_size=32 if case.num_experts else 0)
        layer = PrefillDecoderLayer(cfg, seed=case.seed, dtype=dtype, device=device)
        x = randn(R, cfg.hidden_size)
        kp, vp = randn(P, cfg.num_kv_heads, hd), randn(P, cfg.num_kv_heads, hd)
        y, k_new, v_new = layer(shard_new_tokens(x, layout, rank), shard_prefix(kp, layout, rank),
                                shard_prefix(vp, layout, rank), layout, rank, group=group, algorithm=case.algorithm,
                                impl=case.impl, block_tokens=16)
        ref_y, ref_k, ref_v = layer.double().reference_forward(x.double(), kp.double(), vp.double())
        got, want = [y, k_new, v_new], [ref_y, ref_k, ref_v]
    else:
        raise ValueError(f"unknown case kind {case.kind!r}")
    atol, rtol = TOLERANCES[case.dtype]
    real = torch.tensor([i < R for i in layout.local_new_indices(rank)], device=device)
    max_abs = max_rel = 0.0
    ok = True
    for g_local, w_full in zip(got, want):
        w_local = shard_new_tokens(w_full, layout, rank)[real]
        g_local = g_local[real].double()
        err = (g_local - w_local).abs()
        max_abs = _nanmax([max_abs, err.max() if err.numel() else 0.0])
        rel = err / w_local.abs().clamp_min(1e-300)
        max_rel = _nanmax([max_rel, rel.max() if rel.numel() else 0.0])
        ok = ok and bool((err <= atol + rtol * w_local.abs()).all())
    return {"max_abs_err": max_abs, "max_rel_err": max_rel, "ok": ok, "pairs": pairs}


def _suite_worker(rank: int, world_size: int, cases: list[CheckCase], device: str) -> list[dict | None]:
    import torch
    import torch.distributed as dist

    groups = {c: dist.new_group(list(range(c))) for c in sorted({case.degree for case in cases})}
    out: list[dict | None] = []
    with torch.inference_mode():
        for case in cases:
            out.append(_run_case(case, rank, groups[case.degree], device) if rank < case.degree else None)
    return out


def run_check_suite(cases: list[CheckCase] | None = None, device: str = "cpu") -> list[CheckResult]:
    """Run ``cases`` (default :func:`default_cases`) on one spawned process group; returns one result per case.

    Raises:
        ValueError: on an unknown dtype / device, or not enough GPUs for ``device="cuda"``.
    """
    cases = default_cases(device=device) if cases is None else list(cases)
    if not cases:
        return []
    for case in cases:
        if case.dtype not in TOLERANCES:
            raise ValueError(f"unknown dtype {case.dtype!r}; one of {', '.join(TOLERANCES)}")
        if case.dtype == "bfloat16" and device != "cuda":
            raise ValueError("bfloat16 cases need device='cuda' (the CPU reference path is fp32/fp64)")
    world = max(case.degree for case in cases)
    per_rank = launch(_suite_worker, world, args=(cases, device), device=device)
    results = []
    for i, case in enumerate(cases):
        rows = [per_rank[r][i] for r in range(case.degree)]
        atol, rtol = TOLERANCES[case.dtype]
        res = CheckResult(case, _nanmax(r["max_abs_err"] for r in rows), _nanmax(r["max_rel_err"] for r in rows), atol, rtol,
                          all(r["ok"] for r in rows))
        if case.kind == "attention":
            layout = ZigzagLayout(case.num_new_tokens, case.num_cached_tokens, case.degree)
            res.rank_pairs = [r["pairs"] for r in rows]
            res.expected_pairs = [layout.rank_pairs(r) for r in range(case.degree)]
            mean = layout.total_pairs() / case.degree
            res.balance_ok = (res.rank_pairs == res.expected_pairs and sum(res.rank_pairs) == layout.total_pairs()
                              and all(abs(p - mean) <= layout.max_imbalance_pairs() for p in res.rank_pairs))
        results.append(res)
    return results


def format_table(results: list[CheckResult]) -> str:
    """Plain-text table: case, max abs/rel error, tolerance, per-rank pairs, PASS/FAIL."""
    head = f"{'case':<58} {'max_abs_err':>11} {'atol':>7} {'pairs/rank':<22} result"
    lines = [head, "-" * len(head)]
    for r in results:
        pairs = ",".join(str(p) for p in r.rank_pairs) if r.rank_pairs else "-"
        lines.append(f"{r.case.name:<58} {r.max_abs_err:11.2e} {r.atol:7.0e} {pairs:<22} {'PASS' if r.passed else 'FAIL'}")
    n_fail = sum(not r.passed for r in results)
    lines.append(f"{len(results) - n_fail}/{len(results)} passed")
    return "\n".join(lines)
