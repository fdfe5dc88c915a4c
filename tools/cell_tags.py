"""The cell-tag convention: the tests' scaffolding stays in every notebook, out of the learner's way.

    python tools/cell_tags.py            # apply it to every notebook (lessons and solutions), in place
    python tools/cell_tags.py --check    # name the cells that do not follow it; exit 1 if any (a test runs this)

1. nbval's markers are cell tags, never comments in the source: ``nbval-ignore-output`` (output that depends on
   the hardware), ``nbval-skip``, ``raises-exception``. Jupyter, nbval and the site read tags; a learner does
   not have to read a marker line.
2. A code cell that only checks (``assert`` statements, possibly under ``if``/``for``/``with``) and shows no
   output is scaffolding: tagged ``remove-cell`` (a rendered page drops it), collapsed in JupyterLab
   (``"jupyter": {"source_hidden": true}``) and skipped in slides (``"slideshow": {"slide_type": "skip"}``).
   Every such cell is marked, and only such cells. A one-line assert that states the lesson's fact stays
   visible inside the cell it checks.
3. Every cell has its slide type and every notebook its presentation options, by the rule of tools/slides.py
   (``apply`` and ``problems`` below apply and check it too).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import nbformat

from tools import course, slide_rule

MARKERS = {  # nbval's comment markers and the tags that replace them
    "# NBVAL_IGNORE_OUTPUT": "nbval-ignore-output",
    "# NBVAL_SKIP": "nbval-skip",
    "# NBVAL_RAISES_EXCEPTION": "raises-exception",
}
SCAFFOLDING = "remove-cell"
HIDDEN = {"source_hidden": True}
SKIP = {"slide_type": "skip"}


def _only_checks(statements: list[ast.stmt]) -> bool:
    for s in statements:
        if isinstance(s, ast.Assert | ast.Pass):
            continue
        if isinstance(s, ast.If) and _only_checks(s.body) and _only_checks(s.orelse):
            continue
        if isinstance(s, ast.For | ast.With) and _only_checks(s.body) and not getattr(s, "orelse", None):
            continue
        return False
    return True


def is_scaffolding(cell) -> bool:
    """A code cell made only of checks, with no stored output."""
    if cell.cell_type != "code" or cell.get("outputs"):
        return False
    source = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    return bool(tree.body) and _only_checks(tree.body)


def assert_lines(cell) -> int:
    """How many source lines of a code cell belong to ``assert`` statements."""
    try:
        tree = ast.parse(cell.source)
    except SyntaxError:
        return 0
    return sum(node.end_lineno - node.lineno + 1 for node in ast.walk(tree) if isinstance(node, ast.Assert))


def is_hidden(cell) -> bool:
    return SCAFFOLDING in cell.metadata.get("tags", [])


def apply(nb) -> None:
    """Bring a notebook to the convention, in place."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        tags = list(cell.metadata.get("tags", []))
        lines = cell.source.splitlines()
        for marker, tag in MARKERS.items():
            if any(line.strip() == marker for line in lines):
                lines = [line for line in lines if line.strip() != marker]
                tags += [tag] if tag not in tags else []
        cell.source = "\n".join(lines)
        if is_scaffolding(cell):
            tags += [SCAFFOLDING] if SCAFFOLDING not in tags else []
            cell.metadata["jupyter"] = {**cell.metadata.get("jupyter", {}), **HIDDEN}
            cell.metadata["slideshow"] = {**cell.metadata.get("slideshow", {}), **SKIP}
        elif SCAFFOLDING in tags:
            tags.remove(SCAFFOLDING)
            cell.metadata.get("jupyter", {}).pop("source_hidden", None)
            if cell.metadata.get("slideshow") == SKIP:
                del cell.metadata["slideshow"]
        if tags:
            cell.metadata["tags"] = tags
        else:
            cell.metadata.pop("tags", None)
        if cell.metadata.get("jupyter") == {}:
            del cell.metadata["jupyter"]
    slide_rule.apply(nb, is_hidden)


def problems(nb, name: str = "") -> list[str]:
    """What in a notebook breaks the convention (empty when it follows it)."""
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        where = f"{name} cell {i}"
        for marker, tag in MARKERS.items():
            if any(line.strip() == marker for line in cell.source.splitlines()):
                found.append(f"{where}: the comment {marker!r} in the source; tag the cell {tag!r} instead")
        if is_scaffolding(cell) and not is_hidden(cell):
            found.append(f"{where}: only checks, but is not tagged {SCAFFOLDING!r}")
        if is_hidden(cell) and not is_scaffolding(cell):
            found.append(f"{where}: tagged {SCAFFOLDING!r} but is not a check-only cell without output")
        if is_hidden(cell) and (cell.metadata.get("jupyter") != HIDDEN or cell.metadata.get("slideshow") != SKIP):
            found.append(f"{where}: scaffolding must be collapsed and skipped in slides too")
    return found + slide_rule.problems(nb, is_hidden, name)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    found = []
    for path in course.all_notebooks():
        nb = nbformat.read(path, as_version=4)
        if check:
            found += problems(nb, course.repo_path(path))
            continue
        before = nbformat.writes(nb)
        apply(nb)
        if nbformat.writes(nb) != before:
            nbformat.write(nb, path)
            print(f"rewrote {course.repo_path(path)}")
    for line in found:
        print(line)
    if found:
        print("Run: python tools/cell_tags.py")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
