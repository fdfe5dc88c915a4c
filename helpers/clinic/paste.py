"""What pasting does to a message, undone: ``clean`` makes the one-line text the table's patterns read.

No torch import here.
"""

from __future__ import annotations

import html
import re
import unicodedata

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # colour codes in pasted tracebacks (and in some torch messages)


QUOTES = str.maketrans(  # what editors, blogs and forums make of a message's quotes and dashes
    {"\u2018": "'", "\u2019": "'", "\u201a": "'", "\u2032": "'", "\u201c": '"', "\u201d": '"', "\u201e": '"',
     "\u2033": '"', "\u2010": "-", "\u2011": "-", "\u2013": "-", "\u2014": "-", "\u2212": "-",
     "\u200b": None, "\u200c": None, "\u200d": None, "\u2060": None, "\ufeff": None}
)  # fmt: skip
LINE_PREFIX = re.compile(  # what a launcher or a tool puts in front of each line
    r"^[ \t]*(?:\[(?:rank|default)\d+\]:[ \t]?|E(?=[ \t]{2})|>+(?=[ \t]|$))+", re.M
)  # torchrun's rank prefixes ([rank0]:, [default0]:), pytest's E, quoted mail and markdown, >>> prompts
SCAFFOLDING = re.compile(  # a traceback's lines that are no part of any message
    r"^[ \t]*(?:Traceback \(most recent call last\):?|During handling of the above exception, another exception "
    r"occurred:|The above exception was the direct cause of the following exception:|[~^ ]*\^[~^ ]*)[ \t]*$",
    re.M,
)
HOME = re.compile(r"(?:[A-Za-z]:)?/(?:home|Users)/[^/\s'\"]+", re.I)  # ~ for anyone's home directory
# The exceptions a device error comes as, for a name glued to its message ("RuntimeErrorCUDA out of memory")
RAISED = (
    "RuntimeError|TypeError|ValueError|AttributeError|AssertionError|IndexError|KeyError|NotImplementedError|"
    "OSError|ImportError|BufferError|OutOfMemoryError|PicklingError|UnpicklingError|ProcessExitedException|"
    "ProcessRaisedException|DistBackendError|DistNetworkError|DistStoreError|ChildFailedError|UserWarning"
)
GLUED = re.compile(rf"(?<![A-Za-z])((?:\w+\.)*(?:{RAISED}))(?=[A-Za-z`'\"])")
IDEOGRAPH = r"[\u2e80-\u2fff\u3040-\u9fff\uac00-\ud7af\uf900-\ufaff]"  # CJK text, glued to a message
CJK_GLUE = re.compile(rf"(?<={IDEOGRAPH})(?=[A-Za-z0-9_])|(?<=[A-Za-z0-9_]){IDEOGRAPH}")


def clean(text: str) -> str:
    """The text as the patterns read it: one line, whatever the paste did to it.

    Colour codes, HTML entities (&#39;), full-width characters (Chinese posts), typographic quotes and dashes,
    and invisible characters become plain text; Chinese (or Japanese, Korean) text glued to a message is parted
    from it, and an exception's name glued to its message gets its colon back; the prefixes a launcher or tool
    writes before each line and a traceback's own lines go; Windows paths use /, a home directory reads ~, an
    address 0x...; every run of spaces and line breaks becomes one space, so a message wrapped over lines reads as
    it was raised.
    """
    text = ANSI.sub("", text)
    if "&" in text:
        text = html.unescape(text)
    text = unicodedata.normalize("NFKC", text).translate(QUOTES)
    text = CJK_GLUE.sub(lambda m: " " + m.group(0), text)  # 报错RuntimeError: ..., ...unexpectedly请问
    text = re.sub(r"\b(\w*(?:Error|Exception|Warning)):(?=\S)", r"\1: ", text)  # RuntimeError：x, a full-width colon
    text = GLUED.sub(r"\1: ", text)  # RuntimeErrorCUDA error: ..., a colon lost in a title or a chat
    text = SCAFFOLDING.sub("", LINE_PREFIX.sub("", text))
    text = re.sub(r"(?<=[\w.~:$)])\\(?=[\w.~$-])", "/", text)  # C:\Users\me\x.py, ..\torch\csrc
    text = HOME.sub("~", text)
    text = re.sub(r"\b0x[0-9a-fA-F]{6,}\b", "0x...", text)
    return re.sub(r"\s+", " ", text).strip()
