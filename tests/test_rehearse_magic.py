"""``%%rehearse``: a cell rehearsed as a whole script in a child, its report under the cell with ``<cell>:N``
lines, a clear usage line for a wrong option (never a traceback), nothing left in the kernel or the folder; the
clinic's note under a device error points to it."""

from __future__ import annotations

import pytest
from IPython.testing.globalipapp import start_ipython

from helpers import clinic
from helpers.clinic.known_errors import KNOWN_ERRORS
from helpers.rehearse import magic
from tools import course

METHOD2 = (course.ROOT / "tests" / "fixtures" / "rehearse" / "method2_labels_on_cpu.py").read_text()


@pytest.fixture(scope="module")
def shell():
    ip = start_ipython()
    ip.run_line_magic("load_ext", "helpers.rehearse")
    yield ip
    ip.run_line_magic("unload_ext", "helpers.rehearse")


def test_a_cell_is_rehearsed_as_a_gpu_with_its_own_lines_and_numbers(shell, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shell.run_cell_magic("rehearse", "--steps 1 --loops 1", METHOD2)
    out = capsys.readouterr().out
    assert magic.last["exit_code"] == 1
    assert "<cell>:20: problem [mixed-devices]" in out and "<cell>:25:" in out
    assert "loss 1.186733" in out  # the CPU's own number, printed by the cell
    assert "runs on a CUDA GPU: no, 2 problem(s)" in out
    assert "rehearse-cell-" not in out and list(tmp_path.iterdir()) == []  # no temporary path, nothing left
    assert "loader" not in shell.user_ns  # the cell ran in a child: its names stay there


def test_the_same_cell_runs_on_a_mac_and_a_laptop(shell, capsys):
    for machine in ("mac", "laptop"):
        shell.run_cell_magic("rehearse", f"--as {machine} --steps 1 --loops 1", METHOD2)
        assert magic.last["exit_code"] == 0, capsys.readouterr().out


def test_static_reads_the_cell(shell, capsys):
    shell.run_cell_magic("rehearse", "--static", METHOD2)
    out = capsys.readouterr().out
    assert "<cell>:11:" in out and "cuda-only-fallback" in out


@pytest.mark.parametrize(
    "line, says",
    [("--as tpu", "--as 'tpu'"), ("--steps x", "--steps"), ("--steps 0", "--steps"), ("--bogus", "--bogus"), ("'", "")],
)
def test_a_wrong_option_prints_the_usage_never_a_traceback(shell, capsys, line, says):
    result = shell.run_cell(f"%%rehearse {line}\nprint(1)\n")
    out = capsys.readouterr().out
    assert result.success and result.error_in_exec is None
    assert out.startswith("usage: %%rehearse") and says in out and "Traceback" not in out
    assert magic.last["exit_code"] == 2


def test_the_report_speaks_the_learners_language(shell, capsys, monkeypatch):
    monkeypatch.setenv("COURSE_LANG", "zh-CN")
    shell.run_cell_magic("rehearse", "--steps 1 --loops 1", METHOD2)
    assert "不能，有 2 个问题" in capsys.readouterr().out


def test_the_clinic_points_to_the_magic_under_errors_a_rehearsal_meets(capsys):
    keys = {entry.key for entry in KNOWN_ERRORS}
    assert clinic.REHEARSABLE <= keys
    assert "%%rehearse" in clinic.rehearse_tip() and "notebook 10" in clinic.rehearse_tip()
