"""The cell-tag convention: the tests' scaffolding stays in every notebook, out of the learner's way.

    python tools/cell_tags.py            # apply it to every notebook (lessons and solutions), in place
    python tools/cell_tags.py --check    # name the cells that do not follow it; exit 1 if any (a test runs this)

1. nbval's markers are cell tags, never comments in the source: ``nbval-ignore-output`` (output that depends on
   the hardware), ``nbval-skip``, ``raises-exception``. Jupyter, nbval and the site read tags; a learner does
   not have to read a marker line.
2. A code cell that only checks and shows no output is scaffolding. A check is an ``assert``, a
   ``raise AssertionError(...)`` (``if not ok: raise AssertionError(...)``), a check call (``run.check()``,
   ``check_x(...)``, ``torch.testing.assert_close(...)``), an expected error (``try: f(); raise
   AssertionError(...)`` with checks in its ``except``), or an ``if``/``for``/``while``/``with`` block of those;
   comments do not count, and a check cell may bind names for its checks (``cuda_build = ...``) after its first
   check, as long as no cell below needs them. A cell that opens with code is a lesson. Scaffolding is tagged
   ``remove-cell`` (a rendered page drops it), collapsed in JupyterLab (``"jupyter": {"source_hidden": true}``)
   and skipped in slides (``"slideshow": {"slide_type": "skip"}``).
   Every such cell is marked, and only such cells. A one-line assert that states the lesson's fact stays
   visible inside the cell it checks; a shown cell of which half the code lines are checks (``mostly_checks``)
   is split: its lesson lines stay, its checks go into the next cell. An exercise's verdict
   (``assert check.some_exercise(fn)``, which prints) is not a check: the learner reads it.
3. Every cell has its slide type and every notebook its presentation options, by the rule of tools/slide_rule.py
   (``apply`` and ``problems`` below apply and check it too).
"""

from __future__ import annotations

import ast
import re
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


def _name(node: ast.expr) -> str:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def _is_check_call(node: ast.expr) -> bool:
    """A call whose only business is to check: ``run.check()``, ``check_x(...)``, ``torch.testing.assert_close``."""
    if not isinstance(node, ast.Call):
        return False
    name = _name(node.func)
    return name == "check" or name.startswith(("check_", "assert"))


