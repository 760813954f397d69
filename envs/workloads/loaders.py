"""Trace loaders: Mooncake FAST'25 JSONL, Azure LLM inference 2023 CSV, L-Eval derived lengths CSV.

Entry point :func:`load_trace` picks the loader from the file type. All loaders return an
:class:`envs.sim.request.Workload` whose arrival times are in seconds from the first request
(the first request arrives at 0 s), with ``request_id`` 0..n-1 in arrival order.

Facts used here are from ``shared/data/traces/SOURCES.md``:

* Mooncake ``conversation_trace.jsonl`` (12,031 requests) and ``synthetic_trace.jsonl``
  (3,993): ``timestamp`` [ms], ``input_length``, ``output_length`` [tokens], ``hash_ids`` (one
  id per **512-token** block, ``len == ceil(input_length/512)`` on every row). The conversation
  trace's timestamps are quantised to ~3 s buckets (1,180 distinct values, gaps 2.997–3.003 s,
  90.2 % of requests share the previous timestamp); :func:`load_mooncake_jsonl` detects such a
  quantisation and spreads the requests inside each bucket (see
  :func:`spread_quantised_timestamps`). The synthetic trace (Poisson) is left unchanged.
* Azure 2023 ``AzureLLMInferenceTrace_code.csv`` (8,819) / ``_conv.csv`` (19,366):
  ``TIMESTAMP`` (``2023-11-16 18:17:03.9799600``, 100 ns digits), ``ContextTokens``,
  ``GeneratedTokens``. No prefix information: every request gets its own block hashes.
* ``leval_request_lengths_DERIVED.csv`` (2,074 (document, query) rows over 299 documents of
  L-Eval, OpenLMLab/LEval): no arrival times; see :func:`load_leval_lengths_csv`.

Bad input raises one :class:`TraceFormatError` naming the file, the 1-based line number, the
field and what was expected; ``skip_invalid=True`` skips invalid lines instead, counts them in
``Workload.metadata["num_skipped_invalid"]`` and emits a :class:`TraceWarning`.
"""

from __future__ import annotations

import csv
import datetime as _dt
import gzip
import json
import math
import re
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from envs.sim.request import Request, Workload, num_blocks_for

try:  # optional fast JSON parser
    import orjson as _orjson  # type: ignore[import-not-found]

    _json_loads: Callable[[bytes], Any] = _orjson.loads
    _JSON_ERRORS: tuple[type[BaseException], ...] = (_orjson.JSONDecodeError, ValueError)
except ImportError:  # pragma: no cover - depends on the environment
    _json_loads = json.loads
    _JSON_ERRORS = (ValueError,)

__all__ = [
    "TraceFormatError",
    "TraceWarning",
    "MOONCAKE_BLOCK_SIZE_TOKENS",
    "DEFAULT_LEVAL_RATE_RPS",
    "DEFAULT_LEVAL_MEAN_QUERY_GAP_S",
    "load_trace",
    "load_mooncake_jsonl",
    "load_azure_csv",
    "load_leval_lengths_csv",
    "detect_timestamp_bucket_ms",
    "spread_quantised_timestamps",
]

#: Tokens per ``hash_ids`` entry in the Mooncake FAST'25 traces (SOURCES.md).
MOONCAKE_BLOCK_SIZE_TOKENS = 512
#: Default arrival rate for the L-Eval lengths file [requests/s]; close to the Mooncake
#: conversation (3.40) and synthetic (3.91) traces' mean rates (SOURCES.md).
DEFAULT_LEVAL_RATE_RPS = 3.0
#: Default mean spacing of the questions on one L-Eval document [s].
DEFAULT_LEVAL_MEAN_QUERY_GAP_S = 20.0

_AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_LEVAL_COLUMNS = ("task", "doc_id", "query_idx", "doc_tokens_tekken", "query_tokens_tekken", "ref_output_tokens_tekken")


