"""Trace loaders: real traces (counts from shared/data/traces/SOURCES.md) and every kind of bad input."""

from __future__ import annotations

import gzip
import json
import pickle
import time
import warnings

import numpy as np
import pytest
from conftest import assert_prefix_consistent

from envs.workloads import (
    TraceFormatError,
    TraceWarning,
    detect_timestamp_bucket_ms,
    load_trace,
    spread_quantised_timestamps,
    workload_stats,
)

# (file, requests, duration first->last arrival [s] or None) from SOURCES.md
REAL_TRACES = [
    ("conversation_trace.jsonl", 12_031, None),  # spread: duration grows by < 1 bucket
    ("synthetic_trace.jsonl", 3_993, 1_022.0),
    ("AzureLLMInferenceTrace_code.csv", 8_819, 3_435.9),
    ("AzureLLMInferenceTrace_conv.csv", 19_366, 3_501.7),
    ("leval_request_lengths_DERIVED.csv", 2_074, None),  # synthetic arrivals
]


@pytest.mark.parametrize("fname,num_requests,duration_s", REAL_TRACES)
def test_real_trace_counts(traces_dir, fname, num_requests, duration_s):
    w = load_trace(traces_dir / fname)
    assert w.num_requests == num_requests
    assert w.requests[0].arrival_time_s == 0.0
    assert w.kv_block_size_tokens == 512
    assert w.metadata["num_skipped_invalid"] == 0
    if duration_s is not None:
        assert w.duration_s == pytest.approx(duration_s, abs=0.05)
    assert_prefix_consistent(w)


def test_mooncake_stats_match_sources(traces_dir):
    conv = workload_stats(load_trace(traces_dir / "conversation_trace.jsonl"))
    assert conv["input_mean_tokens"] == pytest.approx(12_035.1, abs=0.1)
    assert conv["ideal_reuse_fraction"] == pytest.approx(0.3736, abs=0.0005)  # SOURCES: 37.36 %
    syn = workload_stats(load_trace(traces_dir / "synthetic_trace.jsonl"))
    assert syn["input_mean_tokens"] == pytest.approx(15_325.5, abs=0.1)
    assert syn["ideal_reuse_fraction"] == pytest.approx(0.6512, abs=0.0005)  # SOURCES: 65.12 %


def test_conversation_load_time(traces_dir):
    load_trace(traces_dir / "conversation_trace.jsonl")  # warm the page cache
    t0 = time.perf_counter()
    load_trace(traces_dir / "conversation_trace.jsonl")
    elapsed_s = time.perf_counter() - t0
    assert elapsed_s < 2.0, f"loading took {elapsed_s:.2f} s"  # ~0.2 s when the machine is idle


def _raw_timestamps_ms(path):
    with open(path) as f:
        return np.array([json.loads(line)["timestamp"] for line in f], dtype=float)


def test_conversation_spread_stays_in_buckets_and_keeps_order(traces_dir):
    path = traces_dir / "conversation_trace.jsonl"
    w = load_trace(path, spread_seed=3)
    assert w.metadata["timestamp_bucket_ms"] == pytest.approx(3000.0, abs=5)
    raw = _raw_timestamps_ms(path)
    rel_s = (raw - raw[0]) / 1000.0
    distinct = np.unique(rel_s)
    next_start = np.append(distinct[1:], distinct[-1] + 3.0)
    upper = next_start[np.searchsorted(distinct, rel_s)]
    arrivals = np.array([r.arrival_time_s for r in w.requests])
    assert np.all(arrivals >= rel_s)  # never before its bucket
    assert np.all(arrivals < upper)  # never in the next bucket
    assert np.all(np.diff(arrivals) >= 0)  # original (file) order kept
    # the file's requests, in file order (lengths identify them)
    with open(path) as f:
        lengths = [json.loads(line)["input_length"] for line in f]
    assert [r.num_prompt_tokens for r in w.requests] == lengths
    # spreading removes the 3 s bursts: many distinct arrival times, Poisson-like gaps
    assert len(np.unique(arrivals)) > 0.99 * w.num_requests
    assert 0.8 < workload_stats(w)["inter_arrival_cv"] < 1.3  # SOURCES: 3.03 quantised


def test_spread_is_seeded(traces_dir):
    path = traces_dir / "conversation_trace.jsonl"
    a = load_trace(path, spread_seed=1)
    b = load_trace(path, spread_seed=1)
    c = load_trace(path, spread_seed=2)
    assert a == b
    assert a.requests != c.requests
    unspread = load_trace(path, spread=False)
    assert unspread.metadata["timestamp_bucket_ms"] is None
    assert len({r.arrival_time_s for r in unspread.requests}) == 1_180  # SOURCES: 1,180 distinct


