"""A stand-in for a run that is killed midway: the tests of "a run stopped midway keeps what it
already wrote" (``cpgym dynamic``, ``cache-ablation``, ``faults``, ``evaluate``, ...) replace one run
function with it."""

from __future__ import annotations


def fail_on_call(real, n: int, message: str = "killed", exception: type[BaseException] = RuntimeError):
    """``real`` wrapped so that its ``n``-th call raises ``exception(message)`` instead of running
    (``KeyboardInterrupt`` for a Ctrl-C)."""
    calls = []

    def wrapped(*args, **kwargs):
        calls.append(1)
        if len(calls) == n:
            raise exception(message)
        return real(*args, **kwargs)

    return wrapped


def execute_cell_or_die(cell, out_dir: str) -> dict:
    """``experiments.sweep.execute.execute_cell``, except that a cell of the policy ``round-robin`` ends its
    worker process abruptly (``os._exit``, as the out-of-memory killer would) after it started (its
    ``.tmp`` folder exists). Module-level, so that a spawned pool worker can unpickle it."""
    import os
    from pathlib import Path

    from experiments.sweep.execute import execute_cell
    from experiments.sweep.manifest import TMP_DIR

    if cell.policy == "round-robin":
        (Path(out_dir) / TMP_DIR / cell.key).mkdir(parents=True, exist_ok=True)
        os._exit(9)
    return execute_cell(cell, out_dir)


def patch_everywhere(monkeypatch, module, name: str, replacement) -> None:
    """``monkeypatch.setattr(module, name, replacement)``, and the same in every loaded module that
    bound the original object under ``name`` at import (``from module import name``): project modules
    import what they use at module level, so patching the defining module alone would not reach them.
    Every project module is imported first: one first imported while the patch is active (a command
    module the CLI's parser loads) would keep the replacement after the test."""
    import importlib
    import pkgutil
    import sys

    packages = ("envs", "baselines", "benchmark", "policies", "experiments", "kernels_ref")
    for package in packages:
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, package + "."):
            importlib.import_module(info.name)

    original = getattr(module, name)
    monkeypatch.setattr(module, name, replacement)
    for other in list(sys.modules.values()):
        if (other is not module and getattr(other, "__name__", "").split(".")[0] in packages
                and getattr(other, name, None) is original):
            monkeypatch.setattr(other, name, replacement)
