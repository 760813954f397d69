"""``cpgym benchmark list|run|leaderboard|validate``: the JSON schemas, the test-split ledger,
leaderboard generation from entries, exact re-run validation, one-line input errors."""

from __future__ import annotations

import json

import pytest

from benchmark.leaderboard import ENTRY_FIELDS, leaderboard_markdown, read_entries, read_entry, write_entry
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
])
def test_bad_input_is_one_line_and_exit_2(argv, match, capsys):
    status, out, err = _run(capsys, "benchmark", "run", "--policy", "least-work", *argv)
    assert status == 2 and match in err and len(err.strip().splitlines()) == 1 and out == ""


def _entry(task: str, policy: str, mean: float, delta: float | None, spec: str | None = None) -> dict:
    summary = {"task": task, "policy": policy, "split": "test", "num_episodes": 3, "mean_ttft_s": mean,
               "p90_ttft_s": 2 * mean, "p99_ttft_s": 3 * mean, "slo_attainment_token_weighted": 0.9,
               "reference": "tuned:vertumnus-router", "delta_mean_ttft_pct": delta, "ci_low": None, "ci_high": None,
               "overloaded": False}
    return {"task": task, "split": "test", "spec": spec or policy, "checkpoint_sha256": None, "max_episodes": None,
            "commit": "abc", "command": "cpgym benchmark run", "summary": summary, "episodes": []}


def test_leaderboard_from_fixture_entries(tmp_path, capsys):
    entries = tmp_path / "entries"
    for e in (_entry("routing/a-v1", "tuned:vertumnus-router", 2.0, 0.0), _entry("routing/a-v1", "x", 1.0, -50.0),
              _entry("routing/b-v1", "tuned:vertumnus-router", 4.0, 0.0), _entry("routing/b-v1", "x", 8.0, 100.0)):
        write_entry(entries, e)
    assert sorted(p.name for p in entries.iterdir()) == ["routing__a-v1.json.gz", "routing__b-v1.json.gz"]
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text("".join(json.dumps({"task": t, "policy": "x", "checkpoint_sha256": None, "split": s}) + "\n"
                              for t, s in (("routing/a-v1", "test"), ("routing/a-v1", "test"), ("routing/a-v1", "validation"),
                                           ("routing/b-v1", "test"))))
    out = tmp_path / "LEADERBOARD.md"
    status, text, _ = _run(capsys, "benchmark", "leaderboard", "--entries", str(entries), "--ledger", str(ledger),
                           "--out", str(out))
    md = out.read_text()
    assert status == 0 and "4 entries on 2 task(s)" in text
    assert "| x | 2 | 1.000 |" in md  # geometric mean of 0.5 and 2.0
    assert "| tuned:vertumnus-router | 2 | 1.000 |" in md
    a = md.split("## routing/a-v1")[1].split("## routing/b-v1")[0]
    assert a.index("| x |") < a.index("| tuned:vertumnus-router |")  # sorted by mean TTFT
    assert "| x | 3 | 1.000 | 2.000 | 3.000 | 0.9000 | -50.0 | 2 | no |" in a  # two test evaluations of x on a
    assert md == leaderboard_markdown(read_entries(entries), [json.loads(x) for x in ledger.read_text().splitlines()])


def test_validate_passes_on_a_fresh_entry_and_fails_on_a_tampered_number(tmp_path, capsys):
    entries = tmp_path / "entries"
    status, _, _ = _run(capsys, "benchmark", "run", "--policy", "least-work", "--tasks", TASK, "--split", "test",
                        "--quick", "--quiet", "--ledger", str(tmp_path / "ledger.jsonl"), "--entries", str(entries))
    (path,) = sorted(entries.glob("*.json.gz"))
    (entry,) = read_entry(path)
    assert status == 0 and sorted(entry) == sorted(ENTRY_FIELDS) and entry["max_episodes"] == 4
    status, out, _ = _run(capsys, "benchmark", "validate", str(path), "--quiet")
    assert status == 0 and "[least-work]: ok" in out
    entry["episodes"][2]["p99_ttft_s"] += 1e-9
    entry["summary"]["slo_attainment_token_weighted"] = 0.5
    write_entry(entries, entry)
    status, out, _ = _run(capsys, "benchmark", "validate", str(path), "--quiet")
    assert status == 1
    assert "mismatch: episodes[2].p99_ttft_s: stored" in out and "mismatch: summary.slo_attainment_token_weighted" in out
    assert len((tmp_path / "ledger.jsonl").read_text().splitlines()) == 1  # validation is not a test evaluation


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
