"""The nbgrader route: turn lessons into an nbgrader course's source, graded by the course's own checks.

    python tools/nbgrader_source.py COURSE --lessons 03 --assignment lab03
    cd COURSE && nbgrader generate_assignment lab03     # release/lab03/: what the learners get
    nbgrader collect lab03 (or copy to submitted/STUDENT/lab03/), nbgrader autograde lab03 --create
    nbgrader generate_feedback lab03 && nbgrader export  # feedback/ and grades.csv

``pip install -e ".[teach]"`` installs nbgrader. Each lesson becomes ``COURSE/source/ASSIGNMENT/NN_topic.ipynb``: the
lesson as shipped (its links to the solutions taken out, as ``tools/release.py`` does), with each exercise's starter
cell replaced by a solution cell (the worked solution between ``### BEGIN SOLUTION`` and ``### END SOLUTION``,
under a comment naming what to write; nbgrader replaces the region with ``raise NotImplementedError``) and its check
cell by an autograded test cell worth the exercise's points (the lesson's ``course: {points: N}``). The test cell
imports the course's checks afresh (a redefined ``check`` or a patched module changes nothing) and asserts the
verdict; nbgrader restores it from the source when it autogrades, so a deleted or edited test cell changes nothing
either. ``COURSE/nbgrader_config.py`` sets the stub and a 10-minute cell timeout.

nbgrader runs the notebook as written, not in quick mode: set ``COURSE_QUICK=1`` in the environment of
``nbgrader autograde`` to grade as the course's tests do (seconds per lesson instead of minutes).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from helpers.course import grade
from tools import release

ROOT = Path(__file__).resolve().parent.parent
CONFIG = """\
c = get_config()  # noqa: F821 (nbgrader's config file)
c.CourseDirectory.course_id = {course!r}
c.ClearSolutions.code_stub = {{"python": "# your code here\\nraise NotImplementedError"}}
c.ExecutePreprocessor.timeout = 600
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "data", "checkpoints", "runs"]
"""
TEST_CELL = """\
# Autograded: the course's check, imported afresh, on your {answer} ({points} {unit})
import sys

for _name in [n for n in sys.modules if n == "helpers.exercises" or n.startswith("helpers.exercises.")]:
    del sys.modules[_name]
from helpers.exercises import {lesson} as check

assert check.{check}({answer}), "not yet: the feedback above says what is wrong"
"""


def defines(source: str, name: str) -> bool:
    return re.search(rf"^(?:def|class)\s+{re.escape(name)}\b", source, re.MULTILINE) is not None


def signature(source: str, name: str) -> str:
    match = re.search(rf"^(def|class)\s+({re.escape(name)}\b[^\n]*?):?\s*$", source, re.MULTILINE)
    return (match.group(2) if match.group(1) == "def" else f"the class {match.group(2)}") if match else name


def text(cell: dict) -> str:
    return "".join(cell["source"])


def nbgrader(grade_id: str, *, solution: bool = False, points: int = 0) -> dict:
    meta = {"grade_id": grade_id, "schema_version": 3, "solution": solution, "task": False}
    meta.update({"grade": bool(points), "locked": bool(points)})
    if points:
        meta["points"] = points
    return meta


def source_notebook(lesson: Path) -> dict:
    """The lesson as an nbgrader source notebook (solution and autograded test cells)."""
    nb = json.loads(lesson.read_text(encoding="utf-8"))
    module = grade.lesson_of(nb)
    solutions = json.loads((lesson.parent / "solutions" / f"{lesson.stem}_solutions.ipynb").read_text("utf-8"))
    exercises = {e.check: e for e in grade.exercises_in(nb)}
    cells = nb["cells"]
    for index, cell in enumerate(cells):
        if cell["cell_type"] == "markdown":
            cell["source"] = release.without_solution_links(text(cell)).splitlines(keepends=True)
            continue
        calls = grade.CHECK_CALL.findall(text(cell))
        if not calls or calls[0][0] not in exercises:
            continue
        exercise = exercises[calls[0][0]]
        starter = next(i for i in range(index - 1, -1, -1) if defines(text(cells[i]), exercise.answer))
        solved = [text(c) for c in solutions["cells"] if c["cell_type"] == "code" and defines(text(c), exercise.answer)]
        what = signature(text(cells[starter]), exercise.answer)
        answer = solved[-1].split("\n\n\nprint(")[0].rstrip()  # without a solution's demonstration line
        cells[starter]["source"] = (
            f"# Exercise: write {what} (the statement above says what it does)\n"
            f"### BEGIN SOLUTION\n{answer}\n### END SOLUTION\n"
        )
        cells[starter]["outputs"], cells[starter]["execution_count"] = [], None
        cells[starter]["metadata"]["nbgrader"] = nbgrader(f"answer_{exercise.check}", solution=True)
        cell["source"] = TEST_CELL.format(
            lesson=module, unit="point" if exercise.points == 1 else "points", **vars(exercise)
        )
        cell["outputs"], cell["execution_count"] = [], None
        cell["metadata"]["nbgrader"] = nbgrader(f"check_{exercise.check}", points=exercise.points)
    nb["cells"] = [c for c in cells if c["cell_type"] != "markdown" or text(c).strip()]
    return nb


def write_source(course: Path, numbers: list[str], assignment: str, course_id: str = "course") -> list[Path]:
    """Write ``course/source/assignment/`` and ``course/nbgrader_config.py``; the notebooks written."""
    folder = course / "source" / assignment
    folder.mkdir(parents=True, exist_ok=True)
    (course / "nbgrader_config.py").write_text(CONFIG.format(course=course_id), encoding="utf-8")
    written = []
    for lesson in release.lessons("en", numbers):
        target = folder / lesson.name
        nb = source_notebook(lesson)
        target.write_text(json.dumps(nb, indent=1, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("course", type=Path, help="the nbgrader course folder to write into")
    parser.add_argument("--lessons", nargs="+", required=True, help="lesson numbers, e.g. 03 05")
    parser.add_argument("--assignment", required=True, help="the assignment's name in nbgrader, e.g. lab03")
    parser.add_argument("--course-id", default="course", help="nbgrader's course_id (default: course)")
    args = parser.parse_args(argv)
    written = write_source(args.course, args.lessons, args.assignment, args.course_id)
    return release.report_written(written)


if __name__ == "__main__":
    sys.exit(main())
