"""A sweep keeps wandb's and Ray's files under its own output folder: nothing new in the home
or temporary directories (run in a subprocess with a fresh HOME and TMPDIR)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.experiments.conftest import write_spec

REPO = Path(__file__).resolve().parents[2]
SPEC = """
name: side-effects
workload: {name: mixed-default, params: {duration_s: 3.0}}
policies: [least-work]
seeds: [0]
"""


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _sweep_in_sandbox(tmp_path: Path, out: Path, *extra: str) -> Path:
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "XDG_", "RAY_"))}
    env.update(HOME=str(home), TMPDIR=str(tmp), PYTHONPATH=str(REPO), MPLCONFIGDIR=str(tmp_path / "mpl"))
    spec = write_spec(tmp_path, SPEC)
    proc = subprocess.run([sys.executable, "-m", "experiments.cli", "sweep", str(spec), "--out", str(out), "--quiet", *extra],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert _files(home) == [], "files written under HOME"
    assert _files(tmp) == [], "files left in TMPDIR"
    return out


@pytest.mark.slow
def test_wandb_files_stay_under_the_output_folder(tmp_path):
    pytest.importorskip("wandb")
    out = _sweep_in_sandbox(tmp_path, tmp_path / "o", "--jobs", "1", "--wandb", "offline")
    assert list((out / "wandb").glob("offline-run-*"))
    assert list((out / "wandb" / "cache").rglob("*.log"))  # wandb-core's debug logs


@pytest.mark.slow  # Ray start-up takes 10-20 s on a 2-core machine
def test_ray_files_stay_under_the_output_folder(tmp_path):
    pytest.importorskip("ray")
    import shutil
    import tempfile

    short = Path(tempfile.mkdtemp(prefix="cg", dir="/tmp"))  # Ray's Unix socket paths must stay < 108 bytes
    try:
        out = _sweep_in_sandbox(tmp_path, short / "o", "--jobs", "1", "--backend", "ray", "--wandb", "disabled")
        assert list((out / ".ray").glob("session_*"))
    finally:
        shutil.rmtree(short, ignore_errors=True)


def test_ray_temp_dir_inside_the_output_folder_when_the_path_allows(tmp_path):
    import shutil
    import tempfile

    from experiments.sweep.backends import _ray_temp_dir

    short = Path(tempfile.mkdtemp(prefix="cg", dir="/tmp"))
    try:
        assert _ray_temp_dir(str(short / "o")) == ((short / "o" / ".ray").resolve(), False)
    finally:
        shutil.rmtree(short, ignore_errors=True)
    deep = tmp_path / ("x" * 80)
    elsewhere, remove = _ray_temp_dir(str(deep))
    try:  # too long for Ray's Unix sockets: a temporary folder, removed by the sweep at the end
        assert remove and len(str(elsewhere)) + 75 <= 107 and not deep.exists()
    finally:
        shutil.rmtree(elsewhere, ignore_errors=True)
