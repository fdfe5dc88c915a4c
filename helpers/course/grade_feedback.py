"""The feedback a teacher hands back: one HTML page per student, written by ``python -m helpers grade --feedback DIR``.

For each graded notebook: its status, the points and the percentage, then each exercise's verdict, its points and
what the check said at its first level (what is wrong and the first hint: the checks never print a solution, and
the deeper hint is left for the learner to ask for). With ``--executed`` the page links the executed notebook,
kept beside it.
"""

from __future__ import annotations

import html
from pathlib import Path

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Feedback: {student}</title>
<style>body{{font-family:sans-serif;max-width:50em;margin:2em auto}}td,th{{border:1px solid #ccc;padding:.3em .6em;
vertical-align:top;text-align:left}}table{{border-collapse:collapse}}.passed{{color:#176117}}.not{{color:#a01010}}</style>
</head><body>
<h1>Feedback for {student}</h1>
{sections}
</body></html>
"""


def feedback_lines(message: str) -> list[str]:
    """What the check said, up to its first hint: the deeper level (``More:``) is never copied into the feedback."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    return [line for line in lines if not line.startswith(("More:", "更多"))]


def section(result) -> str:
    lesson = f"lesson {result.lesson[2:4]}" if result.lesson else "no lesson"
    head = f"<h2>{html.escape(result.file)} ({html.escape(lesson)})</h2>\n<p>Status: {html.escape(result.status)}</p>"
    if not result.exercises:
        return head
    head += f"\n<p><strong>{result.total} of {result.possible} points ({result.percentage:.0f} %)</strong></p>"
    rows = []
    for exercise in result.exercises:
        state, message = result.verdict(exercise)
        css = "passed" if state == "passed" else "not"
        said = "<br>".join(html.escape(line) for line in feedback_lines(message))
        rows.append(
            f'<tr><td>{html.escape(exercise.check)}</td><td class="{css}">{html.escape(state)}</td>'
            f"<td>{result.points(exercise)} / {exercise.points}</td><td>{said}</td></tr>"
        )
    table = "<table><tr><th>exercise</th><th>verdict</th><th>points</th><th>what the check said</th></tr>\n"
    table += "\n".join(rows) + "</table>"
    if result.executed is not None:
        name = html.escape(result.executed.name)
        table += f'\n<p>Your notebook as it ran: <a href="{name}">{name}</a></p>'
    return f"{head}\n{table}"


def write_feedback(results, folder: Path) -> list[Path]:
    """One ``STUDENT.html`` per student in ``folder``, a section per notebook graded; the pages written."""
    folder.mkdir(parents=True, exist_ok=True)
    students: dict[str, list] = {}
    for result in results:
        students.setdefault(result.student, []).append(result)
    written = []
    for student, graded in students.items():
        path = folder / f"{student}.html"
        sections = "\n".join(section(result) for result in graded)
        path.write_text(PAGE.format(student=html.escape(student), sections=sections), encoding="utf-8")
        written.append(path)
    return written
