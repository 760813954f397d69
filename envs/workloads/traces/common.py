"""Shared helpers of the trace loaders: the error types, skipping of invalid lines, field parsers,
file access (plain or gzip, every decompression failure reported with the file name) and the
block-size consistency check of prefix block ids.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import warnings
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:  # optional fast JSON parser
    import orjson as _orjson  # type: ignore[import-not-found]

    json_loads: Callable[[bytes], Any] = _orjson.loads
    JSON_ERRORS: tuple[type[BaseException], ...] = (_orjson.JSONDecodeError, ValueError)
except ImportError:  # pragma: no cover - depends on the environment
    json_loads = json.loads
    JSON_ERRORS = (ValueError,)


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


class LineError(Exception):
    """Internal: one invalid line (converted to TraceFormatError with file and line)."""

    def __init__(self, field: str | None, problem: str) -> None:
        super().__init__(problem)
        self.field = field
        self.problem = problem


class Skipper:
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
# small field parsers (raise LineError)


#: Largest token count a trace field may hold [tokens]: the longest advertised context window
#: (Llama 4 Scout, 10M tokens; the shared traces' longest prompt is 191,378). Loaders that make up
#: block ids (Azure, L-Eval) allocate ``ceil(tokens / block)`` of them per request, so a typo such
#: as ``999999999999`` would otherwise exhaust memory instead of failing on its line.
MAX_TRACE_TOKENS = 10_000_000
#: The expected form of a token-count field, as error messages state it.
TOKENS_WHAT = f"an integer >= 1 and <= {MAX_TRACE_TOKENS:,} [tokens]"


def type_name(v: Any) -> str:
    return "null" if v is None else type(v).__name__


def json_int(obj: dict, key: str, minimum: int, what: str, maximum: int | None = None) -> int:
    if key not in obj:
        raise LineError(key, f"missing; expected {what}")
    v = obj[key]
    if type(v) is float and v.is_integer():
        v = int(v)
    if type(v) is not int:
        raise LineError(key, f"got {v!r} ({type_name(v)}); expected {what}")
    if v < minimum or (maximum is not None and v > maximum):
        raise LineError(key, f"got {v}; expected {what}")
    return v


def json_number(obj: dict, key: str, what: str) -> float:
    if key not in obj:
        raise LineError(key, f"missing; expected {what}")
    v = obj[key]
    if type(v) not in (int, float) or not math.isfinite(v):
        raise LineError(key, f"got {v!r} ({type_name(v)}); expected {what}")
    if v < 0:
        raise LineError(key, f"got {v}; expected {what}")
    return float(v)


def csv_int(row: dict[str, str], key: str, minimum: int, what: str, maximum: int | None = None) -> int:
    s = row[key].strip()
    try:
        v = int(s)
    except ValueError:
        raise LineError(key, f"got {s!r}; expected {what}") from None
    if v < minimum or (maximum is not None and v > maximum):
        raise LineError(key, f"got {v}; expected {what}")
    return v


def json_tokens(obj: dict, key: str) -> int:
    """A token-count field of a JSON line: an integer in [1, :data:`MAX_TRACE_TOKENS`]."""
    return json_int(obj, key, 1, TOKENS_WHAT, MAX_TRACE_TOKENS)


def csv_tokens(row: dict[str, str], key: str) -> int:
    """A token-count column of a CSV row: an integer in [1, :data:`MAX_TRACE_TOKENS`]."""
    return csv_int(row, key, 1, TOKENS_WHAT, MAX_TRACE_TOKENS)


# ---------------------------------------------------------------------------------------------
# file access

#: First two bytes of every gzip member (RFC 1952 §2.3.1).
GZIP_MAGIC = b"\x1f\x8b"
# What Python's gzip module raises on bad data: a wrong header (BadGzipFile, an OSError), a
# truncated stream (EOFError) or corrupt deflate data / CRC (zlib.error, BadGzipFile).
_DECOMPRESSION_ERRORS: tuple[type[BaseException], ...] = (gzip.BadGzipFile, EOFError, zlib.error)


def is_gzip_name(path: Path) -> bool:
    """Whether the file name ends in ``.gz`` (any case): such files are read through gzip."""
    return path.suffix.lower() == ".gz"


def _decompression_problem(exc: BaseException) -> str:
    if isinstance(exc, EOFError):
        return f"gzip data ends early ({exc}); the file is truncated, expected a complete gzip file"
    if isinstance(exc, gzip.BadGzipFile) and "Not a gzipped file" in str(exc):
        return (f"is not gzip data ({exc}); the name ends in .gz, so gzip-compressed data was expected "
                "(rename the file without .gz if it is plain text)")
    return f"gzip data is corrupt ({exc}); expected a valid gzip file"


def iter_raw_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """Yields ``(1-based line number, raw line bytes)`` of a trace file, gunzipped if its name ends
    in ``.gz``.

    Raises:
        TraceFormatError: naming the file (and the line where reading stopped) if the gzip data
            is not gzip, truncated or corrupt, or if a file whose name does not end in ``.gz``
            holds gzip data.
        OSError: if the file cannot be opened (the message names it).
    """
    gz = is_gzip_name(path)
    lineno = 0
    try:
        with (gzip.open(path, "rb") if gz else open(path, "rb")) as fh:
            for raw in fh:
                lineno += 1
                if lineno == 1 and not gz and raw.startswith(GZIP_MAGIC):
                    raise TraceFormatError(path, None, None, "holds gzip-compressed data but its name does not end in .gz; "
                                                             "expected plain text (rename it to end in .gz, or decompress it)")
                yield lineno, raw
    except _DECOMPRESSION_ERRORS as exc:
        if not gz:
            raise
        line = None if lineno == 0 else lineno + 1
        raise TraceFormatError(path, line, None, _decompression_problem(exc)) from None


def base_suffix(path: Path) -> str:
    """The file type below an optional ``.gz``, lower case (``"a.JSONL.gz"`` -> ``".jsonl"``)."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    return suffixes[-1] if suffixes else ""


