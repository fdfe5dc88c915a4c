"""``%load_ext helpers.clinic`` in a real Jupyter kernel: the traceback stays IPython's own, the cell still
fails, and a known device error gets the clinic's note under it (unknown errors get nothing)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from helpers import clinic
from helpers.known_errors import KNOWN_ERRORS, render
from tools import course

MISMATCH = 'torch.ones(3) + torch.ones(3, device="meta")  # a device mix-up any machine raises'
SAME_DEVICE = next(e for e in KNOWN_ERRORS if e.key == "same-device")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
CELLS = [  # (source, tagged raises-exception)
    ("import torch", False),
    (MISMATCH, True),  # 1: before the extension
    ("%load_ext helpers.clinic", False),
    (MISMATCH, True),  # 3: the note
    ('raise ValueError("not a device error")', True),  # 4: no note
    ("try:\n    " + MISMATCH + "\nexcept RuntimeError:\n    raise KeyboardInterrupt", True),  # 5: passes untouched
    ("%load_ext helpers.clinic", False),  # 6: loading twice gives one note
    (MISMATCH, True),  # 7
    ("%unload_ext helpers.clinic", False),
    (MISMATCH, True),  # 9: no note after unload
    ("%load_ext helpers.clinic", False),
    (MISMATCH, False),  # 11: untagged: the run stops here, as "Run all" does
    ('print("not reached")', False),
]


def traceback_text(output) -> str:
    """The traceback without colours and the cell's execution count ("Cell In[3], line 1")."""
    return re.sub(r"In\[\d+\]", "In[N]", ANSI.sub("", "\n".join(output.traceback)))


@pytest.fixture(scope="module")
def executed():
    nb = nbformat.v4.new_notebook()
    for source, raises in CELLS:
        cell = nbformat.v4.new_code_cell(source)
        if raises:
            cell.metadata["tags"] = ["raises-exception"]
        nb.cells.append(cell)
    replies = {}
    client = NotebookClient(
        nb,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(course.ROOT)}},
        on_cell_executed=lambda cell, cell_index, execute_reply: replies.__setitem__(cell_index, execute_reply),
    )
    with pytest.raises(CellExecutionError) as stopped:
        client.execute()
    return nb, replies, stopped.value


def notes(cell) -> str:
    return "".join(o.text for o in cell.outputs if o.output_type == "stream")


def errors(cell) -> list:
    return [o for o in cell.outputs if o.output_type == "error"]


def test_a_known_error_gets_the_note_under_the_usual_traceback(executed):
    nb, replies, _ = executed
    before, after, unloaded = nb.cells[1], nb.cells[3], nb.cells[9]
    assert [o.output_type for o in before.outputs] == ["error"]
    assert [o.output_type for o in after.outputs] == ["error", "stream"]  # the note comes after the traceback
    (plain,), (noted,) = errors(unloaded), errors(after)  # not cell 1: torch's first call takes another path
    assert (
        (noted.ename, noted.evalue)
        == (plain.ename, plain.evalue)
        == (
            "RuntimeError",
            "Tensor on device meta is not on the expected device cpu!",
        )
    )
    assert traceback_text(noted) == traceback_text(plain)  # IPython's own traceback, unchanged
    assert notes(after).strip() == render(SAME_DEVICE)
    assert after.outputs[1].name == "stdout"
    assert replies[3]["content"]["status"] == "error" and replies[3]["content"]["ename"] == "RuntimeError"


def test_unknown_errors_and_interrupts_get_nothing(executed):
    nb, replies, _ = executed
    for index, ename in ((4, "ValueError"), (5, "KeyboardInterrupt")):
        cell = nb.cells[index]
        assert [o.output_type for o in cell.outputs] == ["error"], cell.outputs
        assert errors(cell)[0].ename == ename and replies[index]["content"]["status"] == "error"


def test_loaded_twice_one_note_unloaded_none(executed):
    nb, _, _ = executed
    assert notes(nb.cells[7]).count("[device error clinic]") == 1
    assert [o.output_type for o in nb.cells[9].outputs] == ["error"]


def test_the_cell_still_fails_and_run_all_stops(executed):
    nb, replies, stopped = executed
    assert "RuntimeError" in str(stopped)
    assert replies[11]["content"]["status"] == "error"
    assert [o.output_type for o in nb.cells[11].outputs] == ["error", "stream"]
    assert 12 not in replies and nb.cells[12].outputs == []  # never run


def test_callback_passes_everything_but_known_errors(capsys):
    """The callback alone: results without an error, with an unknown one, with a BaseException."""
    known = RuntimeError("Expected all tensors to be on the same device, but found at least two devices")
    for error in (None, ValueError("x"), KeyboardInterrupt(), SystemExit(1)):
        clinic.note_after_error(SimpleNamespace(error_in_exec=error))
    clinic.note_after_error(None)  # IPython passes None when a cell could not even start
    assert capsys.readouterr().out == ""
    clinic.note_after_error(SimpleNamespace(error_in_exec=known))
    assert capsys.readouterr().out.strip() == render(SAME_DEVICE)
