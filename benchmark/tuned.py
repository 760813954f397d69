"""Stored tuned parameters of the heuristics, per task (issue #39, "Baselines tuned as hard as
anything learned").

One JSON file per task, ``benchmark/tuned/<task id with / replaced by __>.json`` (package data),
written by ``cpgym benchmark tune`` and read only through :func:`load_tuned`::

    {"task": "routing/conversation-0.9-v1",
     "policies": {"vertumnus-router": {"params": {"beta": 4.0, "lambda": 2.0}, ...}}}

Every key besides ``params`` (the search record, trial budget, ...) belongs to the tuner and is
not read here. ``tuned:NAME`` in a benchmark SPEC is ``get_policy(NAME).with_params(**params)``.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from benchmark.tasks import Task


def tuned_dir() -> Path:
    """The folder of the stored files (``benchmark/tuned/``)."""
    return Path(str(resources.files("benchmark").joinpath("tuned")))


def tuned_file(task: Task, folder: Path | None = None) -> Path:
    """``<folder>/<task id with / replaced by __>.json`` (folder: :func:`tuned_dir`)."""
    return (folder or tuned_dir()) / (task.id.replace("/", "__") + ".json")


def load_tuned(task: Task, name: str, folder: Path | None = None) -> dict | None:
    """The stored tuned parameters of policy ``name`` on ``task`` (``{"beta": 4.0, ...}``), or
    ``None`` when the task has no file or the file has no entry for ``name``.

    Raises:
        ValueError: naming the file, when it is not JSON of the module docstring's format (another
            task's file, no ``policies`` object, an entry without a ``params`` object).
    """
    path = tuned_file(task, folder)
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("task") != task.id or not isinstance(doc.get("policies"), dict):
        raise ValueError(f"{path}: expected {{\"task\": {task.id!r}, \"policies\": {{NAME: {{\"params\": {{...}}}}}}}}")
    entry = doc["policies"].get(name)
    if entry is None:
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get("params"), dict):
        raise ValueError(f"{path}: policies.{name} has no 'params' object")
    return dict(entry["params"])
