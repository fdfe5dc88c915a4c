"""Teacher's guides (notebooks/guides/NN_topic_guide.md): one per lesson, true to the lesson it guides.

A guide names the lesson's parts in a syntax this test reads:

- a section of the lesson: ``§[heading]``, the heading's text exactly as the notebook writes it, without
  its ``#`` marks (e.g. ``§[2. Is there a usable CUDA GPU?]``); brackets inside it must pair, one level deep;
- an exercise check: ``check.NAME``, as the notebook's check cell calls it (e.g. ``check.gpu_inventory``); written
  ``Exercise N (`check.NAME`)``, N must be that exercise's number in the lesson;
- an entry of the error clinic: ``[clinic: KEY]``, a key of ``helpers.clinic.known_errors.KNOWN_ERRORS``.

Each guide has the six sections below (``## `` headings) and two plans, ``### 45-minute plan`` and
``### 90-minute plan``: tables whose first column is the minutes of each row, adding up to 45 and 90.
"""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest

from helpers.clinic.known_errors import KNOWN_ERRORS
from tools import course

GUIDES = course.NOTEBOOKS / "guides"
SECTIONS = (
    "Objectives",
    "Plans",
    "Misconceptions",
    "Questions for the room",
    "What to prepare",
    "Timings",
)
PLANS = {"45-minute plan": 45, "90-minute plan": 90}
SECTION_REF = re.compile(r"§\[((?:[^\[\]]|\[[^\[\]]*\])+)\]")  # a heading may hold [...] once, e.g. ([1, 2])
CHECK_REF = re.compile(r"\bcheck\.(\w+)")
CLINIC_REF = re.compile(r"\[clinic: ([^\]]+)\]")
EXERCISE_REF = re.compile(r"Exercise (\d+) \(`check\.(\w+)`\)")


def guide_path(lesson: Path, guides: Path = GUIDES) -> Path:
    return guides / f"{lesson.stem}_guide.md"


def missing_guides(lessons: list[Path], guides: Path = GUIDES) -> list[str]:
    return [lesson.name for lesson in lessons if not guide_path(lesson, guides).is_file()]


def notebook_headings(notebook: Path) -> set[str]:
    """The text of every markdown heading in a notebook, outside fenced code blocks."""
    headings = set()
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        fenced = False
        for line in "".join(cell["source"]).splitlines():
            if line.lstrip().startswith("```"):
                fenced = not fenced
            elif not fenced and (m := re.match(r"^#{1,6} (.+?)\s*$", line)):
                headings.add(m.group(1))
    return headings


def exercise_order(notebook: Path, checks: set[str]) -> list[str]:
    """The lesson's exercise checks in the order its check cells call them: Exercise 1's first."""
    order = []
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] == "code":
            for name in re.findall(r"\bcheck\.(\w+)\(", "".join(cell["source"])):
                if name in checks and name not in order:
                    order.append(name)
    return order


def check_module(lesson: Path):
    number = lesson.name[:2]
    [path] = (course.ROOT / "helpers" / "exercises").glob(f"ex{number}_*.py")
    return importlib.import_module(f"helpers.exercises.{path.stem}")


def exercise_checks(module) -> set[str]:
    return {name for name, value in vars(module).items() if getattr(value, "is_exercise_check", False)}


