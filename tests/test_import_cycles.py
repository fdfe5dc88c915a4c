"""No import cycles among the course's own modules (helpers/ and tools/).

A cycle works until someone imports the modules in another order, or moves an import to the top of a file; then
one of them meets the other half-initialised. The imports are read with ``ast`` (nothing is imported): at the top
of a file or inside a function, ``import a.b`` and ``from a import b`` (an edge to the module ``a.b`` when it is
one, to the package ``a`` otherwise), relative imports resolved against the importing module's package. Imports
under ``if TYPE_CHECKING:`` never run and are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tools import course

PACKAGES = ("helpers", "tools")


def module_names(root: Path, packages=PACKAGES) -> dict[str, Path]:
    """Every module under ``packages`` by its dotted name (a package by its own name, for its ``__init__.py``)."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _runs(node: ast.AST) -> list[ast.AST]:
    """The nodes under ``node`` that run, leaving out ``if TYPE_CHECKING:`` blocks."""
    kept = []
    for child in ast.iter_child_nodes(node):
        test = child.test if isinstance(child, ast.If) else None
        if test is not None and "TYPE_CHECKING" in ast.unparse(test):
            kept += [n for s in child.orelse for n in [s, *_runs(s)]]
            continue
        kept += [child, *_runs(child)]
    return kept


def imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ``modules`` that the module ``name`` (at ``path``) imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in _runs(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = ".".join(filter(None, [base, node.module]))
            else:
                base = node.module
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {m for m in found if m in modules and m != name}


def find_cycle(modules: dict[str, Path]) -> list[str] | None:
    """One import cycle, as the modules along it (the first again at the end), or None."""
    graph = {name: sorted(imports(name, path, modules)) for name, path in modules.items()}
    state, stack = {}, []  # state: 1 while on the path being explored, 2 when done

    def visit(name):
        state[name] = 1
        stack.append(name)
        for other in graph[name]:
            if state.get(other) == 1:
                return stack[stack.index(other) :] + [other]
            if other not in state and (cycle := visit(other)):
                return cycle
        stack.pop()
        state[name] = 2
        return None

    for name in sorted(graph):
        if name not in state and (cycle := visit(name)):
            return cycle
    return None


def test_no_import_cycle_among_helpers_and_tools():
    modules = module_names(course.ROOT)
    assert {"helpers", "tools.cell_tags", "tools.slides", "helpers.exercises.ex01_cuda"} <= set(modules)
    cycle = find_cycle(modules)
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}"


def test_a_cycle_is_found_through_relative_and_late_imports(tmp_path):
    """The detector itself: a lazy import inside a function and relative ``from`` imports close a cycle."""
    (tmp_path / "tools" / "sub").mkdir(parents=True)
    files = {
        "tools/__init__.py": "",
        "tools/a.py": "from tools import b\n",
        "tools/b.py": "def f():\n    from .sub import c  # late\n",
        "tools/sub/__init__.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tools import a\n",
        "tools/sub/c.py": "from ..a import something\n",
        "tools/d.py": "import tools.a\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).write_text(text)
    modules = module_names(tmp_path, ["tools"])
    assert imports("tools.sub.c", modules["tools.sub.c"], modules) == {"tools.a"}
    assert imports("tools.sub", modules["tools.sub"], modules) == set(), "TYPE_CHECKING imports never run"
    assert find_cycle(modules) == ["tools.a", "tools.b", "tools.sub.c", "tools.a"]
    (tmp_path / "tools/b.py").write_text("def f():\n    from .sub import helper  # the package, not c\n")
    assert find_cycle(modules) is None
