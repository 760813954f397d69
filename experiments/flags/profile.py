"""``cpgym kernels profile`` flags: the declarations the parser reads (the run: :mod:`experiments.commands.profile`)."""

from __future__ import annotations

import argparse

from kernels_ref import specs
from kernels_ref.profile import DEFAULT_PROFILE_LAYER as L
from kernels_ref.profile import ProfileConfig


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = ProfileConfig()
    ints = lambda v: ",".join(str(x) for x in v)  # noqa: E731
    p.add_argument("--out", metavar="FILE", required=True, help="write the fitted calibration JSON file")
    p.add_argument("--new-tokens", default=ints(d.num_new_tokens), help=f"R values (default {ints(d.num_new_tokens)})")
    p.add_argument("--cached-tokens", default=ints(d.num_cached_tokens),
                   help=f"P values (default {ints(d.num_cached_tokens)})")
    p.add_argument("--degrees", default=ints(d.degrees), help=f"C values (default {ints(d.degrees)})")
    p.add_argument("--layers", type=int, default=d.num_layers, help=f"decoder layers per step (default {d.num_layers})")
    p.add_argument("--hidden", type=int, default=L.hidden_size, help=f"hidden size (default {L.hidden_size})")
    p.add_argument("--q-heads", type=int, default=L.num_q_heads, help=f"query heads (default {L.num_q_heads})")
    p.add_argument("--kv-heads", type=int, default=L.num_kv_heads, help=f"KV heads (default {L.num_kv_heads})")
    p.add_argument("--head-dim", type=int, default=L.head_dim, help=f"head dim (default {L.head_dim})")
    p.add_argument("--intermediate", type=int, default=L.intermediate_size,
                   help=f"dense MLP width (default {L.intermediate_size})")
    p.add_argument("--experts", type=int, default=0, help="MoE experts (default 0: dense MLP)")
    p.add_argument("--top-k", type=int, default=2, help="MoE experts per token (default 2)")
    p.add_argument("--moe-intermediate", type=int, default=256, help="MoE expert width (default 256)")
    p.add_argument("--algorithm", choices=("allgather", "ring"), default=d.algorithm,
                   help=f"CP attention (default {d.algorithm})")
    p.add_argument("--impl", choices=("sdpa", "matmul"), default=d.impl, help=f"all-gather attention impl (default {d.impl})")
    p.add_argument("--dtype", default=None, help="float32 (CPU default) / float64; bfloat16 (GPU default)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cpu (gloo, default) or cuda (nccl)")
    p.add_argument("--warmup", type=int, default=d.warmup, help=f"untimed runs per point (default {d.warmup})")
    p.add_argument("--repeats", type=int, default=d.repeats, help=f"timed runs per point (default {d.repeats})")
    p.add_argument("--seed", type=int, default=d.seed, help=f"weights/inputs seed (default {d.seed})")
    p.add_argument("--model", default=specs.DEFAULT_MODEL,
                   help=f"roofline model preset for the memory fields (default {specs.DEFAULT_MODEL})")
    p.add_argument("--gpu", default=specs.DEFAULT_GPU,
                   help=f"roofline GPU preset for the memory fields (default {specs.DEFAULT_GPU})")
    p.add_argument("--format", choices=("table", "json"), default="table", help="stdout format (default table)")
