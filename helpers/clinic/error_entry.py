"""One entry of the device error table (``KnownError``) and how its patterns are written (``words``).

The patterns are regular expressions searched in the text ``helpers.clinic.paste.clean`` makes of a paste; most
are ``words("core phrase")``. The state_dict checks below are the ``verify`` of the two prefix entries: their
patterns cannot say that the keys really differ by a prefix. No torch import here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field


def words(phrase: str, gap: int = 2) -> str:
    """A regex for the stable core of a message, tolerant to how it varies and how people paste it.

    The phrase's words must come in order, in any case, separated by anything that is not a word (spaces, line
    wraps, quotes, punctuation, brackets), with up to ``gap`` other words between any two of them: a release
    that inserts a word, a device, a tensor type, an operator's name. `` ... `` in the phrase allows up to eight
    there (a GPU's name, a list of pids). A number in the phrase stands for any number.
    """
    between = rf"\W+(?:\w+\W+){{0,{gap}}}"

    def part(chunk: str) -> str:
        return between.join(r"\d+" if w.isdigit() else re.escape(w) for w in re.findall(r"\w+", chunk))

    return r"(?i:\b" + r"\W+(?:\w+\W+){0,8}".join(part(chunk) for chunk in phrase.split(" ... ")) + r"\b)"


@dataclass(frozen=True)
class KnownError:
    key: str  # short slug
    title: str  # the error as a learner would name it
    patterns: tuple[str, ...]  # regexes searched in the cleaned "ExceptionTypeName: message" (see _clean)
    meaning: str
    fix: str
    lesson: str  # where the course teaches it, e.g. "notebook 04 (models vs tensors)"
    shown: bool = True  # False: no lesson shows this message; ``lesson`` is the background, this note the help
    verify: Callable[[str], bool] | None = field(default=None, repr=False)  # a check beyond the patterns

    def matches(self, text: str) -> bool:
        return self.where(text) is not None

    def where(self, text: str) -> int | None:
        """Where in ``text`` the first of this entry's patterns starts; None if none occurs (or verify refuses)."""
        found = [m.start() for m in (re.search(pattern, text) for pattern in self.patterns) if m]
        if not found or (self.verify is not None and not self.verify(text)):
            return None
        return min(found)


KEY = r"""["']([\w.]+)["']"""  # a state_dict key as torch lists it ("conv1.weight"), or in a Python list
KEY_LIST = rf"((?:\s*{KEY},?)+)"
HEADINGS = {  # torch's own error, what load_state_dict(strict=False) returns, torch 0.3's KeyError
    "missing": (r"Missing key\(s\) in state_dict:", r"missing_keys=\[", r"missing keys in state_dict: \"\{"),
    "unexpected": (r"Unexpected key\(s\) in state_dict:", r"unexpected_keys=\[", r"\bunexpected key"),
}


def _state_dict_keys(text: str, kind: str) -> set[str] | None:
    """The keys listed after ``Missing key(s) in state_dict:`` (or ``Unexpected``, or ``missing_keys=[``);
    None when the text has no such heading."""
    lists = [re.search(heading + KEY_LIST, text) for heading in HEADINGS[kind]]
    found = [set(re.findall(KEY, m.group(1))) for m in lists if m]
    return set().union(*found) if found else None


def differ_by_prefix(prefix: str) -> Callable[[str], bool]:
    """True when adding or removing ``prefix`` turns a missing key into an unexpected one, or back.

    Keys that differ in anything else (a renamed layer, another architecture, a checkpoint nested under
    ``"state_dict"``) are not the prefix's doing, even when both sides start with ``module.``. A pasted part of
    the message counts too: a key list alone (both spellings of a key listed), or the last part alone (only
    unexpected keys, all with the prefix, the lines above cut off; not the extra ``num_batches_tracked`` of a
    newer torch, nor a wrapper's own keys).
    """

    def stripped(keys: set[str]) -> set[str]:
        return {key.removeprefix(prefix) for key in keys if key.startswith(prefix)}

    def verify(text: str) -> bool:
        missing, unexpected = _state_dict_keys(text, "missing"), _state_dict_keys(text, "unexpected")
        if missing is None and unexpected is None:  # the key list alone
            keys = set(re.findall(KEY, text))
            return bool(stripped(keys) & keys)
        if stripped(unexpected or set()) & (missing or set()) or stripped(missing or set()) & (unexpected or set()):
            return True
        first_lines_cut = missing is None and not re.search(r"Error\(s\) in loading state_dict", text)
        return bool(
            first_lines_cut
            and unexpected
            and len(stripped(unexpected)) == len(unexpected)
            and not all(key.endswith("num_batches_tracked") for key in unexpected)
        )

    return verify


PIDS = r"\W+(?:\w+\W+){0,2}(?:\(pids?(?:\(s\))? [^)]*\)\W+)?(?:\w+\W+){0,2}"  # a DataLoader's worker pids, any number
TYPE = r"(?:Variable\[)?torch\."  # a legacy tensor type: torch.cuda.FloatTensor, Variable[torch.FloatTensor]
FLOATS = r"(?:Float|Double|Half|BFloat16)"  # the floating dtypes: a Long/Int mix-up is a different error
