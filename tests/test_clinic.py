"""``%load_ext helpers.clinic`` in a real Jupyter kernel: a known device error shows the learner's frames and the
last line (``%tb`` or ``%clinic full`` show every frame) with the clinic's note under it, the cell still fails,
and unknown errors keep IPython's traceback and get no note."""

from __future__ import annotations

import re
from types import SimpleNamespace

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from helpers import clinic
from helpers.clinic.known_errors import KNOWN_ERRORS, render
from tools import course

MISMATCH = 'torch.ones(3) + torch.ones(3, device="meta")  # a device mix-up any machine raises'
DEEP = 'nn.Linear(3, 2).to("meta")(torch.ones(2, 3))  # the same mix-up, raised inside torch.nn'
UNKNOWN_DEEP = "nn.Linear(3, 2)(torch.ones(2, 4))  # shapes, not devices: no note, IPython's traceback"
SAME_DEVICE = next(e for e in KNOWN_ERRORS if e.key == "same-device")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
CELLS = [  # (source, tagged raises-exception)
    ("import sys\nimport torch\nfrom torch import nn", False),
    (MISMATCH, True),  # 1: before the extension
    ("%load_ext helpers.clinic", False),
    (MISMATCH, True),  # 3: the note
    ('raise ValueError("not a device error")', True),  # 4: no note
    ("try:\n    " + MISMATCH + "\nexcept RuntimeError:\n    raise KeyboardInterrupt", True),  # 5: passes untouched
    ("%load_ext helpers.clinic", False),  # 6: loading twice gives one note
    (MISMATCH, True),  # 7
    ("%unload_ext helpers.clinic", False),
    (MISMATCH, True),  # 9: no note after unload
    (DEEP, True),  # 10: torch's frames, the extension unloaded
    ("%load_ext helpers.clinic", False),
    (DEEP, True),  # 12: the learner's frame and the last line
    ("print(type(sys.last_value).__name__, 'expected device' in str(sys.last_value))", False),  # 13
    ("%tb", False),  # 14: the full traceback on demand
    ("%clinic full", False),  # 15
    (DEEP, True),  # 16: whole again
    ("%clinic short", False),  # 17
    (UNKNOWN_DEEP, True),  # 18: an unknown error keeps IPython's traceback
    ("def step(model, x):\n    return model(x)\n\nstep(nn.Linear(3, 2).to('meta'), torch.ones(2, 3))", True),  # 19
    (MISMATCH, False),  # 20: untagged: the run stops here, as "Run all" does
    ('print("not reached")', False),
]
LAST = len(CELLS) - 1


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


def frames(output) -> list[str]:
    """The header line of each frame the traceback shows."""
    return [line for line in traceback_text(output).splitlines() if line.startswith(("Cell In[", "File "))]


def notes(cell) -> str:
    return "".join(o.text for o in cell.outputs if o.output_type == "stream")


def errors(cell) -> list:
    return [o for o in cell.outputs if o.output_type == "error"]


def test_a_known_error_gets_the_note_under_the_usual_traceback(executed):
    nb, replies, _ = executed
    before, after, unloaded = nb.cells[1], nb.cells[3], nb.cells[9]  # no frame to leave out: unchanged
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
    assert noted.traceback[-1] == plain.traceback[-1]  # the last line as IPython writes it
    assert frames(noted) == ["Cell In[N], line 1"] and len(frames(plain)) > 1  # torch's frames left out
    assert notes(after).strip() == render(SAME_DEVICE) + "\n" + clinic.rehearse_tip()  # and how to rehearse a fix
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
    assert replies[LAST - 1]["content"]["status"] == "error"
    assert [o.output_type for o in nb.cells[LAST - 1].outputs] == ["error", "stream"]
    assert LAST not in replies and nb.cells[LAST].outputs == []  # never run