def level2_sections(text: str) -> dict[str, str]:
    """Each ``## `` section of a guide: its heading and its text."""
    parts = re.split(r"^## (.+?)\s*$", text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def plan_minutes(text: str, title: str) -> list[int] | None:
    """The first column of the table under ``### title``, as integers; None when the plan is missing."""
    m = re.search(rf"^### {re.escape(title)}\s*$(.*?)(?=^#{{2,3}} |\Z)", text, flags=re.M | re.S)
    if m is None:
        return None
    rows = [line for line in m.group(1).splitlines() if line.strip().startswith("|")]
    minutes = []
    for row in rows[2:]:  # the header row and the |---| row carry no minutes
        cell = row.strip().strip("|").split("|")[0].strip()
        minutes.append(int(cell) if cell.isdigit() else -1)
    return minutes


def guide_problems(text: str, notebook: Path, checks: set[str], clinic_keys: set[str]) -> list[str]:
    """Everything that makes a guide untrue to its lesson or incomplete; [] for a good guide."""
    problems = []
    sections = level2_sections(text)
    problems += [f"no section '## {name}'" for name in SECTIONS if name not in sections]
    for title, total in PLANS.items():
        minutes = plan_minutes(text, title)
        if not minutes:
            problems.append(f"no table under '### {title}'")
        elif -1 in minutes:
            problems.append(f"'{title}': a row whose first column is not a number of minutes")
        elif sum(minutes) != total:
            problems.append(f"'{title}': the minutes add up to {sum(minutes)}, not {total}")
    headings = notebook_headings(notebook)
    problems += [
        f"§[{h}] is not a heading of {notebook.name}" for h in sorted(set(SECTION_REF.findall(text)) - headings)
    ]
    if not SECTION_REF.search(text):
        problems.append(f"no section of {notebook.name} is named with §[heading]")
    problems += [
        f"check.{c} is not an exercise check of {notebook.name}" for c in sorted(set(CHECK_REF.findall(text)) - checks)
    ]
    order = exercise_order(notebook, checks)
    problems += [
        f"Exercise {n} is check.{name} in the guide, but not in {notebook.name}"
        for n, name in sorted(set(EXERCISE_REF.findall(text)))
        if name in checks and (int(n) > len(order) or order[int(n) - 1] != name)
    ]
    problems += [
        f"[clinic: {k}] is not a key of the clinic" for k in sorted(set(CLINIC_REF.findall(text)) - clinic_keys)
    ]
    return problems


CLINIC_KEYS = {entry.key for entry in KNOWN_ERRORS}
WITH_GUIDES = [lesson for lesson in course.lessons() if guide_path(lesson).is_file()]


def test_every_lesson_has_a_guide():
    assert course.lessons(), "no lesson notebooks found"
    assert missing_guides(course.lessons()) == []


@pytest.mark.parametrize("lesson", WITH_GUIDES, ids=lambda p: p.stem)
def test_guide_is_true_to_its_lesson(lesson):
    module = check_module(lesson)
    checks = exercise_checks(module)
    assert checks, f"no exercise checks found in {module.__name__}"
    text = guide_path(lesson).read_text(encoding="utf-8")
    assert guide_problems(text, lesson, checks, CLINIC_KEYS) == []
    named = set(CHECK_REF.findall(text))
    assert named == checks, f"the guide should name every exercise of the lesson; missing {checks - named}"


GOOD = """# Guide
## Objectives
- one
## Plans
### 45-minute plan
| Minutes | Present | Live-code | Learners do | Skip |
| --- | --- | --- | --- | --- |
| 40 | §[1. First] | the first cell | Exercise 1 (`check.ex_one`) | §[Going deeper: more] |
| 5 | wrap up | | | |
### 90-minute plan
| Minutes | Present | Live-code | Learners do | Skip |
| --- | --- | --- | --- | --- |
| 90 | §[1. First] | | Exercise 1 (`check.ex_one`) | |
## Misconceptions
1. Something, corrected by §[1. First], §[2. `f([1, 2])`] and [clinic: same-device].
## Questions for the room
## What to prepare
## Timings
"""


@pytest.fixture
def tiny_lesson(tmp_path):
    notebook = tmp_path / "07_tiny.ipynb"
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": ["# 07 · Tiny\n", "## 1. First\n", "## 2. `f([1, 2])`"]},
        {"cell_type": "markdown", "metadata": {}, "source": ["### Going deeper: more\n", "```\n", "# Fenced\n", "```"]},
        {"cell_type": "code", "metadata": {}, "source": ["ok = check.ex_one(f)\n", "ok = check.ex_two(g)"]},
    ]
    notebook.write_text(json.dumps({"cells": cells}), encoding="utf-8")
    return notebook


def problems_of(text, notebook):
    return guide_problems(text, notebook, {"ex_one", "ex_two"}, {"same-device"})


def test_a_good_guide_passes(tiny_lesson):
    assert problems_of(GOOD, tiny_lesson) == []


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("## Timings\n", "", "no section '## Timings'"),
        ("| 5 | wrap up", "| 10 | wrap up", "'45-minute plan': the minutes add up to 50, not 45"),
        ("| 90 |", "| ninety |", "'90-minute plan': a row whose first column is not a number of minutes"),
        ("### 90-minute plan", "### 80-minute plan", "no table under '### 90-minute plan'"),
        ("| 40 | §[1. First]", "| 40 | §[1. Frist]", "§[1. Frist] is not a heading of 07_tiny.ipynb"),
        ("§[2. `f([1, 2])`]", "§[2. `f([1, 3])`]", "§[2. `f([1, 3])`] is not a heading of 07_tiny.ipynb"),
        ("§[Going deeper: more]", "§[Fenced]", "§[Fenced] is not a heading of 07_tiny.ipynb"),
        ("(`check.ex_one`) | §", "(`check.ex_three`) | §", "check.ex_three is not an exercise check of 07_tiny.ipynb"),
        (
            "Exercise 1 (`check.ex_one`) | §",
            "Exercise 1 (`check.ex_two`) | §",
            "Exercise 1 is check.ex_two in the guide",
        ),
        (
            "Exercise 1 (`check.ex_one`) | |",
            "Exercise 3 (`check.ex_one`) | |",
            "Exercise 3 is check.ex_one in the guide",
        ),
        ("[clinic: same-device]", "[clinic: mixed-devices]", "[clinic: mixed-devices] is not a key of the clinic"),
    ],
)
def test_a_broken_guide_fails(tiny_lesson, old, new, problem):
    assert old in GOOD
    problems = problems_of(GOOD.replace(old, new, 1), tiny_lesson)
    assert any(problem in p for p in problems), problems


def test_a_guide_that_names_no_section_fails(tiny_lesson):
    text = SECTION_REF.sub("the first part", GOOD)
    assert "no section of 07_tiny.ipynb is named with §[heading]" in problems_of(text, tiny_lesson)


def test_a_lesson_without_a_guide_is_reported(tmp_path):
    guides = tmp_path / "guides"
    guides.mkdir()
    (guides / "00_a_guide.md").write_text(GOOD, encoding="utf-8")
    lessons = [tmp_path / "00_a.ipynb", tmp_path / "01_b.ipynb"]
    assert missing_guides(lessons, guides) == ["01_b.ipynb"]


def test_the_real_lessons_are_read():
    """The heading reader finds real headings (and so could reject a wrong one) in every lesson."""
    for lesson in course.lessons():
        assert "Exercises" in notebook_headings(lesson), lesson.name
        assert exercise_checks(check_module(lesson)), lesson.name
