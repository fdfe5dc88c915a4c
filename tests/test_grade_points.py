"""Points per exercise: one place (the check cell's metadata), shown to the learner in the exercise's statement."""

import json
import re
from pathlib import Path

import pytest

from helpers.course import grade

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
LESSONS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name[:2])
def test_each_check_cell_has_points_and_its_statement_shows_them(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    lesson = grade.lesson_of(nb)
    exercises = grade.exercises_in(nb)
    # every check of the lesson's module has its cell, with whole points above 0
    assert [e.check for e in exercises] == [name.rsplit(".", 1)[1] for name in grade.exercises_of(lesson)]
    assert all(isinstance(e.points, int) and e.points > 0 for e in exercises)
    statements = [
        "".join(c["source"])
        for c in nb["cells"]
        if c["cell_type"] == "markdown" and "**Exercise " in "".join(c["source"])
    ]
    shown = [int(m) for s in statements for m in re.findall(r"\*\*Exercise \d+[^*]*\((\d+) points?\)\.?\*\*", s)]
    assert shown == [e.points for e in exercises]


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name[:2])
def test_the_chinese_twin_shows_the_same_points(path):
    nb = json.loads((NOTEBOOKS / "zh-CN" / path.name).read_text(encoding="utf-8"))
    text = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    shown = [int(m) for m in re.findall(r"\*\*练习 [\d.]+[^*]*（(\d+) 分）", text)]
    assert shown == [e.points for e in grade.exercises_in(nb)]


def test_the_course_lesson_of_a_check_module_is_found():
    path = grade.course_lesson("ex01_cuda")
    assert path is not None and path.name == "01_cpu_to_gpu_cuda.ipynb"
    assert [(e.check, e.answer, e.points) for e in grade.course_exercises("ex01_cuda")] == [
        ("move_to", "move_to", 1),
        ("float_tensor_on", "float_tensor_on", 2),
    ]
    assert grade.course_lesson("ex42_nothing") is None