class TraceFormatError(ValueError):
    """A trace file is malformed.

    Attributes:
        file: path of the file, as given.
        line: 1-based line number of the offending line (None if not about one line).
        field: the offending field or column (None if not about one field).
        problem: what is wrong and what was expected.
    """

    def __init__(self, file: str | Path, line: int | None, field: str | None, problem: str) -> None:
        self.file = str(file)
        self.line = line
        self.field = field
        self.problem = problem
        where = self.file
        if line is not None:
            where += f", line {line}"
        if field is not None:
            where += f", field {field!r}"
        super().__init__(f"{where}: {problem}")

    def __reduce__(self):  # keep picklable (multiprocessing sweeps)
        return (type(self), (self.file, self.line, self.field, self.problem))


class TraceWarning(UserWarning):
    """Emitted when ``skip_invalid=True`` skipped invalid trace lines."""


class _LineError(Exception):
    """Internal: one invalid line (converted to TraceFormatError with file and line)."""

    def __init__(self, field: str | None, problem: str) -> None:
        super().__init__(problem)
        self.field = field
        self.problem = problem


class _Skipper:
    """Either raises the first error or counts skipped lines (``skip_invalid``)."""

    def __init__(self, path: Path, skip_invalid: bool) -> None:
        self.path = path
        self.skip_invalid = skip_invalid
        self.num_skipped = 0
        self.first: TraceFormatError | None = None

    def __call__(self, line: int | None, field: str | None, problem: str) -> None:
        err = TraceFormatError(self.path, line, field, problem)
        if not self.skip_invalid:
            raise err from None
        self.num_skipped += 1
        if self.first is None:
            self.first = err

    def finish(self, metadata: dict) -> None:
        metadata["num_skipped_invalid"] = self.num_skipped
        if self.num_skipped:
            metadata["first_skipped_invalid"] = str(self.first)
            warnings.warn(
                f"{self.path}: skipped {self.num_skipped} invalid line(s) (skip_invalid=True); first: {self.first}",
                TraceWarning,
                stacklevel=3,
            )


# ---------------------------------------------------------------------------------------------
# small field parsers (raise _LineError)


def _type_name(v: Any) -> str:
    return "null" if v is None else type(v).__name__


def _json_int(obj: dict, key: str, minimum: int, what: str) -> int:
    if key not in obj:
        raise _LineError(key, f"missing; expected {what}")
    v = obj[key]
    if type(v) is float and v.is_integer():
        v = int(v)
    if type(v) is not int:
        raise _LineError(key, f"got {v!r} ({_type_name(v)}); expected {what}")
    if v < minimum:
        raise _LineError(key, f"got {v}; expected {what}")
    return v


def _json_number(obj: dict, key: str, what: str) -> float:
    if key not in obj:
        raise _LineError(key, f"missing; expected {what}")
    v = obj[key]
    if type(v) not in (int, float) or not math.isfinite(v):
        raise _LineError(key, f"got {v!r} ({_type_name(v)}); expected {what}")
    if v < 0:
        raise _LineError(key, f"got {v}; expected {what}")
    return float(v)


def _csv_int(row: dict[str, str], key: str, minimum: int, what: str) -> int:
    s = row[key].strip()
    try:
        v = int(s)
    except ValueError:
        raise _LineError(key, f"got {s!r}; expected {what}") from None
    if v < minimum:
        raise _LineError(key, f"got {v}; expected {what}")
    return v


# ---------------------------------------------------------------------------------------------
# file access


def _open_binary(path: Path):
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    return open(path, "rb")


