"""The test-split ledger (issue #39, "Sealed test split"): every benchmark run on a test split
appends one JSON line per (task, policy) to ``results/benchmark/ledger.jsonl`` (relative to the
working directory; ``cpgym benchmark run --ledger FILE``), so the leaderboard can show how often
each entry's policy was scored on the test split.

A line: ``{"date" (UTC, ISO 8601, seconds), "commit" (``git describe --always --dirty`` of the
checkout, else ``cpgym <package version>``), "policy" (the SPEC), "checkpoint_sha256" (the hash of
the checkpoint's policy, ``policies.common.checkpoint_hash.policy_sha256``; lines written before it
hold the model file's SHA-256; null for a heuristic),
"task", "split", "num_episodes", "mean_ttft_s"}``.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from collections import Counter
from pathlib import Path

#: Default ledger path (relative to the working directory: the repository root).
DEFAULT_LEDGER = Path("results/benchmark/ledger.jsonl")
#: Keys of a ledger line, in order.
LEDGER_FIELDS = ("date", "commit", "policy", "checkpoint_sha256", "task", "split", "num_episodes", "mean_ttft_s")


def commit_id() -> str:
    """``git describe --always --dirty`` of the checkout holding this package, else
    ``cpgym <version>`` (an installed package without its repository)."""
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=root, capture_output=True, text=True,
                             timeout=10, check=False)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"cpgym {version('cpgym')}"
    except PackageNotFoundError:
        return "unknown"


def utc_now() -> str:
    """The current UTC time, ISO 8601 to the second (``2026-12-07T06:00:00Z``)."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def ledger_line(summary: dict, spec: str, checkpoint_sha256: str | None, commit: str, date: str) -> dict:
    """The ledger line of one summary row (module docstring)."""
    return {"date": date, "commit": commit, "policy": spec, "checkpoint_sha256": checkpoint_sha256,
            "task": summary["task"], "split": summary["split"], "num_episodes": summary["num_episodes"],
            "mean_ttft_s": summary["mean_ttft_s"]}


def append_ledger(path: Path | str, lines: list[dict]) -> None:
    """Appends ``lines`` (one JSON object per line) to the ledger at ``path`` (created with its folder).

    Raises:
        ValueError: if a line is not of the test split (only test runs are recorded).
    """
    bad = [ln["split"] for ln in lines if ln["split"] != "test"]
    if bad:
        raise ValueError(f"ledger: only test-split runs are recorded, got split {bad[0]!r}")
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "a", encoding="utf-8") as f:
        for ln in lines:
            f.write(json.dumps(ln, sort_keys=False) + "\n")


def read_ledger(path: Path | str) -> list[dict]:
    """The ledger's lines (``[]`` if the file does not exist).

    Raises:
        ValueError: naming the file and line number, on a line that is not a ledger record (a
            JSON object with every key of :data:`LEDGER_FIELDS`).
    """
    p = Path(path)
    if not p.exists():
        return []
    out = []
    for i, text in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{p}:{i}: not a ledger record: not JSON ({exc})") from None
        missing = [k for k in LEDGER_FIELDS if k not in obj] if isinstance(obj, dict) else list(LEDGER_FIELDS)
        if missing:
            raise ValueError(f"{p}:{i}: not a ledger record (missing {', '.join(missing)}); expected a file written "
                             "by `cpgym benchmark run --split test`")
        out.append(obj)
    return out


def record_test_runs(path: Path | str, results: list[dict]) -> None:
    """Appends one line per ``results`` item (``{"summary": row, "contender": Contender}``, as
    ``benchmark.protocol.run_benchmark`` returns) to the ledger at ``path``: the SPEC (else the
    label), the checkpoint hash, this checkout's :func:`commit_id` and one :func:`utc_now` date.
    The one way a test-split run is recorded (``cpgym benchmark run`` and ``benchmark.evaluate``).

    Raises:
        ValueError: as :func:`append_ledger`.
    """
    commit, date = commit_id(), utc_now()
    append_ledger(path, [ledger_line(r["summary"], r["contender"].spec or r["contender"].label,
                                     r["contender"].checkpoint_sha256, commit, date) for r in results])


def count_test_evaluations(lines: list[dict]) -> Counter:
    """Number of test-split runs per ``(task, policy SPEC, checkpoint_sha256)``."""
    return Counter((ln["task"], ln["policy"], ln.get("checkpoint_sha256")) for ln in lines if ln["split"] == "test")
