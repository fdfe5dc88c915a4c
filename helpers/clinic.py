"""The error clinic in any notebook: ``%load_ext helpers.clinic``.

After a cell raises a known device error (see :mod:`helpers.known_errors`), a short note says what it
means, how to fix it and which notebook teaches it. The note is printed *after* the cell has failed, from
IPython's ``post_run_cell`` event: the traceback is IPython's own, untouched, and the cell still counts as
failed (Jupyter's "Run all" stops there; nbval's ``raises-exception`` tag works as before). Unknown errors,
``KeyboardInterrupt`` and ``SystemExit`` add nothing. ``%unload_ext helpers.clinic`` removes the note.
"""

from __future__ import annotations

from helpers.known_errors import explain_exception, render


def note_after_error(result) -> None:
    """``post_run_cell`` callback: print the clinic's note when the cell raised a known device error."""
    try:
        error = getattr(result, "error_in_exec", None)
        if not isinstance(error, Exception):  # no error, or KeyboardInterrupt / SystemExit: pass through
            return
        entry = explain_exception(error)
        if entry is not None:
            print(render(entry), flush=True)
    except Exception:  # the note is a help, never a second error under the first one
        pass


def load_ipython_extension(ipython) -> None:
    ipython.events.register("post_run_cell", note_after_error)  # registering twice keeps one


def unload_ipython_extension(ipython) -> None:
    if note_after_error in ipython.events.callbacks["post_run_cell"]:
        ipython.events.unregister("post_run_cell", note_after_error)