def _base_suffix(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    return suffixes[-1] if suffixes else ""


def _trace_name(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".jsonl", ".csv"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    return name


class _CsvLines:
    """Decoded lines of a CSV file for csv.reader, tracking the 1-based physical line number."""

    def __init__(self, fh) -> None:
        self._fh = fh
        self.line = 0

    def __iter__(self) -> Iterator[str]:
        for raw in self._fh:
            self.line += 1
            yield raw.decode("utf-8-sig" if self.line == 1 else "utf-8")


def _read_csv(path: Path, required: tuple[str, ...], err: _Skipper, description: str) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield ``(line_number, row_dict)`` for the data rows of a CSV file with the given columns.

    Header problems always raise (even with ``skip_invalid``); row problems go through ``err``.
    """
    with _open_binary(path) as fh:
        lines = _CsvLines(fh)
        reader = csv.reader(lines, strict=True)
        header: list[str] | None = None
        num_rows = 0
        while True:
            start = lines.line + 1  # a record may span lines (quoted newlines): report where it starts
            try:
                row = next(reader)
            except StopIteration:
                break
            except UnicodeDecodeError as e:
                raise TraceFormatError(path, lines.line, None, f"not UTF-8 text ({e.reason} at byte {e.start}); expected a UTF-8 CSV file") from None
            except csv.Error as e:
                err(start, None, f"malformed CSV ({e}); expected {description}")
                continue
            if not row or all(not c.strip() for c in row):
                continue  # blank line
            if header is None:
                header = [c.strip() for c in row]
                missing = [c for c in required if c not in header]
                if missing:
                    raise TraceFormatError(
                        path, start, missing[0],
                        f"header {header} lacks column(s) {missing}; expected a header with columns {list(required)} ({description})",
                    )
                continue
            if len(row) != len(header):
                err(start, None, f"malformed CSV row: {len(row)} field(s) {row!r}; expected {len(header)} fields ({', '.join(header)})")
                continue
            num_rows += 1
            yield start, dict(zip(header, row))
        if header is None:
            raise TraceFormatError(path, None, None, f"file is empty; expected a CSV header {list(required)} and at least one row ({description})")
        if num_rows == 0:
            raise TraceFormatError(path, lines.line, None, f"no data rows after the header; expected at least one request ({description})")


# ---------------------------------------------------------------------------------------------
# quantised timestamps


def detect_timestamp_bucket_ms(timestamps_ms: np.ndarray, *, min_tie_fraction: float = 0.5, tolerance: float = 0.02) -> float | None:
    """Detect timestamps quantised to fixed-width buckets; return the bucket width [ms] or None.

    Quantised means: at least ``min_tie_fraction`` of the requests share their timestamp with
    the previous request, and every gap between consecutive distinct timestamps is an integer
    multiple (>= 1, within ``tolerance`` of the bucket) of the median gap. The Mooncake
    conversation trace gives 3000 ms (SOURCES.md: gaps 2.999–3.003 s, 90.2 % ties); the Mooncake
    synthetic (Poisson) trace is not quantised (0.3 % ties).
    """
    ts = np.asarray(timestamps_ms, dtype=float)
    if ts.size < 3:
        return None
    distinct = np.unique(ts)
    if distinct.size < 2:
        return None
    tie_fraction = 1.0 - distinct.size / ts.size
    if tie_fraction < min_tie_fraction:
        return None
    gaps = np.diff(distinct)
    bucket = float(np.median(gaps))
    if bucket <= 0:
        return None
    ratio = gaps / bucket
    if np.any(ratio < 1 - tolerance) or np.any(np.abs(ratio - np.round(ratio)) > tolerance):
        return None
    return bucket


def spread_quantised_timestamps(timestamps_ms: np.ndarray, bucket_ms: float, rng: np.random.Generator) -> np.ndarray:
    """Spread requests that share a quantised timestamp uniformly inside their bucket [ms].

    The ``n`` requests with timestamp ``t`` get ``t + sorted(U_1..U_n)`` with ``U_i`` uniform on
    ``[0, w)``, ``w = min(bucket_ms, next distinct timestamp - t)``; given their count, these are
    exactly the arrival times of a Poisson process inside the bucket. Offsets are sorted and
    assigned in file order, so the original order is kept and every request stays inside
    ``[t, t + w)``. The very first request keeps offset 0, so the trace still starts at its first
    timestamp. Input must be non-decreasing. Returns float milliseconds.
    """
    ts = np.asarray(timestamps_ms, dtype=float)
    if ts.size == 0:
        return ts.copy()
    starts = np.flatnonzero(np.r_[True, ts[1:] != ts[:-1]])  # first index of each bucket
    group = np.cumsum(np.r_[True, ts[1:] != ts[:-1]]) - 1
    bucket_t = ts[starts]
    width = np.full(bucket_t.size, float(bucket_ms))
    if bucket_t.size > 1:
        width[:-1] = np.minimum(width[:-1], np.diff(bucket_t))
    u = rng.uniform(0.0, 1.0, ts.size)
    order = np.lexsort((u, group))  # groups are contiguous, so this sorts u within each group
    offsets = u[order] * width[group]
    offsets[0] = 0.0
    return ts + offsets


# ---------------------------------------------------------------------------------------------
# Mooncake JSONL


def _reblock_mooncake(hashes: list[tuple[int, ...]], lengths: list[int], dst_bs: int) -> list[tuple[int, ...]]:
    """Re-express 512-token Mooncake block ids at another block size (a divisor or multiple of 512).

    Divisor ``512/k``: sub-block ``s`` of original block ``h`` gets id ``h*k + s``. Multiple
    ``512*k``: a group of ``k`` original blocks gets a dense id keyed by (last original id, group
    size); Mooncake ids encode their whole prefix, so both keep prefix consistency.
    """
    src = MOONCAKE_BLOCK_SIZE_TOKENS
    out: list[tuple[int, ...]] = []
    if src % dst_bs == 0:
        k = src // dst_bs
        for hs, length in zip(hashes, lengths):
            ids: list[int] = []
            for p, h in enumerate(hs):
                tokens = min(src, length - p * src)
                base = h * k
                ids.extend(range(base, base + -(-tokens // dst_bs)))
            out.append(tuple(ids))
        return out
    k = dst_bs // src
    table: dict[tuple[int, int], int] = {}
    for hs in hashes:
        ids = []
        for g in range(0, len(hs), k):
            grp = hs[g : g + k]
            key = (grp[-1], len(grp))
            h = table.get(key)
            if h is None:
                h = table[key] = len(table)
            ids.append(h)
        out.append(tuple(ids))
    return out


def _parse_mooncake_line(obj: Any, prev_ts: float | None) -> tuple[float, int, int, tuple[int, ...]]:
    if not isinstance(obj, dict):
        raise _LineError(None, f"got a JSON {_type_name(obj)}; expected a JSON object with timestamp, input_length, output_length, hash_ids")
    ts = _json_number(obj, "timestamp", "a number of milliseconds >= 0")
    if prev_ts is not None and ts < prev_ts:
        raise _LineError("timestamp", f"got {obj['timestamp']}, earlier than the previous request's {prev_ts:g}; expected non-decreasing timestamps [ms]")
    length = _json_int(obj, "input_length", 1, "an integer >= 1 [tokens]")
    out_len = _json_int(obj, "output_length", 1, "an integer >= 1 [tokens]")
    if "hash_ids" not in obj:
        raise _LineError("hash_ids", "missing; expected a list of integer block ids")
    hs = obj["hash_ids"]
    if not isinstance(hs, list):
        raise _LineError("hash_ids", f"got {_type_name(hs)}; expected a list of integer block ids")
    for x in hs:
        if type(x) is not int:
            raise _LineError("hash_ids", f"contains {x!r} ({_type_name(x)}); expected integer block ids")
    expected = num_blocks_for(length, MOONCAKE_BLOCK_SIZE_TOKENS)
    if len(hs) != expected:
        raise _LineError(
            "hash_ids",
            f"has {len(hs)} ids for input_length={length}; expected ceil({length}/{MOONCAKE_BLOCK_SIZE_TOKENS})={expected} "
            f"({MOONCAKE_BLOCK_SIZE_TOKENS}-token blocks)",
        )
    return ts, length, out_len, tuple(hs)


def load_mooncake_jsonl(
    path: str | Path,
    *,
    kv_block_size_tokens: int | None = None,
    skip_invalid: bool = False,
    spread_seed: int = 0,
    spread: bool = True,
    name: str | None = None,
) -> Workload:
    """Load a Mooncake FAST'25 JSONL trace (kvcache-ai/Mooncake ``FAST25-release/traces``).

    Args:
        path: ``.jsonl`` (or ``.jsonl.gz``) file, one JSON object a line with ``timestamp`` [ms],
            ``input_length``, ``output_length`` [tokens] and ``hash_ids`` (one id per 512-token block).
            Blank lines are ignored.
        kv_block_size_tokens: block size of the returned hashes [tokens]; None or 512 keeps the
            trace's ids, a divisor or multiple of 512 re-blocks them (prefix-consistently).
        skip_invalid: skip invalid lines (counted in ``metadata["num_skipped_invalid"]``, warned)
            instead of raising :class:`TraceFormatError`.
        spread_seed: seed of the in-bucket spreading of quantised timestamps.
        spread: if True (default), detect quantised timestamps (:func:`detect_timestamp_bucket_ms`)
            and spread them (:func:`spread_quantised_timestamps`); traces that are not quantised
            (e.g. the Poisson synthetic trace) are never altered.
        name: workload name (default: file name without extension).

    Returns:
        Workload with arrival times [s] from the first request (0 s), session_id -1 (the traces
        have none). ``metadata``: ``format``, ``timestamp_bucket_ms`` (None if not quantised),
        ``spread_seed``, ``num_skipped_invalid``, ``native_kv_block_size_tokens`` (512).
    """
    path = Path(path)
    bs = MOONCAKE_BLOCK_SIZE_TOKENS if kv_block_size_tokens is None else int(kv_block_size_tokens)
    if bs < 1 or (MOONCAKE_BLOCK_SIZE_TOKENS % bs and bs % MOONCAKE_BLOCK_SIZE_TOKENS):
        raise ValueError(f"kv_block_size_tokens must divide {MOONCAKE_BLOCK_SIZE_TOKENS} or be a multiple of it for a Mooncake trace, got {kv_block_size_tokens}")
    err = _Skipper(path, skip_invalid)
    ts_list: list[float] = []
    lengths: list[int] = []
    outputs: list[int] = []
    hashes: list[tuple[int, ...]] = []
    prev_ts: float | None = None
    num_lines = 0
    with _open_binary(path) as fh:
        for lineno, raw in enumerate(fh, 1):
            num_lines += 1
            if not raw.strip():
                continue
            try:
                obj = _json_loads(raw)
            except _JSON_ERRORS as e:
                detail = getattr(e, "msg", None) or str(e)
                if isinstance(e, UnicodeDecodeError):
                    detail = f"not UTF-8 text ({e.reason})"
                err(lineno, None, f"malformed JSON ({detail}); expected one JSON object per line")
                continue
            try:
                ts, length, out_len, hs = _parse_mooncake_line(obj, prev_ts)
            except _LineError as e:
                err(lineno, e.field, e.problem)
                continue
            prev_ts = ts
            ts_list.append(ts)
            lengths.append(length)
            outputs.append(out_len)
            hashes.append(hs)
    if num_lines == 0 or (not ts_list and err.num_skipped == 0):
        raise TraceFormatError(path, None, None, "file is empty; expected one JSON request object per line (Mooncake FAST'25 format)")
    if not ts_list:
        raise TraceFormatError(path, None, None, f"all {err.num_skipped} non-blank line(s) are invalid; first: {err.first}")
    ts_ms = np.asarray(ts_list, dtype=float)
    bucket_ms = detect_timestamp_bucket_ms(ts_ms) if spread else None
    if bucket_ms is not None:
        ts_ms = spread_quantised_timestamps(ts_ms, bucket_ms, np.random.default_rng(spread_seed))
    arrivals_s = ((ts_ms - ts_ms[0]) / 1000.0).tolist()
    if bs != MOONCAKE_BLOCK_SIZE_TOKENS:
        hashes = _reblock_mooncake(hashes, lengths, bs)
    requests = tuple(
        Request(i, t, length, out_len, hs)
        for i, (t, length, out_len, hs) in enumerate(zip(arrivals_s, lengths, outputs, hashes))
    )
    metadata = {
        "format": "mooncake-jsonl",
        "timestamp_bucket_ms": bucket_ms,
        "spread_seed": spread_seed if bucket_ms is not None else None,
        "native_kv_block_size_tokens": MOONCAKE_BLOCK_SIZE_TOKENS,
    }
    err.finish(metadata)
    return Workload(name or _trace_name(path), requests, bs, str(path), metadata)


# ---------------------------------------------------------------------------------------------
# Azure 2023 CSV

_AZURE_TS = re.compile(r"^\s*(\d{4}-\d{2}-\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?\s*$")


def _azure_timestamp_ns(s: str, day_cache: dict[str, int]) -> int:
    m = _AZURE_TS.match(s)
    if m is None:
        raise _LineError("TIMESTAMP", f"got {s!r}; expected a datetime 'YYYY-MM-DD HH:MM:SS[.fffffff]'")
    day_str, hh, mm, ss, frac = m.groups()
    day = day_cache.get(day_str)
    if day is None:
        try:
            day = _dt.date.fromisoformat(day_str).toordinal()
        except ValueError:
            raise _LineError("TIMESTAMP", f"got {s!r}; invalid date, expected 'YYYY-MM-DD HH:MM:SS[.fffffff]'") from None
        day_cache[day_str] = day
    h, mi, se = int(hh), int(mm), int(ss)
    if h > 23 or mi > 59 or se > 60:
        raise _LineError("TIMESTAMP", f"got {s!r}; invalid time of day, expected 'HH:MM:SS'")
    frac_ns = int((frac or "0").ljust(9, "0"))
    return ((day * 24 + h) * 60 + mi) * 60_000_000_000 + se * 1_000_000_000 + frac_ns


def load_azure_csv(
    path: str | Path,
    *,
    kv_block_size_tokens: int | None = None,
    skip_invalid: bool = False,
    name: str | None = None,
) -> Workload:
    """Load an Azure LLM inference trace 2023 CSV (Azure/AzurePublicDataset, Splitwise ISCA'24).

    Columns ``TIMESTAMP`` (e.g. ``2023-11-16 18:17:03.9799600``), ``ContextTokens`` (prompt
    length, >= 1), ``GeneratedTokens`` (>= 1). The trace has no prefix information, so every
    request gets fresh block hashes (allocated from a per-call counter: no prefix reuse) and
    session_id -1. Use it for arrival processes and lengths only (SOURCES.md).

    Args:
        path: ``.csv`` (or ``.csv.gz``) file with the header above.
        kv_block_size_tokens: block size for the generated hashes [tokens], default 512.
        skip_invalid: skip invalid rows (counted, warned) instead of raising.
        name: workload name (default: file name without extension).
    """
    path = Path(path)
    bs = 512 if kv_block_size_tokens is None else int(kv_block_size_tokens)
    if bs < 1:
        raise ValueError(f"kv_block_size_tokens must be >= 1, got {kv_block_size_tokens}")
    err = _Skipper(path, skip_invalid)
    day_cache: dict[str, int] = {}
    rows: list[tuple[int, int, int]] = []
    prev_ns: int | None = None
    for lineno, row in _read_csv(path, _AZURE_COLUMNS, err, "Azure LLM inference trace: TIMESTAMP,ContextTokens,GeneratedTokens"):
        try:
            ns = _azure_timestamp_ns(row["TIMESTAMP"], day_cache)
            if prev_ns is not None and ns < prev_ns:
                raise _LineError("TIMESTAMP", f"got {row['TIMESTAMP'].strip()!r}, earlier than the previous row; expected non-decreasing timestamps")
            length = _csv_int(row, "ContextTokens", 1, "an integer >= 1 [tokens]")
            out_len = _csv_int(row, "GeneratedTokens", 1, "an integer >= 1 [tokens]")
        except _LineError as e:
            err(lineno, e.field, e.problem)
            continue
        prev_ns = ns
        rows.append((ns, length, out_len))
    if not rows:
        raise TraceFormatError(path, None, None, f"all {err.num_skipped} data row(s) are invalid; first: {err.first}")
    ns0 = rows[0][0]
    next_hash = 0
    requests = []
    for i, (ns, length, out_len) in enumerate(rows):
        nb = -(-length // bs)
        requests.append(Request(i, (ns - ns0) / 1e9, length, out_len, tuple(range(next_hash, next_hash + nb))))
        next_hash += nb
    trace_start = _dt.datetime.fromordinal(1) + _dt.timedelta(microseconds=(ns0 - 86_400_000_000_000) // 1000)
    metadata = {"format": "azure-2023-csv", "trace_start": trace_start.isoformat(sep=" ")}
    err.finish(metadata)
    return Workload(name or _trace_name(path), tuple(requests), bs, str(path), metadata)


# ---------------------------------------------------------------------------------------------
# L-Eval derived lengths CSV


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
    required = _LEVAL_COLUMNS + ((doc_tokens_column,) if doc_tokens_column not in _LEVAL_COLUMNS else ())
    err = _Skipper(path, skip_invalid)
    docs: dict[tuple[str, int], tuple[int, int]] = {}  # (task, doc_id) -> (doc index, doc tokens)
    doc_line: dict[tuple[str, int], int] = {}
    rows: list[tuple[int, int, int, int]] = []  # doc index, doc tokens, query tokens, output tokens
    for lineno, row in _read_csv(path, required, err, "L-Eval derived lengths: " + ",".join(required)):
        try:
            task = row["task"].strip()
            if not task:
                raise _LineError("task", "is empty; expected an L-Eval task name")
            doc_id = _csv_int(row, "doc_id", 0, "an integer >= 0")
            _csv_int(row, "query_idx", 0, "an integer >= 0")  # validated; identical documents may repeat an index
            doc_tokens = _csv_int(row, doc_tokens_column, 1, "an integer >= 1 [tokens]")
            query_tokens = _csv_int(row, "query_tokens_tekken", 1, "an integer >= 1 [tokens]")
            out_tokens = _csv_int(row, "ref_output_tokens_tekken", 1, "an integer >= 1 [tokens]")
            key = (task, doc_id)
            if key in docs and docs[key][1] != doc_tokens:
                raise _LineError(doc_tokens_column, f"got {doc_tokens} for document ({task!r}, {doc_id}); expected {docs[key][1]} as on line {doc_line[key]} (same document, same length)")
        except _LineError as e:
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
    return Workload(name or _trace_name(path), tuple(requests), bs, str(path), metadata)


# ---------------------------------------------------------------------------------------------
# dispatch


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
        TraceFormatError: unknown file type, unrecognised CSV header, or invalid content.
        FileNotFoundError: the file does not exist.
        IsADirectoryError: the path is a folder.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(21, "is a folder, expected a trace file (.jsonl or .csv)", str(path))
    if not path.exists():
        raise FileNotFoundError(2, "trace file does not exist", str(path))
    suffix = _base_suffix(path)
    if suffix == ".jsonl":
        return load_mooncake_jsonl(path, kv_block_size_tokens=kv_block_size_tokens, skip_invalid=skip_invalid, spread_seed=spread_seed, **options)
    if suffix == ".csv":
        if not path.is_file():
            raise FileNotFoundError(f"trace file not found: {path}")
        with _open_binary(path) as fh:
            first = b""
            for raw in fh:
                if raw.strip():
                    first = raw
                    break
        try:
            cols = [c.strip() for c in next(csv.reader([first.decode("utf-8-sig")]), [])]
        except (UnicodeDecodeError, csv.Error):
            cols = []
        if not first:
            raise TraceFormatError(path, None, None, "file is empty; expected a CSV header (Azure 2023: TIMESTAMP,ContextTokens,GeneratedTokens; L-Eval lengths: task,doc_id,query_idx,...)")
        if "TIMESTAMP" in cols:
            return load_azure_csv(path, kv_block_size_tokens=kv_block_size_tokens, skip_invalid=skip_invalid, **options)
        if "doc_id" in cols or "task" in cols:
            return load_leval_lengths_csv(path, kv_block_size_tokens=kv_block_size_tokens, skip_invalid=skip_invalid, seed=spread_seed, **options)
        raise TraceFormatError(
            path, 1, "header",
            f"unrecognised CSV header {cols}; expected Azure 2023 columns {list(_AZURE_COLUMNS)} or L-Eval lengths columns {list(_LEVAL_COLUMNS)}",
        )
    raise TraceFormatError(
        path, None, None,
        f"unknown trace file type {suffix or '(no extension)'!r}; expected .jsonl (Mooncake FAST'25) or .csv "
        "(Azure LLM inference 2023, L-Eval derived lengths), optionally followed by .gz",
    )
