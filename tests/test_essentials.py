"""The essentials path: every lesson states its time, and skipping its going-deeper sections is safe.

A section whose heading starts with "Going deeper:" lasts until the next heading of the same or a
higher level. A newcomer may skip it, so no code cell outside such sections may read a name that only
a going-deeper cell defines, and the exercises are never inside one. The title cell's **Time:** line
gives the essentials' and the whole notebook's minutes (tests/test_readme.py compares them with the README).
"""

import ast
import re

import nbformat
import pytest

from tools import course

# Sections the review asked to mark as going deeper; a notebook not listed here needs none in particular.
REQUIRED_DEEPER = {
    "00_prerequisites": ["how the child processes count"],
    "03_device_objects": ["watching the operations", "the function mode", "where `meta` stays silent"],
    "04_models_vs_tensors": ["a switch that makes every move", "buffers that checkpoints leave out"],
    "05_train_tudui": ["what a tensor total keeps alive"],
    "06_speed": ["TF32 and `cudnn.benchmark`"],
    "07_memory": ["fragmentation", "activation checkpointing", "loading big checkpoints"],
    "08_many_devices": ["more than one machine", "FSDP"],
    "09_error_clinic": [
        "what the stand-in misses",
        "a parameter that takes no part in the loss",
        "a GPU the wheel was not built for",
        "the same explanation in a terminal",
    ],
}
LESSONS = course.lessons()
LESSON_IDS = [p.stem for p in LESSONS]
HEADING = re.compile(r"^(#{1,6}) (.*)$", re.MULTILINE)
TIME_LINE = re.compile(r"^\*\*Time:\*\* essentials about \d+ min, whole notebook about \d+ min\.$", re.MULTILINE)


def split(nb):
    """(is_going_deeper, cell) for every cell, following the heading rule above."""
    deeper_level = None
    marked = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for hashes, title in HEADING.findall(cell.source):
                level = len(hashes)
                if deeper_level is not None and level <= deeper_level:
                    deeper_level = None
                if title.startswith("Going deeper:"):
                    deeper_level = level
        marked.append((deeper_level is not None, cell))
    return marked


def names(source):
    """Names a cell binds and names it reads (IPython magics and shell lines read as `pass`)."""
    lines = source.splitlines()
    code = "\n".join(
        line[: len(line) - len(line.lstrip())] + "pass" if line.lstrip().startswith(("%", "!")) else line
        for line in lines
    )
    tree = ast.parse(code)
    bound, read = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (bound if isinstance(node.ctx, ast.Store | ast.Del) else read).add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return bound, read


def leaks(nb):
    """Names that essential code cells read but only going-deeper cells define."""
    essential, deeper_only, leaked = set(), set(), set()
    for deeper, cell in split(nb):
        if cell.cell_type != "code":
            continue
        bound, read = names(cell.source)
        if deeper:
            deeper_only |= bound - essential
        else:
            leaked |= (read - bound) & deeper_only
            essential |= bound
            deeper_only -= bound
    return leaked


@pytest.mark.parametrize("path", LESSONS, ids=LESSON_IDS)
def test_essentials_never_read_a_name_defined_only_in_going_deeper(path):
    leaked = leaks(nbformat.read(path, as_version=4))
    assert not leaked, f"essential cells read {sorted(leaked)}, defined only in a going-deeper section"


@pytest.mark.parametrize("path", LESSONS, ids=LESSON_IDS)
def test_going_deeper_sections_are_marked(path):
    nb = nbformat.read(path, as_version=4)
    titles = [t for c in nb.cells if c.cell_type == "markdown" for _, t in HEADING.findall(c.source)]
    deeper = [t for t in titles if t.startswith("Going deeper:")]
    for fragment in REQUIRED_DEEPER.get(path.stem, []):
        assert any(fragment in t for t in deeper), f"no 'Going deeper:' section about {fragment!r}"
    assert TIME_LINE.search(nb.cells[0].source), "the title cell needs its **Time:** line"
    exercises = titles.index("Exercises")
    assert all(not t.startswith("Going deeper:") for t in titles[exercises:]), "exercises are essential"


def test_split_follows_the_heading_rule():
    nb = nbformat.v4.new_notebook()
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    nb.cells = [
        md("## 1. A"), code("a = 1"),
        md("### Going deeper: B"), code("b = 2"), md("#### a sub-heading"), code("c = 3"),
        md("### C"), code("d = a"),
        md("## Going deeper: E"), code("e = 5"), md("## F"), code("f = 6"),
    ]  # fmt: skip
    marks = [deeper for deeper, cell in split(nb) if cell.cell_type == "code"]
    assert marks == [False, True, True, False, True, False]


def test_a_leak_is_found():
    nb = nbformat.v4.new_notebook()
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    nb.cells = [md("## 1. A"), code("x = 1"), md("### Going deeper: B"), code("y = x"), md("## 2"), code("z = y")]
    assert leaks(nb) == {"y"}
