"""The grader's output (:mod:`helpers.course.grade`): the course's CSV (one row per notebook, four columns per
exercise), Canvas's gradebook import and Moodle's "Import grades from CSV" (one row per student).
"""

from __future__ import annotations

import csv
from pathlib import Path

from helpers.course.grade_lessons import Exercise, Result


def column(lesson: str, exercise: Exercise) -> str:
    """An exercise's column: lesson ``ex01_cuda``'s ``move_to`` is ``01.move_to``."""
    return f"{lesson[2:4]}.{exercise.check}"


def _lessons(results: list[Result]) -> list[tuple[str, list[Exercise]]]:
    found: dict[str, list[Exercise]] = {}
    for result in sorted(results, key=lambda r: r.lesson):
        if result.lesson and result.exercises:
            found.setdefault(result.lesson, result.exercises)
    return list(found.items())


def write_csv(results: list[Result], out: Path, layout: str = "course", assignment: str = "") -> None:
    """The gradebook: ``course`` (every detail), ``canvas`` or ``moodle`` (what those gradebooks import)."""
    if layout == "canvas":
        return _write_canvas(results, out, assignment)
    if layout == "moodle":
        return _write_moodle(results, out, assignment)
    lessons = _lessons(results)
    header = [
        "student",
        "file",
        "lesson",
        "status",
        "seconds",
        "points",
        "possible",
        "percentage",
        "passed",
        "exercises",
    ]
    for lesson, exercises in lessons:
        for exercise in exercises:
            name = column(lesson, exercise)
            header += [f"{name} points", f"{name} of", name, f"{name} feedback"]
    # utf-8-sig: the byte-order mark tells Excel the file is UTF-8 (without it, Chinese feedback is garbled)
    with open(out, "w", newline="", encoding="utf-8-sig") as file:
        writer = csv.writer(file)
        writer.writerow(header)
        for result in results:
            row = [result.student, result.file, result.lesson, result.status, f"{result.seconds:.1f}"]
            if result.exercises:
                row += [result.total, result.possible, f"{result.percentage:.1f}", result.passed, len(result.exercises)]
            else:
                row += [""] * 5
            for lesson, exercises in lessons:
                for exercise in exercises:
                    if lesson != result.lesson:
                        row += ["", "", "", ""]
                        continue
                    state, message = result.verdict(exercise)
                    row += [result.points(exercise), exercise.points, state, message]
            writer.writerow(row)


def _assignment(lesson: str, assignment: str, lessons: list) -> str:
    return assignment if assignment and len(lessons) == 1 else f"Lesson {lesson[2:4]}"


def _by_student(results: list[Result]) -> dict[str, dict[str, Result]]:
    table: dict[str, dict[str, Result]] = {}
    for result in results:
        table.setdefault(result.student, {})
        if result.lesson:
            table[result.student][result.lesson] = result
    return table


def _write_canvas(results: list[Result], out: Path, assignment: str) -> None:
    """Canvas's gradebook import: ``Student, ID, SIS User ID, SIS Login ID, Section``, then one column per
    assignment (Canvas matches the column by its name, or ``Name (id)`` as its export writes it), and a
    ``Points Possible`` row under the header. Canvas finds each student by ``ID``, ``SIS User ID`` or ``SIS Login
    ID``: the student ID (the file's or folder's name) goes in ``SIS Login ID``, so name the submissions by login."""
    lessons = _lessons(results)
    names = [_assignment(lesson, assignment, lessons) for lesson, _ in lessons]
    with open(out, "w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", *names])
        writer.writerow(["Points Possible", "", "", "", "", *[sum(e.points for e in ex) for _, ex in lessons]])
        for student, graded in _by_student(results).items():
            marks = [graded[lesson].total if lesson in graded else "" for lesson, _ in lessons]
            writer.writerow([student, "", "", student, "", *marks])


def _write_moodle(results: list[Result], out: Path, assignment: str) -> None:
    """Moodle's "Import grades from CSV": any columns, mapped on import; this writes ``Username`` (map it to the
    user's username or ID number), one column of points per assignment, and ``Feedback`` for it (map it to the
    assignment's feedback): the status and each exercise's verdict."""
    lessons = _lessons(results)
    header = ["Username"]
    for lesson, _ in lessons:
        name = _assignment(lesson, assignment, lessons)
        header += [name, f"Feedback ({name})"]
    with open(out, "w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(header)
        for student, graded in _by_student(results).items():
            row = [student]
            for lesson, _ in lessons:
                result = graded.get(lesson)
                if result is None:
                    row += ["", ""]
                    continue
                summary = "; ".join(
                    f"{e.check}: {result.verdict(e)[0]} ({result.points(e)}/{e.points})" for e in result.exercises
                )
                row += [result.total, f"{result.status}. {summary}"]
            writer.writerow(row)
