"""Rewrite every Colab badge, Colab link and install line from the slug in pyproject.toml.

A link from one notebook to another works where the learner is: a relative link for local JupyterLab,
followed by the same notebook in Colab (a relative link alone breaks in Colab, a Colab link alone leaves
JupyterLab): ``[04 · Models vs tensors](04_models_vs_tensors.ipynb) ([in Colab](https://colab...))``.

python tools/sync_links.py          # rewrite notebooks and README in place
python tools/sync_links.py --check  # exit 1 and list the files that disagree
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import nbformat

from tools import course

COLAB_LINK = re.compile(
    r"https://colab\.research\.google\.com/github/[\w.-]+/[\w.-]+/blob/[\w.-]+/(notebooks/[\w./-]+\.ipynb)"
)
INSTALL = re.compile(r"git\+https://github\.com/[\w.-]+/[\w.-]+?(?:\.git)?@[\w.-]+")
CLONE = re.compile(r"git clone https://github\.com/[\w.-]+/[\w.-]+?\.git")
BADGE = re.compile(r"\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\)")
NOTEBOOK_LINK = re.compile(r"(?<!!)\[(?P<text>[^\]]+)\]\((?P<url>[^)\s]+\.ipynb)\)(?: \(\[in Colab\]\([^)]+\)\))?")


def sync_text(text: str) -> str:
    text = COLAB_LINK.sub(lambda m: course.colab_url(m.group(1)), text)
    text = INSTALL.sub(course.install_spec(), text)
    return CLONE.sub(f"git clone https://github.com/{course.github_slug()}.git", text)


def linked_notebook(url: str, here: Path) -> Path | None:
    """The course notebook a link points at (a Colab link or a path relative to ``here``), else None."""
    colab = COLAB_LINK.fullmatch(url)
    target = course.ROOT / colab.group(1) if colab else (here.parent / url)
    return target.resolve() if target.resolve() in {p.resolve() for p in course.all_notebooks()} else None


def both_links(text: str, here: Path) -> str:
    """Every link to a course notebook as a relative link followed by its Colab link."""

    def rewrite(m: re.Match) -> str:
        target = linked_notebook(m.group("url"), here)
        if target is None:
            return m.group(0)
        relative = Path(os.path.relpath(target, here.parent)).as_posix()
        return f"[{m.group('text')}]({relative}) ([in Colab]({course.colab_url(target)}))"

    return NOTEBOOK_LINK.sub(rewrite, text)


def sync_notebook(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        cell.source = sync_text(cell.source)
        if cell.cell_type == "markdown":
            cell.source = both_links(cell.source, path)
        if i == 0:  # the title cell's badge opens this very notebook
            cell.source = BADGE.sub(lambda _: course.badge(path), cell.source)
    return nbformat.writes(nb) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    targets = {p: sync_notebook(p) for p in course.all_notebooks()}
    readme = course.ROOT / "README.md"
    targets[readme] = sync_text(readme.read_text(encoding="utf-8"))
    stale = [p for p, new in targets.items() if p.read_text(encoding="utf-8") != new]
    for path in stale:
        if check:
            print(f"out of date: {course.repo_path(path)}")
        else:
            path.write_text(targets[path], encoding="utf-8")
            print(f"rewrote {course.repo_path(path)}")
    if check and stale:
        print("Run: python tools/sync_links.py")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
