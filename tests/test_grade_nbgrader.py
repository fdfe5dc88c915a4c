"""The nbgrader route end to end, with the real nbgrader: generate the assignment from the source that
tools/nbgrader_source.py writes, autograde three submissions (solved, half right, broken), generate the feedback,
export the grades, and check the points."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.course import grade
from tools import nbgrader_source

pytest.importorskip("nbgrader", reason="nbgrader is in the teach extra: pip install -e '.[teach]'")

ASSIGNMENT = "lab03"
NOTEBOOK = "03_device_objects.ipynb"
WRONG_SCORE = (
    "import torch\n\n\ndef weighted_score(x):\n    w = torch.tensor([0.2, 0.3, 0.5])\n    return (x * w).sum(-1)\n"
)
EXPECTED = {"solved": 3.0, "half": 1.0, "broken": 0.0}


def nbgrader(course: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, COURSE_QUICK="1", COURSE_DEVICE="cpu", CUDA_VISIBLE_DEVICES="")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])  # its alembic
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-m", "nbgrader", *args], cwd=course, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def answers(source: dict) -> dict[str, str]:
    """The source's solutions, by grade id, without nbgrader's markers."""
    found = {}
    for cell in source["cells"]:
        meta = cell["metadata"].get("nbgrader", {})
        if meta.get("solution"):
            text = "".join(cell["source"])
            found[meta["grade_id"]] = text.split("### BEGIN SOLUTION\n")[1].split("### END SOLUTION")[0]
    return found


def submission(released: dict, solved: dict[str, str], kind: str) -> dict:
    nb = json.loads(json.dumps(released))
    for cell in nb["cells"]:
        grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id", "")
        if grade_id == "answer_choose_device" and kind in ("solved", "half"):
            cell["source"] = solved[grade_id]
        if grade_id == "answer_weighted_score":
            cell["source"] = {"solved": solved[grade_id], "half": WRONG_SCORE, "broken": "def weighted_score(x)\n"}[
                kind
            ]
        if grade_id.startswith("check_") and kind == "broken":
            cell["source"] = "print('[PASS] all good')\n"  # edited test cells: nbgrader restores them
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The course graded once by nbgrader: (the course folder, the exported grades by student)."""
    course = tmp_path_factory.mktemp("nbgrader")
    written = nbgrader_source.write_source(course, ["03"], ASSIGNMENT)
    assert [p.name for p in written] == [NOTEBOOK]
    nbgrader(course, "generate_assignment", ASSIGNMENT, "--force")
    released = json.loads((course / "release" / ASSIGNMENT / NOTEBOOK).read_text(encoding="utf-8"))
    solved = answers(json.loads(written[0].read_text(encoding="utf-8")))
    for kind in EXPECTED:
        folder = course / "submitted" / kind / ASSIGNMENT
        folder.mkdir(parents=True)
        (folder / NOTEBOOK).write_text(json.dumps(submission(released, solved, kind)), encoding="utf-8")
    nbgrader(course, "autograde", ASSIGNMENT, "--create", "--force")
    nbgrader(course, "generate_feedback", ASSIGNMENT, "--force")
    nbgrader(course, "export")
    rows = list(csv.DictReader((course / "grades.csv").open(newline="", encoding="utf-8")))
    return course, {row["student_id"]: row for row in rows}


def test_the_released_assignment_has_stubs_and_points_from_the_lesson(graded):
    course, _ = graded
    released = json.loads((course / "release" / ASSIGNMENT / NOTEBOOK).read_text(encoding="utf-8"))
    text = json.dumps(released)
    assert "BEGIN SOLUTION" not in text and "_solutions" not in text
    stubs = ["".join(c["source"]) for c in released["cells"] if c["metadata"].get("nbgrader", {}).get("solution")]
    assert len(stubs) == 2 and all(s.rstrip().endswith("# your code here\nraise NotImplementedError") for s in stubs)
    points = {
        c["metadata"]["nbgrader"]["grade_id"]: c["metadata"]["nbgrader"].get("points")
        for c in released["cells"]
        if c["metadata"].get("nbgrader", {}).get("grade")
    }
    assert points == {f"check_{e.check}": e.points for e in grade.course_exercises("ex03_devices")}


def test_autograde_and_export_give_each_submission_its_points(graded):
    _, rows = graded
    assert {student: float(row["score"]) for student, row in rows.items()} == EXPECTED
    assert {float(row["max_score"]) for row in rows.values()} == {3.0}


def test_the_feedback_shows_the_checks_own_words(graded):
    course, _ = graded
    half = (course / "feedback" / "half" / ASSIGNMENT / "03_device_objects.html").read_text(encoding="utf-8")
    assert "TRY AGAIN" in half and "Hint:" in half  # the check's feedback on the wrong weighted_score
    assert "x.new_tensor([0.2, 0.3, 0.5])" not in half  # the solution's line
