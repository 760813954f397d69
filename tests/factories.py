"""Shared test factories: tiny calibrations, workloads, traces, pools, evaluation CSVs and checkpoints.

Plain functions (the session-scoped fixtures built from them are in ``tests/conftest.py``). Every
value here is pinned by some test's expected numbers or digests: change a default and those tests
change meaning, so add a parameter instead.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from envs.sim import Calibration, CostCoefficients, PoolConfig, Request, Workload

# --- pools -----------------------------------------------------------------------------------
#: 8 GPUs on one node: one cp4 and two cp2 workers (degrees 1, 2, 4).
SMALL_POOL = PoolConfig(num_gpus=8, gpus_per_node=8, composition="cp4x1,cp2x2", supported_degrees=(1, 2, 4))
#: the same workers with degrees 2 and 4 only (the reconfiguration tests' pool: cp4x2 / cp2x4 reachable).
RECONFIG_POOL = PoolConfig(num_gpus=8, gpus_per_node=8, composition="cp4x1,cp2x2", supported_degrees=(2, 4))
#: one GPU, one cp1 worker.
ONE_GPU_POOL = PoolConfig(num_gpus=1, gpus_per_node=1, composition="cp1@0", supported_degrees=(1,))
#: 8 GPUs on two 4-GPU nodes: cp4, cp2 and two cp1 workers (the mixed pool of the router and fault tests).
HETERO_POOL_2_NODES = PoolConfig(num_gpus=8, gpus_per_node=4, composition="cp4@0,cp2@4,cp1@6,cp1@7",
                                 supported_degrees=(1, 2, 4))


# --- calibrations ----------------------------------------------------------------------------
def toy_calibration(d_s: float = 1.0, c_s_per_token: float = 0.1, *, a_s_per_token: float = 0.0,
                    b_s_per_token: float = 0.0, alpha_s_per_pair: float = 0.0, kv_bytes_per_token: int = 1,
                    gpu_memory_bytes: int = 4000, max_prompt_tokens: int = 10_000) -> Calibration:
    """A hand-computable cost model: ``E_C(R, P) = d + a*R + b*P + c*R/C + alpha*R*(P + (R+1)/2)/C`` [s].

    Defaults: ``E_C = 1 + 0.1*R/C`` [s]; 1 byte per KV token and 4,000 bytes per GPU, i.e. 1,000
    blocks of 4 tokens per GPU; no weights or activation reserve; prompts up to 10,000 tokens.
    """
    return Calibration(
        model="toy", gpu_type="toy",
        coefficients=CostCoefficients(d_s=d_s, a_s_per_token=a_s_per_token, b_s_per_token=b_s_per_token,
                                      c_s_per_token=c_s_per_token, alpha_s_per_pair=alpha_s_per_pair),
        kv_bytes_per_token=kv_bytes_per_token, gpu_memory_bytes=gpu_memory_bytes, weight_bytes_per_gpu=0,
        activation_reserve_bytes=0, max_prompt_tokens=max_prompt_tokens,
    )


# --- workloads -------------------------------------------------------------------------------
def make_workload(specs: Iterable[tuple[float, int, Sequence[int] | None]], block: int = 4, name: str = "tiny") -> Workload:
    """A workload by hand: ``specs`` is ``(arrival_s, num_prompt_tokens, block_hashes or None)``
    per request (``None``: fresh hashes from 10,000 up); 1 output token; ``block`` tokens per block."""
    reqs = []
    nxt = 10_000
    for i, (t, L, hashes) in enumerate(specs):
        n = -(-L // block)
        if hashes is None:
            hashes = tuple(range(nxt, nxt + n))
            nxt += n
        reqs.append(Request(i, float(t), L, 1, tuple(hashes)))
    return Workload(name, tuple(reqs), kv_block_size_tokens=block)


def random_workload(n: int, rate_rps: float, seed: int, block: int = 4, name: str = "rand") -> Workload:
    """``n`` Poisson arrivals; prompts of 4..80 tokens, half of them sharing one of 3 prefixes."""
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1.0 / rate_rps, n))
    reqs = []
    nxt = 1_000_000
    for i in range(n):
        L = int(rng.integers(4, 81))
        nb = -(-L // block)
        if rng.random() < 0.5:
            p = int(rng.integers(3))
            hashes = tuple(p * 1000 + j for j in range(nb))
        else:
            hashes = tuple(range(nxt, nxt + nb))
            nxt += nb
        reqs.append(Request(i, float(t[i]), L, 1, hashes))
    return Workload(name, tuple(reqs), kv_block_size_tokens=block)


def prefix_document_workload() -> Workload:
    """300 requests at 30 req/s (seeded), 512-token blocks: each opens with one of 20 shared
    document prefixes (2-9 blocks) and adds 1-5 blocks of its own."""
    rng = np.random.default_rng(7)
    t = np.cumsum(rng.exponential(1 / 30.0, 300))
    reqs = []
    for i in range(300):
        doc = int(rng.integers(20))
        n_doc = 2 + doc % 8
        n_own = int(rng.integers(1, 6))
        hashes = tuple(doc * 1000 + k for k in range(n_doc)) + tuple(10**6 + i * 10 + k for k in range(n_own))
        L = 512 * (len(hashes) - 1) + int(rng.integers(1, 513))
        reqs.append(Request(i, float(t[i]), L, 1, hashes))
    return Workload("small-prefix", tuple(reqs), kv_block_size_tokens=512)


def poisson_workload(rate_rps: float, duration_s: float, seed: int = 0, L: int = 2000,
                     shared: tuple[int, ...] = ()) -> Workload:
    """Poisson arrivals at ``rate_rps`` over ``[0, duration_s)``, every prompt ``L`` tokens with 10
    output tokens in 512-token blocks: the ``shared`` leading blocks, then blocks of its own."""
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1.0 / rate_rps, int(rate_rps * duration_s * 1.2) + 10))
    t = t[t < duration_s]
    nb = -(-L // 512)
    reqs = tuple(Request(i, float(x), L, 10,
                         shared + tuple(range(1_000_000 + i * nb, 1_000_000 + (i + 1) * nb - len(shared))))
                 for i, x in enumerate(t))
    return Workload("poisson", reqs, kv_block_size_tokens=512)


# --- trace files -----------------------------------------------------------------------------
def write_trace(path: Path, rows: Iterable[dict]) -> Path:
    """Writes ``rows`` (Mooncake-format dicts: ``timestamp`` [ms], ``input_length``,
    ``output_length``, ``hash_ids``) to ``path`` as JSONL, one row a line; returns ``path``."""
    path = Path(path)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def tiny_trace(path: Path, num_requests: int = 240, rate_rps: float = 4.0, seed: int = 0) -> Path:
    """A Mooncake-format JSONL trace: sessions sharing prefixes, Poisson-ish arrivals [ms]."""
    rng = np.random.default_rng(seed)
    t = 0.0
    with open(path, "w") as fh:
        for i in range(num_requests):
            t += rng.exponential(1000.0 / rate_rps)
            n_blocks = int(rng.integers(1, 6))
            sess = int(rng.integers(0, 8))
            hashes = [sess * 1000 + k for k in range(n_blocks - 1)] + [100_000 + i]
            fh.write(json.dumps({"timestamp": int(t), "input_length": n_blocks * 512 - int(rng.integers(0, 500)),
                                 "output_length": 10, "hash_ids": hashes}) + "\n")
    return path


# --- evaluation files and checkpoints --------------------------------------------------------
#: the shipped checkpoints (``policies/checkpoints``)
CHECKPOINTS_DIR = Path(__file__).resolve().parents[1] / "policies" / "checkpoints"
#: one routing evaluation's episode row (`cpgym evaluate --out`), e.g. to put among reconfiguration rows
ROUTING_EPISODE_ROW = {"policy": "least-work", "seed": 1000, "window": 0, "window_name": "w", "mean_ttft_s": 1.0,
                       "p90_ttft_s": 2.0, "slo_attainment_token_weighted": 0.5, "prefix_hit_rate": 0.3, "num_unfinished": 0}


def episode_rows_csv(tmp_path: Path) -> Path:
    """``tmp_path/rows.csv``: a routing evaluation's episode rows, least-work (mean TTFT 1 s + seed)
    and round-robin (2 s + seed) on seeds 7 and 9, window 0."""
    rows = [{"policy": p, "seed": s, "window": 0, "window_name": "w", "num_requests": 10, "wall_s": 0.1,
             "mean_ttft_s": t + s, "p90_ttft_s": 2 * t, "slo_attainment_token_weighted": 0.5, "prefix_hit_rate": 0.3,
             "num_unfinished": 0} for p, t in (("least-work", 1.0), ("round-robin", 2.0)) for s in (7, 9)]
    path = tmp_path / "rows.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def reconfig_rows_csv(tmp_path: Path, extra: Iterable[dict] = (), composition: bool = True) -> Path:
    """``tmp_path/reconfig.csv``: a reconfiguration evaluation's episode rows (vertumnus-router,
    fixed:cp4x10 and best-fixed-in-hindsight on seeds 1000 and 1001), then ``extra`` rows; without
    its composition column if ``composition`` is False."""
    rows = [{"policy": p, "seed": s, "wall_s": 0.0, "mean_ttft_s": t, "p90_ttft_s": 2 * t,
             "slo_attainment_token_weighted": 0.9, "num_operations": 0, "num_committed_operations": 0,
             "num_unfinished": 0, "composition": c}
            for s in (1000, 1001) for p, t, c in (("vertumnus-router", 1.0, None), ("fixed:cp4x10", 0.9, None),
                                                  ("best-fixed-in-hindsight", 0.9, "cp4x10"))]
    df = pd.concat([pd.DataFrame(rows), pd.DataFrame(list(extra))])
    path = tmp_path / "reconfig.csv"
    (df if composition else df.drop(columns=["composition"])).to_csv(path, index=False)
    return path


def set_cell(col: str, value, row: int = 1):
    """An edit of a ``pandas.DataFrame``: cell ``(row, col)`` set to ``value`` (the column made ``object``)."""
    def edit(df):
        df = df.astype({col: object})
        df.loc[row, col] = value
        return df
    return edit


def junk_checkpoint(tmp_path: Path, kind: str, junk: str = "model.zip") -> Path:
    """A checkpoint folder of ``kind`` (the shipped one's files) whose ``junk`` file is 4 junk bytes."""
    src = CHECKPOINTS_DIR / ("reconfig_target" if kind == "reconfig" else "routing_conversation_residual")
    d = tmp_path / f"{kind}_ckpt"
    d.mkdir()
    for name in ("model.zip", "train_config.json", *(("vecnormalize.pkl",) if kind == "reconfig" else ())):
        shutil.copyfile(src / name, d / name)
    (d / junk).write_bytes(b"junk")
    return d