def trace_name(path: Path) -> str:
    """Default workload name of a trace file: its name without ``.gz``, ``.jsonl``, ``.csv``."""
    name = path.name
    for suffix in (".gz", ".jsonl", ".csv"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    return name


class _CsvLines:
    """Decoded lines of a CSV file for csv.reader, tracking the 1-based physical line number."""

    def __init__(self, raw_lines: Iterator[tuple[int, bytes]]) -> None:
        self._raw = raw_lines
        self.line = 0

    def __iter__(self) -> Iterator[str]:
        for self.line, raw in self._raw:
            yield raw.decode("utf-8-sig" if self.line == 1 else "utf-8")


def read_csv(path: Path, required: tuple[str, ...], err: Skipper, description: str) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield ``(line_number, row_dict)`` for the data rows of a CSV file with the given columns.

    Header problems always raise (even with ``skip_invalid``); row problems go through ``err``.
    """
    lines = _CsvLines(iter_raw_lines(path))
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
            raise TraceFormatError(path, lines.line, None,
                                   f"not UTF-8 text ({e.reason} at byte {e.start}); expected a UTF-8 CSV file") from None
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
                    f"header {header} lacks column(s) {missing}; "
                    f"expected a header with columns {list(required)} ({description})",
                )
            repeated = [c for c in required if header.count(c) > 1]
            if repeated:  # a row dict would silently keep the last of them
                raise TraceFormatError(
                    path, start, repeated[0],
                    f"header {header} has column(s) {repeated} more than once; "
                    f"expected each of {list(required)} exactly once ({description})",
                )
            continue
        if len(row) != len(header):
            err(start, None,
                f"malformed CSV row: {len(row)} field(s) {row!r}; expected {len(header)} fields ({', '.join(header)})")
            continue
        num_rows += 1
        yield start, dict(zip(header, row))
    if header is None:
        raise TraceFormatError(path, None, None,
                               f"file is empty; expected a CSV header {list(required)} and at least one row ({description})")
    if num_rows == 0:
        raise TraceFormatError(path, lines.line, None,
                               f"no data rows after the header; expected at least one request ({description})")



# ---------------------------------------------------------------------------------------------
# block sizes of prefix block ids


@dataclass(frozen=True)
class BlockSizeConflict:
    """One prefix block id that two requests give different token counts.

    Attributes:
        block_id: the id.
        first_row: row key (index or file line) of the earlier request holding it.
        first_tokens: tokens the block holds there [tokens].
        row: row key of the request that disagrees.
        tokens: tokens the block holds there [tokens].
    """

    block_id: int
    first_row: int
    first_tokens: int
    row: int
    tokens: int


class BlockSizeChecker:
    """Checks, row by row, that every prefix block id always holds the same number of tokens.

    A prompt of ``L`` tokens has ``ceil(L / block)`` block ids; all are full (``block`` tokens)
    except a partial last one (``L mod block`` tokens). Block ids name a prefix of KV (the
    Mooncake convention, ``envs/sim/request.py``), so one id must always hold the same number of
    tokens: the per-worker prefix cache counts ``hit blocks × block`` tokens, and an id seen
    partial in one request and full in another would be credited with KV never computed
    (e.g. ``[1, 2]`` at 694 tokens, then ``[1, 2, 3]`` at 1,536 tokens: block 2 holds 182 tokens
    in the first, 512 in the second, so the second would hit 1,024 tokens of which only 694
    were ever computed).

    Args:
        block_size_tokens: tokens per block (>= 1).

    Cost: O(blocks of the row) per :meth:`add`.
    """

    __slots__ = ("block_size_tokens", "_full", "_partial")

    def __init__(self, block_size_tokens: int) -> None:
        if block_size_tokens < 1:
            raise ValueError(f"block_size_tokens must be >= 1, got {block_size_tokens}")
        self.block_size_tokens = block_size_tokens
        self._full: dict[int, int] = {}  # id -> first row key where it is a full block
        self._partial: dict[int, tuple[int, int]] = {}  # id -> (tokens, first row key)

    def add(self, row: int, num_tokens: int, block_ids: Sequence[int]) -> BlockSizeConflict | None:
        """Checks one request (``row`` is its key in messages: index or file line) against the
        earlier ones and records it if it agrees; returns the first disagreement, else None."""
        bs = self.block_size_tokens
        num_full = num_tokens // bs
        head = block_ids[:num_full]
        partial = self._partial
        if partial and not partial.keys().isdisjoint(head):
            h = next(h for h in head if h in partial)
            tokens, first = partial[h]
            return BlockSizeConflict(h, first, tokens, row, bs)
        rest = num_tokens - num_full * bs
        if rest:
            h = block_ids[num_full]
            first_full = self._full.get(h)
            if first_full is not None:
                return BlockSizeConflict(h, first_full, bs, row, rest)
            seen = partial.get(h)
            if seen is not None and seen[0] != rest:
                return BlockSizeConflict(h, seen[1], seen[0], row, rest)
            if seen is None:
                partial[h] = (rest, row)
        full = self._full
        for h in head:
            if h not in full:
                full[h] = row
        return None


def find_block_size_conflict(rows: Iterable[tuple[int, Sequence[int]]], block_size_tokens: int) -> BlockSizeConflict | None:
    """The first block id held at two different token counts (see :class:`BlockSizeChecker`),
    or None. ``rows``: ``(num_prompt_tokens, block_ids)`` per request; row keys are 0-based
    indices (``request_id`` for a workload's requests)."""
    checker = BlockSizeChecker(block_size_tokens)
    for i, (num_tokens, ids) in enumerate(rows):
        conflict = checker.add(i, num_tokens, ids)
        if conflict is not None:
            return conflict
    return None
