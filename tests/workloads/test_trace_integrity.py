"""Trace integrity: decompression failures name the file, and one prefix block id never holds
two different token counts (loader check, plus a scan of every named workload and shared trace)."""

from __future__ import annotations

import gzip
import json
import warnings

import pytest

from envs.workloads import WORKLOADS, TraceFormatError, TraceWarning, get_workload, load_trace
from envs.workloads.traces import BlockSizeChecker, find_block_size_conflict, load_azure_csv, load_mooncake_jsonl
from experiments.cli import main

JSONL = "".join(json.dumps({"timestamp": t, "input_length": 1000, "output_length": 10, "hash_ids": [1, 2 + t]}) + "\n"
                for t in range(200))
AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
    f"2023-11-16 18:17:{s:02d}.0000000,{100 + s},10\n" for s in range(60))
LEVAL = ("task,doc_id,query_idx,doc_tokens_tekken,doc_tokens_sp32k,query_tokens_tekken,ref_output_tokens_tekken\n"
         "qa,0,0,3000,3500,20,40\nqa,0,1,3000,3500,25,30\n")


def _gz_bytes(text: str) -> bytes:
    return gzip.compress(text.encode(), mtime=0)


def _corrupt(data: bytes) -> bytes:
    """Flips the CRC-32 of the gzip trailer (RFC 1952 §2.3: CRC32 then ISIZE, 4 bytes each), so
    the data decompresses completely and fails the integrity check at the end."""
    return data[:-8] + bytes(b ^ 0xFF for b in data[-8:-4]) + data[-4:]


def _one_line_error_naming(path, exc: BaseException, *words: str) -> None:
    msg = str(exc)
    assert str(path) in msg, msg
    assert "\n" not in msg, msg
    for w in words:
        assert w in msg, msg


# ----------------------------------------------------------------------------------------------
# item: a corrupt or mislabelled .gz names the file


@pytest.mark.parametrize("name,text", [("t.jsonl.gz", JSONL), ("az.csv.gz", AZURE), ("lv.csv.gz", LEVAL)])
def test_plain_text_named_gz_names_the_file(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(TraceFormatError) as ei:
        load_trace(p)
    _one_line_error_naming(p, ei.value, "not gzip data", "Not a gzipped file")


@pytest.mark.parametrize("name,text", [("t.jsonl.gz", JSONL), ("az.csv.gz", AZURE)])
def test_truncated_gz_names_the_file(tmp_path, name, text):
    p = tmp_path / name
    data = _gz_bytes(text)
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError) as ei:
        load_trace(p)
    _one_line_error_naming(p, ei.value, "truncated", "end-of-stream marker")


@pytest.mark.parametrize("name,text", [("t.jsonl.gz", JSONL), ("az.csv.gz", AZURE)])
def test_corrupt_gz_names_the_file(tmp_path, name, text):
    p = tmp_path / name
    p.write_bytes(_corrupt(_gz_bytes(text)))
    with pytest.raises(TraceFormatError) as ei:
        load_trace(p)
    _one_line_error_naming(p, ei.value, "gzip data is corrupt", "CRC check failed")


def test_garbled_deflate_stream_names_the_file(tmp_path):
    p = tmp_path / "t.jsonl.gz"
    data = _gz_bytes(JSONL)
    p.write_bytes(data[:10] + b"\xff" * 16 + data[26:])  # an invalid deflate block right after the header
    with pytest.raises(TraceFormatError) as ei:
        load_trace(p)
    _one_line_error_naming(p, ei.value, "gzip data is corrupt")


def test_every_loader_names_the_file_on_bad_gzip(tmp_path):
    for loader, text in ((load_mooncake_jsonl, JSONL), (load_azure_csv, AZURE)):
        p = tmp_path / f"direct_{loader.__name__}.gz"
        p.write_text(text)
        with pytest.raises(TraceFormatError) as ei:
            loader(p)
        _one_line_error_naming(p, ei.value, "not gzip data")


def test_gzip_data_without_gz_name_names_the_file(tmp_path):
    p = tmp_path / "packed.jsonl"
    p.write_bytes(_gz_bytes(JSONL))
    with pytest.raises(TraceFormatError) as ei:
        load_trace(p)
    _one_line_error_naming(p, ei.value, "gzip-compressed", ".gz")


def test_valid_gz_still_loads(tmp_path):
    p = tmp_path / "ok.csv.gz"
    p.write_bytes(_gz_bytes(AZURE))
    assert load_trace(p).num_requests == 60