def test_synthetic_trace_not_altered(traces_dir):
    path = traces_dir / "synthetic_trace.jsonl"
    w = load_trace(path, spread_seed=123)
    assert w.metadata["timestamp_bucket_ms"] is None
    raw = _raw_timestamps_ms(path)
    assert [r.arrival_time_s for r in w.requests] == ((raw - raw[0]) / 1000.0).tolist()


def test_detect_and_spread_helpers():
    assert detect_timestamp_bucket_ms(np.array([0, 0, 0, 3000, 3000, 6001, 6001, 12000, 12000])) == pytest.approx(3000, abs=2)
    assert detect_timestamp_bucket_ms(np.array([0, 5, 17, 40, 41, 90])) is None  # no ties
    ts = np.array([0.0, 0.0, 0.0, 1000.0, 1000.0, 2000.0])
    out = spread_quantised_timestamps(ts, 1000.0, np.random.default_rng(0))
    assert out[0] == 0.0 and np.all(np.diff(out) >= 0)
    assert np.all(out >= ts) and np.all(out < ts + 1000.0)


def test_azure_has_no_prefix_reuse(traces_dir):
    w = load_trace(traces_dir / "AzureLLMInferenceTrace_code.csv")
    all_hashes = [h for r in w.requests for h in r.block_hashes]
    assert len(all_hashes) == len(set(all_hashes))
    assert w.metadata["trace_start"].startswith("2023-11-16 18:17:03.97996")
    s = workload_stats(w)
    assert s["input_mean_tokens"] == pytest.approx(2_047.8, abs=0.1)
    assert s["inter_arrival_cv"] == pytest.approx(13.15, abs=0.01)


def test_leval_documents_share_blocks(traces_dir):
    w = load_trace(traces_dir / "leval_request_lengths_DERIVED.csv", spread_seed=0)
    s = workload_stats(w)
    assert s["input_mean_tokens"] == pytest.approx(10_174.0, abs=1)  # SOURCES: 10,174
    assert s["num_sessions"] == 299  # documents
    assert 0.78 < s["ideal_reuse_fraction"] < 0.84  # SOURCES: 83.9 % at token level; full blocks only here
    assert w.mean_rate_rps == pytest.approx(3.0, rel=0.1)
    by_doc: dict[int, list] = {}
    for r in w.requests:
        by_doc.setdefault(r.session_id, []).append(r)
    gsm = max(by_doc.values(), key=len)  # gsm100: 100 queries on one 16-shot prompt
    assert len(gsm) == 100
    common = min(len(r.block_hashes) for r in gsm) - 1
    assert common >= 1 and len({r.block_hashes[:common] for r in gsm}) == 1
    # queries of a document arrive over time, interleaved with other documents
    positions = [r.request_id for r in gsm]
    assert max(positions) - min(positions) > 100
    other = load_trace(traces_dir / "leval_request_lengths_DERIVED.csv", spread_seed=1, rate_rps=6.0)
    assert other.mean_rate_rps == pytest.approx(6.0, rel=0.1)
    assert other.requests != w.requests


def test_reblocking_mooncake(traces_dir):
    path = traces_dir / "synthetic_trace.jsonl"
    w256 = load_trace(path, kv_block_size_tokens=256)
    assert w256.kv_block_size_tokens == 256
    assert_prefix_consistent(w256)
    w1024 = load_trace(path, kv_block_size_tokens=1024)
    assert_prefix_consistent(w1024)
    base = workload_stats(load_trace(path))["ideal_reuse_fraction"]
    assert workload_stats(w256)["ideal_reuse_fraction"] == pytest.approx(base, abs=0.02)
    with pytest.raises(ValueError, match="divide 512"):
        load_trace(path, kv_block_size_tokens=300)


# --------------------------------------------------------------------------------------------
# bad input


