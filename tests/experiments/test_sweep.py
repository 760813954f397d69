"""Sweeps: a small sweep runs, resume skips finished cells, a failing cell does not lose the
others, an interrupted cell never looks finished, and the Ray backend gives the same results."""

from __future__ import annotations

import json

import pytest

from baselines.registry import POLICIES, PolicySpec
from experiments.cli import main
from experiments.spec import load_spec
from experiments.sweep.execute import execute_cell
from experiments.sweep.manifest import TMP_DIR, scan_finished
from experiments.sweep.run import run_sweep
from tests.experiments.conftest import write_spec
from tests.factories import write_trace


def _summaries(out):
    return {json.loads((d / "cell.json").read_text())["key"]: json.loads((d / "summary.json").read_text())
            for d in out.iterdir() if (d / "cell.json").is_file()}


@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory):
    """The tiny sweep, run once in-process (jobs=1)."""
    from tests.experiments.conftest import TINY

    d = tmp_path_factory.mktemp("sweep")
    spec = load_spec(write_spec(d, TINY))
    seen = []
    outcome = run_sweep(spec, d / "out", jobs=1, progress=False, on_result=seen.append)
    return spec, d / "out", outcome, seen


def test_small_sweep_runs_and_writes_every_cell(finished_sweep):
    spec, out, outcome, seen = finished_sweep
    assert (outcome.num_cells, outcome.num_run, outcome.num_done, outcome.num_failed) == (8, 8, 8, 0)
    assert len(seen) == 8 and all(r["status"] == "done" for r in seen)
    folders = [d for d in out.iterdir() if d.is_dir() and not d.name.startswith(".")]
    assert len(folders) == 8
    for d in folders:
        wl, policy, seed, when = d.name.split("__")  # {workload}__{policy}__{seed}__{time}
        assert policy in ("least-work", "round-robin") and seed in ("0", "1") and when.isdigit()
        assert {"requests.parquet", "summary.json", "config.json", "cell.json", "extras.json"} <= {f.name for f in d.iterdir()}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["sweep"] == "tiny" and len(manifest["cells"]) == 8
    assert all(v["status"] == "done" and (out / v["run_dir"]).is_dir() for v in manifest["cells"].values())
    # rates were applied: the measured workload rate equals the swept target
    for key, s in _summaries(out).items():
        cell = next(c for c in spec.resolve() if c.key == key)
        assert s["workload_rate_rps"] == pytest.approx(cell.workload.target_rps)
        assert s["num_requests"] > 0 and s["policy"] == cell.policy


def test_same_seed_cells_are_identical(finished_sweep, tmp_path):
    spec, out, _, _ = finished_sweep
    cell = spec.resolve()[0]
    res = execute_cell(cell, str(tmp_path))
    assert res["status"] == "done"
    again = json.loads((tmp_path / res["run_dir"] / "summary.json").read_text())
    first = _summaries(out)[cell.key]
    for k in ("mean_ttft_s", "p99_ttft_s", "slo_attainment_token_weighted", "prefix_hit_rate", "gpu_time_s"):
        assert again[k] == first[k]


def test_resume_skips_finished_cells(finished_sweep):
    spec, out, _, _ = finished_sweep
    again = run_sweep(spec, out, jobs=1, progress=False)
    assert (again.num_skipped, again.num_run) == (8, 0)
    # lose one finished cell and leave a half-written one behind: exactly one cell is recomputed
    victim = sorted(d for d in out.iterdir() if (d / "cell.json").is_file())[0]
    key = json.loads((victim / "cell.json").read_text())["key"]
    import shutil

    shutil.rmtree(victim)
    half = out / TMP_DIR / key / "x__least-work__0__1"
    half.mkdir(parents=True)
    (half / "summary.json").write_text("{}")
    assert key not in scan_finished(out)
    ran = []
    third = run_sweep(spec, out, jobs=1, progress=False, on_result=ran.append)
    assert (third.num_skipped, third.num_run, third.num_done) == (7, 1, 1)
    assert [r["key"] for r in ran] == [key]
    assert not (out / TMP_DIR / key).exists()
    assert len(scan_finished(out)) == 8


