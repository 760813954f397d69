"""``cpgym`` exits normally (issue #43 item 10): it ended with ``os._exit``, so code after ``main``
never ran and ``python -m cProfile -o F $(which cpgym) simulate ...`` never wrote ``F``."""

from __future__ import annotations

import os
import pstats
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: what the ``cpgym`` console script runs
ENTRY = "import sys\nfrom experiments.cli import main\nsys.exit(main())\n"


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)


@pytest.mark.slow
def test_profiling_a_command_writes_the_profile(tmp_path):
    script = tmp_path / "cpgym"
    script.write_text(ENTRY)
    prof = tmp_path / "simulate.prof"
    res = _run(["-m", "cProfile", "-o", str(prof), str(script), "simulate", "--workload", "tool-agent", "--arrival-window-s",
                "0",
                "2", "--policy", "least-work", "--format", "json", "--quiet"], tmp_path)
    assert res.returncode == 0, res.stderr
    assert '"policy": "least-work"' in res.stdout
    stats = pstats.Stats(str(prof))
    assert any(name == "summarize" for _, _, name in stats.stats), "the profile misses the command's functions"


def test_code_after_main_runs_and_the_status_is_kept(tmp_path):
    code = ("import signal, sys\nfrom experiments.cli import main\nstatus = main()\n"
            "print('after main', status, signal.getsignal(signal.SIGINT) is signal.SIG_IGN)\nsys.exit(status)\n")
    res = _run(["-c", code, "simulate", "--list-policies"], tmp_path)
    assert res.returncode == 0, res.stderr
    # the teardown ignores a Ctrl-C (Python would reset its handler to the default: a silent kill)
    assert res.stdout.endswith("after main 0 True\n")
    bad = _run(["-c", code, "simulate", "--policy", "nosuch", "--quiet"], tmp_path)
    assert bad.returncode == 2 and bad.stdout == "after main 2 True\n"
    assert bad.stderr.startswith("cpgym simulate: error: ") and bad.stderr.count("\n") == 1, bad.stderr
