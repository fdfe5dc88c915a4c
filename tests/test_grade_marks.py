"""Marks nobody can forge: four submissions of lesson 03, graded by the course's own checks after each notebook ran.

solved (3 of 3 points), untouched (0), half right (exercise 1 only: 1 point), and a forger who solved exercise 1,
deleted every check cell (the one that imports the checks included), redefined ``check``, patched the course's check
module and ``Feedback`` in the kernel, and printed ``[PASS]`` lines in a last cell: the forger gets exactly the point
its correct function earns. Two submissions come one folder per student, as nbgrader and the platforms collect them.
"""

import csv
import json
from pathlib import Path

import pytest

from helpers.course import grade

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
LESSON = NOTEBOOKS / "03_device_objects.ipynb"
SOLUTIONS = NOTEBOOKS / "solutions" / "03_device_objects_solutions.ipynb"
EXPECTED = {"solved": (1, 2), "untouched": (0, 0), "half": (1, 0), "forger": (1, 0)}  # points per exercise
EDITED = "ok = True  # the check cell, edited: {call}\n"
WRONG_SCORE = (
    "def weighted_score(x):\n    w = torch.tensor([0.2, 0.3, 0.5])  # made on the CPU\n    return (x * w).sum(-1)\n"
)
FORGERY = """\
import helpers.exercises as package
import helpers.exercises.ex03_devices as real


class check:  # the check cells' name, redefined
    @staticmethod
    def choose_device(fn):
        return package.Feedback(True, "forged")

    weighted_score = choose_device


real.weighted_score = check.weighted_score  # the course's own module patched in this kernel
package.Feedback.__bool__ = lambda self: True
print("[PASS] Everything is right.")
print("[PASS] weighted_score: the weights are created where x lives.")
"""


def source(nb: dict, fragment: str) -> int:
    return next(i for i, cell in enumerate(nb["cells"]) if fragment in "".join(cell["source"]))


def solved_answer(name: str) -> str:
    solutions = json.loads(SOLUTIONS.read_text(encoding="utf-8"))
    text = "".join(solutions["cells"][source(solutions, f"def {name}")]["source"])
    return text.split("\n\n\nprint(")[0] + "\n"  # without the solutions' demonstration line


