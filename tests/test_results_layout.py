"""``results/`` is organised by experiment: no folder named after an issue, every folder holding
result files has a ``provenance.json``, no scripts among the data, and the seed folders of a
multi-seed experiment are laid out evenly."""

from __future__ import annotations

import json
import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"
DOCS = {"README.md", "provenance.json"}


def _folders():
    return [d for d in [RESULTS, *RESULTS.rglob("*")] if d.is_dir()]


def test_no_folder_is_named_after_an_issue():
    assert not [d for d in _folders() if re.fullmatch(r"issue[-_]?\d+", d.name, re.IGNORECASE)]


def test_every_folder_with_results_has_provenance():
    missing = [str(d.relative_to(RESULTS)) for d in _folders()
               if any(f.is_file() and f.name not in DOCS for f in d.iterdir()) and not (d / "provenance.json").is_file()]
    assert not missing
    for f in RESULTS.rglob("provenance.json"):
        rec = json.loads(f.read_text())
        assert rec["git_commit"] and ("versions" in rec) and ("argv" in rec or "commands" in rec), f


def test_no_scripts_among_the_data():
    assert not [f for f in RESULTS.rglob("*") if f.suffix in (".py", ".sh")]


def test_seed_folders_are_even():
    for d in _folders():
        seeds = sorted(c.name for c in d.iterdir() if c.is_dir() and re.fullmatch(r"seed\d+", c.name))
        if seeds:
            assert seeds == [f"seed{i}" for i in range(len(seeds))], d
            names = [sorted(f.name for f in (d / s).iterdir() if f.suffix != ".png") for s in seeds]
            assert all(n == names[0] for n in names), d
            assert not [f for f in d.iterdir() if f.is_file() and f.name not in DOCS], d  # nothing of one seed at the top
