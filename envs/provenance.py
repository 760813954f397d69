"""``provenance.json``: what produced a results folder (git commit, library versions, argv).

Every command that writes results calls :func:`write_provenance` once on its output folder, so
each folder records the code and environment that made its numbers.
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

__all__ = ["PROVENANCE_FILE", "git_commit", "provenance", "write_provenance"]

PROVENANCE_FILE = "provenance.json"
#: Distributions whose versions are recorded.
RECORDED_PACKAGES = ("cpgym", "numpy", "simpy", "torch", "gymnasium", "stable-baselines3", "sb3-contrib")
_REPO = Path(__file__).resolve().parents[1]


def git_commit(repo: str | Path = _REPO) -> tuple[str | None, bool | None]:
    """``(commit, dirty)`` of the checkout at ``repo`` from ``git rev-parse HEAD`` and
    ``git status --porcelain``; ``(None, None)`` when git or the repository is unavailable
    (e.g. an installed wheel)."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True,
                                check=True, timeout=10).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                                capture_output=True, text=True, check=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    return commit or None, bool(status.strip())


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def provenance(argv: list[str] | None = None, **extra) -> dict:
    """The provenance record: ``git_commit`` / ``git_dirty`` (``None`` without git), ``versions``
    (``python`` and each of :data:`RECORDED_PACKAGES`, ``None`` when not installed), ``argv``
    (default ``sys.argv``), ``platform``, ``created_utc`` (ISO 8601) and ``extra`` items."""
    commit, dirty = git_commit()
    versions = {"python": platform.python_version(), **{d: _version(d) for d in RECORDED_PACKAGES}}
    return {"git_commit": commit, "git_dirty": dirty, "versions": versions,
            "argv": list(sys.argv if argv is None else argv), "platform": platform.platform(),
            "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"), **extra}


def write_provenance(out_dir: str | Path, argv: list[str] | None = None, name: str = PROVENANCE_FILE, **extra) -> Path:
    """Writes :func:`provenance` to ``out_dir/name`` (default ``provenance.json``; creating
    ``out_dir``); returns the path.

    Raises:
        OSError: when the folder cannot be created or written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    path.write_text(json.dumps(provenance(argv, **extra), indent=2) + "\n")
    return path
