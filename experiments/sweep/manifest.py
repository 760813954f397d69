"""A sweep's output folder: its file names, the manifest, the one reader of its finished cells,
resume bookkeeping (which cells are finished, under which key, by which code) and the driver's
lock. The layout is described in :mod:`experiments.sweep`."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

from baselines.capacity import code_fingerprint
from experiments.common import write_text_atomic
from experiments.spec import Cell

MANIFEST = "manifest.json"
CELL_FILE = "cell.json"
TMP_DIR = ".tmp"


def _json_safe(x):
    import math

    import numpy as np

    if isinstance(x, dict):
        return {str(k): _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating, float)):
        return float(x) if math.isfinite(float(x)) else None
    if isinstance(x, np.ndarray):
        return _json_safe(x.tolist())
    if x is None or isinstance(x, (bool, int, str)):
        return x
    return str(x)


def write_json_atomic(path: Path, obj) -> None:
    """Writes JSON to ``path`` atomically (:func:`experiments.common.write_text_atomic`: readers never
    see half a file)."""
    write_text_atomic(path, json.dumps(_json_safe(obj), indent=2) + "\n")



#: The sources a cell's numbers depend on besides its key (simulator, policies, the run path).
CELL_CODE = ("envs", "baselines", "baselines/runner.py")


def cell_code_fingerprint() -> str:
    """SHA-256 of the sources of :data:`CELL_CODE` (``baselines.capacity.code_fingerprint``),
    recorded in each ``cell.json`` as ``code_sha256``: not part of the cell key (a resumed sweep
    reuses its cells), but compared on resume (:func:`outdated_cells`)."""
    return code_fingerprint(CELL_CODE)


def outdated_cells(out_dir: str | Path, keys) -> list[str]:
    """Run folders under ``out_dir`` of the finished cells among ``keys`` that other code computed
    (their ``cell.json`` records another ``code_sha256``; a cell from before that field counts as
    current), in folder order."""
    code = cell_code_fingerprint()
    keys = set(keys)
    return [d.name for d, doc in finished_cells(out_dir) if doc["key"] in keys and doc.get("code_sha256") not in (None, code)]



def _manifest_cells(out_dir: str | Path) -> dict | None:
    """The ``cells`` object of ``out_dir``'s ``manifest.json``, or ``None`` when it has no readable
    manifest of that shape (a sweep rebuilds it from the run folders)."""
    try:
        doc = json.loads((Path(out_dir) / MANIFEST).read_text())
    except (ValueError, OSError):
        return None
    cells = (doc.get("cells") or {}) if isinstance(doc, dict) else None
    return cells if isinstance(cells, dict) else None


def _manifest_legacy_keys(cells: dict) -> dict[str, str]:
    """``{cell key: legacy key}`` of the manifest ``cells`` found under a legacy key (:func:`match_finished`)."""
    return {k: e["legacy_key"] for k, e in cells.items() if isinstance(e, dict) and isinstance(e.get("legacy_key"), str)}


def manifest_cell_keys(out_dir: str | Path) -> set[str] | None:
    """The cell keys that ``out_dir``'s ``manifest.json`` lists (``cpgym sweep`` rewrites it with
    the cells of the spec it runs), or ``None`` when it has no readable manifest. A spec edited
    and run again into the same ``--out`` leaves the old cells' folders there; they are not cells
    of the sweep any more (``cpgym report`` and the sweep analyses leave them out). A cell found
    under its legacy key (:func:`match_finished`) is listed by that key too: its ``cell.json`` holds it."""
    cells = _manifest_cells(out_dir)
    if cells is None:
        return None
    return set(cells) | set(_manifest_legacy_keys(cells).values())


def finished_cells(out_dir: str | Path, strict: bool = False, current_only: bool = False) -> Iterator[tuple[Path, dict]]:
    """``(run folder, cell document)`` of every finished cell directly under ``out_dir``, in
    folder-name order: the one reader of a sweep's output folder (``cell.json`` is written last,
    so its presence marks a finished cell; dot-folders are cells still running).

    A ``cell.json`` that is not a JSON object with a ``key`` string is skipped (a stray file, not a cell
    of this harness; the sweep then runs that cell again), or with ``strict`` (analyses of the
    results, which must not silently drop a run) an error. With ``current_only`` (analyses) the
    cells that the folder's manifest no longer lists (:func:`manifest_cell_keys`) are left out.
    A missing ``out_dir`` yields nothing.

    Raises:
        ValueError: with ``strict``, naming the ``cell.json`` that is not a cell document.
    """
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        return
    keys = manifest_cell_keys(out_dir) if current_only else None
    for d in sorted(out_dir.iterdir()):
        if d.name.startswith(".") or not d.is_dir():
            continue
        f = d / CELL_FILE
        if not f.is_file():
            continue
        try:
            doc = json.loads(f.read_text())
        except (ValueError, OSError) as exc:
            if strict:
                raise ValueError(f"{f}: not a readable JSON cell document ({exc})") from None
            continue
        if isinstance(doc, dict) and isinstance(doc.get("key"), str) and doc["key"]:
            if keys is None or doc["key"] in keys:
                yield d, doc
        elif strict:
            raise ValueError(f"{f}: expected a JSON object with a \"key\" string (the cell document `cpgym sweep` writes)")


def scan_finished(out_dir: Path) -> dict[str, str]:
    """``{cell key: run folder name}`` of the finished cells under ``out_dir``
    (:func:`finished_cells`)."""
    return {doc["key"]: d.name for d, doc in finished_cells(out_dir)}


def match_finished(cells: list[Cell], out_dir: str | Path) -> tuple[dict[str, str], dict[str, str]]:
    """The finished cells under ``out_dir`` as the cells of a spec see them: ``({key: run folder
    name}, {cell key: legacy key})``. A folder written before cell keys left out file paths holds
    the cell's :attr:`~experiments.spec.model.Cell.legacy_key` (hashed with this checkout's
    absolute paths); it counts as that cell, under the cell's key, and the second mapping says
    which cells were found so. The other keys of the first mapping are finished cells of no cell
    (stale folders).

    A folder's manifest remembers the legacy key under which a resume at the old location found a
    cell (``legacy_key`` of its entry), so the folder moved later (another checkout or traces
    folder: other absolute paths, another ``Cell.legacy_key``) still counts as that cell."""
    finished = scan_finished(Path(out_dir))
    recorded = _manifest_legacy_keys(_manifest_cells(out_dir) or {})
    legacy: dict[str, str] = {}
    for c in cells:
        if c.key in finished:
            continue
        for old in (c.legacy_key, recorded.get(c.key)):
            if old is not None and old in finished:
                finished[c.key] = finished.pop(old)
                legacy[c.key] = old
                break
    return finished, legacy



def read_manifest(path: Path, sweep: str) -> dict:
    """The previous manifest (``{}`` if missing or unreadable, e.g. not a JSON object: it is rebuilt
    from the run folders); its ``cells`` entries that are not objects are left out.

    Raises:
        ValueError: it belongs to another sweep.
    """
    if not path.is_file():
        return {}
    try:
        old = json.loads(path.read_text())
    except ValueError:
        return {}
    if not isinstance(old, dict):
        return {}
    cells = old.get("cells")
    old["cells"] = {k: e for k, e in cells.items() if isinstance(e, dict)} if isinstance(cells, dict) else {}
    if old.get("sweep") not in (None, sweep):
        raise ValueError(f"{path.parent} holds sweep {old.get('sweep')!r}, not {sweep!r}; choose another --out")
    return old


def initial_entries(cells: list[Cell], old: dict, finished: dict[str, str],
                     legacy: dict[str, str] | None = None) -> dict[str, dict]:
    """Manifest entries at start: finished cells from the run folders (the source of truth), failed
    ones from the old manifest (retried), the rest pending; wandb bookkeeping is carried over. A
    cell found under its legacy key (``legacy``, :func:`match_finished`) records it as
    ``legacy_key`` (what its ``cell.json`` holds, :func:`manifest_cell_keys`)."""
    entries: dict[str, dict] = {}
    old_cells = old.get("cells") or {}
    for c in cells:
        prev = old_cells.get(c.key) or old_cells.get(c.legacy_key) or {}
        base = {"axes": dict(c.axes), "policy": c.policy, "seed": c.config.seed, "workload": c.workload.label}
        if c.key in finished:
            logged = prev.get("wandb_logged", False) and prev.get("run_dir") == finished[c.key]
            entries[c.key] = {**base, "status": "done", "run_dir": finished[c.key], "error": None,
                              "wall_s": prev.get("wall_s"), "wandb_logged": bool(logged)}
            if legacy and c.key in legacy:
                entries[c.key]["legacy_key"] = legacy[c.key]
        elif prev.get("status") == "failed":
            entries[c.key] = {**base, "status": "failed", "run_dir": None, "error": prev.get("error"),
                              "wall_s": prev.get("wall_s")}
        else:
            entries[c.key] = {**base, "status": "pending", "run_dir": None, "error": None, "wall_s": None}
    return entries



#: What a sweep writes directly in its folder besides the cell folders (``report``: ``cpgym report``).
_SWEEP_ENTRIES = (MANIFEST, "sweep.json", "provenance.json", TMP_DIR, "wandb", "report")


def foreign_entries(out: Path) -> list[str]:
    """Names in ``out`` that no sweep wrote, when ``out`` is not a sweep's folder (no manifest.json,
    no sweep.json): a sweep there would overwrite e.g. another command's ``provenance.json`` and mix
    its cells with whatever runs the folder holds. Hidden names (``.lock``, ``.ray``, temporary
    files) and cell folders (a ``cell.json``: a sweep whose manifest was lost) are a sweep's."""
    if not out.is_dir() or (out / MANIFEST).exists() or (out / "sweep.json").exists():
        return []
    return sorted(p.name for p in out.iterdir()
                  if not (p.name in _SWEEP_ENTRIES or p.name.startswith(".") or (p / CELL_FILE).is_file()))



def lock_out_dir(out: Path):
    """Takes an exclusive lock on ``out/.lock`` for this driver's lifetime (released by the OS when
    the driver ends, however it ends), so two drivers never run cells of one folder at once.

    Returns:
        the open lock file (keep it open), or ``None`` where ``fcntl`` is missing (Windows).

    Raises:
        ValueError: another driver holds the folder.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        return None
    fh = open(out / ".lock", "a+")
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.seek(0)
        holder = fh.read().strip() or "?"
        fh.close()
        raise ValueError(f"{out} is in use by another sweep driver (pid {holder}); wait for it or stop it first") from None
    fh.seek(0)
    fh.truncate()
    fh.write(f"{os.getpid()}\n")
    fh.flush()
    return fh

