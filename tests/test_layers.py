"""The layering of ``../shared/DESIGN.md``: the import-linter contracts of ``pyproject.toml``, no
import cycle between project modules (imports inside functions counted), and a stated reason for
every import of a project module made inside a function."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("envs", "baselines", "benchmark", "policies", "experiments", "kernels_ref")
#: An import of a project module inside a function must say why on its line (or the line above):
#: ``# lazy: <heavy optional dependency it loads>``.
LAZY_REASON = re.compile(r"#\s*lazy:\s*\S")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for p in sorted((ROOT / pkg).rglob("*.py")):
            name = ".".join(p.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = p
    return out


def _project_module(name: str, modules) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imports(modules):
    """``(importer, imported, line, in_function)`` for every import statement of a project module
    (``if TYPE_CHECKING:`` blocks left out: they never run)."""
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        parents = {c: n for n in ast.walk(tree) for c in ast.iter_child_nodes(n)}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            chain, q = [], node
            while q in parents:
                q = parents[q]
                chain.append(q)
            if any(isinstance(q, ast.If) and "TYPE_CHECKING" in ast.unparse(q.test) for q in chain):
                continue
            in_function = any(isinstance(q, (ast.FunctionDef, ast.AsyncFunctionDef)) for q in chain)
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        pkg = pkg.rpartition(".")[0]
                    base = f"{pkg}.{base}" if node.module else pkg
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            for imported in {m for t in targets if (m := _project_module(t, modules)) and m != name}:
                yield name, imported, node, in_function


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_import_linter_contracts_hold():
    # `lint-imports --no-cache`, run by this interpreter (the console script may not be on PATH)
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    proc = subprocess.run([sys.executable, "-c", code, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_no_import_cycle_between_project_modules():
    modules = _modules()
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for importer, imported, _, _ in _imports(modules):
        edges[importer].add(imported)
    assert _cycles(edges) == []


def test_the_cycle_check_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_imports_inside_functions_state_their_reason():
    modules = _modules()
    missing = []
    for importer, imported, node, in_function in _imports(modules):
        if not in_function:
            continue
        lines = modules[importer].read_text(encoding="utf-8").splitlines()
        text = "\n".join(lines[max(node.lineno - 2, 0):node.end_lineno])
        if not LAZY_REASON.search(text):
            missing.append(f"{modules[importer].relative_to(ROOT)}:{node.lineno} imports {imported}")
    assert missing == [], "imports inside functions without '# lazy: <reason>':\n" + "\n".join(sorted(set(missing)))
