"""The grader's reading of a submission (``python -m helpers grade``, :mod:`helpers.course.grade`): which lesson a
notebook is (its checks' import, else its title's number), which exercises that lesson has and their points (from
the course's own lesson where it is beside the package), where the submissions are in a folder, and
:class:`Result`, one graded notebook's row.
"""

from __future__ import annotations

import importlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

LESSON_IMPORT = re.compile(
    r"^\s*(?:from\s+helpers\.exercises\s+import\s+(ex\d\d_\w+)"
    r"|from\s+helpers\.exercises\.(ex\d\d_\w+)\s+import"
    r"|import\s+helpers\.exercises\.(ex\d\d_\w+))",
    re.MULTILINE,
)


PASSED, NOT_PASSED, NOT_RUN = "passed", "not passed", "not run"


CHECK_CALL = re.compile(r"^\s*\w+\s*=\s*check\.(\w+)\(\s*(\w+)", re.MULTILINE)
"""A check cell's call, ``ok = check.move_to(move_to)``: the check's name and the learner's answer's name."""


COURSE_NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
"""The course's lessons, where the points and the answers' names are read (a clone of the course has them)."""


@dataclass(frozen=True)
class Exercise:
    """One exercise of a lesson: its check's name, the name of the learner's answer it is called on, its points."""

    check: str
    answer: str
    points: int = 1


def exercises_in(nb: dict) -> list[Exercise]:
    """The exercises of a notebook, from its check cells: ``ok = check.NAME(ANSWER)`` and the cell's metadata
    ``course: {points: N}`` (the one place a lesson's points are written; 1 where a cell has none)."""
    found: list[Exercise] = []
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = source if isinstance(source, str) else "".join(source)
        points = (cell.get("metadata", {}).get("course") or {}).get("points", 1)
        for name, answer in CHECK_CALL.findall(source):
            if name not in [e.check for e in found]:
                found.append(Exercise(name, answer, int(points) if isinstance(points, (int, float)) else 1))
    return found


def course_lesson(lesson: str) -> Path | None:
    """The course's lesson notebook whose checks are ``helpers.exercises.<lesson>`` (``ex01_cuda``), if here."""
    for path in sorted(COURSE_NOTEBOOKS.glob(f"{lesson[2:4]}_*.ipynb")):
        nb, _ = read_notebook(path)
        if nb is not None and lesson_of(nb) == lesson:
            return path
    return None


def course_exercises(lesson: str) -> list[Exercise]:
    """The lesson's exercises as the course's own notebook states them (points included); [] without it."""
    path = course_lesson(lesson)
    nb = read_notebook(path)[0] if path else None
    return exercises_in(nb) if nb else []


@dataclass
class Result:
    """One notebook's row."""

    file: str
    student: str = ""
    lesson: str = ""
    status: str = "ok"
    exercises: list[Exercise] = field(default_factory=list)
    verdicts: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Check name (``move_to``): (passed, not passed or not run, the check's feedback in full)."""
    seconds: float = 0.0
    executed: Path | None = None
    """Where the executed notebook was kept (``--executed``), or None."""

    def verdict(self, exercise: Exercise) -> tuple[str, str]:
        return self.verdicts.get(exercise.check, (NOT_RUN, ""))

    def points(self, exercise: Exercise) -> int:
        return exercise.points if self.verdict(exercise)[0] == PASSED else 0

    @property
    def passed(self) -> int:
        return sum(self.verdict(e)[0] == PASSED for e in self.exercises)

    @property
    def total(self) -> int:
        return sum(self.points(e) for e in self.exercises)

    @property
    def possible(self) -> int:
        return sum(e.points for e in self.exercises)

    @property
    def percentage(self) -> float:
        return 100 * self.total / self.possible if self.possible else 0.0


TITLE = re.compile(r"^#\s+(\d\d)\s+·", re.MULTILINE)


def lesson_of(nb: dict) -> str | None:
    """The check module of a notebook (``ex01_cuda``): the one its code imports, else the one of the lesson number
    in its title (``# 01 · ...``), so that deleting the cell that imports the checks changes nothing; None if
    neither names a lesson."""
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        match = LESSON_IMPORT.search(source if isinstance(source, str) else "".join(source))
        if match:
            return next(group for group in match.groups() if group)
    for cell in nb.get("cells", []):
        source = cell.get("source", "")
        match = TITLE.search(source if isinstance(source, str) else "".join(source))
        if cell.get("cell_type") == "markdown" and match:
            return lesson_numbered(match.group(1))
    return None


def lesson_numbered(number: str) -> str | None:
    """The check module of lesson ``number`` (``"01"`` gives ``ex01_cuda``), or None."""
    package = Path(importlib.import_module("helpers.exercises").__file__).parent
    found = sorted(package.glob(f"ex{int(number):02d}_*.py"))
    return found[0].stem if found else None


def exercises_of(lesson: str) -> list[str]:
    """Every exercise check of ``helpers.exercises.<lesson>``, in the order the module defines them."""
    module = importlib.import_module(f"helpers.exercises.{lesson}")
    return [
        f"{module.__name__}.{name}"
        for name, value in vars(module).items()
        if getattr(value, "is_exercise_check", False) and getattr(value, "__module__", "") == module.__name__
    ]


def lesson_exercises(lesson: str, nb: dict) -> list[Exercise]:
    """The exercises graded for this lesson: every check of its module, with the answer's name and the points the
    course's lesson gives (the submission's own check cells only where the course's notebooks are not here; the
    check's own name and 1 point where neither says)."""
    known = {e.check: e for e in course_exercises(lesson) or exercises_in(nb)}
    names = [name.rsplit(".", 1)[1] for name in exercises_of(lesson)]
    return [known.get(name, Exercise(name, name, 1)) for name in names]


def read_notebook(path: Path) -> tuple[dict | None, str]:
    """The notebook as JSON, or None and why it is not a notebook."""
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        return None, "not a notebook: not a text file"
    except json.JSONDecodeError as err:
        return None, f"not a notebook: not JSON ({err.msg} at line {err.lineno})"
    except OSError as err:
        return None, f"not a notebook: cannot be read ({type(err).__name__}: {err.strerror})"
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        return None, "not a notebook: JSON without a list of cells"
    return nb, ""


def submissions(folder: Path) -> list[tuple[str, Path]]:
    """(student, notebook) for every submission in ``folder``: each ``*.ipynb`` directly in it (the student is the
    file's name without ``.ipynb``), and each ``*.ipynb`` anywhere in a sub-folder (the student is the sub-folder's
    name: one folder per student, as nbgrader and most learning platforms collect them). Hidden files and folders and
    ``.ipynb_checkpoints`` are skipped."""
    found = [(p.stem, p) for p in sorted(folder.glob("*.ipynb")) if p.is_file() and not p.name.startswith(".")]
    for sub in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for path in sorted(sub.rglob("*.ipynb")):
            parts = path.relative_to(sub).parts
            if path.is_file() and not any(part.startswith(".") for part in parts):
                found.append((sub.name, path))
    return found