def test_a_known_error_shows_the_learners_frames_and_the_last_line(executed):
    nb, replies, _ = executed
    (plain,), (short,) = errors(nb.cells[10]), errors(nb.cells[12])
    full, short_text = traceback_text(plain), traceback_text(short)
    assert (short.ename, short.evalue) == (plain.ename, plain.evalue)
    assert short.traceback[-1] == plain.traceback[-1]  # the last line, as IPython writes it
    assert "torch/nn/modules" in full and "torch/nn/modules" not in short_text  # torch's frames left out
    assert "Cell In[N], line 1" in short_text and DEEP.split("  #")[0] in short_text  # the learner's line
    assert ANSI.sub("", short.traceback[-2]).startswith("[device error clinic] ")
    assert "frames inside torch and the course's helpers left out: %tb prints the full traceback." in short_text
    assert short_text.count("\n") < full.count("\n") / 2
    left_out = len(frames(plain)) - 1
    assert frames(short) == ["Cell In[N], line 1"] and f"] {left_out} frames inside" in short_text
    assert notes(nb.cells[12]).strip() == render(SAME_DEVICE) + "\n" + clinic.rehearse_tip()  # the note as before
    assert replies[12]["content"]["status"] == "error" and replies[12]["content"]["ename"] == "RuntimeError"


def test_the_full_traceback_on_demand(executed):
    nb, _, _ = executed
    assert notes(nb.cells[13]) == "RuntimeError True\n"  # sys.last_value holds the error, as after any cell
    (on_demand,), (plain,) = errors(nb.cells[14]), errors(nb.cells[10])
    assert traceback_text(on_demand) == traceback_text(plain)  # %tb: IPython's own, every frame
    (whole,) = errors(nb.cells[16])
    assert traceback_text(whole) == traceback_text(plain) and "full." in notes(nb.cells[15])
    assert "your frames and the last line" in notes(nb.cells[17])


def test_unknown_errors_keep_every_frame_and_the_learners_functions_stay(executed):
    nb, _, _ = executed
    (unknown,) = errors(nb.cells[18])
    assert "torch/nn/modules" in traceback_text(unknown) and "[device error clinic]" not in traceback_text(unknown)
    assert notes(nb.cells[18]) == ""
    (own,) = errors(nb.cells[19])
    text = traceback_text(own)
    assert "return model(x)" in text and "step(nn.Linear" in text and "torch/nn/modules" not in text
    assert frames(own) == ["Cell In[N], line 4", "Cell In[N], line 2, in step(model, x)"]
    with_torch = len(frames(errors(nb.cells[10])[0]))  # the same call from the cell: its frames, and torch's
    assert f"[device error clinic] {with_torch - 1} frames inside torch" in text, text


def test_frames_are_sorted_by_file():
    import torch

    from helpers.lab import simulate

    assert not clinic.is_learners(torch.__file__) and not clinic.is_learners(simulate.__file__)
    assert not clinic.is_learners(re.__file__) and not clinic.is_learners("<frozen importlib._bootstrap>")
    assert clinic.is_learners("/tmp/ipykernel_123/456.py") and clinic.is_learners("<ipython-input-3-abc>")
    assert clinic.is_learners(str(course.ROOT / "notebooks" / "my_dataset.py"))


def test_callback_passes_everything_but_known_errors(capsys):
    """The callback alone: results without an error, with an unknown one, with a BaseException."""
    known = RuntimeError("Expected all tensors to be on the same device, but found at least two devices")
    for error in (None, ValueError("x"), KeyboardInterrupt(), SystemExit(1)):
        clinic.note_after_error(SimpleNamespace(error_in_exec=error))
    clinic.note_after_error(None)  # IPython passes None when a cell could not even start
    assert capsys.readouterr().out == ""
    clinic.note_after_error(SimpleNamespace(error_in_exec=known))
    assert capsys.readouterr().out.strip() == render(SAME_DEVICE) + "\n" + clinic.rehearse_tip()
