"""The note under a known device error: what it means, how to fix it, where the course teaches it.

``render`` writes it in the course's language (``tr``); ``fill`` wraps it, Chinese included.
"""

from __future__ import annotations

import re
import textwrap

from helpers.clinic.error_entry import KnownError
from helpers.course.i18n import columns, tr

CJK = re.compile(r"[\u2e80-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef]")
CLOSING = "，。：；？！）、”’》」』"  # Chinese punctuation a line does not start with
OPENING = "（“‘《「『"  # ... nor ends with


def fill(text: str, width: int = 100, indent: str = "  ") -> str:
    """``textwrap.fill`` for the notes; Chinese text may break between any two characters (never inside a word
    of code or English, never before closing punctuation), and its characters count as two columns."""
    if not CJK.search(text):
        return textwrap.fill(
            text, width=width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
        )
    units: list[str] = []
    for unit in re.findall(rf"\s+|{CJK.pattern}|[^\s\u2e80-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef]+", text):
        if units and not units[-1].isspace() and (unit[0] in CLOSING or units[-1][-1] in OPENING):
            units[-1] += unit
        else:
            units.append(unit)
    lines, line = [], ""
    for unit in units:
        if line.strip() and not unit.isspace() and columns(line + unit) > width:
            lines.append(line.rstrip())
            line = indent
        if unit.isspace() and line.isspace():
            continue  # no line starts with a space beyond its indent
        line += unit
    lines.append(line.rstrip())
    return "\n".join(lines)


def render(entry: KnownError) -> str:
    """A short plain-text note: what the error means, how to fix it, where the course teaches it.

    An entry no lesson shows (``shown=False``) names the lesson on its topic and says the note is the help.
    The note speaks the course's language; the error's own words (the title's message) stay as PyTorch wrote them.
    """
    lesson = tr(entry.lesson)
    learn = (
        tr("Learn more: {lesson}", lesson=lesson)
        if entry.shown
        else tr("Learn more: {lesson}, on the topic (no lesson shows this message itself)", lesson=lesson)
    )
    return "\n".join(
        [
            tr("[device error clinic] {title}", title=tr(entry.title)),
            fill(tr("What this means: {meaning}", meaning=tr(entry.meaning))),
            fill(tr("How to fix it: {fix}", fix=tr(entry.fix))),
            fill(learn),
        ]
    )
