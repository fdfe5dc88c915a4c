"""The device errors a learner meets, in one table: what each means, how to fix it, which notebook teaches it.

The table drives the error clinic: ``%load_ext helpers.clinic`` in a notebook (a note under the traceback)
and ``python -m helpers doctor --explain "PASTED MESSAGE"`` in a terminal. This module is the matcher and the
table's one name; the entries live in ``errors_gpu``, ``errors_processes`` and ``errors_tensors`` (in that order),
an entry's shape and ``words`` in ``error_entry``, the undoing of what pasting does in ``paste``, the note in
``notes``.

Each entry's ``patterns`` are regular expressions searched in ``"ExceptionTypeName: message"`` (or a whole pasted
traceback, or a part of one), once ``paste.clean`` has undone what pasting does to a message (line wraps, quotes,
colour codes, a launcher's line prefixes, a traceback's own lines, an exception name glued to its message or to
Chinese text). Most are ``words("core phrase")``: the stable core of a wording, in any case, with room for the words
a release or a device inserts; an entry lists a core phrase of each line a learner may paste alone (the last line of
a message, or the one after a cut). They follow the wordings of torch 0.4 to the newest, of CUDA, MPS and the CPU
kernels (with oneDNN or without). Entries are tried in table order, so the more specific ones come first; an entry
may add a ``verify`` check its patterns cannot express (the keys of a state_dict must really differ by a prefix).
``tests/test_known_errors.py`` checks every pattern against the messages the installed torch raises (or, for GPU-only
ones, against text that still exists in it), against a corpus of messages people pasted into public threads
(``tests/fixtures/real_error_messages.json``) and against a catalogue of PyTorch's own device messages
(``tests/fixtures/torch_device_messages.toml``), family by family.

No torch import here: the explainer works even where torch is broken.
"""

from __future__ import annotations

from collections.abc import Iterator

from helpers.clinic.error_entry import KnownError, words
from helpers.clinic.errors_gpu import GPU_ERRORS
from helpers.clinic.errors_processes import PROCESS_ERRORS
from helpers.clinic.errors_tensors import TENSOR_ERRORS
from helpers.clinic.notes import CLOSING, fill, render
from helpers.clinic.paste import clean
from helpers.course.i18n import tr

__all__ = [
    "CLOSING",
    "DOCTOR",
    "HARMLESS",
    "KNOWN_ERRORS",
    "KnownError",
    "exception_chain",
    "exception_text",
    "explain_exception",
    "explain_text_cli",
    "fill",
    "match",
    "render",
    "words",
]

DOCTOR = "python -m helpers doctor"
KNOWN_ERRORS: tuple[KnownError, ...] = GPU_ERRORS + PROCESS_ERRORS + TENSOR_ERRORS
HARMLESS = frozenset({"cublas-context-warning"})  # a warning printed on the way: never the error itself


def match(text: str) -> KnownError | None:
    """The entry for the error that ``text`` names first, or None.

    A paste can name more than one: an error and a hint printed after it (a program's "If you encounter CUDA out of
    memory ..." under a CPU allocator's error), a root error and what it led to (a worker's own error, then the main
    process's). The first one named is the root, so it wins; at the same place, table order (the most specific
    entry first); a harmless warning only when nothing else is there.
    """
    text = clean(text)
    found = [
        (entry.key in HARMLESS, at, i) for i, entry in enumerate(KNOWN_ERRORS) if (at := entry.where(text)) is not None
    ]
    return KNOWN_ERRORS[min(found)[2]] if found else None


def exception_text(exc: BaseException) -> str:
    """``"ExceptionTypeName: message"``, followed by the exception's notes (``add_note``), one per line."""
    try:
        message = str(exc)
    except Exception:  # a broken __str__ must not break the explainer
        message = ""
    notes = [str(note) for note in getattr(exc, "__notes__", None) or ()]
    return "\n".join([f"{type(exc).__name__}: {message}", *notes])


def exception_chain(exc: BaseException | None) -> Iterator[BaseException]:
    """``exc``, then what it was raised from (``__cause__``) or during (``__context__``), and so on."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ if exc.__cause__ is not None else exc.__context__


def explain_exception(exc: BaseException) -> KnownError | None:
    """The entry for ``exc``, or for the first exception in its chain that one matches; None if none does."""
    return next(filter(None, (match(exception_text(e)) for e in exception_chain(exc))), None)


def explain_text_cli(text: str) -> int:
    """Print the explanation of a pasted message; return 0 when it is a known device error, 1 when not."""
    entry = match(text)
    if entry is None:
        print(tr("Not a known device error; `{doctor}` checks this machine.", doctor=DOCTOR))
        return 1
    print(render(entry))
    return 0
