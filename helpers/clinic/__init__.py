"""The error clinic in any notebook: ``%load_ext helpers.clinic``.

After a cell raises a known device error (see :mod:`helpers.clinic.known_errors`), two things change:

- The traceback shows the learner's own frames (the notebook's cells, their own ``.py`` files) and the
  error's last line, without the frames inside torch (its dispatch and C++ glue), the course's helpers
  (the simulated machines, the GPU rules of the exercise checks) and the standard library. One line above
  the last says how many frames were left out and that ``%tb`` prints the full traceback; ``%clinic full``
  keeps every traceback whole from then on, ``%clinic short`` goes back.
- A short note says what the error means, how to fix it and which notebook teaches it. It is printed *after*
  the cell has failed, from IPython's ``post_run_cell`` event. Under an error a rehearsal meets on a CPU-only
  machine (``REHEARSABLE``), its last line says how to try the fix there first: ``%%rehearse`` (notebook 10).

The cell still counts as failed (Jupyter's "Run all" stops there; nbval's ``raises-exception`` tag works as
before) and ``sys.last_value`` holds the error, as after any failed cell. Unknown errors, ``KeyboardInterrupt``
and ``SystemExit`` keep IPython's normal traceback and get no note. ``%unload_ext helpers.clinic`` removes
both changes.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import types
from pathlib import Path

from helpers.clinic.known_errors import explain_exception, render
from helpers.course.i18n import tr

# The errors a rehearsal meets on a CPU-only machine (helpers.rehearse): the note says how to try a fix there.
REHEARSABLE = frozenset(
    {
        "same-device",
        "numpy-cuda",
        "cuda-deserialize",
        "invalid-device-ordinal",
        "mps-float64",
        "no-nvidia-driver",
        "not-compiled-with-cuda",
        "no-cuda-gpus",
        "input-weight-type",
        "optimizer-foreach-device",
        "dataloader-worker-notebook",
        "windows-spawn-main",
        "mp-spawn-notebook",
    }
)


def rehearse_tip() -> str:
    """The note's last line under a device error a rehearsal can meet: try the fix on this machine first."""
    return tr(
        "Try the fix before paying for a GPU: %load_ext helpers.rehearse, then a cell with the whole script "
        "under %%rehearse --as gpu (or mac, laptop) rehearses it here; notebook 10 shows how."
    )


_STATE = {"full": False, "previous": None}  # %clinic full / short; the custom handler this one replaced


def note_after_error(result) -> None:
    """``post_run_cell`` callback: print the clinic's note when the cell raised a known device error."""
    try:
        error = getattr(result, "error_in_exec", None)
        if not isinstance(error, Exception):  # no error, or KeyboardInterrupt / SystemExit: pass through
            return
        entry = explain_exception(error)
        if entry is not None:
            tip = "\n" + rehearse_tip() if entry.key in REHEARSABLE else ""
            print(render(entry) + tip, flush=True)
    except Exception:  # the note is a help, never a second error under the first one
        pass


def _hidden_roots() -> tuple[str, ...]:
    """Folders whose frames a learner does not need to read: torch, the course's helpers, Python's own."""
    import torch

    roots = {Path(torch.__file__).parent, Path(__file__).parent.parent}
    for name in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(name)
        if path:
            roots.add(Path(path))
    return tuple(os.path.realpath(root) + os.sep for root in roots)


def is_learners(filename: str, hidden: tuple[str, ...] | None = None) -> bool:
    """Whether a frame's file is the learner's: a notebook cell, or a file outside torch, the helpers and
    Python's own folders. Frames without a real file (``<frozen ...>``, ``<string>``) are not."""
    if filename.startswith("<"):
        return filename.startswith("<ipython-input-")
    hidden = _hidden_roots() if hidden is None else hidden
    return not os.path.realpath(filename).startswith(hidden)


