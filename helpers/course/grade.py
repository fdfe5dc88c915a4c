"""Grade a class's notebooks: ``python -m helpers grade FOLDER`` runs each and writes one CSV.

    python -m helpers grade submissions/                  # writes grades.csv here
    python -m helpers grade submissions/ --out 01.csv --timeout 180 --jobs 2
    python -m helpers grade submissions/ --format canvas --assignment "Lab 03" --feedback returned/ --executed

Submissions: every ``*.ipynb`` directly in FOLDER (the student ID is the file's name without ``.ipynb``) and every
``*.ipynb`` in its sub-folders (one folder per student, as nbgrader's ``submitted/`` or a platform's download: the
student ID is the sub-folder's name). Each runs from top to bottom in a fresh kernel, the way "Restart and run
all" would; then, in that same kernel, the grader imports the course's checks afresh and calls each exercise's
check on the learner's function, found by the name the lesson's check cell passes (``check.move_to(move_to)``).
The grade comes from that call's return value.

The CSV (``--format course``, the default) has one row per notebook: ``student``, ``file``, ``lesson`` (the check
module, e.g. ``ex01_cuda``), ``status`` in full, ``seconds`` (the notebook and its checks), ``points``,
``possible``, ``percentage``, ``passed`` and ``exercises`` (how many passed, of how many), then four columns per
exercise, e.g. ``01.move_to points``, ``01.move_to of`` (its points), ``01.move_to`` (``passed``, ``not passed``
or ``not run``: the function was not defined when the notebook ended) and ``01.move_to feedback`` (what the check
said, in full). An exercise's points come from the course's lesson (its check cell's metadata, ``course: {points:
N}``, shown to the learner in the exercise's statement), never from the submission; where the course's notebooks
are not beside the package, from the submission's own check cells, and 1 where neither says.

Gradebook layouts: ``--format canvas`` writes Canvas's gradebook import (``Student, ID, SIS User ID, SIS Login ID,
Section``, one column per assignment named ``--assignment`` or ``Lesson NN``, a ``Points Possible`` row; the
student ID goes in ``SIS Login ID``, which Canvas matches); ``--format moodle`` writes what Moodle's "Import grades
from CSV" maps (``Username``, the points per assignment, ``Feedback (...)``). Both hold one row per student.
``--feedback DIR`` writes ``DIR/STUDENT.html`` (each exercise's verdict, points and the check's first-level
feedback: what is wrong and the first hint, never a solution); ``--executed`` keeps each executed notebook beside
it (``STUDENT.FILE.executed.ipynb``, without the grader's cells).

The lesson comes from the notebook's cells (its ``from helpers.exercises import exNN_... as check`` line, else the
lesson number of its title, ``# 03 · ...``), never from the file name, and the exercises are all the checks of that
module.

``status`` is ``ok`` (every cell ran; cells tagged ``raises-exception`` may raise), ``syntax error in cell N``,
``error: <the first error's first line> (cell N)``, ``error: the kernel died in cell N ...`` (nothing is graded:
no kernel is left to call the checks in), ``timeout after N s`` (the running cell is interrupted, the rest are not
run, and the functions defined by then are still graded), ``not a notebook: ...``, or ``no exercises: ...`` for a
notebook that names no lesson (not run). Cells are counted from the top, markdown cells included, from 1. After an
error the remaining cells still run, so a later exercise is still graded.

What the grading closes (each case is tested in ``tests/test_grade_marks.py``): a deleted check cell (the one
that imports the checks included), an edited check cell (``ok = True``), a ``check`` name redefined, a patched
``helpers.exercises`` module or ``Feedback`` class in the kernel (the checks are imported afresh), and ``[PASS]``
printed anywhere (printed output is never read). What remains possible: the learner's code runs with the kernel's
full powers before the checks do, so code written to detect grading can still cheat (patching ``torch``,
``builtins``, ``sys.modules['helpers.lesson...']`` or the import system so the fresh import is not the course's,
or an answer that recognises the check's inputs and returns memorised outputs). A teacher who must exclude that
reads the code, or grades with hidden tests of their own (nbgrader's hidden test cells, ``tools/nbgrader_source.py``).

How a notebook runs:

- in a copy, in a temporary folder that is also its working directory (what it writes, ``data/``,
  ``checkpoints/``, ``runs/``, goes there and is deleted): the learner's file and folder are never
  changed;
- in a kernel of this Python (the course installed), one notebook after another, or ``--jobs N`` at a
  time; each within ``--timeout`` seconds in all, kernel start included (default 600: the ten shipped
  lessons used about 50 s of CPU time each on average, and took 40 s to 7 min each on a busy 2-core
  machine), then each exercise's check within ``--check-timeout`` seconds (default 120). A notebook that hangs,
  crashes its kernel or is not a notebook is reported in its row and the others go on;
- in quick mode (``COURSE_QUICK=1``) on the CPU (``COURSE_DEVICE=cpu``, ``CUDA_VISIBLE_DEVICES`` empty);
  ``--device cuda`` (or ``auto``, ``mps``, ``cuda:1``) runs on that device instead, leaving
  ``CUDA_VISIBLE_DEVICES`` as it is;
- with the network cut for what honours the proxy variables: ``http_proxy``, ``https_proxy``,
  ``all_proxy`` (and their capitals) point at a closed local port, ``no_proxy`` is empty and
  ``PIP_NO_INDEX=1``, so Python's urllib (torchvision's downloads), requests and pip fail at once; the
  course's data needs no network there (quick mode trains on its synthetic CIFAR-shaped data, never
  downloads, and does not read ``COURSE_DATA``). IPython's profile is a fresh one in the temporary
  folder, so the teacher's own IPython start-up files are not run.

What is not blocked: code that opens sockets itself or ignores the proxy variables (DNS lookups
included) still reaches the network, and a notebook can read and write whatever the teacher's account
can, use all the memory and start processes. This is not a sandbox: run notebooks you do not trust
inside a container or virtual machine without a network (``docker run --network none ...``).
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from helpers.course.config import VERDICTS_ENV
from helpers.course.grade_csv import column, write_csv
from helpers.course.grade_lessons import (
    CHECK_CALL,
    NOT_PASSED,
    NOT_RUN,
    PASSED,
    Exercise,
    Result,
    course_exercises,
    course_lesson,
    exercises_in,
    exercises_of,
    lesson_exercises,
    lesson_of,
    submissions,
)
from helpers.course.grade_run import (
    CHECK_TIMEOUT_S,
    DEFAULT_TIMEOUT_S,
    PROXY_VARIABLES,
    environment,
    grade_one,
    run_notebook,
)

__all__ = [  # the grader's names, importable from here wherever they are defined
    "CHECK_CALL",
    "CHECK_TIMEOUT_S",
    "DEFAULT_TIMEOUT_S",
    "NOT_PASSED",
    "NOT_RUN",
    "PASSED",
    "PROXY_VARIABLES",
    "VERDICTS_ENV",
    "Exercise",
    "Result",
    "column",
    "course_exercises",
    "course_lesson",
    "environment",
    "exercises_in",
    "exercises_of",
    "grade",
    "grade_one",
    "lesson_exercises",
    "lesson_of",
    "main",
    "run_notebook",
    "submissions",
    "write_csv",
]


def grade(
    folder: Path,
    out: Path,
    timeout: float = DEFAULT_TIMEOUT_S,
    jobs: int = 1,
    device: str = "cpu",
    layout: str = "course",
    assignment: str = "",
    feedback: Path | None = None,
    executed: bool = False,
    check_timeout: float | None = None,
) -> list[Result]:
    """Grade every submission in ``folder``; write the CSV to ``out`` (and the feedback files to ``feedback``)."""
    found = submissions(folder)
    kept = (feedback or out.parent / "feedback") if executed else None

    def one(student: str, path: Path) -> Result:
        target = kept / f"{student}.{path.stem}.executed.ipynb" if kept else None
        return grade_one(path, timeout, device, student, check_timeout, target)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(one, student, path) for student, path in found]
        results = []
        for future in futures:
            result = future.result()
            results.append(result)
            score = f", {result.total} of {result.possible} points" if result.exercises else ""
            print(f"{result.student} ({result.file}): {result.status}{score} ({result.seconds:.1f} s)", flush=True)
    write_csv(results, out, layout, assignment)
    if feedback is not None:
        from helpers.course.grade_feedback import write_feedback

        write_feedback(results, feedback)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helpers grade",
        description="Run every learner notebook in FOLDER (each *.ipynb in it, and in each sub-folder: one folder per "
        "student), call the course's checks on its answers and write one CSV row per notebook: the points of each "
        "exercise, the total, the percentage, the time and the status.",
        epilog="Each notebook runs in a temporary copy (the learners' files are not changed), in quick mode, with "
        "downloads cut through the proxy variables. It runs learners' code with your rights: this is not a sandbox "
        "(python -c 'import helpers.course.grade; help(helpers.course.grade)' says what is and is not blocked).",
    )
    parser.add_argument("folder", type=Path, help="the folder of submissions (*.ipynb, or one sub-folder per student)")
    parser.add_argument("--out", type=Path, default=Path("grades.csv"), help="the CSV to write (default: grades.csv)")
    parser.add_argument(
        "--format",
        choices=("course", "canvas", "moodle"),
        default="course",
        help="course: every detail (default); canvas or moodle: the layout that gradebook imports",
    )
    parser.add_argument("--assignment", default="", help="the assignment's name in the gradebook (default: Lesson NN)")
    parser.add_argument("--feedback", type=Path, help="write one feedback HTML per student into this folder")
    parser.add_argument(
        "--executed", action="store_true", help="also keep each executed notebook (into --feedback, or ./feedback)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help=f"seconds per notebook, all cells together (default: {DEFAULT_TIMEOUT_S})",
    )
    parser.add_argument(
        "--check-timeout",
        type=float,
        default=CHECK_TIMEOUT_S,
        help=f"seconds for each exercise's check after the notebook ran (default: {CHECK_TIMEOUT_S})",
    )
    parser.add_argument("--jobs", type=int, default=1, help="notebooks run at the same time (default: 1)")
    parser.add_argument("--device", default="cpu", help="COURSE_DEVICE for the notebooks (default: cpu, GPUs hidden)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # runs one notebook: internal
    parser.add_argument("--deadline", type=float, help=argparse.SUPPRESS)  # the child's, in time.time() seconds
    args = parser.parse_args(argv)
    if args.child:
        run_notebook(args.folder, args.deadline, args.timeout)
        return 0
    if args.timeout <= 0 or args.jobs < 1 or args.check_timeout <= 0:
        parser.error("--timeout and --check-timeout must be above 0 and --jobs at least 1")
    if not args.folder.is_dir():
        parser.error(f"{args.folder} is not a folder: give the folder that holds the learners' notebooks")
    if not submissions(args.folder):
        print(f"No notebooks (*.ipynb) in {args.folder} or its sub-folders: nothing to grade.", file=sys.stderr)
        return 1
    start = time.perf_counter()
    results = grade(
        args.folder,
        args.out,
        args.timeout,
        args.jobs,
        args.device,
        args.format,
        args.assignment,
        args.feedback,
        args.executed,
        args.check_timeout,
    )
    print(f"Wrote {args.out}: {len(results)} notebooks in {time.perf_counter() - start:.0f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
