"""Rewrite every Colab badge, Colab link and install line from the slug in pyproject.toml.

python tools/sync_links.py          # rewrite notebooks and README in place
python tools/sync_links.py --check  # exit 1 and list the files that disagree
"""

from __future__ import annotations

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


def sync_text(text: str) -> str:
    text = COLAB_LINK.sub(lambda m: course.colab_url(m.group(1)), text)
    text = INSTALL.sub(course.install_spec(), text)
    return CLONE.sub(f"git clone https://github.com/{course.github_slug()}.git", text)


def sync_notebook(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        cell.source = sync_text(cell.source)
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