def learners_frames(tb: types.TracebackType | None) -> tuple[types.TracebackType | None, int]:
    """The traceback without the frames that are not the learner's, and how many were left out (counted from
    the learner's first frame on: the frames that start a cell are never shown anyway)."""
    hidden = _hidden_roots()
    kept, left_out, started = [], 0, False
    while tb is not None:
        if is_learners(tb.tb_frame.f_code.co_filename, hidden):
            kept.append(tb)
            started = True
        elif started:
            left_out += 1
        tb = tb.tb_next
    short = None
    for frame in reversed(kept):
        short = types.TracebackType(short, frame.tb_frame, frame.tb_lasti, frame.tb_lineno)
    return short, left_out


def short_traceback(shell, etype, value, tb) -> list[str] | None:
    """IPython's traceback of the learner's frames only, then the line about ``%tb``, then the error's last
    line; ``None`` when nothing would be left out."""
    short, left_out = learners_frames(tb)
    if short is None or left_out == 0:
        return None
    chained = value.__cause__, value.__context__, value.__suppress_context__
    try:
        value.__cause__, value.__suppress_context__ = None, True  # the error itself, not the ones it came from
        stb = shell.InteractiveTB.structured_traceback(etype, value, short, tb_offset=0)
    finally:
        value.__cause__, value.__context__, value.__suppress_context__ = chained
    if left_out == 1:
        line = tr(
            "[device error clinic] 1 frame inside torch and the course's helpers left out: "
            "%tb prints the full traceback."
        )
    else:
        line = tr(
            "[device error clinic] {count} frames inside torch and the course's helpers left out: "
            "%tb prints the full traceback.",
            count=left_out,
        )
    return [*stb[:-1], line, stb[-1]]


def _remember(etype, value, tb) -> None:
    """What IPython keeps after any failed cell (``%tb``, ``%debug`` and the notebooks' asserts read it)."""
    sys.last_type, sys.last_value, sys.last_traceback = etype, value, tb
    if sys.version_info >= (3, 12):
        sys.last_exc = value


def show_error(shell, etype, value, tb, tb_offset=None):
    """IPython's custom exception handler: a known device error gets the short traceback, any other the usual."""
    stb = None
    try:
        if not _STATE["full"] and explain_exception(value) is not None:
            stb = short_traceback(shell, etype, value, tb)
    except Exception:  # the clinic never hides an error behind one of its own
        stb = None
    if stb is None:
        shell.showtraceback((etype, value, tb), running_compiled_code=True)
        return None
    _remember(etype, value, tb)
    shell._showtraceback(etype, value, stb)  # what IPython's showtraceback ends with; the kernel sends it
    if shell.call_pdb:
        shell.debugger(force=True)
    return None


def clinic_magic(line: str) -> None:
    """``%clinic full``: every traceback whole; ``%clinic short``: known device errors show your frames only."""
    choice = line.strip().lower()
    if choice in ("full", "short"):
        _STATE["full"] = choice == "full"
    elif choice:
        print(tr("%clinic takes 'full' or 'short'."))
        return
    if _STATE["full"]:
        print(tr("[device error clinic] tracebacks of known device errors: full."))
    else:
        print(
            tr(
                "[device error clinic] tracebacks of known device errors: your frames and the last line "
                "(%tb prints the full traceback)."
            )
        )


def load_ipython_extension(ipython) -> None:
    ipython.events.register("post_run_cell", note_after_error)  # registering twice keeps one
    if getattr(ipython.CustomTB, "__func__", None) is not show_error:
        _STATE["previous"] = (ipython.custom_exceptions, ipython.CustomTB)
    ipython.custom_exceptions = (Exception,)
    ipython.CustomTB = types.MethodType(show_error, ipython)
    ipython.register_magic_function(clinic_magic, "line", "clinic")


def unload_ipython_extension(ipython) -> None:
    if note_after_error in ipython.events.callbacks["post_run_cell"]:
        ipython.events.unregister("post_run_cell", note_after_error)
    if getattr(ipython.CustomTB, "__func__", None) is show_error:
        ipython.custom_exceptions, ipython.CustomTB = _STATE["previous"] or ((), ipython.CustomTB)
        _STATE["previous"] = None