def test_failing_cell_is_reported_and_others_finish(tmp_path, monkeypatch):
    def broken_router():
        raise RuntimeError("boom in the router factory")

    monkeypatch.setitem(POLICIES, "broken", PolicySpec("broken", broken_router, "always fails", "test"))
    spec = load_spec(write_spec(tmp_path, """
name: withfail
workload: {name: mixed-default, params: {duration_s: 5.0}}
policies: [least-work, broken]
seeds: [0, 1]
"""))
    out = tmp_path / "out"
    outcome = run_sweep(spec, out, jobs=1, progress=False)
    assert (outcome.num_done, outcome.num_failed) == (2, 2)
    assert all("boom in the router factory" in err for _, err in outcome.failures)
    manifest = json.loads((out / "manifest.json").read_text())["cells"]
    failed = [v for v in manifest.values() if v["status"] == "failed"]
    assert len(failed) == 2 and all("RuntimeError" in v["error"] and v["traceback"] for v in failed)
    assert len(scan_finished(out)) == 2
    assert not any((out / TMP_DIR).iterdir())
    # failed cells are retried on the next run, finished ones are not
    again = run_sweep(spec, out, jobs=1, progress=False)
    assert (again.num_skipped, again.num_run, again.num_failed) == (2, 2, 2)


def test_process_pool_backend(tmp_path):
    spec = load_spec(write_spec(tmp_path, """
name: pool
workload: {name: mixed-default, params: {duration_s: 5.0}}
policies: [least-work, round-robin]
seeds: [0]
"""))
    outcome = run_sweep(spec, tmp_path / "out", backend="local", jobs=2, progress=False)
    assert (outcome.num_done, outcome.num_failed) == (2, 0)
    ref = tmp_path / "ref"
    for c in spec.resolve():  # the pool gives the same numbers as an in-process run
        execute_cell(c, str(ref))
    a, b = _summaries(tmp_path / "out"), _summaries(ref)
    assert a.keys() == b.keys() and all(a[k]["mean_ttft_s"] == b[k]["mean_ttft_s"] for k in a)


@pytest.mark.slow  # Ray start-up alone is 8 s idle and timed out (> 45 s) on this 2-core machine under load
def test_ray_backend_tiny_sweep(tmp_path):
    pytest.importorskip("ray")
    spec = load_spec(write_spec(tmp_path, """
name: ray
workload: {name: mixed-default, params: {duration_s: 5.0}}
policies: [least-work, round-robin]
seeds: [0]
"""))
    outcome = run_sweep(spec, tmp_path / "out", backend="ray", jobs=2, progress=False)
    assert (outcome.num_done, outcome.num_failed) == (2, 0)
    ref = tmp_path / "ref"
    for c in spec.resolve():
        execute_cell(c, str(ref))
    a, b = _summaries(tmp_path / "out"), _summaries(ref)
    assert a.keys() == b.keys() and all(a[k]["p90_ttft_s"] == b[k]["p90_ttft_s"] for k in a)
    again = run_sweep(spec, tmp_path / "out", backend="ray", jobs=2, progress=False)
    assert (again.num_skipped, again.num_run) == (2, 0)  # resumes without starting Ray