def submission(kind: str) -> dict:
    nb = json.loads(LESSON.read_text(encoding="utf-8"))
    cells = nb["cells"]
    if kind in ("solved", "half", "forger"):
        cells[source(nb, "def choose_device(text):")]["source"] = solved_answer("choose_device")
    if kind == "solved":
        cells[source(nb, "def weighted_score(x):")]["source"] = solved_answer("weighted_score")
    if kind == "half":
        cells[source(nb, "def weighted_score(x):")]["source"] = "import torch\n\n" + WRONG_SCORE
    if kind == "editor":  # nothing written, every check cell edited to claim success
        for cell in cells:
            text = "".join(cell["source"])
            if "ok = check." in text:
                cell["source"] = EDITED.format(call=text.splitlines()[-1])
    if kind == "forger":
        cells[source(nb, "def weighted_score(x):")]["source"] = "import torch\n\n" + WRONG_SCORE
        nb["cells"] = [c for c in cells if "check." not in "".join(c["source"])]  # every check cell deleted
        forged = {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": FORGERY}
        nb["cells"].append(forged)
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The four graded once: (the results by student, the folder of feedback pages, the CSV's rows)."""
    base = tmp_path_factory.mktemp("marks")
    folder = base / "class"
    folder.mkdir()
    for kind in [*EXPECTED, "editor"]:
        path = folder / f"{kind}.ipynb" if kind in ("solved", "untouched") else folder / kind / "lesson03.ipynb"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(submission(kind)), encoding="utf-8")
    out = base / "grades.csv"
    results = grade.grade(folder, out, timeout=240, jobs=2, feedback=base / "feedback", executed=True)
    rows = list(csv.DictReader(out.open(newline="", encoding="utf-8-sig")))
    editor = next(r for r in rows if r["student"] == "editor")
    rows.remove(editor)
    return {r.student: r for r in results}, base / "feedback", rows, editor


def test_each_submission_gets_the_points_of_its_correct_functions(graded):
    results, _, rows, _ = graded
    assert {r["student"]: (int(r["03.choose_device points"]), int(r["03.weighted_score points"])) for r in rows} == (
        EXPECTED
    )
    assert {r["student"]: r["points"] for r in rows} == {"solved": "3", "untouched": "0", "half": "1", "forger": "1"}
    assert {r["student"]: r["percentage"] for r in rows}["half"] == "33.3"
    assert {r["student"]: r["file"] for r in rows}["forger"] == "lesson03.ipynb"  # the student is the folder
    assert all(r["status"] == "ok" and float(r["seconds"]) > 0 and r["possible"] == "3" for r in rows)


def test_edited_check_cells_change_nothing(graded):
    *_, editor = graded
    assert (editor["points"], editor["03.choose_device"], editor["03.weighted_score"]) == (
        "0",
        "not passed",
        "not passed",
    )


def test_the_forger_is_graded_on_the_function_itself(graded):
    results, _, _, _ = graded
    forger = results["forger"]
    assert forger.lesson == "ex03_devices"  # from the title: the cell importing the checks was deleted
    state, message = forger.verdicts["weighted_score"]
    assert state == grade.NOT_PASSED and "forged" not in message and message  # the real check's hint
    assert forger.verdicts["choose_device"][0] == grade.PASSED  # a correct answer counts without its check cell


def test_the_feedback_page_gives_verdicts_points_and_hints_never_the_solution(graded):
    results, feedback, _, _ = graded
    page = (feedback / "half.html").read_text(encoding="utf-8")
    assert "1 of 3 points" in page and "not passed" in page and "Hint:" in page
    assert "new_tensor" not in page  # the solution's call
    assert "More:" not in page  # the deeper hint is the learner's to ask for
    assert (feedback / "half.lesson03.executed.ipynb").exists() and "half.lesson03.executed.ipynb" in page
    executed = json.loads((feedback / "half.lesson03.executed.ipynb").read_text(encoding="utf-8"))
    assert not any("_course_grade_" in "".join(c["source"]) for c in executed["cells"])  # the grader's cells left out
    assert any(c.get("outputs") for c in executed["cells"] if c["cell_type"] == "code")


def test_canvas_and_moodle_layouts(graded, tmp_path):
    results, _, _, _ = graded
    ordered = [results[name] for name in EXPECTED]  # the editor left out
    grade.write_csv(ordered, tmp_path / "canvas.csv", "canvas", "Lab 03")
    canvas = list(csv.reader((tmp_path / "canvas.csv").open(newline="", encoding="utf-8")))
    assert canvas[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Lab 03"]
    assert canvas[1] == ["Points Possible", "", "", "", "", "3"]
    assert {row[3]: row[5] for row in canvas[2:]} == {"solved": "3", "untouched": "0", "half": "1", "forger": "1"}
    grade.write_csv(ordered, tmp_path / "moodle.csv", "moodle")
    moodle = list(csv.DictReader((tmp_path / "moodle.csv").open(newline="", encoding="utf-8")))
    assert list(moodle[0]) == ["Username", "Lesson 03", "Feedback (Lesson 03)"]
    assert {row["Username"]: row["Lesson 03"] for row in moodle} == {"solved": "3", "untouched": "0", "half": "1",
                                                                      "forger": "1"}  # fmt: skip
    assert (
        "weighted_score: not passed (0/2)" in {row["Username"]: row for row in moodle}["half"]["Feedback (Lesson 03)"]
    )


def test_submissions_are_found_in_files_and_one_folder_per_student(tmp_path):
    (tmp_path / "ana.ipynb").write_text("{}")
    (tmp_path / "ben" / "work").mkdir(parents=True)
    (tmp_path / "ben" / "work" / "03.ipynb").write_text("{}")
    (tmp_path / "ben" / ".ipynb_checkpoints").mkdir()
    (tmp_path / "ben" / ".ipynb_checkpoints" / "03-checkpoint.ipynb").write_text("{}")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "x.ipynb").write_text("{}")
    found = [(student, path.relative_to(tmp_path).as_posix()) for student, path in grade.submissions(tmp_path)]
    assert found == [("ana", "ana.ipynb"), ("ben", "ben/work/03.ipynb")]


@pytest.mark.slow  # a kernel: about 15 s
def test_a_check_that_hangs_on_an_answer_is_stopped_and_the_others_are_graded(tmp_path):
    nb = submission("solved")
    cell = nb["cells"][source(nb, "def weighted_score(x):")]
    cell["source"] = "import time\n\n\ndef weighted_score(x):\n    while True:\n        time.sleep(0.2)\n"
    nb["cells"] = [c for c in nb["cells"] if "ok = check.weighted_score" not in "".join(c["source"])]
    (tmp_path / "slow.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    result = grade.grade_one(tmp_path / "slow.ipynb", timeout=240, device="cpu", check_timeout=5)
    assert result.verdicts["weighted_score"] == (grade.NOT_RUN, "the check did not finish within 5 s")
    assert result.verdicts["choose_device"][0] == grade.PASSED and result.total == 1
