"""Interrupting a ``--jobs 2`` sweep: Ctrl-C (SIGINT to the process group, as a terminal sends it)
ends with one line and exit status 130; SIGKILL of the driver takes its workers with it. Either
way no process of the sweep is left within 10 s, and a resume runs each unfinished cell exactly
once (and logs every finished cell to wandb)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.spec import load_spec
from experiments.sweep.manifest import scan_finished
from experiments.sweep.run import run_sweep
from tests.experiments.conftest import write_spec

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

SPEC = """
name: interrupt
workload: {name: mixed-default, params: {duration_s: 20.0}}
policies: [least-work, round-robin, vertumnus]
seeds: [0, 1]
rates: [30]
"""
REPO = Path(__file__).resolve().parents[2]


def _children(pid: int) -> set[int]:
    """Live descendants of ``pid`` (from /proc; zombies count as gone)."""
    parents: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parents.setdefault(int(fields[1]), []).append(int(d.name))
    out, todo = set(), [pid]
    while todo:
        for c in parents.get(todo.pop(), []):
            out.add(c)
            todo.append(c)
    return out


def _alive(pids: set[int]) -> set[int]:
    live = set()
    for p in pids:
        try:
            if (Path("/proc") / str(p) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                live.add(p)
        except OSError:
            pass
    return live


def _start(spec_path: Path, out: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "experiments.cli", "sweep", str(spec_path), "--jobs", "2", "--out", str(out),
            "--wandb", "disabled", "--quiet"]
    # SIGINT back to its default in the child: a test run that inherited SIGINT ignored (started in
    # the background of a non-interactive shell, e.g. `(setsid nohup /usr/bin/time pytest &)`) passes
    # SIG_IGN on, Python then installs no KeyboardInterrupt handler, and every attempt's sweep ran to
    # the end (exit 0, every cell finished) whatever the load
    return subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_default_sigint)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_for_workers(proc: subprocess.Popen, out: Path) -> set[int]:
    """Waits until both pool workers run a cell; returns the driver's descendants."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        tmp = out / ".tmp"
        kids = _children(proc.pid)
        if tmp.is_dir() and len(list(tmp.iterdir())) >= 2 and len(kids) >= 2:
            return kids
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError("the sweep's workers never started")


def _wait_gone(pids: set[int], limit_s: float = 10.0) -> set[int]:
    deadline = time.monotonic() + limit_s
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _alive(pids)


def _resume_runs_each_unfinished_cell_once(spec_path: Path, out: Path) -> None:
    spec = load_spec(spec_path)
    before = set(scan_finished(out))
    assert len(before) < spec.num_cells  # the interrupt came before the end
    ran: list[str] = []
    outcome = run_sweep(spec, out, jobs=2, progress=False, on_result=lambda r: ran.append(r["key"]))
    assert sorted(ran) == sorted(c.key for c in spec.resolve() if c.key not in before)
    assert outcome.num_failed == 0 and outcome.num_skipped == len(before)
    folders = [d for d in out.iterdir() if d.is_dir() and not d.name.startswith(".")]
    assert len(folders) == spec.num_cells  # no cell ran twice


@pytest.mark.slow
def test_sigint_stops_workers_prints_one_line_and_resume_finishes(tmp_path):
    spec_path = write_spec(tmp_path, SPEC)
    for attempt in range(5):
        out = tmp_path / f"out{attempt}"
        proc = _start(spec_path, out)
        kids = _wait_for_workers(proc, out)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        _, err = proc.communicate(timeout=60)
        # harness race, not a product failure: on a loaded machine the /proc scan can first see
        # two busy workers during the last cells, which may finish before the signal lands
        if not (proc.returncode == 0 and len(scan_finished(out)) == load_spec(spec_path).num_cells):
            break
    # 0 here means either five attempts that all finished before the signal landed (a loaded
    # machine) or an interrupted sweep that exited 0: the message tells which
    assert proc.returncode == 130, (f"attempt {attempt}: exit {proc.returncode} with "
                                    f"{len(scan_finished(out))} of {load_spec(spec_path).num_cells} cells finished; {err}")
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "interrupted" in lines[0] and "resume" in lines[0], err
    assert not _wait_gone(kids)
    assert not _children(proc.pid)
    _resume_runs_each_unfinished_cell_once(spec_path, out)