def test_cli_dry_run_and_bad_backend_args(tmp_path, capsys, tiny_spec):
    assert main(["sweep", str(tiny_spec), "--out", str(tmp_path / "o"), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "8 cells, 0 finished" in text and text.count("todo") == 8
    with pytest.raises(ValueError, match="--jobs"):
        run_sweep(load_spec(tiny_spec), tmp_path / "o", jobs=0)


def test_a_refused_sweep_writes_nothing(finished_sweep, tmp_path, tiny_spec, capsys, monkeypatch):
    import builtins
    import hashlib

    # --jobs 0 (which left a folder holding only provenance.json): a row of tests/experiments/test_cli_errors.py
    out = tmp_path / "new"
    # another sweep's folder: its provenance.json was overwritten with this command before the refusal
    _, other, _, _ = finished_sweep
    other_spec = write_spec(tmp_path, "name: another\nworkload: {name: mixed-default}\npolicies: [least-work]\n")
    prov = other / "provenance.json"

    def digest():
        return hashlib.sha256(prov.read_bytes()).hexdigest() if prov.exists() else None

    before = digest()
    assert main(["sweep", str(other_spec), "--out", str(other), "--wandb", "disabled"]) == 2
    assert "holds sweep 'tiny', not 'another'" in capsys.readouterr().err
    assert digest() == before
    # --backend ray without Ray: a ModuleNotFoundError traceback after the folder was set up
    real_import = builtins.__import__

    def no_ray(name, *a, **k):
        if name == "ray" or name.startswith("ray."):
            raise ModuleNotFoundError("No module named 'ray'", name="ray")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    assert main(["sweep", str(tiny_spec), "--out", str(out), "--backend", "ray", "--wandb", "disabled"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cpgym sweep: error: --backend ray needs Ray") and err.count("\n") == 1 and not out.exists()


def test_policy_parameters_are_sweepable(tmp_path):
    """``vertumnus-router.beta`` / ``vertumnus-router.lambda`` as sweep axes: cells differ only in the router's
    parameters, results keep the policy name, and an undeclared parameter fails at load time."""
    from experiments.spec import SpecError

    spec = load_spec(write_spec(tmp_path, """
        name: beta-lambda
        workload: {name: tool-agent, params: {duration_s: 20.0}, target_rps: 60}
        policies: [vertumnus-router]
        sweep:
          grid:
            vertumnus-router.beta: [1.0, 3.0]
            vertumnus-router.lambda: [0.0, 4.0]
        """))
    assert spec.num_cells == 4
    outcome = run_sweep(spec, tmp_path / "out", jobs=1, progress=False)
    assert outcome.num_done == 4
    summaries = _summaries(tmp_path / "out")
    assert {s["policy"] for s in summaries.values()} == {"vertumnus-router"}
    assert len({round(s["mean_ttft_s"], 9) for s in summaries.values()}) > 1  # the parameters change decisions
    for d in (tmp_path / "out").iterdir():
        if (d / "cell.json").is_file():
            params = json.loads((d / "cell.json").read_text())["policy_params"]
            assert set(params) == {"beta", "lambda"}
    with pytest.raises(SpecError, match="vertumnus-router.gamma"):
        load_spec(write_spec(tmp_path, "name: x\nworkload: {name: tool-agent}\npolicies: [vertumnus-router]\n"
                             "sweep: {grid: {vertumnus-router.gamma: [1]}}\n", "bad.yaml"))


def test_list_valued_policy_parameter_is_a_sweep_axis(tmp_path):
    """A parameter whose value is a list (``vertumnus-adaptive.target_horizons_s``) loads as an axis
    (it raised ``TypeError: unhashable type: 'list'`` in the spec check) and reaches the policy."""
    from experiments.spec import SpecError

    spec = load_spec(write_spec(tmp_path, """
        name: horizons
        workload: {name: tool-agent, params: {duration_s: 20.0}, target_rps: 60}
        policies: [vertumnus-adaptive]
        sweep:
          grid:
            vertumnus-adaptive.target_horizons_s: [[20.0, 40.0], [0.0]]
        """))
    assert spec.num_cells == 2
    cells = spec.resolve()
    values = sorted(tuple(dict(c.policy_params)["target_horizons_s"]) for c in cells)
    assert values == [(0.0,), (20.0, 40.0)]
    built = POLICIES["vertumnus-adaptive"].with_params(**dict(cells[0].policy_params))
    (controller,) = built.make_attachments()
    assert tuple(controller.config.target_horizons_s) in values
    with pytest.raises(SpecError, match="target_horizons_s"):
        load_spec(write_spec(tmp_path, "name: x\nworkload: {name: tool-agent}\npolicies: [vertumnus-adaptive]\n"
                             "sweep: {grid: {vertumnus-adaptive.target_horizons_s: [[-1.0]]}}\n", "bad.yaml"))


def test_a_run_folder_that_cannot_be_created_fails_the_cell_instead_of_losing_it(finished_sweep, tmp_path, monkeypatch):
    """Any rename error was taken for a taken name: 10,000 retries, then the cell reported "done"
    while its results were deleted with the temporary folder (a long trace name plus the grid part
    went past 255 bytes: ENAMETOOLONG)."""
    import errno
    import os

    import experiments.sweep.execute as sweep_execute

    spec, _, _, _ = finished_sweep

    def too_long(src, dst):
        raise OSError(errno.ENAMETOOLONG, "File name too long", str(dst))

    monkeypatch.setattr(sweep_execute.os, "rename", too_long)
    res = execute_cell(spec.resolve()[0], str(tmp_path))
    assert res["status"] == "failed" and "File name too long" in res["error"]
    monkeypatch.setattr(sweep_execute.os, "rename", os.rename)
    assert scan_finished(tmp_path) == {}


def test_folder_names_beside_a_long_trace_name_stay_within_the_file_name_limit():
    from types import SimpleNamespace

    from experiments.sweep.execute import MAX_FOLDER_NAME_BYTES, cell_folder_name

    run = "t" * 215 + "__least-work__0__1796104903"
    a = cell_folder_name(run, SimpleNamespace(axes=(("cache_capacity_scale", 0.5),)))
    b = cell_folder_name(run, SimpleNamespace(axes=(("cache_capacity_scale", 0.25),)))
    assert a != b and max(len(a.encode()), len(b.encode())) <= 255
    run = "t" * 200 + "__least-work__0__1796104903"
    c = cell_folder_name(run, SimpleNamespace(axes=(("cache_capacity_scale", 0.5), ("slo.slo_scale", 4.0))))
    assert len(c.encode()) <= MAX_FOLDER_NAME_BYTES and "~" in c


def test_an_out_folder_holding_other_files_is_refused_before_anything_is_written(finished_sweep, tmp_path, tiny_spec,
                                                                                  capsys):
    import shutil

    # e.g. a results folder given as --out by mistake: its provenance.json was overwritten with the
    # sweep's and the cells were written among its files
    other = tmp_path / "results"
    other.mkdir()
    (other / "README.md").write_text("numbers\n")
    (other / "provenance.json").write_text('{"argv": ["cpgym", "compare"]}\n')
    assert main(["sweep", str(tiny_spec), "--out", str(other), "--wandb", "disabled"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cpgym sweep: error: {other} holds files that are not a sweep's (README.md); choose a new "
                          "or empty --out")
    assert sorted(p.name for p in other.iterdir()) == ["README.md", "provenance.json"]
    assert (other / "provenance.json").read_text() == '{"argv": ["cpgym", "compare"]}\n'
    # a sweep's own folder that lost its manifest.json and sweep.json still resumes (they are rebuilt)
    spec, out, _, _ = finished_sweep
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    (copy / "manifest.json").unlink()
    (copy / "sweep.json").unlink()
    assert run_sweep(spec, copy, jobs=1, progress=False).num_skipped == 8


def test_a_resume_after_a_code_change_says_that_it_reuses_cells_of_the_old_code(finished_sweep, tmp_path, monkeypatch,
                                                                                  capsys):
    import shutil

    import experiments.sweep.manifest as sweep_manifest

    spec, out, _, _ = finished_sweep
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    assert all(len(doc["code_sha256"]) == 64 for _, doc in sweep_manifest.finished_cells(copy))
    assert run_sweep(spec, copy, jobs=1, progress=False).outdated_dirs == []
    # the simulator or a policy changed since: the cells are reused (the code is not in the key), without a word
    monkeypatch.setattr(sweep_manifest, "cell_code_fingerprint", lambda: "0" * 64)
    again = run_sweep(spec, copy, jobs=1, progress=False)
    assert again.num_skipped == 8 and len(again.outdated_dirs) == 8
    assert main(["sweep", str(spec.path), "--out", str(copy), "--wandb", "disabled", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert f"warning: 8 finished cell(s) in {copy} were computed by other code (envs/, baselines/ or" in err


def _trace_sweep(folder, trace="traces/t.jsonl"):
    """A one-cell trace sweep in ``folder`` (its own trace file; spec path relative to the spec)."""
    (folder / "traces").mkdir(parents=True, exist_ok=True)
    write_trace(folder / "traces" / "t.jsonl", ({"timestamp": 250 * i, "input_length": 600 + 10 * i, "output_length": 10,
                                                 "hash_ids": [i % 3, 10 + i]} for i in range(40)))
    return write_spec(folder, f"name: path-free\nworkload: {{trace: {trace}}}\npolicies: [least-work]\n")


def test_cell_keys_do_not_depend_on_where_the_repo_and_the_traces_live(tmp_path, monkeypatch):
    # the key hashed the trace's absolute path: the same spec moved (another checkout, the shipped
    # results read elsewhere) keyed its cells anew, re-ran them and left the finished ones out
    import shutil

    import experiments.spec.loader

    a = load_spec(_trace_sweep(tmp_path / "a")).resolve()
    b = load_spec(_trace_sweep(tmp_path / "b")).resolve()
    assert [c.workload.trace for c in a] != [c.workload.trace for c in b]  # resolved: absolute paths
    assert [c.key for c in a] == [c.key for c in b]
    for where in ("x", "y"):  # @traces/ resolved from two checkouts
        monkeypatch.setattr(experiments.spec.loader, "default_traces_dir", lambda where=where: tmp_path / where / "traces")
        spec = load_spec(_trace_sweep(tmp_path / where, "'@traces/t.jsonl'"))
        assert [c.key for c in spec.resolve()] == [c.key for c in a]
    # a calibration file: its content names it, not its path
    from experiments.spec.cells import _default_calibration_path

    for where in ("a", "b"):
        shutil.copy(_default_calibration_path(), tmp_path / where / "calib.json")
    keys = [c.key for w in ("a", "b") for c in load_spec(write_spec(
        tmp_path / w, "name: c\nworkload: {trace: traces/t.jsonl}\npolicies: [least-work]\ncalibration: calib.json\n",
        "c.yaml")).resolve()]
    assert len(set(keys)) == 1

    # a finished sweep moved elsewhere is resumed and reported with its cells
    out = tmp_path / "a" / "out"
    assert run_sweep(load_spec(tmp_path / "a" / "spec.yaml"), out, jobs=1, progress=False).num_done == 1
    shutil.copytree(tmp_path / "a", tmp_path / "moved")
    moved = tmp_path / "moved" / "out"
    outcome = run_sweep(load_spec(tmp_path / "moved" / "spec.yaml"), moved, jobs=1, progress=False)
    assert (outcome.num_skipped, outcome.num_run, outcome.stale_dirs) == (1, 0, [])
    from experiments.sweep.manifest import finished_cells

    assert [d.name for d, _ in finished_cells(moved, current_only=True)] == [d.name for d, _ in finished_cells(out)]


def test_a_sweep_keyed_with_absolute_paths_still_resumes_at_its_location(tmp_path, capsys):
    # folders written before keys left out the paths hold the path-hashed key: still the cell there
    from experiments.sweep.manifest import finished_cells, manifest_cell_keys

    spec_file = _trace_sweep(tmp_path)
    spec = load_spec(spec_file)
    (cell,) = spec.resolve()
    assert cell.legacy_key not in (None, cell.key)
    out = tmp_path / "out"
    run_sweep(spec, out, jobs=1, progress=False)
    (d,) = [p for p in out.iterdir() if (p / "cell.json").is_file()]
    doc = json.loads((d / "cell.json").read_text())
    (d / "cell.json").write_text(json.dumps({**doc, "key": cell.legacy_key}))  # as the earlier version wrote it
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["cells"] = {cell.legacy_key: manifest["cells"][cell.key]}
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert main(["sweep", str(spec_file), "--out", str(out), "--dry-run"]) == 0
    assert f"{cell.key}  done" in capsys.readouterr().out
    outcome = run_sweep(spec, out, jobs=1, progress=False)
    assert (outcome.num_skipped, outcome.num_run, outcome.stale_dirs) == (1, 0, [])
    assert json.loads((out / "manifest.json").read_text())["cells"][cell.key]["legacy_key"] == cell.legacy_key
    assert manifest_cell_keys(out) == {cell.key, cell.legacy_key}
    assert [p.name for p, _ in finished_cells(out, current_only=True)] == [d.name]
    # a named workload with the default calibration has one key either way
    from tests.experiments.conftest import TINY

    assert all(c.legacy_key is None for c in load_spec(write_spec(tmp_path, TINY, "tiny.yaml")).resolve())


def test_a_sweep_keyed_with_absolute_paths_resumed_once_then_moved_still_resumes(tmp_path):
    # a resume at the old location found the cell under its path-hashed key and recorded it in the
    # manifest; the folder moved afterwards (other absolute paths, another legacy key) re-ran it
    import shutil

    spec = load_spec(_trace_sweep(tmp_path / "a"))
    (cell,) = spec.resolve()
    out = tmp_path / "a" / "out"
    run_sweep(spec, out, jobs=1, progress=False)
    (d,) = [p for p in out.iterdir() if (p / "cell.json").is_file()]
    doc = json.loads((d / "cell.json").read_text())
    (d / "cell.json").write_text(json.dumps({**doc, "key": cell.legacy_key}))  # as the earlier version wrote it
    assert run_sweep(spec, out, jobs=1, progress=False).num_run == 0  # at its location: found, recorded
    shutil.copytree(tmp_path / "a", tmp_path / "moved")
    moved_spec = load_spec(tmp_path / "moved" / "spec.yaml")
    assert moved_spec.resolve()[0].legacy_key != cell.legacy_key and moved_spec.resolve()[0].key == cell.key
    moved = tmp_path / "moved" / "out"
    assert main(["sweep", str(tmp_path / "moved" / "spec.yaml"), "--out", str(moved), "--dry-run"]) == 0
    outcome = run_sweep(moved_spec, moved, jobs=1, progress=False)
    assert (outcome.num_skipped, outcome.num_run, outcome.stale_dirs) == (1, 0, [])
    assert json.loads((moved / "manifest.json").read_text())["cells"][cell.key]["legacy_key"] == cell.legacy_key


def test_a_cell_document_whose_key_is_not_a_string_is_not_a_finished_cell(finished_sweep, tmp_path):
    # scan_finished (every resume, --dry-run) was a TypeError traceback: unhashable type: 'list'
    import shutil

    from experiments.sweep.manifest import finished_cells

    spec, out, _, _ = finished_sweep
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    f = sorted(copy.glob("*/cell.json"))[0]
    f.write_text(json.dumps({**json.loads(f.read_text()), "key": ["not", "a", "key"]}))
    assert len(scan_finished(copy)) == 7
    with pytest.raises(ValueError, match=f"{f}: expected a JSON object with a \"key\" string"):
        list(finished_cells(copy, strict=True))
