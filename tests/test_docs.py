"""The documentation site builds with warnings as errors, its references follow the code, and
the tutorials' code runs.

The build (``sphinx-build -W --keep-going -b html docs OUT``) takes about a minute of CPU, so it
is ``slow``; a broken page, link target, docstring or directive fails it. The tutorials' quick
blocks run in the default run, their ``<!-- slow -->`` blocks (real training budgets, the honest
protocol) with ``-m slow``; the blocks of one page run in order in one folder, as a reader runs
them (a later block may use an earlier one's ``runs/`` output).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import re
import subprocess
import sys
import tomllib

import pytest

from experiments.cli import build_parser
from tests.doc_code import REPO, code_blocks, run_block

DOCS = REPO / "docs"
#: Pages whose code is run (the other pages' ``cpgym`` commands are parsed by
#: tests/experiments/test_outputs_and_help.py): the tutorials and any page with Python code.
RUN_PAGES = sorted({*DOCS.glob("tutorials/*.md"),
                    *(p for p in DOCS.rglob("*.md") if any(b.lang == "python" for b in code_blocks(p)))})


def _page_id(path):
    return str(path.relative_to(DOCS))


@pytest.mark.parametrize("page", RUN_PAGES, ids=_page_id)
def test_page_quick_code_runs(page, tmp_path):
    blocks = [b for b in code_blocks(page) if b.runnable and not b.slow]
    for block in blocks:
        run_block(block, tmp_path, timeout_s=600)


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in RUN_PAGES if any(b.slow for b in code_blocks(p))], ids=_page_id)
def test_page_all_code_runs(page, tmp_path):
    for block in (b for b in code_blocks(page) if b.runnable):
        run_block(block, tmp_path, timeout_s=4 * 3600)


def test_every_tutorial_has_code_that_a_test_runs():
    """Each tutorial has runnable code: quick blocks run in the default run, ``<!-- slow -->`` ones
    (training, sweeps) with ``-m slow``."""
    tutorials = sorted(DOCS.glob("tutorials/*.md"))
    assert len(tutorials) >= 4
    assert all(any(b.runnable for b in code_blocks(p)) for p in tutorials)


def test_api_reference_covers_the_top_level_packages():
    """The API page lists exactly the import-linter root packages; autosummary recurses from them."""
    roots = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"]
    api = (DOCS / "api.md").read_text()
    listed = re.findall(r"^   (\w+)$", api, re.M)
    assert sorted(listed) == sorted(roots) and ":recursive:" in api


def _command_paths(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                out.append((*path, name))
                out.extend(_command_paths(child, (*path, name)))
    return out


def _modules(package: str) -> list[str]:
    pkg = importlib.import_module(package)
    return [package] + [m.name for m in pkgutil.walk_packages(pkg.__path__, package + ".")]


@pytest.mark.slow
def test_docs_build_without_warnings(tmp_path):
    out = tmp_path / "html"
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS), str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-6000:]
    # the CLI reference shows every command, group member, nested sub-command and alias
    cli = (out / "cli-reference.html").read_text()
    paths = _command_paths(build_parser())
    assert len(paths) >= 20
    missing = [" ".join(p) for p in paths if f'id="cpgym-{"-".join(p)}"' not in cli]
    assert not missing, missing
    # one API page per module of every top-level package
    roots = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"]
    pages = {p.stem for p in (out / "api").glob("*.html")}
    missing = [m for r in roots for m in _modules(r) if m not in pages]
    assert not missing, missing