def _line(ts=0, length=1000, out=10, hashes=None, **drop):
    obj = {"timestamp": ts, "input_length": length, "output_length": out,
           "hash_ids": hashes if hashes is not None else list(range(-(-length // 512)))}
    for k in drop:
        obj.pop(k)
    return json.dumps(obj)


def _write(tmp_path, name, lines):
    p = tmp_path / name
    p.write_text("".join(line + "\n" for line in lines))
    return p


def _assert_error(path, line, field, *match, **kwargs):
    with pytest.raises(TraceFormatError) as ei:
        load_trace(path, **kwargs)
    e = ei.value
    msg = str(e)
    assert path.name in msg and e.file == str(path)
    if line is not None:
        assert f"line {line}" in msg and e.line == line
    if field is not None:
        assert repr(field) in msg and e.field == field
    for m in match:
        assert m in msg, msg
    assert isinstance(e, ValueError)
    assert e.__cause__ is None and (e.__context__ is None or e.__suppress_context__)  # no chained traceback
    return e


GOOD = _line(0, 1000, 10, [1, 2])


@pytest.mark.parametrize(
    "bad_line,field,expect",
    [
        (_line(0, 1000, 10, [1, 2], input_length=None), "input_length", "missing"),
        (_line(0, 1000, 10, [1, 2], hash_ids=None), "hash_ids", "missing"),
        (_line(0, 1000, 10, [1, 2], timestamp=None), "timestamp", "missing"),
        (_line(0, 0, 10, []), "input_length", ">= 1"),
        (_line(0, -5, 10, []), "input_length", ">= 1"),
        (_line(0, 1000, 0, [1, 2]), "output_length", ">= 1"),
        (_line(0, 1000, -1, [1, 2]), "output_length", ">= 1"),
        (_line(0, 1000, 10, [1, 2, 3]), "hash_ids", "ceil(1000/512)=2"),
        (_line(0, 1000, 10, [1]), "hash_ids", "ceil(1000/512)=2"),
        (_line(0, 1000, 10, [1, "x"]), "hash_ids", "integer"),
        (_line(0, 1000, 10, [7, 7]), "hash_ids", "repeats id 7"),  # cached once, hit twice
        (_line(0, 1000, 10**8, [1, 2]), "output_length", "<= 10,000,000"),
        (_line(0, "1000", 10, [1, 2]), "input_length", "integer"),
        (_line(-1, 1000, 10, [1, 2]), "timestamp", ">= 0"),
        (_line(1e300, 1000, 10, [1, 2]), "timestamp", "at most 1e+12 ms"),  # the clock lost the TTFT: ~0
        ('{"timestamp": 0, "input_length": 1000, ', None, "malformed JSON"),
        ("[1, 2, 3]", None, "JSON object"),
    ],
)
def test_mooncake_bad_line(tmp_path, bad_line, field, expect):
    p = _write(tmp_path, "bad.jsonl", [GOOD, GOOD, bad_line, GOOD])
    _assert_error(p, 3, field, expect)


def test_mooncake_decreasing_timestamp(tmp_path):
    p = _write(tmp_path, "order.jsonl", [_line(5000, 1000, 10, [1, 2]), _line(4000, 1000, 10, [1, 3])])
    _assert_error(p, 2, "timestamp", "non-decreasing")


def test_mooncake_not_utf8(tmp_path):
    p = tmp_path / "binary.jsonl"
    p.write_bytes((GOOD + "\n").encode() + b'{"timestamp": \xff\xfe}\n')
    _assert_error(p, 2, None)


@pytest.mark.parametrize("name", ["empty.jsonl", "empty.csv"])
def test_empty_file(tmp_path, name):
    p = tmp_path / name
    p.write_text("")
    _assert_error(p, None, None, "empty")


def test_blank_only_jsonl_is_empty(tmp_path):
    p = _write(tmp_path, "blank.jsonl", ["", "   "])
    _assert_error(p, None, None, "empty")


def test_unknown_file_type(tmp_path):
    p = _write(tmp_path, "trace.parquet", [GOOD])
    _assert_error(p, None, None, "unknown trace file type", ".parquet")
    p = _write(tmp_path, "trace", [GOOD])
    _assert_error(p, None, None, "unknown trace file type")


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_trace(tmp_path / "nope.jsonl")
    with pytest.raises(FileNotFoundError):
        load_trace(tmp_path / "nope.csv")


AZ_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"
AZ_ROW = "2023-11-16 18:17:03.9799600,4808,10"


@pytest.mark.parametrize(
    "bad_row,field,expect",
    [
        ("2023-11-16 18:17:04.0,0,10", "ContextTokens", ">= 1"),
        ("2023-11-16 18:17:04.0,-3,10", "ContextTokens", ">= 1"),
        ("2023-11-16 18:17:04.0,12,abc", "GeneratedTokens", "integer"),
        ("2023-11-16 18:17:04.0,12,0", "GeneratedTokens", ">= 1"),
        ("2023-11-16 18:17:04.0,1000000000,5", "ContextTokens", "<= 10,000,000"),  # 999999999999: an OOM kill
        ("yesterday,12,5", "TIMESTAMP", "YYYY-MM-DD"),
        ("2023-13-45 18:17:04.0,12,5", "TIMESTAMP", "invalid date"),
        ("2023-11-16 18:17:01.0,12,5", "TIMESTAMP", "non-decreasing"),
        ("2023-11-16 18:17:04.0,12", None, "expected 3 fields"),
        ("2023-11-16 18:17:04.0,12,5,7", None, "expected 3 fields"),
        ('"2023-11-16 18:17:04.0,12,5', None, "malformed CSV"),
    ],
)
def test_azure_bad_row(tmp_path, bad_row, field, expect):
    p = _write(tmp_path, "az.csv", [AZ_HEADER, AZ_ROW, bad_row, "2023-11-16 18:17:05.0,12,5"])
    _assert_error(p, 3, field, expect)


def test_azure_missing_column(tmp_path):
    p = _write(tmp_path, "az.csv", ["TIMESTAMP,ContextTokens", "2023-11-16 18:17:03.9799600,4808"])
    _assert_error(p, 1, "GeneratedTokens", "lacks column")


def test_csv_repeated_column(tmp_path):
    # a row dict keeps the last of two equal names: the trailing column's 5 tokens were used
    p = _write(tmp_path, "az.csv", [AZ_HEADER + ",ContextTokens", AZ_ROW + ",5"])
    _assert_error(p, 1, "ContextTokens", "more than once")


def test_csv_header_only(tmp_path):
    p = _write(tmp_path, "az.csv", [AZ_HEADER])
    _assert_error(p, 1, None, "no data rows")


def test_csv_unknown_header(tmp_path):
    p = _write(tmp_path, "other.csv", ["a,b,c", "1,2,3"])
    _assert_error(p, 1, "header", "unrecognised CSV header")


LE_HEADER = "task,doc_id,query_idx,doc_tokens_tekken,doc_tokens_sp32k,query_tokens_tekken,ref_output_tokens_tekken"


@pytest.mark.parametrize(
    "bad_row,field,expect",
    [
        ("coursera,0,1,5175,5396,48,1", "doc_tokens_tekken", "expected 5174 as on line 2"),
        ("coursera,0,1,5174,5396,,1", "query_tokens_tekken", "integer"),
        ("coursera,x,1,5174,5396,48,1", "doc_id", "integer >= 0"),
        (",0,1,5174,5396,48,1", "task", "empty"),
        ("coursera,0,1,5174,5396,48,0", "ref_output_tokens_tekken", ">= 1"),
        ("coursera,1,1,1000000000,5396,48,1", "doc_tokens_tekken", "<= 10,000,000"),
    ],
)
def test_leval_bad_row(tmp_path, bad_row, field, expect):
    p = _write(tmp_path, "le.csv", [LE_HEADER, "coursera,0,0,5174,5396,44,1", bad_row])
    _assert_error(p, 3, field, expect)


def test_skip_invalid_counts_and_warns(tmp_path):
    lines = [GOOD, _line(0, 0, 10, []), GOOD, "not json", _line(1, 1000, 10, [1, 2, 3]), GOOD]
    p = _write(tmp_path, "mixed.jsonl", lines)
    with pytest.raises(TraceFormatError):
        load_trace(p)
    with pytest.warns(TraceWarning, match="skipped 3 invalid"):
        w = load_trace(p, skip_invalid=True)
    assert w.num_requests == 3
    assert w.metadata["num_skipped_invalid"] == 3
    assert "line 2" in w.metadata["first_skipped_invalid"]


def test_skip_invalid_csv(tmp_path):
    p = _write(tmp_path, "az.csv", [AZ_HEADER, AZ_ROW, "bad,row", "2023-11-16 18:17:05.0,0,1", "2023-11-16 18:17:06.5,12,5"])
    with pytest.warns(TraceWarning):
        w = load_trace(p, skip_invalid=True)
    assert w.num_requests == 2 and w.metadata["num_skipped_invalid"] == 2
    assert w.requests[1].arrival_time_s == pytest.approx(2.52004, abs=1e-9)


def test_skip_invalid_all_bad(tmp_path):
    p = _write(tmp_path, "allbad.jsonl", ["nope", "{}"])
    with pytest.raises(TraceFormatError, match="all 2"):
        load_trace(p, skip_invalid=True)


def test_no_warning_when_clean(tmp_path):
    p = _write(tmp_path, "ok.jsonl", [GOOD, _line(3, 700, 5, [1, 9])])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        w = load_trace(p)
    assert w.num_requests == 2 and w.requests[1].arrival_time_s == pytest.approx(0.003)


def test_gzip_jsonl(tmp_path):
    p = tmp_path / "t.jsonl.gz"
    with gzip.open(p, "wt") as f:
        f.write(GOOD + "\n" + _line(1500, 600, 3, [1, 4]) + "\n")
    w = load_trace(p)
    assert w.num_requests == 2 and w.name == "t"


def test_error_pickles(tmp_path):
    e = TraceFormatError(tmp_path / "x.jsonl", 7, "hash_ids", "bad")
    e2 = pickle.loads(pickle.dumps(e))
    assert (e2.file, e2.line, e2.field, str(e2)) == (e.file, 7, "hash_ids", str(e))
