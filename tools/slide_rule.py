"""The slide rule: the slide type of every cell and the presentation options of every notebook.

tools/cell_tags.py applies and checks it, in its one pass over the notebooks, after tagging the check-only cells;
tools/slides.py presents the notebooks it shaped (``export``). This module imports neither: which cells are check-only
is the cell tags' business, and comes in as ``hidden`` (``cell_tags.is_hidden``).

The rule (``slide_type``): the title cell and each ``##`` heading start a ``slide``; a ``###`` heading a
``subslide``; the code cell right after a question (prose ending in ``?``) is a ``fragment`` (the class guesses,
then the answer appears), and so is an exercise's check cell (``ok = check.some_exercise(fn)``: the verdict
appears after the class has tried); the setup cell and the check-only cells are ``skip``; every other cell continues
its slide (``-``). Each notebook's ``metadata.rise`` (``RISE``, jupyterlab-rise's own keys) keeps long outputs on the
projector (``scroll``), numbers the slides, changes slides without a transition, starts at the beginning and
leaves the chalkboard off; a notebook may set other values, and both the live slides and the export follow them.
"""

from __future__ import annotations

import re
from collections.abc import Callable

SLIDE, SUBSLIDE, FRAGMENT, CONTINUE, SKIP = "slide", "subslide", "fragment", "-", "skip"
RISE = {  # jupyterlab-rise's notebook-level options (its settings schema names them)
    "scroll": True,  # a long output scrolls inside its slide instead of running off the projector
    "theme": "white",  # its font ships with reveal.js ("simple" and others fetch Google Fonts)
    "transition": "none",
    "enable_chalkboard": False,
    "start_slideshow_at": "beginning",
    "slideNumber": True,
}
SETUP_MARK = "# Setup"
EXERCISE_CHECK = re.compile(r"^(\w+ = )?check\.\w+\(", re.MULTILINE)  # ok = check.some_exercise(fn)


def _first_line(cell) -> str:
    return cell.source.lstrip().split("\n", 1)[0]


def slide_type(cell, previous=None, index: int = 0, hidden: bool = False) -> str:
    """The slide type the rule gives a cell (``previous``: the cell before it; ``hidden``: a check-only cell)."""
    if cell.cell_type == "markdown":
        first = _first_line(cell)
        if index == 0 or first.startswith("# ") or first.startswith("## "):
            return SLIDE
        if first.startswith("### "):
            return SUBSLIDE
        return CONTINUE
    if cell.cell_type != "code":
        return CONTINUE
    if cell.source.startswith(SETUP_MARK) or hidden:
        return SKIP
    if previous is not None and previous.cell_type == "markdown" and previous.source.rstrip().endswith("?"):
        return FRAGMENT
    if EXERCISE_CHECK.search(cell.source):
        return FRAGMENT
    return CONTINUE


def rise(nb) -> dict:
    """The notebook's presentation options: its own ``metadata.rise`` over the course's defaults."""
    return {**RISE, **nb.metadata.get("rise", {})}


def apply(nb, hidden: Callable) -> None:
    """Give every cell its slide type and the notebook its presentation options, in place."""
    previous = None
    for i, cell in enumerate(nb.cells):
        kind = slide_type(cell, previous, i, hidden(cell))
        cell.metadata["slideshow"] = {**cell.metadata.get("slideshow", {}), "slide_type": kind}
        previous = cell
    nb.metadata["rise"] = rise(nb)


def problems(nb, hidden: Callable, name: str = "") -> list[str]:
    """The cells whose slide type breaks the rule, and missing presentation options (empty when none)."""
    found = []
    previous = None
    for i, cell in enumerate(nb.cells):
        want, have = slide_type(cell, previous, i, hidden(cell)), cell.metadata.get("slideshow", {}).get("slide_type")
        if have != want:
            found.append(f"{name} cell {i}: slide type {have!r}, the slide rule says {want!r}")
        previous = cell
    missing = [k for k in RISE if k not in nb.metadata.get("rise", {})]
    if missing:
        found.append(f"{name}: metadata.rise lacks {', '.join(missing)}")
    return found
