"""``python -m helpers doctor --explain MESSAGE``: a pasted error message explained in a terminal."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from helpers.clinic import doctor
from helpers.clinic.known_errors import KNOWN_ERRORS, render
from tools import course

NUMPY = "TypeError: can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first."  # noqa: E501
PASTED_TRACEBACK = """Traceback (most recent call last):
  File "train.py", line 12, in <module>
    loss = loss_fn(model(imgs), targets)
RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!
"""
UNKNOWN = "ValueError: too many values to unpack (expected 2)"
ENTRY = {e.key: e for e in KNOWN_ERRORS}


@pytest.fixture(autouse=True)
def no_machine_checks(monkeypatch):
    """--explain reads the message only: looking at the machine would be a bug (and slow)."""

    def refuse():
        raise AssertionError("--explain must not run the machine checks")

    monkeypatch.setattr(doctor, "gather_facts", refuse)


def test_explains_the_text_given(capsys):
    assert doctor.main(["--explain", NUMPY]) == 0
    assert capsys.readouterr().out.strip() == render(ENTRY["numpy-cuda"])


def test_a_whole_pasted_traceback(capsys):
    assert doctor.main(["--explain", PASTED_TRACEBACK]) == 0
    assert capsys.readouterr().out.strip() == render(ENTRY["same-device"])


def test_unknown_message_exits_1_and_points_to_the_doctor(capsys):
    assert doctor.main(["--explain", UNKNOWN]) == 1
    assert (
        capsys.readouterr().out.strip() == "Not a known device error; `python -m helpers doctor` checks this machine."
    )


def test_reads_a_file(tmp_path, capsys):
    log = tmp_path / "error.txt"
    log.write_text(PASTED_TRACEBACK, encoding="utf-8")
    assert doctor.main(["--explain", str(log)]) == 0
    assert "[device error clinic] Expected all tensors" in capsys.readouterr().out
    missing = tmp_path / "no_such_file.txt"
    assert doctor.main(["--explain", str(missing)]) == 1  # not a file: taken as the message itself


def test_reads_standard_input(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO(NUMPY))
    assert doctor.main(["--explain", "-"]) == 0
    assert "t.detach().cpu().numpy()" in capsys.readouterr().out
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert doctor.main(["--explain", "-"]) == 1


def test_help_names_the_option(capsys):
    with pytest.raises(SystemExit):
        doctor.main(["--help"])
    assert "--explain MESSAGE" in capsys.readouterr().out


def test_in_a_real_terminal_command():
    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "helpers", "doctor", *args],
            input=stdin,
            capture_output=True,
            text=True,
            cwd=course.ROOT,
            timeout=120,
            check=False,
        )

    known = run("--explain", PASTED_TRACEBACK)
    assert known.returncode == 0, known.stderr
    assert known.stdout.strip() == render(ENTRY["same-device"]) and known.stderr == ""
    unknown = run("--explain", "-", stdin=UNKNOWN)
    assert unknown.returncode == 1 and "Not a known device error" in unknown.stdout


def test_the_clinic_and_explain_share_one_matching_function(monkeypatch, capsys):
    """No copy of the matching: both go through helpers.clinic.known_errors.match, whatever it answers."""
    from types import SimpleNamespace

    from helpers import clinic
    from helpers.clinic import known_errors

    seen = []

    def spy(text):
        seen.append(text)
        return ENTRY["port-in-use"]

    monkeypatch.setattr(known_errors, "match", spy)
    assert doctor.main(["--explain", "anything at all"]) == 0
    clinic.note_after_error(SimpleNamespace(error_in_exec=ValueError("anything else")))
    out = capsys.readouterr().out
    assert seen == ["anything at all", "ValueError: anything else"]
    assert out.count(render(ENTRY["port-in-use"])) == 2


def test_older_wordings_and_what_is_not_a_device_error(capsys):
    old = "RuntimeError: Expected object of device type cuda but got device type cpu for argument #1 'self' in call to _th_mm"  # noqa: E501
    assert doctor.main(["--explain", old]) == 0
    assert capsys.readouterr().out.strip() == render(ENTRY["same-device"])
    long_int = "RuntimeError: expected scalar type Long but found Int"  # a label dtype: the fix is .long()
    assert doctor.main(["--explain", long_int]) == 1
    assert "Not a known device error" in capsys.readouterr().out
