"""Lazy package attributes (PEP 562): a package's public names load their module on first use, so
``import envs.sim`` / ``import envs.workloads`` stay cheap for the CLI's start-up."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Mapping


def lazy_attributes(package: str, exports: Mapping[str, str], public: list[str]) -> tuple[Callable, Callable]:
    """``(__getattr__, __dir__)`` for ``package``: a name of ``exports`` (name -> sub-module) or a
    sub-module (``pkg.traces`` after ``import pkg``, as when the package imported every sub-module),
    loaded on first use. Not cached in the package: a test that patches the sub-module's name
    patches the package's too.

    Raises (from ``__getattr__``):
        AttributeError: for any other name.
    """

    def __getattr__(name: str):
        if name in exports:
            return getattr(importlib.import_module(f"{package}.{exports[name]}"), name)
        if not name.startswith("_") and importlib.util.find_spec(f"{package}.{name}") is not None:
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        import sys

        return sorted(set(vars(sys.modules[package])) | set(public))

    return __getattr__, __dir__
