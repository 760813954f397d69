"""``cpgym benchmark list|run|leaderboard|validate``: the JSON schemas, the test-split ledger,
leaderboard generation from entries, exact re-run validation, one-line input errors."""

from __future__ import annotations

import json

import pytest

from benchmark.leaderboard import ENTRY_FIELDS, leaderboard_markdown, make_entry, read_entries, read_entry, write_entry
from benchmark.tasks import TASKS
from experiments.cli import main

TASK = "routing/conversation-0.9-v1"


def _run(capsys, *argv) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_list_json_shows_every_task_with_its_splits(capsys):
    status, out, _ = _run(capsys, "benchmark", "list", "--format", "json")
    rows = json.loads(out)
    assert status == 0 and [r["id"] for r in rows] == list(TASKS)
    for r in rows:
        assert list(r)[:7] == ["id", "kind", "workload", "load_fraction", "capacity_rps", "rate_rps", "splits"]
        s = r["splits"]
        assert set(s["num_episodes"]) == {"train", "validation", "test"}
        if s["kind"] == "time":
            assert s["gap_s"] >= r["warmup_s"] and s["train_s"][1] + s["gap_s"] <= s["validation_s"][0]
            assert s["validation_s"][1] + s["gap_s"] <= s["test_s"][0]
        else:
            assert s["kind"] == "seed" and s["train"][1] <= s["validation"][0] and s["validation"][1] <= s["test"][0]
    conv = next(r for r in rows if r["id"] == TASK)
    assert conv["rate_rps"] == pytest.approx(0.9 * conv["capacity_rps"])
    assert all(conv["splits"]["num_episodes"][k] >= 2 for k in ("train", "validation", "test"))


def test_validation_runs_leave_the_ledger_alone_and_test_runs_append(tmp_path, capsys):
    ledger = tmp_path / "ledger.jsonl"
    base = ("benchmark", "run", "--policy", "least-work", "--tasks", TASK, "--quick", "--quiet", "--format", "json",
            "--ledger", str(ledger))
    status, out, _ = _run(capsys, *base)
    rows = json.loads(out)
    assert status == 0 and rows[0]["split"] == "validation" and not ledger.exists()
    status, out, _ = _run(capsys, *base, "--split", "test", "--out", str(tmp_path / "run.json"))
    (row,) = json.loads(out)
    (line,) = [json.loads(x) for x in ledger.read_text().splitlines()]
    assert status == 0 and row["split"] == "test" and row["num_episodes"] == 4
    assert list(line) == ["date", "commit", "policy", "checkpoint_sha256", "task", "split", "num_episodes", "mean_ttft_s"]
    assert (line["policy"], line["task"], line["split"], line["mean_ttft_s"]) == ("least-work", TASK, "test",
                                                                                  row["mean_ttft_s"])
    saved = json.loads((tmp_path / "run.json").read_text())
    assert saved["rows"] == [row] and len(saved["episodes"]) == 4


