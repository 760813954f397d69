"""Single-process tests: reference attention, masks, LSE merge, layouts, C = 1 kernels, layer."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels_ref.attention import (
    INVALID_POSITION,
    attention_with_lse,
    bottom_right_causal_mask,
    expand_kv_heads,
    masked_attention,
    merge_partials,
    reference_attention,
)
from kernels_ref.cp_attention import (
    ring_attention,
    shard_new_tokens,
    shard_prefix,
    unshard_new_tokens,
    zigzag_allgather_attention,
)
from kernels_ref.layer import LayerConfig, PrefillDecoderLayer
from kernels_ref.layout import ZigzagLayout


def _qkv(r, p, hq, hkv, d, seed, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(r, hq, d, generator=g, dtype=torch.float64).to(dtype)
    k = torch.randn(p + r, hkv, d, generator=g, dtype=torch.float64).to(dtype)
    v = torch.randn(p + r, hkv, d, generator=g, dtype=torch.float64).to(dtype)
    return q, k, v


def _naive(q, k, v):
    """Row-by-row loop: query i (position P+i) attends keys 0..P+i; GQA via h // group."""
    r, hq, d = q.shape
    p = k.shape[0] - r
    g = hq // k.shape[1]
    out = torch.zeros(r, hq, v.shape[2], dtype=torch.float64)
    for i in range(r):
        for h in range(hq):
            keys = k[: p + i + 1, h // g].double()
            w = torch.softmax(keys @ q[i, h].double() / math.sqrt(d), dim=0)
            out[i, h] = w @ v[: p + i + 1, h // g].double()
    return out


@given(r=st.integers(1, 9), p=st.integers(0, 9), hkv=st.sampled_from([1, 2]), group=st.sampled_from([1, 3]),
       seed=st.integers(0, 99))
@settings(max_examples=15, deadline=None)
def test_reference_matches_row_by_row_loop(r, p, hkv, group, seed):
    q, k, v = _qkv(r, p, hkv * group, hkv, 4, seed)
    torch.testing.assert_close(reference_attention(q, k, v), _naive(q, k, v), atol=1e-13, rtol=1e-13)


def test_mask_is_bottom_right_and_sdpa_is_causal_is_top_left():
    m = bottom_right_causal_mask(2, 6)
    # paper §2.2 example: L=8, P=6: the 7th token sees 7 positions, the 8th sees 8, 15 pairs in all
    assert m.sum(dim=1).tolist() == [7, 8] and int(m.sum()) == 15
    q, k, v = _qkv(5, 7, 2, 2, 8, seed=0)
    ref = reference_attention(q, k, v)

    def sd(q=q, k=k, v=v, **kw):  # SDPA in [tokens, heads, dim] layout
        q, k, v = (t.permute(1, 0, 2) for t in (q, k, v))
        return F.scaled_dot_product_attention(q, k, v, **kw).permute(1, 0, 2)

    torch.testing.assert_close(sd(attn_mask=bottom_right_causal_mask(5, 7)), ref, atol=1e-12, rtol=1e-12)
    assert (sd(is_causal=True) - ref).abs().max() > 1e-2  # top-left alignment is wrong with a prefix
    q0, k0, v0 = _qkv(5, 0, 2, 2, 8, seed=1)  # without a prefix the two alignments coincide
    torch.testing.assert_close(sd(q0, k0, v0, is_causal=True), reference_attention(q0, k0, v0), atol=1e-12, rtol=1e-12)


def test_gqa_equals_explicitly_repeated_heads():
    q, k, v = _qkv(6, 4, 8, 2, 8, seed=3)
    grouped = reference_attention(q, k, v)
    torch.testing.assert_close(grouped, reference_attention(q, expand_kv_heads(k, 8), expand_kv_heads(v, 8)), atol=0, rtol=0)
    # query heads 0-3 use KV head 0: changing KV head 1 leaves them unchanged
    k2 = k.clone()
    k2[:, 1] = torch.randn(k.shape[0], k.shape[2], generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    other = reference_attention(q, k2, v)
    torch.testing.assert_close(other[:, :4], grouped[:, :4], atol=0, rtol=0)
    assert (other[:, 4:] - grouped[:, 4:]).abs().max() > 1e-3


@pytest.mark.parametrize("keys_sorted", [False, True])
@pytest.mark.parametrize("block", [1, 4, 64])
def test_attention_with_lse_matches_reference_and_logsumexp(keys_sorted, block):
    q, k, v = _qkv(11, 6, 4, 2, 8, seed=4)
    qp, kp = torch.arange(6, 17), torch.arange(17)
    out, lse = attention_with_lse(q, k, v, qp, kp, block_tokens=block, keys_sorted=keys_sorted)
    torch.testing.assert_close(out, reference_attention(q, k, v), atol=1e-13, rtol=1e-13)
    scores = torch.einsum("qhd,khd->qhk", q, expand_kv_heads(k, 4)) / math.sqrt(8)
    scores = scores.masked_fill(~bottom_right_causal_mask(11, 6)[:, None, :], float("-inf"))
    torch.testing.assert_close(lse, torch.logsumexp(scores, dim=-1), atol=1e-13, rtol=1e-13)


def test_lse_merge_of_disjoint_key_sets_equals_full_attention():
    q, k, v = _qkv(9, 12, 4, 1, 8, seed=5)
    qp, kp = torch.arange(12, 21), torch.arange(21)
    perm = torch.randperm(21, generator=torch.Generator().manual_seed(0))
    parts = [perm[:3], perm[3:10], perm[10:]]  # arbitrary split; some query rows see no key of a part
    out = torch.zeros(9, 4, 8, dtype=torch.float64)
    lse = torch.full((9, 4), float("-inf"), dtype=torch.float64)
    for idx in parts:
        o, part_lse = attention_with_lse(q, k[idx], v[idx], qp, kp[idx])
        out, lse = merge_partials(out, lse, o, part_lse)
    full, full_lse = attention_with_lse(q, k, v, qp, kp)
    torch.testing.assert_close(out, full, atol=1e-13, rtol=1e-13)
    torch.testing.assert_close(lse, full_lse, atol=1e-13, rtol=1e-13)


def test_fully_masked_rows_are_merge_identity_and_fp32_merge():
    q, k, v = _qkv(3, 0, 2, 2, 4, seed=6, dtype=torch.float32)
    out, lse = attention_with_lse(q, k, v, torch.arange(3), torch.full((3,), INVALID_POSITION))
    assert out.dtype == torch.float32 and bool((out == 0).all()) and bool(torch.isneginf(lse).all())
    o2, l2 = attention_with_lse(q, k, v, torch.arange(3), torch.arange(3))
    m_out, m_lse = merge_partials(out, lse, o2, l2)
    assert torch.equal(m_out, o2) and torch.equal(m_lse, l2)
    both, both_lse = merge_partials(out, lse, out, lse)
    assert bool((both == 0).all()) and bool(torch.isneginf(both_lse).all())


@pytest.mark.parametrize("impl", ["matmul", "sdpa"])
def test_positions_and_block_size_are_checked(impl):
    # a positions vector of the wrong length was sliced silently, and block_tokens <= 0 gave an
    # all-zero output (range() with a negative step is empty)
    q, k, v = _qkv(3, 2, 2, 1, 4, seed=7, dtype=torch.float32)
    qp, kp = torch.arange(2, 5), torch.arange(5)
    with pytest.raises(ValueError, match=r"k_positions must have shape \[T_k\] = \[5\]"):
        masked_attention(q, k, v, qp, torch.arange(9), impl=impl)
    with pytest.raises(ValueError, match=r"q_positions must have shape \[T_q\] = \[3\]"):
        masked_attention(q, k, v, torch.arange(2, 9), kp, impl=impl)
    with pytest.raises(ValueError, match="q_positions"):
        masked_attention(q, k, v, qp[None], kp, impl=impl)
    for bad in (0, -1, 2.5):
        with pytest.raises(ValueError, match="block_tokens must be an integer >= 1"):
            masked_attention(q, k, v, qp, kp, block_tokens=bad, impl=impl)


@given(r=st.integers(1, 200), p=st.integers(0, 300), c=st.sampled_from([1, 2, 3, 4, 8]))
@settings(max_examples=200, deadline=None)
def test_zigzag_layout_partitions_and_balances(r, p, c):
    lay = ZigzagLayout(r, p, c)
    s = lay.chunk_tokens
    idx = sorted(i for rank in range(c) for i in lay.local_new_indices(rank))
    assert idx == list(range(lay.padded_new_tokens)) and lay.num_padding_tokens < 2 * c
    for rank in range(c):
        lo, hi = lay.chunk_ids(rank)
        assert (lo, hi) == (rank, 2 * c - 1 - rank)
        assert lay.local_new_indices(rank) == list(range(lo * s, lo * s + s)) + list(range(hi * s, hi * s + s))
    pairs = [lay.rank_pairs(rank) for rank in range(c)]
    w = r * p + r * (r + 1) // 2
    assert sum(pairs) == w == lay.total_pairs()
    dev = max(abs(x - w / c) for x in pairs)
    if r % (2 * c) == 0:
        assert dev == 0 and lay.max_imbalance_pairs() == 0
    assert dev <= lay.max_imbalance_pairs()
    if s >= 2 * c - 1:  # "within one chunk"
        assert dev <= s * (p + lay.padded_new_tokens)
    prefix = [lay.prefix_range(rank) for rank in range(c)]
    assert sum(b - a for a, b in prefix) == p and all(b - a <= lay.prefix_shard_tokens for a, b in prefix)


def test_layout_rejects_bad_input():
    for args in ((0, 0, 1), (4, -1, 1), (4, 0, 0)):
        with pytest.raises(ValueError):
            ZigzagLayout(*args)
    with pytest.raises(ValueError, match="rank"):
        ZigzagLayout(4, 0, 2).chunk_ids(2)


def test_shard_unshard_roundtrip_and_wrong_order_is_detected():
    lay = ZigzagLayout(13, 5, 3)
    x = torch.arange(13 * 2).view(13, 2)
    parts = [shard_new_tokens(x, lay, r) for r in range(3)]
    assert torch.equal(unshard_new_tokens(parts, lay), x)
    assert not torch.equal(unshard_new_tokens(parts[::-1], lay), x)
    pre = torch.arange(5)
    assert torch.cat([shard_prefix(pre, lay, r) for r in range(3)]).tolist() == [0, 1, 2, 3, 4, 0]


@pytest.mark.parametrize("kernel", ["allgather", "allgather-sdpa", "ring"])
@pytest.mark.parametrize("r, p", [(1, 0), (10, 0), (7, 9)])
def test_single_rank_kernels_without_process_group(kernel, r, p):
    q, k, v = _qkv(r, p, 4, 2, 8, seed=7)
    lay = ZigzagLayout(r, p, 1)
    args = (shard_new_tokens(q, lay, 0), shard_new_tokens(k[p:], lay, 0), shard_new_tokens(v[p:], lay, 0),
            shard_prefix(k[:p], lay, 0), shard_prefix(v[:p], lay, 0), lay)
    if kernel == "ring":
        res = ring_attention(*args, count_pairs=True, block_tokens=3)
    else:
        res = zigzag_allgather_attention(*args, impl="sdpa" if kernel.endswith("sdpa") else "matmul", count_pairs=True,
                                         block_tokens=3)
    torch.testing.assert_close(unshard_new_tokens([res.out], lay), reference_attention(q, k, v), atol=1e-12, rtol=1e-12)
    assert res.pairs == lay.total_pairs()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kernel", ["allgather", "allgather-sdpa", "ring"])
def test_single_rank_kernels_in_half_precision_on_cpu(kernel, dtype):
    """bf16 / fp16 inputs on CPU (MQA, a prefix not a multiple of anything, R odd): the output is in the input dtype
    and within 2 units of roundoff of the float64 attention of the rounded inputs (matmul / ring: fp32 scores and
    LSE merge, one final rounding; SDPA: computed in the input dtype). Unit roundoff u = 2^-8 (bf16), 2^-11 (fp16)."""
    u = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}[dtype]
    q, k, v = _qkv(37, 21, 4, 1, 16, seed=12, dtype=dtype)
    lay = ZigzagLayout(37, 21, 1)
    args = (shard_new_tokens(q, lay, 0), shard_new_tokens(k[21:], lay, 0), shard_new_tokens(v[21:], lay, 0),
            shard_prefix(k[:21], lay, 0), shard_prefix(v[:21], lay, 0), lay)
    if kernel == "ring":
        res = ring_attention(*args, block_tokens=5)
    else:
        res = zigzag_allgather_attention(*args, impl="sdpa" if kernel.endswith("sdpa") else "matmul", block_tokens=5)
    out = unshard_new_tokens([res.out], lay)
    assert out.dtype == dtype
    ref = reference_attention(q, k, v)
    assert float(((out.double() - ref).abs() / (1 + ref.abs())).max()) <= 2 * u


def test_kernel_rejects_mismatched_layout():
    q, k, v = _qkv(8, 0, 2, 2, 4, seed=8)
    lay = ZigzagLayout(8, 0, 2)
    with pytest.raises(ValueError, match="degree"):
        zigzag_allgather_attention(q[:4], k[:4], v[:4], k[:0], v[:0], lay)
    with pytest.raises(ValueError, match="local rows"):
        ring_attention(q[:3], k[:3], v[:3], k[:0], v[:0], ZigzagLayout(8, 0, 1))
    with pytest.raises(ValueError, match="multiple"):
        reference_attention(q[:, :2].repeat(1, 1, 1)[:, :1].expand(8, 3, 4), k, v)


@pytest.mark.parametrize("experts", [0, 4])
def test_layer_single_rank_matches_float64_reference(experts):
    cfg = LayerConfig(hidden_size=32, num_q_heads=4, num_kv_heads=2, head_dim=8, intermediate_size=48, num_experts=experts,
                      num_experts_per_token=2 if experts else 0, moe_intermediate_size=16 if experts else 0)
    layer = PrefillDecoderLayer(cfg, seed=1, dtype=torch.float32)
    g = torch.Generator().manual_seed(2)
    x, kp, vp = torch.randn(9, 32, generator=g), torch.randn(5, 2, 8, generator=g), torch.randn(5, 2, 8, generator=g)
    lay = ZigzagLayout(9, 5, 1)
    y, k, _ = layer(shard_new_tokens(x, lay, 0), kp, vp, lay, 0)
    ref_y, ref_k, _ = layer.double().reference_forward(x.double(), kp.double(), vp.double())
    torch.testing.assert_close(unshard_new_tokens([y], lay).double(), ref_y, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(unshard_new_tokens([k], lay).double(), ref_k, atol=1e-5, rtol=1e-5)
    assert cfg.linear_flops_per_token() > 0


def test_layer_config_validation():
    with pytest.raises(ValueError, match="multiple"):
        LayerConfig(num_q_heads=3, num_kv_heads=2)
    with pytest.raises(ValueError, match="MoE"):
        LayerConfig(num_experts=4, num_experts_per_token=5, moe_intermediate_size=8)