def _is_verdict(node: ast.expr) -> bool:
    """An exercise check, ``check.some_exercise(fn)``: it prints its verdict, which the learner reads."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _name(node.func.value) == "check"


def _raises_assertion(s: ast.stmt) -> bool:
    exc = s.exc.func if isinstance(s, ast.Raise) and isinstance(s.exc, ast.Call) else getattr(s, "exc", None)
    return isinstance(s, ast.Raise) and isinstance(exc, ast.Name) and exc.id == "AssertionError"


def _constant(s: ast.stmt) -> bool:
    """An assignment of a literal (``KNOWN_WORDINGS = ("...", "...")``)."""
    try:
        return (
            isinstance(s, ast.Assign | ast.AnnAssign) and s.value is not None and ast.literal_eval(s.value) is not None
        )
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return False


def _bound(targets) -> set[str]:
    """The plain names an assignment binds (``x``, ``a, b``); empty when it writes into an object (``x[0]``)."""
    names = set()
    for t in targets:
        if isinstance(t, ast.Name):
            names.add(t.id)
        elif isinstance(t, ast.Tuple | ast.List | ast.Starred):
            inner = _bound(t.elts if not isinstance(t, ast.Starred) else [t.value])
            if not inner:
                return set()
            names |= inner
        else:
            return set()
    return names


class _Checks:
    """Reads a cell's statements: which ones check (``assert``, ``raise AssertionError``, a check call, the
    expect-an-error idiom ``try: ...; raise AssertionError(...) except Error: <checks>``, and ``if``/``for``/
    ``while``/``with`` blocks of those), and which names the statements around them bind to feed the checks."""

    def __init__(self):
        self.checks = 0
        self.bound: set[str] = set()  # names bound by assignments, imports and ``with ... as``

    def only_checks(self, statements: list[ast.stmt], top: bool = False) -> bool:
        """Every statement checks or supports the checks. At the top of a cell, a name is bound for the checks
        only after a first check (or when it is a constant): a cell that opens with code is a lesson."""
        for s in statements:
            opening = top and not self.checks and not _constant(s)
            if opening and isinstance(s, ast.Assign | ast.AnnAssign | ast.AugAssign) or not self.is_check_or_support(s):
                return False
        return True

    def is_check(self, s: ast.stmt) -> bool:
        """Whether the statement checks and does nothing else (counted)."""
        if (
            isinstance(s, ast.Assert)
            and not _is_verdict(s.test)
            or _raises_assertion(s)
            or isinstance(s, ast.Expr)
            and _is_check_call(s.value)
        ):
            self.checks += 1
            return True
        if isinstance(s, ast.Try | ast.TryStar):
            expects_error = any(_raises_assertion(x) for x in s.body + s.orelse)
            checked = all(self.only_checks(h.body) for h in s.handlers) and self.only_checks(s.finalbody)
            if expects_error and checked:  # the code in ``try`` is what the check runs
                self.checks += 1
                return True
            return False
        if isinstance(s, ast.If | ast.For | ast.AsyncFor | ast.While | ast.With | ast.AsyncWith):
            before = self.checks
            if isinstance(s, ast.With | ast.AsyncWith):
                self.bound |= _bound([i.optional_vars for i in s.items if i.optional_vars is not None])
            return self.only_checks(s.body + getattr(s, "orelse", [])) and self.checks > before
        return False

    def is_check_or_support(self, s: ast.stmt) -> bool:
        if isinstance(s, ast.Pass | ast.Delete) or isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant):
            return True
        if isinstance(s, ast.Assign | ast.AnnAssign | ast.AugAssign):
            names = _bound(s.targets if isinstance(s, ast.Assign) else [s.target])
            self.bound |= names
            return bool(names)
        if isinstance(s, ast.Import | ast.ImportFrom):
            self.bound |= {(a.asname or a.name).split(".")[0] for a in s.names}
            return True
        return self.is_check(s)


def _parse(source: str) -> ast.Module | None:
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
    try:
        return ast.parse(code)
    except SyntaxError:
        return None


def needed_names(source: str) -> set[str]:
    """The names a cell reads before it binds them itself: what it needs from the cells above."""
    tree = _parse(source)
    if tree is None:  # not Python: every word it holds may be a name
        return set(re.findall(r"[A-Za-z_]\w*", source))
    names = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Name)), key=lambda n: (n.lineno, n.col_offset))
    stored, needed = set(), set()
    for n in names:
        if isinstance(n.ctx, ast.Load) and n.id not in stored:
            needed.add(n.id)
        elif isinstance(n.ctx, ast.Store):
            stored.add(n.id)
    return needed


def is_scaffolding(cell, needed_later: set[str] = frozenset()) -> bool:
    """A code cell made only of checks, with no stored output: every statement checks, or binds a name that only
    the cell itself reads (``needed_later``: the names the cells below need from above them)."""
    if cell.cell_type != "code" or cell.get("outputs"):
        return False
    tree = _parse(cell.source)
    if tree is None or not tree.body:
        return False
    reader = _Checks()
    if not reader.only_checks(tree.body, top=True) or not reader.checks:
        return False
    return not reader.bound & set(needed_later)


def check_lines(cell) -> int:
    """How many source lines of a code cell are checks (see ``_Checks``), the lines of their blocks included."""
    tree = _parse(cell.source) if cell.cell_type == "code" else None

    def count(statements) -> int:
        total = 0
        for s in statements:
            if _Checks().is_check(s):
                total += s.end_lineno - s.lineno + 1
            else:
                for field in ("body", "orelse", "finalbody"):
                    total += count(getattr(s, field, []))
                total += sum(count(h.body) for h in getattr(s, "handlers", []))
        return total

    return count(tree.body) if tree else 0


def code_lines(cell) -> int:
    """Source lines that are code: neither blank nor a comment."""
    return sum(1 for line in cell.source.splitlines() if line.strip() and not line.lstrip().startswith("#"))


def mostly_checks(cell) -> bool:
    """A code cell of which half the code lines or more are checks."""
    lines = code_lines(cell)
    return bool(lines) and check_lines(cell) * 2 >= lines


def needed_below(nb) -> list[set[str]]:
    """For each cell, the names that the code cells below it need from above them."""
    out, needed = [], set()
    for cell in reversed(nb.cells):
        out.append(set(needed))
        if cell.cell_type == "code":
            needed |= needed_names(cell.source)
    return out[::-1]


def is_hidden(cell) -> bool:
    return SCAFFOLDING in cell.metadata.get("tags", [])


def apply(nb) -> None:
    """Bring a notebook to the convention, in place."""
    for cell, needed in zip(nb.cells, needed_below(nb), strict=True):
        if cell.cell_type != "code":
            continue
        tags = list(cell.metadata.get("tags", []))
        lines = cell.source.splitlines()
        for marker, tag in MARKERS.items():
            if any(line.strip() == marker for line in lines):
                lines = [line for line in lines if line.strip() != marker]
                tags += [tag] if tag not in tags else []
        cell.source = "\n".join(lines)
        if is_scaffolding(cell, needed):
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
    for i, (cell, needed) in enumerate(zip(nb.cells, needed_below(nb), strict=True)):
        if cell.cell_type != "code":
            continue
        where = f"{name} cell {i}"
        scaffolding = is_scaffolding(cell, needed)
        for marker, tag in MARKERS.items():
            if any(line.strip() == marker for line in cell.source.splitlines()):
                found.append(f"{where}: the comment {marker!r} in the source; tag the cell {tag!r} instead")
        if scaffolding and not is_hidden(cell):
            found.append(f"{where}: only checks, but is not tagged {SCAFFOLDING!r}")
        if is_hidden(cell) and not scaffolding:
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
