"""Installation: cpgym accepts any torch 2.x (so it can share an environment with an installed,
e.g. CUDA, torch), while CI still installs torch==2.13.0 first."""

from __future__ import annotations

import json
import re
import site
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]


def _torch_requirement() -> Requirement:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    (req,) = [Requirement(d) for d in deps if Requirement(d).name == "torch"]
    return req


@pytest.mark.parametrize("version", ["2.1.0", "2.5.1+cu121", "2.9.0", "2.13.0", "2.13.0+cpu", "2.14.1+cu128"])
def test_torch_requirement_accepts_any_torch_2(version):
    assert _torch_requirement().specifier.contains(version, prereleases=False)


@pytest.mark.parametrize("version", ["1.13.1", "2.0.1", "3.0.0"])
def test_torch_requirement_rejects_other_majors(version):
    assert not _torch_requirement().specifier.contains(version)


def test_ci_installs_the_tested_torch_first():
    ci = (REPO / ".ci" / "run").read_text()
    assert re.search(r"^pip install torch==2\.13\.0\b[^\n]*\n(.*\n)*?pip install -e \"\.\[dev\]\"", ci, re.M)
    readme = (REPO / "README.md").read_text()
    install = (REPO / "docs" / "install.md").read_text()
    assert "pip install torch==2.13.0 && pip install -e" in readme  # the wheel CI installs, first
    assert "download.pytorch.org/whl/cpu" in install and "Choosing the torch build" in install


@pytest.mark.slow
def test_editable_install_keeps_an_installed_torch(tmp_path):
    """``pip install --dry-run -e .`` (offline) in a venv that sees this environment's packages
    plus a different torch 2.x: pip would install cpgym only, no torch."""
    import torch

    major, minor = Version(torch.__version__).release[:2]
    other = f"{major}.{minor - 1}.0"  # another torch 2.x that the installed packages also accept
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    purelib = Path(subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  check=True, capture_output=True, text=True).stdout.strip())
    (purelib / "outer.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    dist = purelib / f"torch-{other}.dist-info"  # first on sys.path: pip sees this torch
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {other}\n")
    (dist / "INSTALLER").write_text("pip\n")
    report = tmp_path / "report.json"
    proc = subprocess.run([py, "-m", "pip", "install", "--dry-run", "--no-index", "--no-build-isolation", "--quiet",
                           "--report", str(report), "-e", str(REPO)], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0 and "No matching distribution" in proc.stderr:
        pytest.skip(f"this environment lacks a dependency offline: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, proc.stderr
    installs = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.loads(report.read_text())["install"]}
    assert "torch" not in installs, installs
    assert set(installs) == {"cpgym"}
