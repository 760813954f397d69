"""Leaderboard entries, ``results/benchmark/LEADERBOARD.md`` and their validation (issue #39,
"Leaderboard").

An entry is the result of one (task, policy): ``task, split, spec, checkpoint_sha256,
max_episodes, commit, command, summary`` (the protocol's summary row) and ``episodes`` (its
per-episode rows). The entries of a task live in one results file, ``<entries>/<task id with /
replaced by __>.json.gz`` (gzip-compressed JSON ``{"task": id, "entries": {policy label: entry}}``,
sorted keys: stable bytes), so the results folder holds one file per task;
``cpgym benchmark run --split test --entries`` adds or replaces entries. NaN is stored as
``null``. :func:`leaderboard_markdown` renders one table per task plus a summary: per policy, the
geometric mean over the tasks it has entries for of its mean TTFT relative to the task's reference
(``1 + delta_mean_ttft_pct / 100``: the paired deltas are of per-episode means, so this is the
ratio of the means over the same episodes). A hindsight oracle (``oracle:...``,
``benchmark.references``) is listed with the other entries, marked "(hindsight, not
attainable)", with its definition under the tables. :func:`compare_entry` checks a re-run number by number
(``cpgym benchmark validate``: runs are deterministic, so equality is exact).
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Sequence
from pathlib import Path

from benchmark.ledger import DEFAULT_LEDGER, count_test_evaluations
from benchmark.references import ORACLE_PREFIX, ORACLES, is_oracle_spec

#: Default folder of the entries and path of the generated leaderboard (relative to the repository root).
ENTRIES_DIR = Path("results/benchmark/entries")
LEADERBOARD_FILE = Path("results/benchmark/LEADERBOARD.md")
#: Keys every entry file has.
ENTRY_FIELDS = ("task", "split", "spec", "checkpoint_sha256", "max_episodes", "commit", "command", "summary", "episodes")


def json_ready(x):
    """``x`` with every non-finite float replaced by ``None`` (strict JSON)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: json_ready(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_ready(v) for v in x]
    return x


def entry_file(entries_dir: Path | str, task_id: str) -> Path:
    """The results file of task ``task_id``'s entries (module docstring)."""
    return Path(entries_dir) / (task_id.replace("/", "__") + ".json.gz")


def make_entry(summary: dict, episodes: list[dict], spec: str, checkpoint_sha256: str | None,
               max_episodes: int | None, commit: str, command: str) -> dict:
    """An entry (module docstring) of one (task, policy) result."""
    return json_ready({"task": summary["task"], "split": summary["split"], "spec": spec,
                       "checkpoint_sha256": checkpoint_sha256, "max_episodes": max_episodes, "commit": commit,
                       "command": command, "summary": summary, "episodes": episodes})


def _write_task_file(path: Path, task_id: str, entries: dict[str, dict]) -> None:
    data = json.dumps({"task": task_id, "entries": entries}, indent=1, sort_keys=True).encode("utf-8") + b"\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:  # mtime 0: the same entries give the same bytes
        with gzip.GzipFile(fileobj=f, mode="wb", mtime=0, filename="") as z:
            z.write(data)
    tmp.replace(path)


def write_entry(entries_dir: Path | str, entry: dict) -> Path:
    """Adds ``entry`` to its task's file (replacing an older entry of the same policy); returns the path."""
    p = entry_file(entries_dir, entry["task"])
    entries = {e["summary"]["policy"]: e for e in read_entry(p)} if p.is_file() else {}
    entries[entry["summary"]["policy"]] = entry
    _write_task_file(p, entry["task"], entries)
    return p


