"""L-Eval derived request lengths CSV (``leval_request_lengths_DERIVED.csv``; L-Eval, OpenLMLab/LEval).

Facts from ``shared/data/traces/SOURCES.md``: 2,074 (document, query) rows over 299 documents;
token counts only, no arrival times (see :func:`load_leval_lengths_csv`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from envs.sim.request import Request, Workload

from .common import LineError, Skipper, TraceFormatError, csv_int, csv_tokens, read_csv, trace_name

#: Default arrival rate for the L-Eval lengths file [requests/s]; close to the Mooncake
#: conversation (3.40) and synthetic (3.91) traces' mean rates (SOURCES.md).
DEFAULT_LEVAL_RATE_RPS = 3.0
#: Default mean spacing of the questions on one L-Eval document [s].
DEFAULT_LEVAL_MEAN_QUERY_GAP_S = 20.0
#: Columns an L-Eval lengths file must have.
LEVAL_COLUMNS = ("task", "doc_id", "query_idx", "doc_tokens_tekken", "query_tokens_tekken", "ref_output_tokens_tekken")


def load_leval_lengths_csv(
    path: str | Path,
    *,
    kv_block_size_tokens: int | None = None,
    skip_invalid: bool = False,
    rate_rps: float = DEFAULT_LEVAL_RATE_RPS,
    mean_query_gap_s: float = DEFAULT_LEVAL_MEAN_QUERY_GAP_S,
    seed: int = 0,
    doc_tokens_column: str = "doc_tokens_tekken",
    name: str | None = None,
) -> Workload:
    """Load ``leval_request_lengths_DERIVED.csv`` (L-Eval, OpenLMLab/LEval; token counts only).

    One request per (document, query) row: prompt = document + query tokens
    (``doc_tokens_column`` + ``query_tokens_tekken``), output = ``ref_output_tokens_tekken``.
    The document's *full* blocks get hash ids shared by all queries of that document (keyed by
    (task, doc_id, block index)); the partial document block and the query get fresh ids. With
    every query a separate request this gives ~84 % ideal token reuse (SOURCES.md: 83.9 %).

    The file has no arrival times, so they are synthesised (seeded by ``seed``):

    * arrival instants: a Poisson process at ``rate_rps`` [requests/s], first arrival at 0 s;
    * order: each document is read by one user (``session_id`` = document index) who asks its
      queries in a seeded random order spread over a window of ``min(T, q × mean_query_gap_s)``
      seconds (``q`` queries, ``T = n / rate_rps``) placed uniformly in ``[0, T]``; requests are
      sorted by these nominal times and take the Poisson instants in that order. Queries of one
      document therefore arrive over time, interleaved with other documents.

    Args:
        path: the CSV file (columns task, doc_id, query_idx, doc_tokens_tekken, doc_tokens_sp32k,
            query_tokens_tekken, ref_output_tokens_tekken).
        kv_block_size_tokens: block size [tokens], default 512.
        skip_invalid: skip invalid rows (counted, warned) instead of raising.
        rate_rps: mean arrival rate [requests/s] (default 3.0, like the Mooncake traces).
        mean_query_gap_s: mean spacing of one document's queries [s] (default 20).
        seed: seed of the synthetic arrivals and order.
        doc_tokens_column: ``"doc_tokens_tekken"`` (default, Mistral Tekken 131k vocab) or
            ``"doc_tokens_sp32k"`` (Llama-2-like 32k SentencePiece; the query stays in Tekken).
        name: workload name (default: file name without extension).

    Raises:
        TraceFormatError: naming the file (and line and column where it applies): a missing
            column, an invalid row, text that is not UTF-8, or ``.gz`` data that is not gzip,
            truncated or corrupt.
    """
    path = Path(path)
    bs = 512 if kv_block_size_tokens is None else int(kv_block_size_tokens)
    if bs < 1:
        raise ValueError(f"kv_block_size_tokens must be >= 1, got {kv_block_size_tokens}")
    if not (math.isfinite(rate_rps) and rate_rps > 0):
        raise ValueError(f"rate_rps must be a finite number > 0 [requests/s], got {rate_rps!r}")
    if not (math.isfinite(mean_query_gap_s) and mean_query_gap_s >= 0):
        raise ValueError(f"mean_query_gap_s must be a finite number >= 0 [s], got {mean_query_gap_s!r}")
    if doc_tokens_column not in ("doc_tokens_tekken", "doc_tokens_sp32k"):
        raise ValueError(f"doc_tokens_column must be 'doc_tokens_tekken' or 'doc_tokens_sp32k', got {doc_tokens_column!r}")
    required = LEVAL_COLUMNS + ((doc_tokens_column,) if doc_tokens_column not in LEVAL_COLUMNS else ())
    err = Skipper(path, skip_invalid)
    docs: dict[tuple[str, int], tuple[int, int]] = {}  # (task, doc_id) -> (doc index, doc tokens)
    doc_line: dict[tuple[str, int], int] = {}
    rows: list[tuple[int, int, int, int]] = []  # doc index, doc tokens, query tokens, output tokens
    for lineno, row in read_csv(path, required, err, "L-Eval derived lengths: " + ",".join(required)):
        try:
            task = row["task"].strip()
            if not task:
                raise LineError("task", "is empty; expected an L-Eval task name")
            doc_id = csv_int(row, "doc_id", 0, "an integer >= 0")
            csv_int(row, "query_idx", 0, "an integer >= 0")  # validated; identical documents may repeat an index
            doc_tokens = csv_tokens(row, doc_tokens_column)
            query_tokens = csv_tokens(row, "query_tokens_tekken")
            out_tokens = csv_tokens(row, "ref_output_tokens_tekken")
            key = (task, doc_id)
            if key in docs and docs[key][1] != doc_tokens:
                raise LineError(doc_tokens_column, f"got {doc_tokens} for document ({task!r}, {doc_id}); expected "
                                                   f"{docs[key][1]} as on line {doc_line[key]} (same document, same length)")
        except LineError as e:
            err(lineno, e.field, e.problem)
            continue
        if key not in docs:
            docs[key] = (len(docs), doc_tokens)
            doc_line[key] = lineno
        rows.append((docs[key][0], doc_tokens, query_tokens, out_tokens))
    if not rows:
        raise TraceFormatError(path, None, None, f"all {err.num_skipped} data row(s) are invalid; first: {err.first}")

    rng = np.random.default_rng(seed)
    n = len(rows)
    horizon_s = n / rate_rps
    doc_of = np.array([r[0] for r in rows])
    num_docs = len(docs)
    nominal = np.empty(n)
    for d in range(num_docs):
        idx = np.flatnonzero(doc_of == d)
        idx = idx[rng.permutation(idx.size)]  # seeded shuffle of the query order
        span_s = min(horizon_s, idx.size * mean_query_gap_s)
        start_s = rng.uniform(0.0, horizon_s - span_s) if horizon_s > span_s else 0.0
        nominal[idx] = start_s + np.sort(rng.uniform(0.0, span_s, idx.size))
    order = np.argsort(nominal, kind="stable")
    gaps = rng.exponential(1.0 / rate_rps, n)
    gaps[0] = 0.0
    arrivals_s = np.cumsum(gaps).tolist()

    next_hash = 0
    doc_hashes: dict[int, tuple[int, ...]] = {}
    requests = []
    for i, k in enumerate(order.tolist()):
        d, doc_tokens, query_tokens, out_tokens = rows[k]
        shared = doc_hashes.get(d)
        if shared is None:
            nfull = doc_tokens // bs
            shared = doc_hashes[d] = tuple(range(next_hash, next_hash + nfull))
            next_hash += nfull
        length = doc_tokens + query_tokens
        nrest = -(-length // bs) - len(shared)
        hs = shared + tuple(range(next_hash, next_hash + nrest))
        next_hash += nrest
        requests.append(Request(i, arrivals_s[i], length, out_tokens, hs, session_id=d))
    metadata = {
        "format": "leval-derived-lengths-csv",
        "rate_rps": rate_rps,
        "mean_query_gap_s": mean_query_gap_s,
        "seed": seed,
        "doc_tokens_column": doc_tokens_column,
        "num_documents": num_docs,
    }
    err.finish(metadata)
    return Workload(name or trace_name(path), tuple(requests), bs, str(path), metadata)

