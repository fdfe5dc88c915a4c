"""The language the course speaks at run time: English, or Simplified Chinese (``zh-CN``, 简体中文).

Messages are written in English in the code and wrapped in :func:`tr`::

    failed(tr("Your tensor is on {device}, not on the GPU.", device=x.device))

Their translations live in ``helpers/locale/zh_CN/LC_MESSAGES/``, one gettext catalog per module
named by dotted module path (``exercises.ex01_cuda.po`` for ``helpers/exercises/ex01_cuda.py``,
``lesson.devices.po`` for ``helpers/lesson/devices.py``), merged by message, kept by ``python tools/translate.py``;
a message without a translation is shown in English. A constant defined before the language is known is
marked with :func:`tr_lazy` and translated where it is shown, with ``tr``.

The language: ``COURSE_LANG`` (``en`` or ``zh-CN``; the Chinese notebooks' setup cell sets it), else the
system's locale (``LC_ALL``, ``LC_MESSAGES``, ``LANG``, ``LANGUAGE``: any Chinese locale gives ``zh-CN``),
else English. Error messages from PyTorch itself are never translated: a learner searches for them.
"""

from __future__ import annotations

import ast
import functools
import locale
import os
import unicodedata
import warnings
from pathlib import Path

from helpers.course.config import LANG_ENV

ENGLISH, CHINESE = "en", "zh-CN"
LANGUAGES = (ENGLISH, CHINESE)
CATALOGS = Path(__file__).resolve().parent.parent / "locale" / "zh_CN" / "LC_MESSAGES"
LOCALE_VARIABLES = ("LC_ALL", "LC_MESSAGES", "LANG", "LANGUAGE")


def _parse(value: str) -> str | None:
    """``zh-CN``, ``zh_CN.UTF-8``, ``zh``, ``en_US``... as one of LANGUAGES; None if neither."""
    code = value.strip().replace("_", "-").split(".")[0].split(":")[0].lower()
    if code.startswith("zh"):
        return CHINESE
    if code.startswith("en") or code in {"c", "posix"}:
        return ENGLISH
    return None


@functools.cache
def _warn_unknown(value: str) -> None:
    warnings.warn(
        f"COURSE_LANG={value!r} is not a language the course speaks ({', '.join(LANGUAGES)}): using English. "
        "Set COURSE_LANG=zh-CN for Chinese, or unset it to follow the system's locale.",
        stacklevel=4,
    )


def language() -> str:
    """``"en"`` or ``"zh-CN"``: ``COURSE_LANG``, else the locale, else English."""
    requested = os.environ.get(LANG_ENV, "").strip()
    if requested:
        chosen = _parse(requested)
        if chosen is None:
            _warn_unknown(requested)
        return chosen or ENGLISH
    for name in LOCALE_VARIABLES:
        if os.environ.get(name):
            return _parse(os.environ[name]) or ENGLISH
    try:
        system = locale.getlocale()[0] or ""
    except ValueError:
        system = ""
    return CHINESE if system.lower().startswith(("zh", "chinese")) else ENGLISH


def set_language(lang: str) -> str:
    """Speak ``lang`` from now on, in this process and the processes it starts (``COURSE_LANG``)."""
    chosen = _parse(lang)
    if chosen is None:
        raise ValueError(f"{lang!r} is not a language the course speaks: use one of {', '.join(LANGUAGES)}.")
    os.environ[LANG_ENV] = chosen
    return chosen


def read_po(path: Path) -> dict[str, str]:
    """A ``.po`` file's translations, ``{msgid: msgstr}``: untranslated and fuzzy (outdated) entries left out."""
    entries: dict[str, str] = {}
    entry: dict = {"fuzzy": False, "msgid": [], "msgstr": []}
    field = None

    def flush() -> None:
        nonlocal entry, field
        msgid, msgstr = "".join(entry["msgid"]), "".join(entry["msgstr"])
        if msgid and msgstr and not entry["fuzzy"]:
            entries[msgid] = msgstr
        entry, field = {"fuzzy": False, "msgid": [], "msgstr": []}, None

    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if field == "msgstr" and not line.startswith('"'):
            flush()  # an entry ends where its msgstr's lines end
        if line.startswith("#,"):
            entry["fuzzy"] = "fuzzy" in line
        elif line.startswith(("msgid ", "msgstr ")):
            field, _, literal = line.partition(" ")
            entry[field].append(ast.literal_eval(literal))
        elif line.startswith('"') and field:
            entry[field].append(ast.literal_eval(line))
    if field == "msgstr":
        flush()
    return entries


@functools.cache
def _catalog() -> dict[str, str]:
    table: dict[str, str] = {}
    for path in sorted(CATALOGS.glob("*.po")):
        table.update(read_po(path))
    return table


def tr(message: str, /, **fields) -> str:
    """``message`` in the course's language, with ``{fields}`` filled in (``str.format``).

    With fields, a literal brace in the message is written twice (``{{``), as in ``str.format``.
    """
    text = message
    if language() == CHINESE:
        text = _catalog().get(message, message)
    if not fields:
        return text
    try:
        return text.format(**fields)
    except (KeyError, IndexError, ValueError):  # a broken translation: the English is still right
        return message.format(**fields)


def columns(text: str) -> int:
    """Columns ``text`` takes in a terminal or a notebook's output: a Chinese character or full-width sign takes two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def tr_lazy(message: str, /) -> str:
    """Marks a constant for the catalog; it is translated where it is shown, with :func:`tr`."""
    return message