def read_entry(path: Path | str) -> list[dict]:
    """The entries of one task's results file, in policy order.

    Raises:
        ValueError: naming the file, when it is not gzip-compressed JSON of the module docstring's
            format or an entry lacks a key of :data:`ENTRY_FIELDS`.
    """
    p = Path(path)
    try:
        doc = json.loads(gzip.decompress(p.read_bytes()).decode("utf-8"))
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{p}: not a gzip-compressed JSON entries file ({exc}); expected a file written by "
                         "`cpgym benchmark run --split test --entries`") from None
    entries = doc.get("entries") if isinstance(doc, dict) else None
    if not isinstance(entries, dict):
        raise ValueError(f"{p}: no 'entries' object; expected a file written by `cpgym benchmark run --entries`")
    out = []
    for label in sorted(entries):
        e = entries[label]
        missing = [k for k in ENTRY_FIELDS if not isinstance(e, dict) or k not in e]
        if missing:
            raise ValueError(f"{p}: entry {label!r} is not a benchmark entry (missing {', '.join(missing)})")
        out.append(e)
    return out


def read_entries(entries_dir: Path | str) -> list[dict]:
    """Every entry under ``entries_dir`` (``*.json.gz``), in path order (``[]`` if it does not exist)."""
    d = Path(entries_dir)
    return [e for p in sorted(d.glob("*.json.gz")) for e in read_entry(p)] if d.is_dir() else []


#: What a reader must know about an entry before comparing it (policy label -> note), printed under
#: the tables: results the protocol cannot seal by itself (a checkpoint trained before the splits).
NOTES = {
    "shipped": "On the routing tasks, `shipped` is `policies/checkpoints/routing_vertumnus_arms`, trained before the "
               "benchmark existed on windows j % 4 in {0, 2} of the whole conversation trace (0.9 of capacity), "
               "which overlap the conversation tasks' validation and test blocks: it is not a sealed-split result. "
               "On the reconfiguration tasks it is `policies/checkpoints/reconfig_target`, trained on "
               "`matched-phases` seeds below 1000 (disjoint from the test seeds 2000-2009).",
    **{ORACLE_PREFIX + k: f"hindsight oracle, **not attainable** (it chooses knowing each test episode's outcome): {v} "
                          f"(`benchmark/references.py`)." for k, v in ORACLES.items()},
}
#: Appended to the policy cell of an entry that is not attainable (a hindsight oracle).
NOT_ATTAINABLE = " (hindsight, not attainable)"


def policy_cell(label: str) -> str:
    """The leaderboard's name of policy ``label``: a hindsight oracle is marked :data:`NOT_ATTAINABLE`."""
    return label + NOT_ATTAINABLE if is_oracle_spec(label) else label


def _num(x, fmt: str) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def _delta(s: dict) -> str:
    d, lo, hi = s.get("delta_mean_ttft_pct"), s.get("ci_low"), s.get("ci_high")
    if d is None:
        return "–"
    if lo is None or hi is None:
        return f"{d:+.1f}"
    return f"{d:+.1f} [{lo:+.1f}, {hi:+.1f}]"


def relative_mean_ttft(summary: dict) -> float | None:
    """Mean TTFT relative to the task's reference over the same episodes (``1 + delta / 100``),
    ``None`` without a delta."""
    d = summary.get("delta_mean_ttft_pct")
    return None if d is None or (isinstance(d, float) and math.isnan(d)) else 1.0 + d / 100.0


