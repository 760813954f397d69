"""benchmark/dispatch.py: one dispatcher for tuning and benchmark runs. The rows of
``run_benchmark`` / ``cpgym benchmark run`` are the same in this process, on a local pool of two
workers and on Ray; a local run never imports Ray; bad backends and job counts are refused."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from benchmark.dispatch import Dispatcher
from benchmark.protocol import run_benchmark
from benchmark.specs import heuristic_contender
from benchmark.tasks import get_task

TASK = get_task("routing/conversation-0.9-v1")


def _rows(backend: str, jobs: int) -> list[dict]:
    # a closure-built contender (NAME:param=...) and a registered one: both must travel to workers
    cs = [heuristic_contender("least-work", TASK), heuristic_contender("vertumnus-router:beta=8,lambda=4", TASK)]
    res = run_benchmark(cs, [TASK], "validation", max_episodes=2, backend=backend, jobs=jobs)
    return [{"summary": r["summary"], "episodes": r["episodes"]} for r in res]


def test_dispatcher_keeps_input_order_and_refuses_bad_settings():
    with Dispatcher(pow, "local", 2) as d:
        assert d([(2, k) for k in range(6)]) == [1, 2, 4, 8, 16, 32]
        assert list(d.imap([(3, 2)])) == [9]
    import threading

    lock = threading.Lock()  # cannot be pickled: that item runs in this process, in its turn
    with Dispatcher(lambda a, b: a if b is None else b.locked(), "local", 2) as d:
        assert d([(1, None), (2, lock), (3, None)]) == [1, False, 3]
    with Dispatcher(lambda a, b: a - b) as d:  # in this process: anything callable
        assert d([(5, 1), (1, 5)]) == [4, -4]
    with pytest.raises(ValueError, match="backend"):
        Dispatcher(pow, "slurm")
    with pytest.raises(ValueError, match="jobs"):
        Dispatcher(pow, "local", 0)


def test_local_pool_gives_the_same_rows_as_one_process():
    one = _rows("local", 1)
    assert [len(r["episodes"]) for r in one] == [2, 2] and one[0]["summary"]["policy"] == "least-work"
    assert _rows("local", 2) == one


@pytest.mark.slow  # starts a Ray instance: ~15 s on the shared 2-core machine
def test_ray_gives_the_same_rows_as_one_process():
    # in its own process: Ray keeps per-process state after shutdown (its authentication token),
    # and a later test that starts Ray with another token could not start its head
    pytest.importorskip("ray")
    code = ("import json, sys; from tests.benchmark.test_dispatch import _rows; "
            "print(json.dumps(_rows('ray', 2) == _rows('local', 1)))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.strip().splitlines()[-1]) is True


def test_cli_jobs_same_json_and_no_ray_import(tmp_path):
    """``cpgym benchmark run --jobs 2`` prints the rows of ``--jobs 1``; a local run loads no Ray;
    ``--jobs 0`` (run, validate) is one line and exit 2."""
    code = ("import sys; from experiments.cli import main; rc = main(sys.argv[1:]); "
            "assert 'ray' not in sys.modules, 'a local run imported ray'; sys.exit(rc)")
    base = ["benchmark", "run", "--policy", "least-work", "--tasks", TASK.id, "--quick", "--format", "json", "--quiet"]
    outs = []
    for jobs in ("1", "2"):
        p = subprocess.run([sys.executable, "-c", code, *base, "--jobs", jobs], capture_output=True, text=True,
                           timeout=300)
        assert p.returncode == 0, p.stderr
        outs.append(json.loads(p.stdout))
    assert outs[0] == outs[1] and outs[0][0]["num_episodes"] == 4
    p = subprocess.run([sys.executable, "-c", code, *base, "--jobs", "0"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "--jobs must be >= 1" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    p = subprocess.run([sys.executable, "-c", code, "benchmark", "validate", str(tmp_path / "none.json.gz"), "--jobs", "0"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "--jobs must be >= 1" in p.stderr and len(p.stderr.strip().splitlines()) == 1
