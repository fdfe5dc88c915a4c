"""The note under a known device error: what it means, how to fix it, where the course teaches it.

``render`` writes it in the course's language (``tr``); ``fill`` wraps it, Chinese included (between phrases).
"""

from __future__ import annotations

import re
import textwrap

from helpers.clinic.error_entry import KnownError
from helpers.course.i18n import columns, tr

CJK = re.compile(r"[\u2e80-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef]")
CLOSING = "，。：；？！）、”’》」』"  # Chinese punctuation a line does not start with
OPENING = "（“‘《「『"  # ... nor ends with
# A Chinese line breaks only after punctuation or where Chinese meets code or English: never inside a phrase,
# whose words (报错, 环境变量) a break would cut in two.
PHRASE = re.compile(rf"(?:(?![{CLOSING}]){CJK.pattern})*[{CLOSING}]+|(?:(?![{CLOSING}]){CJK.pattern})+")
OTHER = r"[^\s\u2e80-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef]+"
CLINGING = "的会"  # a line does not start with these after code or English: "x.cpu()" and "会在……" stay together
LISTED = "、"  # code names listed with 、 ("mat1、mat2、target") stay on one line


def fill(text: str, width: int = 100, indent: str = "  ") -> str:
    """``textwrap.fill`` for the notes. Chinese characters count as two columns, and Chinese text breaks only after
    its punctuation or where it meets code or English (never inside a phrase, a word of code or English, before
    closing punctuation or after opening punctuation), and no line holds a single Chinese character. A line does not
    start with 的 or 会 right after code or English, nor break inside a list of code names joined by 、. A phrase too
    long for a line alone is cut between its characters."""
    if not CJK.search(text):
        return textwrap.fill(
            text, width=width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
        )
    room = width - columns(indent)
    units: list[str] = []
    for unit in re.findall(rf"\s+|{PHRASE.pattern}|{OTHER}", text):
        phrase = PHRASE.fullmatch(unit)
        lonely = phrase and len(unit.rstrip(CLOSING)) <= 1  # one character, and its punctuation
        code = [u for u in units[-2:] if not u.isspace()][-1:]  # the unit before, spaces aside
        clings = phrase and unit[0] in CLINGING and code and not CJK.search(code[0][-1])
        if units and not units[-1].isspace() and (lonely or unit[0] in CLOSING or units[-1][-1] in OPENING):
            units[-1] += unit
        elif units and not unit.isspace() and not phrase and units[-1].endswith(LISTED):
            units[-1] += unit  # "'gpu'、'CUDA:0'": a list of code names is not broken
        elif lonely and len(units) > 1 and units[-1].isspace():
            units[-2:] = [units[-2] + units[-1] + unit]  # "GPU 上。" stays on one line
        elif clings:  # "x.cpu() 会……", and a command before it whole: "python -m helpers doctor 会……"
            start = len(units) - 1 - units[-1].isspace()  # the code or English word
            while start > 0 and not CJK.search(units[start - 1]) and columns("".join(units[start - 1 :])) < room // 2:
                start -= 1
            while units[start].isspace():
                start += 1
            head = "".join(units[start:])
            pieces = _cut(unit, max(4, room - columns(head)))
            units[start:] = [head + pieces[0], *pieces[1:]]
        else:
            units.extend(_cut(unit, room) if phrase else [unit])
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


def _cut(phrase: str, room: int) -> list[str]:
    """A Chinese phrase wider than ``room`` columns, cut into pieces that fit (none of a single character)."""
    if columns(phrase) <= room:
        return [phrase]
    size = max(2, room // 2)
    pieces = [phrase[start : start + size] for start in range(0, len(phrase), size)]
    if len(pieces) > 1 and len(pieces[-1].rstrip(CLOSING)) <= 1:
        pieces[-2:] = [pieces[-2][:-1], pieces[-2][-1] + pieces[-1]]
    return pieces


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