def leaderboard_markdown(entries: Sequence[dict], ledger: Sequence[dict], *, entries_dir: Path | str = ENTRIES_DIR,
                         ledger_path: Path | str = DEFAULT_LEDGER) -> str:
    """The leaderboard (module docstring) of ``entries``, with each entry's number of test-split
    runs from the ``ledger`` lines (same task, SPEC and checkpoint hash); ``entries_dir`` and
    ``ledger_path``: where they were read (named in the header; default the repository's).
    Stable bytes: no date; tasks and policies sorted (policies by mean TTFT)."""
    counts = count_test_evaluations(list(ledger))
    lines = ["# cpgym benchmark leaderboard", "",
             f"Generated by `cpgym benchmark leaderboard` from `{str(entries_dir).rstrip('/')}/` and the test-split "
             f"ledger `{ledger_path}`; do not edit. Each entry is re-run and checked number by "
             "number by `cpgym benchmark validate FILE`. Δ: paired difference of per-episode mean TTFT vs the "
             "task's reference, in % of the reference's mean, with its 95 % Student-t interval over episodes "
             "(negative: faster). Test evals: how many times the policy was scored on the task's test split.", ""]
    by_task: dict[str, list[dict]] = {}
    for e in entries:
        by_task.setdefault(e["task"], []).append(e)
    ratios: dict[str, list[float]] = {}
    for task in sorted(by_task):
        for e in by_task[task]:
            r = relative_mean_ttft(e["summary"])
            if r is not None and r > 0:
                ratios.setdefault(e["summary"]["policy"], []).append(r)
    lines += ["## Summary", "", f"Geometric mean over tasks of mean TTFT relative to each task's reference "
              f"(< 1: faster than the reference); {len(by_task)} task(s).", "",
              "| policy | tasks | mean TTFT / reference (geometric mean) |", "|---|---:|---:|"]
    geo = {p: math.exp(sum(map(math.log, rs)) / len(rs)) for p, rs in ratios.items()}
    for p in sorted(geo, key=lambda k: (geo[k], k)):
        lines.append(f"| {policy_cell(p)} | {len(ratios[p])} | {geo[p]:.3f} |")
    for task in sorted(by_task):
        es = sorted(by_task[task], key=lambda e: (e["summary"]["mean_ttft_s"] is None, e["summary"]["mean_ttft_s"] or 0,
                                                  e["summary"]["policy"]))
        first = es[0]["summary"]
        lines += ["", f"## {task}", "", f"Split {first['split']}; reference: {first['reference']}.", "",
                  "| policy | episodes | mean TTFT s | P90 TTFT s | P99 TTFT s | SLO att. (tok) | Δ mean TTFT % [95 % CI] "
                  "| test evals | overloaded |", "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for e in es:
            s = e["summary"]
            n = counts.get((task, e["spec"], e.get("checkpoint_sha256")), 0)
            lines.append(f"| {policy_cell(s['policy'])} | {s['num_episodes']} | {_num(s['mean_ttft_s'], '.3f')} | "
                         f"{_num(s['p90_ttft_s'], '.3f')} | {_num(s['p99_ttft_s'], '.3f')} | "
                         f"{_num(s['slo_attainment_token_weighted'], '.4f')} | {_delta(s)} | {n} | "
                         f"{'yes' if s['overloaded'] else 'no'} |")
    notes = [f"* **{p}**: {NOTES[p]}" for p in sorted(NOTES) if any(e["summary"]["policy"] == p for e in entries)]
    if notes:
        lines += ["", "## Notes", "", *notes]
    return "\n".join(lines) + "\n"


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


def compare_entry(entry: dict, summary: dict, episodes: list[dict]) -> list[str]:
    """Every difference between a stored entry and a re-run's ``summary`` and ``episodes``, one
    line each (``summary.mean_ttft_s: stored 1.234, re-run 1.235``); ``[]`` when they are equal."""
    fresh = json_ready({"summary": summary, "episodes": episodes})
    out = []
    for key in sorted(set(entry["summary"]) | set(fresh["summary"])):
        a, b = entry["summary"].get(key), fresh["summary"].get(key)
        if not _same(a, b):
            out.append(f"summary.{key}: stored {a!r}, re-run {b!r}")
    if len(entry["episodes"]) != len(fresh["episodes"]):
        out.append(f"episodes: stored {len(entry['episodes'])}, re-run {len(fresh['episodes'])}")
    for i, (ea, eb) in enumerate(zip(entry["episodes"], fresh["episodes"])):
        for key in sorted(set(ea) | set(eb)):
            if not _same(ea.get(key), eb.get(key)):
                out.append(f"episodes[{i}].{key}: stored {ea.get(key)!r}, re-run {eb.get(key)!r}")
    return out
