"""`python -m helpers grade FOLDER`: one CSV row per learner notebook, whatever the notebook does."""

import codecs
import copy
import csv
import hashlib
import io
import json
import shutil
from pathlib import Path

import pytest

from helpers.course import grade, grade_run
from helpers.course.grade import NOT_PASSED, NOT_RUN, PASSED
from helpers.exercises import NOT_WRITTEN, VERDICTS_ENV
from helpers.exercises import ex01_cuda as check

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
SOLVED = NOTEBOOKS / "solutions" / "01_cpu_to_gpu_cuda_solutions.ipynb"
LESSON = NOTEBOOKS / "01_cpu_to_gpu_cuda.ipynb"
TIMEOUT_S = 60  # the shipped lesson 01 runs in about 20 s on two busy cores; the looping notebook takes all of it
HEADER = (
    "student,file,lesson,status,seconds,points,possible,percentage,passed,exercises,"
    "01.move_to points,01.move_to of,01.move_to,01.move_to feedback,"
    "01.float_tensor_on points,01.float_tensor_on of,01.float_tensor_on,01.float_tensor_on feedback"
)
MISSING = "no float_tensor_on was defined when the notebook ended (its cell did not run, or it was renamed)"


def code_cell(source: str) -> dict:
    return {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": source}


def cell_index(nb: dict, fragment: str) -> int:
    return next(i for i, cell in enumerate(nb["cells"]) if fragment in "".join(cell["source"]))


def class_folder(folder: Path) -> Path:
    """Six learners' files: solved, looping, unsolved, syntax error, not a notebook, crashing kernel."""
    folder.mkdir()
    solved = json.loads(SOLVED.read_text(encoding="utf-8"))
    shutil.copyfile(SOLVED, folder / "ana.ipynb")  # renamed: the lesson is read from the cells
    second = cell_index(solved, "def float_tensor_on")
    looping = copy.deepcopy(solved)  # a loop after the first exercise; it sleeps, to spare the shared CPU
    looping["cells"].insert(second, code_cell("import time\n\nwhile True:\n    time.sleep(0.2)\n"))
    (folder / "ben.ipynb").write_text(json.dumps(looping), encoding="utf-8")
    shutil.copyfile(LESSON, folder / "chloe.ipynb")  # the lesson as shipped: nothing written
    broken = copy.deepcopy(solved)
    broken["cells"][second]["source"] = "def float_tensor_on(values, device)\n    return values\n"
    (folder / "dan.ipynb").write_text(json.dumps(broken), encoding="utf-8")
    (folder / "eve.ipynb").write_text("I wrote my answers here instead.\n", encoding="utf-8")
    crashing = copy.deepcopy(solved)
    crashing["cells"].insert(second, code_cell("import os\n\nos._exit(1)\n"))
    (folder / "fay.ipynb").write_text(json.dumps(crashing), encoding="utf-8")
    return folder


def snapshot(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*"))}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The class folder, graded once: (folder, its files' hashes before, the CSV's text, main's exit code)."""
    base = tmp_path_factory.mktemp("grade")
    folder = class_folder(base / "class")
    before = snapshot(folder)
    out = base / "grades.csv"
    code = grade.main([str(folder), "--out", str(out), "--timeout", str(TIMEOUT_S), "--jobs", "2"])
    raw = out.read_bytes()
    assert raw.startswith(codecs.BOM_UTF8)  # Excel reads the file as UTF-8 (Chinese feedback) only with it
    return folder, before, raw.decode("utf-8-sig"), code  # as written: csv rows end in \r\n


def pass_message(source: str, name: str, capsys) -> str:
    """The first line of a check's verdict on the solutions notebook's answer, run here."""
    scope: dict = {"check": check}
    exec(source.replace(f"assert check.{name}", f"feedback = check.{name}"), scope)
    capsys.readouterr()
    assert scope["feedback"].passed
    return scope["feedback"].message.splitlines()[0]


def test_the_csv_has_one_row_per_file_with_each_exercise_and_a_status(graded, capsys):
    folder, _, text, code = graded
    solved = json.loads(SOLVED.read_text(encoding="utf-8"))
    move = pass_message("".join(solved["cells"][cell_index(solved, "def move_to")]["source"]), "move_to", capsys)
    floats = "".join(solved["cells"][cell_index(solved, "def float_tensor_on")]["source"])
    floats = pass_message(floats, "float_tensor_on", capsys)
    second = cell_index(solved, "def float_tensor_on") + 1  # cells counted from 1
    timeout = f"timeout after {TIMEOUT_S} s"
    syntax = f"syntax error in cell {second}"
    died = f"error: the kernel died in cell {second} (a crash, or out of memory)"
    one, two = ["1", "1"], ["2", "2"]  # each exercise's points, of how many
    no1, no2 = ["0", "1"], ["0", "2"]
    rows = [
        ["ana", "ana.ipynb", "ex01_cuda", "ok", "3", "3", "100.0", "2", "2", *one, PASSED, move, *two, PASSED, floats],
        ["ben", "ben.ipynb", "ex01_cuda", timeout,
         "1", "3", "33.3", "1", "2", *one, PASSED, move, *no2, NOT_RUN, MISSING],
        ["chloe", "chloe.ipynb", "ex01_cuda", "ok", "0", "3", "0.0", "0", "2",
         *no1, NOT_PASSED, NOT_WRITTEN, *no2, NOT_PASSED, NOT_WRITTEN],
        ["dan", "dan.ipynb", "ex01_cuda", syntax,
         "1", "3", "33.3", "1", "2", *one, PASSED, move, *no2, NOT_RUN, MISSING],
        ["eve", "eve.ipynb", "", "not a notebook: not JSON (Expecting value at line 1)", *[""] * 13],
        # the kernel died: nothing is left to call the checks in, so nothing is graded (the status says why)
        ["fay", "fay.ipynb", "ex01_cuda", died, "0", "3", "0.0", "0", "2", *no1, NOT_RUN, "", *no2, NOT_RUN, ""],
    ]  # fmt: skip
    got = list(csv.reader(io.StringIO(text)))
    assert got[0] == HEADER.split(",")
    for row in got[1:]:
        assert float(row[4]) > 0 or row[0] == "eve"  # the seconds it took
        row[4] = ""
    assert got[1:] == [[*row[:4], "", *row[4:]] for row in rows]
    assert code == 0


def test_the_learners_files_are_left_as_they_were(graded):
    folder, before, _, _ = graded
    assert snapshot(folder) == before  # same files, same bytes: no outputs, no data/ or checkpoints/


def test_a_runner_that_does_not_stop_in_time_is_killed(tmp_path, monkeypatch):
    monkeypatch.setattr(grade_run, "KILL_GRACE_S", 0)  # killed at the limit, whatever it is doing
    monkeypatch.setattr(grade_run, "CHECK_TIMEOUT_S", 0)  # and no time left for the checks
    shutil.copyfile(SOLVED, tmp_path / "x.ipynb")
    result = grade.grade_one(tmp_path / "x.ipynb", timeout=0.5, device="cpu")
    assert (result.status, result.verdicts, result.passed) == ("timeout after 0.5 s", {}, 0)


def test_the_lesson_is_read_from_the_cells_in_each_import_style():
    def nb(*sources):
        return {"cells": [{"cell_type": "markdown", "source": "from helpers.exercises import ex09_clinic"}]
                + [code_cell(s) for s in sources]}  # fmt: skip

    assert grade.lesson_of(nb("x = 1", "from helpers.exercises import ex03_devices as check")) == "ex03_devices"
    assert grade.lesson_of(nb("import helpers.exercises.ex05_training as check")) == "ex05_training"
    assert grade.lesson_of(nb("from helpers.exercises.ex07_memory import accumulate")) == "ex07_memory"
    assert grade.lesson_of(nb(["from helpers.exercises ", "import ex02_cpu as check"])) == "ex02_cpu"
    assert grade.lesson_of(nb("import torch")) is None  # the markdown cell does not count


def test_the_exercises_are_every_check_of_the_lesson_module():
    assert grade.exercises_of("ex01_cuda") == [
        "helpers.exercises.ex01_cuda.move_to",
        "helpers.exercises.ex01_cuda.float_tensor_on",
    ]
    assert grade.column("ex01_cuda", grade.Exercise("move_to", "move_to")) == "01.move_to"


def test_files_that_are_no_lesson_get_a_status_and_are_not_run(tmp_path):
    (tmp_path / "a.ipynb").write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    (tmp_path / "b.ipynb").write_text(json.dumps({"cells": [code_cell("from helpers.exercises import ex42_x")]}))
    (tmp_path / "c.ipynb").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")
    (tmp_path / "d.ipynb").write_text("[1, 2]")
    (tmp_path / "notes.txt").write_text("not a notebook's name: ignored")
    results = grade.grade(tmp_path, tmp_path / "out.csv", timeout=5)
    assert [(r.file, r.status) for r in results] == [
        ("a.ipynb", "no exercises: the notebook imports no lesson's checks (from helpers.exercises import ...)"),
        ("b.ipynb", "no exercises: helpers.exercises.ex42_x is not a lesson of this course"),
        ("c.ipynb", "not a notebook: not a text file"),
        ("d.ipynb", "not a notebook: JSON without a list of cells"),
    ]
    header = (tmp_path / "out.csv").read_text(encoding="utf-8-sig").splitlines()[0]
    assert header == "student,file,lesson,status,seconds,points,possible,percentage,passed,exercises"


def test_columns_of_several_lessons_with_points(tmp_path):
    one = grade.Result("a.ipynb", "a", "ex01_cuda", exercises=grade.lesson_exercises("ex01_cuda", {}))
    (tmp_path / "v.json").write_text(json.dumps({"move_to": {"state": "passed", "message": "Yes."}, "x": "cut"}))
    one.verdicts = grade_run._verdicts(tmp_path / "v.json")
    zero = grade.Result(
        "b.ipynb", "b", "ex00_prerequisites", exercises=grade.lesson_exercises("ex00_prerequisites", {})
    )
    grade.write_csv([one, zero], tmp_path / "out.csv")
    rows = list(csv.DictReader((tmp_path / "out.csv").open(newline="", encoding="utf-8-sig")))
    assert list(rows[0])[10].startswith("00.")  # lesson 00's columns come first
    assert (rows[0]["01.move_to"], rows[0]["01.move_to feedback"], rows[0]["01.move_to points"]) == (
        "passed",
        "Yes.",
        "1",
    )
    assert (rows[0]["points"], rows[0]["possible"], rows[0]["percentage"]) == ("1", "3", "33.3")
    assert rows[0]["01.float_tensor_on"] == "not run" and rows[1]["01.move_to"] == ""
    assert rows[1]["passed"] == "0" and rows[1]["exercises"] == str(len(zero.exercises))
    assert all(rows[1][grade.column(zero.lesson, e)] == "not run" for e in zero.exercises)


def test_a_check_appends_its_verdict_only_when_asked(tmp_path, monkeypatch, capsys):
    log = tmp_path / "verdicts.jsonl"
    monkeypatch.delenv(VERDICTS_ENV, raising=False)
    assert check.move_to(lambda t, device: t.to(device))
    assert not log.exists()
    monkeypatch.setenv(VERDICTS_ENV, str(log))
    assert check.move_to(lambda t, device: t.to(device))
    assert not check.move_to(lambda t, device: t)  # wrong: a second line
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["check"], r["passed"]) for r in records] == [
        ("helpers.exercises.ex01_cuda.move_to", True),
        ("helpers.exercises.ex01_cuda.move_to", False),
    ]
    monkeypatch.setenv(VERDICTS_ENV, str(tmp_path / "no such folder" / "v.jsonl"))
    assert check.move_to(lambda t, device: t.to(device))  # an unwritable file costs nothing
    assert check.move_to.is_exercise_check
    capsys.readouterr()


def test_the_notebooks_environment_cuts_the_network_and_hides_the_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv(VERDICTS_ENV, str(tmp_path / "teacher.jsonl"))
    assert grade.VERDICTS_ENV == VERDICTS_ENV  # the variable the checks read
    env = grade.environment("cpu", tmp_path)
    assert env["COURSE_QUICK"] == "1" and env["COURSE_DEVICE"] == "cpu" and env["CUDA_VISIBLE_DEVICES"] == ""
    assert all(env[name] == "http://127.0.0.1:9" for name in grade.PROXY_VARIABLES)
    assert env["no_proxy"] == env["NO_PROXY"] == "" and VERDICTS_ENV not in env  # the cells' verdicts do not count
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    gpu = grade.environment("cuda", tmp_path)
    assert gpu["COURSE_DEVICE"] == "cuda" and gpu["CUDA_VISIBLE_DEVICES"] == "1"  # left as it is