@pytest.mark.slow
def test_sigkill_of_driver_takes_workers_with_it_and_resume_finishes(tmp_path):
    spec_path = write_spec(tmp_path, SPEC)
    out = tmp_path / "out"
    proc = _start(spec_path, out)
    kids = _wait_for_workers(proc, out)
    proc.kill()
    proc.communicate(timeout=60)
    assert not _wait_gone(kids), "pool workers outlived their driver"
    _resume_runs_each_unfinished_cell_once(spec_path, out)


def test_finished_cells_of_a_killed_driver_are_logged_to_wandb_on_resume(tmp_path, monkeypatch):
    """A cell that finished but was never logged (its driver died first) is logged on the next start."""
    from policies.common import wandb_log

    spec_path = write_spec(tmp_path, """
name: backlog
workload: {name: mixed-default, params: {duration_s: 4.0}}
policies: [least-work, round-robin]
seeds: [0]
""")
    spec = load_spec(spec_path)
    out = tmp_path / "out"
    run_sweep(spec, out, jobs=1, progress=False)  # wandb disabled: nothing logged
    manifest = json.loads((out / "manifest.json").read_text())
    assert all(not e["wandb_logged"] for e in manifest["cells"].values())
    logged: list[str] = []
    monkeypatch.setattr(wandb_log.WandbLogger, "log_cell", lambda self, cell, run_dir: logged.append(cell.key) or True)
    again = run_sweep(spec, out, jobs=1, progress=False, wandb_mode="offline")
    assert again.num_run == 0 and sorted(logged) == sorted(c.key for c in spec.resolve())
    manifest = json.loads((out / "manifest.json").read_text())
    assert all(e["wandb_logged"] for e in manifest["cells"].values())
    logged.clear()
    run_sweep(spec, out, jobs=1, progress=False, wandb_mode="offline")
    assert logged == []  # logged once, not on every start


def test_second_driver_on_the_same_folder_is_refused(tmp_path):
    from experiments.sweep.manifest import lock_out_dir

    held = lock_out_dir(tmp_path)
    try:
        with pytest.raises(ValueError, match="in use by another sweep driver"):
            lock_out_dir(tmp_path)
    finally:
        held.close()
    lock_out_dir(tmp_path).close()  # free again once the holder ends


@pytest.mark.slow
def test_a_worker_that_dies_fails_only_its_own_cell(tmp_path, monkeypatch):
    """A dead worker broke the whole process pool: every cell still queued or running in it failed
    with BrokenProcessPool (here 3 of 4 cells, two of them never started), on every resume."""
    import experiments.sweep.backends as sweep_backends
    from tests.interrupt import execute_cell_or_die

    monkeypatch.setattr(sweep_backends, "execute_cell", execute_cell_or_die)
    spec = load_spec(write_spec(tmp_path, """
name: dies
workload: {name: mixed-default, params: {duration_s: 4.0}}
policies: [round-robin, least-work]
seeds: [0, 1]
"""))
    outcome = run_sweep(spec, tmp_path / "out", jobs=2, progress=False)
    assert (outcome.num_done, outcome.num_failed) == (2, 2), outcome.failures
    dead = {c.key for c in spec.resolve() if c.policy == "round-robin"}
    assert {k for k, _ in outcome.failures} == dead
    assert all(err.startswith("WorkerDied: the worker process running this cell ended") for _, err in outcome.failures)
    assert set(scan_finished(tmp_path / "out")) == {c.key for c in spec.resolve()} - dead
    assert not any((tmp_path / "out" / ".tmp").iterdir())