@pytest.mark.parametrize("make", ["plain", "truncated", "corrupt"])
def test_cli_reports_bad_gzip_in_one_line(tmp_path, capsys, make):
    p = tmp_path / "trace.jsonl.gz"
    data = _gz_bytes(JSONL)
    p.write_bytes({"plain": JSONL.encode(), "truncated": data[: len(data) // 2], "corrupt": _corrupt(data)}[make])
    rc = main(["simulate", "--trace", str(p), "--policy", "least-work", "--format", "json"])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert err.count("\n") == 0 and str(p) in err and "Traceback" not in err, err


# ----------------------------------------------------------------------------------------------
# item: one block id at two sizes


def _mooncake(tmp_path, rows, name="t.jsonl"):
    p = tmp_path / name
    p.write_text("".join(json.dumps({"timestamp": i, "output_length": 1, **r}) + "\n" for i, r in enumerate(rows)))
    return p


A = {"input_length": 694, "hash_ids": [1, 2]}  # block 2 holds 694 - 512 = 182 tokens
B = {"input_length": 1536, "hash_ids": [1, 2, 3]}  # block 2 holds 512 tokens


def test_partial_then_full_block_is_rejected_naming_id_rows_and_sizes(tmp_path):
    p = _mooncake(tmp_path, [A, B])
    with pytest.raises(TraceFormatError) as ei:
        load_trace(p)
    e = ei.value
    assert (e.line, e.field) == (2, "hash_ids")
    _one_line_error_naming(p, e, "block id 2", "holds 512 tokens here", "182 tokens on line 1")


def test_full_then_partial_block_is_rejected(tmp_path):
    p = _mooncake(tmp_path, [B, A])
    with pytest.raises(TraceFormatError) as ei:
        load_trace(p)
    assert (ei.value.line, ei.value.field) == (2, "hash_ids")
    _one_line_error_naming(p, ei.value, "block id 2", "holds 182 tokens here", "512 tokens on line 1")


def test_two_partial_sizes_are_rejected(tmp_path):
    p = _mooncake(tmp_path, [A, {"input_length": 700, "hash_ids": [1, 2]}])
    with pytest.raises(TraceFormatError, match=r"block id 2 holds 188 tokens here .* 182 tokens on line 1"):
        load_trace(p)


def test_consistent_block_sizes_load(tmp_path):
    rows = [A, A, {"input_length": 1536, "hash_ids": [1, 5, 6]}, {"input_length": 1024, "hash_ids": [1, 5]}]
    w = load_trace(_mooncake(tmp_path, rows))
    assert w.num_requests == 4


def test_skip_invalid_drops_the_disagreeing_row(tmp_path):
    p = _mooncake(tmp_path, [A, B, {"input_length": 1000, "hash_ids": [1, 7]}])
    with pytest.warns(TraceWarning, match="block id 2"):
        w = load_trace(p, skip_invalid=True)
    assert [r.num_prompt_tokens for r in w.requests] == [694, 1000]
    assert w.metadata["num_skipped_invalid"] == 1


def test_checker_reports_first_disagreement():
    c = find_block_size_conflict([(694, [1, 2]), (1000, [1, 9]), (1536, [1, 2, 3])], 512)
    assert (c.block_id, c.first_row, c.first_tokens, c.row, c.tokens) == (2, 0, 182, 2, 512)
    assert find_block_size_conflict([(694, [1, 2]), (694, [1, 2])], 512) is None
    checker = BlockSizeChecker(512)
    assert checker.add(10, 1536, [1, 2, 3]) is None
    c = checker.add(11, 694, [1, 2])
    assert (c.first_row, c.first_tokens, c.row, c.tokens) == (10, 512, 11, 182)
    with pytest.raises(ValueError, match="block_size_tokens"):
        BlockSizeChecker(0)


def _assert_one_size_per_block(w) -> None:
    c = find_block_size_conflict([(r.num_prompt_tokens, r.block_hashes) for r in w.requests], w.kv_block_size_tokens)
    assert c is None, f"{w.name}: {c}"


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_named_workloads_give_each_block_one_size(name):
    short = {"phases": {"phase_duration_s": 30.0}}.get(name, {"duration_s": 60.0})
    for seed in (0, 1):
        _assert_one_size_per_block(get_workload(name, seed=seed, **short))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_named_workloads_at_defaults_give_each_block_one_size(name):
    _assert_one_size_per_block(get_workload(name))


@pytest.mark.parametrize("fname", ["conversation_trace.jsonl", "synthetic_trace.jsonl", "AzureLLMInferenceTrace_code.csv",
                                   "AzureLLMInferenceTrace_conv.csv", "leval_request_lengths_DERIVED.csv"])
def test_shared_traces_give_each_block_one_size(traces_dir, fname):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _assert_one_size_per_block(load_trace(traces_dir / fname))
