"""The code of the README and of the docs pages, as ``tests/test_readme.py`` and
``tests/test_docs.py`` run it.

A page's code is its fenced blocks: ``bash`` lines that start with ``cpgym`` (continuations
joined, trailing ``# comments`` dropped) and ``python`` blocks. A block right after a
``<!-- slow -->`` line is long-running: it runs only in the slow test run (``-m slow``), every
other block in the default run. Output paths under ``runs/`` are redirected into the test's
temporary folder, so a run never writes into the checkout.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SLOW_MARKER = "<!-- slow -->"
_FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page: ``line`` is the fence's line number (1-based)."""

    path: Path
    line: int
    lang: str
    code: str
    slow: bool

    @property
    def label(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"

    def commands(self) -> list[str]:
        """The ``cpgym ...`` command lines of a ``bash`` block (none for other languages)."""
        if self.lang != "bash":
            return []
        out = []
        for line in self.code.replace("\\\n", " ").splitlines():
            line = re.split(r"\s#", line)[0].strip()
            if line == "cpgym" or line.startswith("cpgym "):
                out.append(line)
        return out

    @property
    def runnable(self) -> bool:
        return self.lang == "python" or bool(self.commands())


def code_blocks(path: Path) -> list[Block]:
    """Every top-level fenced block of ``path`` with a language (MyST directives such as
    ``{toctree}`` and indented blocks inside list items are not code)."""
    text = path.read_text(encoding="utf-8")
    blocks = []
    for m in _FENCE.finditer(text):
        before = text[:m.start()].rstrip("\n").splitlines()
        slow = bool(before) and before[-1].strip() == SLOW_MARKER
        blocks.append(Block(path, text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2), slow))
    return blocks


def _cpgym() -> list[str]:
    exe = shutil.which("cpgym", path=str(Path(sys.executable).parent))
    if exe:
        return [exe]
    return [sys.executable, "-c", "import sys; from experiments.cli import main; sys.exit(main())"]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "disabled", "WANDB_SILENT": "true"}


def command_argv(command: str, out_dir: Path) -> list[str]:
    """``command``'s arguments (without ``cpgym``), ``runs/...`` paths moved under ``out_dir``."""
    return [str(out_dir / a) if a.startswith("runs/") else a for a in shlex.split(command)[1:]]


def command_cwd(command: str, out_dir: Path) -> Path:
    """Where ``command`` runs: the repository, except ``cpgym benchmark ...`` and ``cpgym evaluate``,
    whose test-split ledger, leaderboard entries and leaderboard default to ``results/benchmark/``
    under the working folder: a documented command must not write into the repository's."""
    words = shlex.split(command)[1:2]
    return out_dir if words in (["benchmark"], ["evaluate"]) else REPO


def run_block(block: Block, out_dir: Path, timeout_s: float) -> None:
    """Runs ``block`` (its ``cpgym`` commands in order, or its Python code) and fails with the
    command and its stderr on a non-zero exit status."""
    if block.lang == "python":
        proc = subprocess.run([sys.executable, "-c", block.code], cwd=out_dir, env=_env(), capture_output=True,
                              text=True, timeout=timeout_s)
        assert proc.returncode == 0, f"{block.label}: python block failed\n{proc.stderr[-4000:]}"
        return
    for command in block.commands():
        proc = subprocess.run([*_cpgym(), *command_argv(command, out_dir)], cwd=command_cwd(command, out_dir), env=_env(),
                              capture_output=True, text=True, timeout=timeout_s)
        assert proc.returncode == 0, f"{block.label}: `{command}` exited {proc.returncode}\n{proc.stderr[-4000:]}"
