"""The trace entry point: :func:`load_trace` picks the loader from the file type."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from envs.sim.request import Workload

from .azure import AZURE_COLUMNS, load_azure_csv
from .common import TraceFormatError, base_suffix, iter_raw_lines
from .leval import LEVAL_COLUMNS, load_leval_lengths_csv
from .mooncake import load_mooncake_jsonl


def load_trace(
    path: str | Path,
    *,
    kv_block_size_tokens: int | None = None,
    skip_invalid: bool = False,
    spread_seed: int = 0,
    **options: Any,
) -> Workload:
    """Load a request trace, choosing the loader from the file type.

    * ``.jsonl`` → :func:`load_mooncake_jsonl` (Mooncake FAST'25);
    * ``.csv`` with a ``TIMESTAMP,ContextTokens,GeneratedTokens`` header → :func:`load_azure_csv`;
    * ``.csv`` with a ``task,doc_id,query_idx,...`` header → :func:`load_leval_lengths_csv`;
    * any of these with a further ``.gz`` is read through gzip.

    Args:
        path: the trace file.
        kv_block_size_tokens: block size of the returned hashes [tokens]; None = 512 (the
            Mooncake traces' native block size, and the default for the others).
        skip_invalid: skip invalid lines, reporting their number in
            ``metadata["num_skipped_invalid"]`` and a :class:`TraceWarning`, instead of raising.
        spread_seed: seed of the randomness a loader adds: the in-bucket spreading of quantised
            Mooncake timestamps, and the synthetic arrivals of the L-Eval lengths file.
        **options: further keyword arguments of the chosen loader (e.g. ``rate_rps`` for L-Eval,
            ``spread=False`` for Mooncake, ``name``).

    Raises:
        TraceFormatError: naming the file: unknown file type, unrecognised CSV header, invalid
            content (with line and field), or a ``.gz`` file whose data is not gzip, truncated or
            corrupt (and a file not named ``.gz`` that holds gzip data).
        FileNotFoundError: the file does not exist.
        IsADirectoryError: the path is a folder.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(21, "is a folder, expected a trace file (.jsonl or .csv)", str(path))
    if not path.exists():
        raise FileNotFoundError(2, "trace file does not exist", str(path))
    suffix = base_suffix(path)
    if suffix == ".jsonl":
        return load_mooncake_jsonl(path, kv_block_size_tokens=kv_block_size_tokens, skip_invalid=skip_invalid,
                                   spread_seed=spread_seed, **options)
    if suffix == ".csv":
        if not path.is_file():
            raise FileNotFoundError(f"trace file not found: {path}")
        first = next((raw for _, raw in iter_raw_lines(path) if raw.strip()), b"")
        try:
            cols = [c.strip() for c in next(csv.reader([first.decode("utf-8-sig")]), [])]
        except (UnicodeDecodeError, csv.Error):
            cols = []
        if not first:
            raise TraceFormatError(path, None, None, "file is empty; expected a CSV header (Azure 2023: "
                                   "TIMESTAMP,ContextTokens,GeneratedTokens; L-Eval lengths: task,doc_id,query_idx,...)")
        if "TIMESTAMP" in cols:
            return load_azure_csv(path, kv_block_size_tokens=kv_block_size_tokens, skip_invalid=skip_invalid, **options)
        if "doc_id" in cols or "task" in cols:
            return load_leval_lengths_csv(path, kv_block_size_tokens=kv_block_size_tokens, skip_invalid=skip_invalid,
                                          seed=spread_seed, **options)
        raise TraceFormatError(
            path, 1, "header",
            f"unrecognised CSV header {cols}; expected Azure 2023 columns {list(AZURE_COLUMNS)} "
            f"or L-Eval lengths columns {list(LEVAL_COLUMNS)}",
        )
    raise TraceFormatError(
        path, None, None,
        f"unknown trace file type {suffix or '(no extension)'!r}; expected .jsonl (Mooncake FAST'25) or .csv "
        "(Azure LLM inference 2023, L-Eval derived lengths), optionally followed by .gz",
    )