@pytest.mark.parametrize("argv, match", [
    (("--tasks", "routing/nope-v1"), "cpgym benchmark run: error: --tasks: unknown task 'routing/nope-v1'"),
    (("--tasks", TASK, "--policy", "vertumnus-router:gamma=1"),
     "error: --policy vertumnus-router:gamma=1: vertumnus-router has no parameter 'gamma'; its parameters: beta, lambda"),
    (("--tasks", TASK, "--entries"), "error: --entries: leaderboard entries are test-split results"),
    (("--tasks", TASK, "--split", "test", "--quick", "--entries"), "error: --quick: a smoke run is not a leaderboard entry"),
])
def test_bad_input_is_one_line_and_exit_2(argv, match, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing written: no ledger, no entries
    status, out, err = _run(capsys, "benchmark", "run", "--policy", "least-work", *argv)
    assert status == 2 and match in err and len(err.strip().splitlines()) == 1 and out == ""
    assert list(tmp_path.iterdir()) == []


#: Two real tasks and their numbers of test episodes (the leaderboard skips an entry with fewer).
TASK_A, TASK_B, NUM_A, NUM_B = "reconfig/matched-phases-v1", "routing/gpu-failure-0.9-v1", 10, 10


def _ledger_line(task: str, policy: str, split: str = "test") -> str:
    return json.dumps({"date": "2026-12-07T00:00:00Z", "commit": "abc", "policy": policy, "checkpoint_sha256": None,
                       "task": task, "split": split, "num_episodes": 10, "mean_ttft_s": 1.0}) + "\n"


def _entry(task: str, policy: str, mean: float, delta: float | None, spec: str | None = None, num: int = 10) -> dict:
    summary = {"task": task, "policy": policy, "split": "test", "num_episodes": num, "mean_ttft_s": mean,
               "p90_ttft_s": 2 * mean, "p99_ttft_s": 3 * mean, "slo_attainment_token_weighted": 0.9,
               "reference": "tuned:vertumnus-router", "delta_mean_ttft_pct": delta, "ci_low": None, "ci_high": None,
               "overloaded": False}
    return {"task": task, "split": "test", "spec": spec or policy, "checkpoint_sha256": None, "max_episodes": None,
            "commit": "abc", "command": "cpgym benchmark run", "summary": summary, "episodes": []}


def test_leaderboard_from_fixture_entries(tmp_path, capsys):
    entries = tmp_path / "entries"
    for e in (_entry(TASK_A, "tuned:vertumnus-router", 2.0, 0.0), _entry(TASK_A, "x", 1.0, -50.0),
              _entry(TASK_B, "tuned:vertumnus-router", 4.0, 0.0), _entry(TASK_B, "x", 8.0, 100.0)):
        write_entry(entries, e)
    assert sorted(p.name for p in entries.iterdir()) == ["reconfig__matched-phases-v1.json.gz",
                                                         "routing__gpu-failure-0.9-v1.json.gz"]
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text("".join(_ledger_line(t, "x", s) for t, s in ((TASK_A, "test"), (TASK_A, "test"),
                                                                    (TASK_A, "validation"), (TASK_B, "test"))))
    out = tmp_path / "LEADERBOARD.md"
    status, text, _ = _run(capsys, "benchmark", "leaderboard", "--entries", str(entries), "--ledger", str(ledger),
                           "--out", str(out))
    md = out.read_text()
    assert status == 0 and "4 entries on 2 task(s)" in text
    assert f"from `{entries}/` and the test-split ledger `{ledger}`" in md  # the paths actually used
    assert "| x | 2 | 1.000 |" in md  # geometric mean of 0.5 and 2.0
    assert "| tuned:vertumnus-router | 2 | 1.000 |" in md
    a = md.split(f"## {TASK_A}")[1].split(f"## {TASK_B}")[0]
    assert a.index("| x |") < a.index("| tuned:vertumnus-router |")  # sorted by mean TTFT
    assert f"| x | {NUM_A} | 1.000 | 2.000 | 3.000 | 0.9000 | -50.0 | 2 | no |" in a  # two test evaluations of x on a
    assert md == leaderboard_markdown(read_entries(entries), [json.loads(x) for x in ledger.read_text().splitlines()],
                                      entries_dir=entries, ledger_path=ledger)


def test_leaderboard_skips_entries_that_are_not_full_test_results(tmp_path, capsys):
    entries, ledger = tmp_path / "entries", tmp_path / "ledger.jsonl"
    ledger.write_text(_ledger_line(TASK_A, "x"))
    quick = {**_entry(TASK_A, "quick", 1.0, -50.0, num=4), "max_episodes": 4}
    short = _entry(TASK_A, "short", 1.0, -50.0, num=NUM_A - 1)
    val = {**_entry(TASK_A, "val", 1.0, -50.0), "split": "validation"}
    for e in (_entry(TASK_A, "x", 2.0, 0.0), quick, short, val):
        write_entry(entries, e)
    out = tmp_path / "LEADERBOARD.md"
    status, text, err = _run(capsys, "benchmark", "leaderboard", "--entries", str(entries), "--ledger", str(ledger),
                             "--out", str(out))
    md = out.read_text()
    assert status == 0 and "1 entries on 1 task(s)" in text
    assert "| quick |" not in md and "| short |" not in md and "| val |" not in md
    f = entries / "reconfig__matched-phases-v1.json.gz"
    assert f"warning: {f}: entries[quick]: a smoke run cut to max_episodes=4; skipped" in err
    assert f"warning: {f}: entries[short]: {NUM_A - 1} episodes, fewer than the task's {NUM_A} test episodes" in err
    assert f"warning: {f}: entries[val]: split 'validation', not test; skipped" in err


@pytest.mark.parametrize("ledger_text, key, phrase", [
    (None, "--ledger {ledger}", "no such file"),
    ('{"task": "x"}\n', "{ledger}:1", "not a ledger record"),
])
def test_leaderboard_refuses_a_missing_or_foreign_ledger(ledger_text, key, phrase, tmp_path, capsys):
    entries, ledger, out = tmp_path / "entries", tmp_path / "ledger.jsonl", tmp_path / "LEADERBOARD.md"
    write_entry(entries, _entry(TASK_A, "x", 2.0, 0.0))
    if ledger_text is not None:
        ledger.write_text(ledger_text)
    status, text, err = _run(capsys, "benchmark", "leaderboard", "--entries", str(entries), "--ledger", str(ledger),
                             "--out", str(out))
    assert status == 2 and key.format(ledger=ledger) in err and phrase in err and len(err.splitlines()) == 1
    assert text == "" and not out.exists()


def test_a_test_run_refuses_to_append_to_a_file_that_is_not_a_ledger(tmp_path, capsys):
    ledger = tmp_path / "notes.jsonl"
    ledger.write_text(_ledger_line(TASK, "least-work") + "hello\n")
    before = ledger.read_text()
    status, out, err = _run(capsys, "benchmark", "run", "--policy", "least-work", "--tasks", TASK, "--split", "test",
                            "--quick", "--quiet", "--ledger", str(ledger))
    assert status == 2 and f"--ledger {ledger}:2: not a ledger record" in err and len(err.splitlines()) == 1
    assert out == "" and ledger.read_text() == before


def _quick_entry(entries, tmp_path) -> None:
    """A 4-episode entry of least-work written from Python (the CLI refuses --quick with --entries)."""
    from benchmark.ledger import record_test_runs
    from benchmark.protocol import run_benchmark
    from benchmark.specs import heuristic_contender
    from benchmark.tasks import get_task

    t = get_task(TASK)
    (r,) = run_benchmark([heuristic_contender("least-work", t)], [t], "test", max_episodes=4)
    record_test_runs(tmp_path / "ledger.jsonl", [r])
    write_entry(entries, make_entry(r["summary"], r["episodes"], "least-work", None, 4, "abc", "cpgym benchmark run"))


def test_validate_passes_on_a_fresh_entry_and_fails_on_a_tampered_number(tmp_path, capsys):
    entries = tmp_path / "entries"
    _quick_entry(entries, tmp_path)
    (path,) = sorted(entries.glob("*.json.gz"))
    (entry,) = read_entry(path)
    assert sorted(entry) == sorted(ENTRY_FIELDS) and entry["max_episodes"] == 4
    status, out, _ = _run(capsys, "benchmark", "validate", str(path), "--quiet")
    assert status == 0 and "[least-work]: ok" in out
    entry["episodes"][2]["p99_ttft_s"] += 1e-9
    entry["summary"]["slo_attainment_token_weighted"] = 0.5
    write_entry(entries, entry)
    status, out, _ = _run(capsys, "benchmark", "validate", str(path), "--quiet")
    assert status == 1
    assert "mismatch: episodes[2].p99_ttft_s: stored" in out and "mismatch: summary.slo_attainment_token_weighted" in out
    assert len((tmp_path / "ledger.jsonl").read_text().splitlines()) == 1  # validation is not a test evaluation


def test_validate_names_the_file_and_the_field(tmp_path, capsys):
    entries = tmp_path / "entries"
    for e in (_entry(TASK_A, "bad", 1.0, 0.0, spec="vertumnus-router:beta=abc"),):
        write_entry(entries, e)
    path = entries / "reconfig__matched-phases-v1.json.gz"
    status, out, err = _run(capsys, "benchmark", "validate", str(path), "--quiet")
    assert status == 2 and out == "" and len(err.splitlines()) == 1
    assert f"error: {path}: entries[bad].spec: vertumnus-router:beta=abc: beta: expected a number, got 'abc'" in err
    assert "--policy" not in err
    unknown = tmp_path / "u" / "x.json.gz"
    write_entry(tmp_path / "u", _entry("routing/nope-v1", "y", 1.0, 0.0))
    (written,) = (tmp_path / "u").glob("*.json.gz")
    written.rename(unknown)
    status, _, err = _run(capsys, "benchmark", "validate", str(unknown), "--quiet")
    assert status == 2 and f"error: {unknown}: entries[y].task: unknown task 'routing/nope-v1'" in err
    status, _, err = _run(capsys, "benchmark", "validate", str(tmp_path / "missing.json.gz"))
    assert status == 2 and f"error: {tmp_path / 'missing.json.gz'}: does not exist" in err


def test_capacity_re_measures_and_stores_the_entry(tmp_path, capsys, monkeypatch):
    import benchmark.capacity as capacity
    from tests.interrupt import patch_everywhere

    store = tmp_path / "capacity.json"
    store.write_text(json.dumps({"other/task-v1": {"capacity_rps": 1.0}}))
    monkeypatch.setattr(capacity, "capacity_file", lambda: store)
    measured = []

    def measure(task, log=None):
        measured.append(task.id)
        return {"capacity_rps": 7.5, "native_rps": 3.0, "definition": task.capacity_definition, "policy": "p",
                "training_digest": "d", "probes": [[1.0, 0.1, True]]}

    patch_everywhere(monkeypatch, capacity, "measure_capacity", measure)
    status, out, _ = _run(capsys, "benchmark", "capacity", "--tasks", TASK, "--quiet")
    assert status == 0 and measured == [TASK]
    assert json.loads(out)[TASK]["capacity_rps"] == 7.5
    assert json.loads(store.read_text())[TASK]["capacity_rps"] == 7.5 and "other/task-v1" in json.loads(store.read_text())
    status, _, err = _run(capsys, "benchmark", "capacity", "--tasks", "nope")
    assert status == 2 and "--tasks: unknown task 'nope'" in err


@pytest.mark.parametrize("text, specs", [
    ("vertumnus-router:beta=4,lambda=2", ["vertumnus-router:beta=4,lambda=2"]),
    ("least-work,vertumnus-router:beta=4,lambda=2,tuned:llm-d", ["least-work", "vertumnus-router:beta=4,lambda=2",
                                                                  "tuned:llm-d"]),
    ("a:x=1,y=2,b:x=1,y=2", ["a:x=1,y=2", "b:x=1,y=2"]),
])
def test_against_splits_on_commas_that_start_a_new_spec(text, specs):
    from experiments.commands.evaluate import split_spec_list

    assert split_spec_list(text, "--against") == specs


def test_the_table_shows_invalid_actions_only_where_a_row_has_some(capsys):
    from experiments.commands.benchmark_run import print_table

    row = {"task": TASK, "policy": "p", "num_episodes": 2, "mean_ttft_s": 1.0, "p90_ttft_s": 1.0, "p99_ttft_s": 1.0,
           "slo_attainment_token_weighted": 1.0, "reference": "r", "delta_mean_ttft_pct": 1.0, "ci_low": 0.0,
           "ci_high": 2.0, "overloaded": False, "num_invalid_actions": 0}
    print_table([row], "validation")
    assert "invalid actions" not in capsys.readouterr().out
    print_table([row, {**row, "policy": "q", "num_invalid_actions": 7}], "validation")
    out = capsys.readouterr().out
    (q,) = [line for line in out.splitlines() if "│ q " in line]
    assert "invalid actions" in out and q.split("│")[-2].strip() == "7"
