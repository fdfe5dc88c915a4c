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
import csv
import importlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from helpers.course.config import DEVICE_ENV, FULL_ENV, QUICK_ENV, VERDICTS_ENV

DEFAULT_TIMEOUT_S = 600  # the slowest lessons (05, 06, 08) took up to 7 min on a busy 2-core machine
CLOSED_PORT = "http://127.0.0.1:9"  # the discard port: nothing listens there, a connection fails at once
PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
CHECK_TIMEOUT_S = 120  # per exercise, after the notebook ran: the slowest checks (05, 07) train small loops
KILL_GRACE_S = 30  # how long past the limit the runner may take to stop the kernel before both are killed
SYNTAX_ERRORS = {"SyntaxError", "IndentationError", "TabError"}
LESSON_IMPORT = re.compile(
    r"^\s*(?:from\s+helpers\.exercises\s+import\s+(ex\d\d_\w+)"
    r"|from\s+helpers\.exercises\.(ex\d\d_\w+)\s+import"
    r"|import\s+helpers\.exercises\.(ex\d\d_\w+))",
    re.MULTILINE,
)
PASSED, NOT_PASSED, NOT_RUN = "passed", "not passed", "not run"
CHECK_CALL = re.compile(r"^\s*\w+\s*=\s*check\.(\w+)\(\s*(\w+)", re.MULTILINE)
"""A check cell's call, ``ok = check.move_to(move_to)``: the check's name and the learner's answer's name."""
COURSE_NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
"""The course's lessons, where the points and the answers' names are read (a clone of the course has them)."""


@dataclass(frozen=True)
class Exercise:
    """One exercise of a lesson: its check's name, the name of the learner's answer it is called on, its points."""

    check: str
    answer: str
    points: int = 1


def exercises_in(nb: dict) -> list[Exercise]:
    """The exercises of a notebook, from its check cells: ``ok = check.NAME(ANSWER)`` and the cell's metadata
    ``course: {points: N}`` (the one place a lesson's points are written; 1 where a cell has none)."""
    found: list[Exercise] = []
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = source if isinstance(source, str) else "".join(source)
        points = (cell.get("metadata", {}).get("course") or {}).get("points", 1)
        for name, answer in CHECK_CALL.findall(source):
            if name not in [e.check for e in found]:
                found.append(Exercise(name, answer, int(points) if isinstance(points, (int, float)) else 1))
    return found


def course_lesson(lesson: str) -> Path | None:
    """The course's lesson notebook whose checks are ``helpers.exercises.<lesson>`` (``ex01_cuda``), if here."""
    for path in sorted(COURSE_NOTEBOOKS.glob(f"{lesson[2:4]}_*.ipynb")):
        nb, _ = read_notebook(path)
        if nb is not None and lesson_of(nb) == lesson:
            return path
    return None


def course_exercises(lesson: str) -> list[Exercise]:
    """The lesson's exercises as the course's own notebook states them (points included); [] without it."""
    path = course_lesson(lesson)
    nb = read_notebook(path)[0] if path else None
    return exercises_in(nb) if nb else []


@dataclass
class Result:
    """One notebook's row."""

    file: str
    student: str = ""
    lesson: str = ""
    status: str = "ok"
    exercises: list[Exercise] = field(default_factory=list)
    verdicts: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Check name (``move_to``): (passed, not passed or not run, the check's feedback in full)."""
    seconds: float = 0.0
    executed: Path | None = None
    """Where the executed notebook was kept (``--executed``), or None."""

    def verdict(self, exercise: Exercise) -> tuple[str, str]:
        return self.verdicts.get(exercise.check, (NOT_RUN, ""))

    def points(self, exercise: Exercise) -> int:
        return exercise.points if self.verdict(exercise)[0] == PASSED else 0

    @property
    def passed(self) -> int:
        return sum(self.verdict(e)[0] == PASSED for e in self.exercises)

    @property
    def total(self) -> int:
        return sum(self.points(e) for e in self.exercises)

    @property
    def possible(self) -> int:
        return sum(e.points for e in self.exercises)

    @property
    def percentage(self) -> float:
        return 100 * self.total / self.possible if self.possible else 0.0


TITLE = re.compile(r"^#\s+(\d\d)\s+·", re.MULTILINE)


def lesson_of(nb: dict) -> str | None:
    """The check module of a notebook (``ex01_cuda``): the one its code imports, else the one of the lesson number
    in its title (``# 01 · ...``), so that deleting the cell that imports the checks changes nothing; None if
    neither names a lesson."""
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        match = LESSON_IMPORT.search(source if isinstance(source, str) else "".join(source))
        if match:
            return next(group for group in match.groups() if group)
    for cell in nb.get("cells", []):
        source = cell.get("source", "")
        match = TITLE.search(source if isinstance(source, str) else "".join(source))
        if cell.get("cell_type") == "markdown" and match:
            return lesson_numbered(match.group(1))
    return None


def lesson_numbered(number: str) -> str | None:
    """The check module of lesson ``number`` (``"01"`` gives ``ex01_cuda``), or None."""
    package = Path(importlib.import_module("helpers.exercises").__file__).parent
    found = sorted(package.glob(f"ex{int(number):02d}_*.py"))
    return found[0].stem if found else None


def exercises_of(lesson: str) -> list[str]:
    """Every exercise check of ``helpers.exercises.<lesson>``, in the order the module defines them."""
    module = importlib.import_module(f"helpers.exercises.{lesson}")
    return [
        f"{module.__name__}.{name}"
        for name, value in vars(module).items()
        if getattr(value, "is_exercise_check", False) and getattr(value, "__module__", "") == module.__name__
    ]


def lesson_exercises(lesson: str, nb: dict) -> list[Exercise]:
    """The exercises graded for this lesson: every check of its module, with the answer's name and the points the
    course's lesson gives (the submission's own check cells only where the course's notebooks are not here; the
    check's own name and 1 point where neither says)."""
    known = {e.check: e for e in course_exercises(lesson) or exercises_in(nb)}
    names = [name.rsplit(".", 1)[1] for name in exercises_of(lesson)]
    return [known.get(name, Exercise(name, name, 1)) for name in names]


def read_notebook(path: Path) -> tuple[dict | None, str]:
    """The notebook as JSON, or None and why it is not a notebook."""
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        return None, "not a notebook: not a text file"
    except json.JSONDecodeError as err:
        return None, f"not a notebook: not JSON ({err.msg} at line {err.lineno})"
    except OSError as err:
        return None, f"not a notebook: cannot be read ({type(err).__name__}: {err.strerror})"
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        return None, "not a notebook: JSON without a list of cells"
    return nb, ""


def submissions(folder: Path) -> list[tuple[str, Path]]:
    """(student, notebook) for every submission in ``folder``: each ``*.ipynb`` directly in it (the student is the
    file's name without ``.ipynb``), and each ``*.ipynb`` anywhere in a sub-folder (the student is the sub-folder's
    name: one folder per student, as nbgrader and most learning platforms collect them). Hidden files and folders and
    ``.ipynb_checkpoints`` are skipped."""
    found = [(p.stem, p) for p in sorted(folder.glob("*.ipynb")) if p.is_file() and not p.name.startswith(".")]
    for sub in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for path in sorted(sub.rglob("*.ipynb")):
            parts = path.relative_to(sub).parts
            if path.is_file() and not any(part.startswith(".") for part in parts):
                found.append((sub.name, path))
    return found


def environment(device: str, work: Path) -> dict[str, str]:
    """The variables a notebook runs with: quick mode, the device, the network cut."""
    env = dict(os.environ)
    env.update({QUICK_ENV: "1", DEVICE_ENV: device})
    env.pop(VERDICTS_ENV, None)  # the grade comes from the grader's own calls of the checks, not from the cells'
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    env.update(dict.fromkeys(PROXY_VARIABLES, CLOSED_PORT))
    env.update({"no_proxy": "", "NO_PROXY": "", "PIP_NO_INDEX": "1"})
    env.update({"IPYTHONDIR": str(work / "ipython"), "JUPYTER_RUNTIME_DIR": str(work / "runtime")})
    env.pop(FULL_ENV, None)
    return env


def grade_one(
    path: Path,
    timeout: float,
    device: str,
    student: str = "",
    check_timeout: float | None = None,
    executed: Path | None = None,
) -> Result:
    """Run one notebook in a temporary copy, then call the course's checks on its answers in the same kernel."""
    check_timeout = CHECK_TIMEOUT_S if check_timeout is None else check_timeout
    result = Result(file=path.name, student=student or path.stem)
    start = time.perf_counter()
    nb, why = read_notebook(path)
    if nb is None:
        result.status = why
        return result
    lesson = lesson_of(nb)
    if lesson is None:
        result.status = "no exercises: the notebook imports no lesson's checks (from helpers.exercises import ...)"
        return result
    result.lesson = lesson
    try:
        result.exercises = lesson_exercises(lesson, nb)
    except ModuleNotFoundError as err:
        if err.name != f"helpers.exercises.{lesson}":
            raise
        result.status = f"no exercises: helpers.exercises.{lesson} is not a lesson of this course"
        return result
    with tempfile.TemporaryDirectory(prefix="grade-", ignore_cleanup_errors=True) as tmp:
        work = Path(tmp)
        (work / "notebook").mkdir()
        shutil.copyfile(path, work / "notebook" / path.name)
        plan = {"module": f"helpers.exercises.{lesson}", "check_timeout": check_timeout}
        plan["exercises"] = [{"check": e.check, "answer": e.answer} for e in result.exercises]
        (work / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
        limit = timeout + check_timeout * len(result.exercises)
        result.status = _run_child(work, timeout, limit, environment(device, work))
        result.verdicts = _verdicts(work / "verdicts.json")
        if executed is not None and (work / "executed.ipynb").exists():
            executed.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(work / "executed.ipynb", executed)
            result.executed = executed
    result.seconds = time.perf_counter() - start
    return result


def _run_child(work: Path, timeout: float, limit: float, env: dict[str, str]) -> str:
    """Run the notebook in a child process (which starts the kernel); its status line."""
    deadline = time.time() + timeout  # the runner stops the notebook then, counting its own start-up
    command = [sys.executable, "-m", "helpers", "grade", str(work), "--child", "--deadline", repr(deadline)]
    command += ["--timeout", repr(timeout)]
    with open(work / "runner.log", "wb") as log:
        child = subprocess.Popen(
            command, env=env, cwd=work, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            child.wait(timeout=limit + KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            _kill(work, child)
    try:
        return json.loads((work / "status.json").read_text(encoding="utf-8"))["status"]
    except (OSError, ValueError, KeyError):
        if child.returncode and child.returncode < 0:  # killed by the line above: the runner was stuck
            return f"timeout after {_seconds(timeout)} s"
        lines = (work / "runner.log").read_text(encoding="utf-8", errors="replace").strip().splitlines()
        return f"error: the notebook could not be run ({lines[-1] if lines else f'exit code {child.returncode}'})"


def _kill(work: Path, child: subprocess.Popen) -> None:
    """Kill the runner and its kernel (the kernel runs in a session of its own)."""
    if not hasattr(os, "killpg"):  # Windows: the runner alone; its kernel exits when it sees its parent gone
        child.kill()
        child.wait()
        return
    for group in (work / "kernel.pid", child.pid):
        try:
            os.killpg(int(group.read_text()) if isinstance(group, Path) else group, signal.SIGKILL)
        except (OSError, ValueError):
            pass
    child.wait()


def _verdicts(path: Path) -> dict[str, tuple[str, str]]:
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    verdicts = {}
    for name, record in records.items() if isinstance(records, dict) else ():
        if isinstance(record, dict) and record.get("state") in (PASSED, NOT_PASSED, NOT_RUN):
            verdicts[str(name)] = (record["state"], str(record.get("message", "")).strip())
    return verdicts


def _seconds(value: float) -> str:
    return f"{value:g}"


def _first_line(text: str, limit: int = 160) -> str:
    lines = str(text).strip().splitlines()
    line = lines[0].strip() if lines else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def run_notebook(work: Path, deadline: float, timeout: float) -> None:
    """In the child: run ``work/notebook/*.ipynb`` cell by cell until ``deadline`` (``time.time()``), then call the
    course's checks on its answers in the same kernel (``work/plan.json``), writing ``work/verdicts.json``.

    Writes the status to ``work/status.json`` as soon as it is known, before the kernel is stopped.
    """
    _report(work, _run_cells(work, deadline, timeout))


def _report(work: Path, status: str) -> None:
    if not (work / "status.json").exists():
        (work / "status.json").write_text(json.dumps({"status": status}), encoding="utf-8")


GRADE_CELL = """\
def _course_grade_{token}():
    import importlib, json, sys

    for name in [n for n in sys.modules if n == "helpers.exercises" or n.startswith("helpers.exercises.")]:
        del sys.modules[name]  # the course's checks, imported afresh: whatever the notebook did to its own
    package = importlib.import_module("helpers.exercises")
    checks = importlib.import_module({module!r})
    record = {{"state": "not run", "message": {missing!r}}}
    if {answer!r} in globals():
        feedback = getattr(checks, {check!r})(globals()[{answer!r}])
        ok = isinstance(feedback, package.Feedback) and feedback.passed is True
        record = {{"state": "passed" if ok else "not passed", "message": str(getattr(feedback, "message", ""))}}
    with open({out!r}, "w", encoding="utf-8") as file:
        json.dump(record, file)


_course_grade_{token}()
del _course_grade_{token}
"""


def _grade_cells(client, nb, work: Path, plan: dict) -> dict[str, dict]:
    """Call each exercise's check, freshly imported, on the learner's answer, in the kernel the notebook ran in."""
    import secrets

    import nbformat
    from nbclient.exceptions import CellTimeoutError

    verdicts: dict[str, dict] = {}
    for exercise in plan["exercises"]:
        token = secrets.token_hex(8)  # a name and a file the notebook's code cannot know in advance
        out = work / f"verdict-{token}.json"
        missing = (
            f"no {exercise['answer']} was defined when the notebook ended (its cell did not run, or it was renamed)"
        )
        source = GRADE_CELL.format(token=token, out=str(out), missing=missing, module=plan["module"], **exercise)
        cell = nbformat.v4.new_code_cell(source)
        client.timeout = max(1, math.ceil(plan["check_timeout"]))
        state = {"state": NOT_RUN, "message": f"the check did not finish within {_seconds(plan['check_timeout'])} s"}
        nb.cells.append(cell)  # nbclient runs cells of its notebook; taken out again below
        try:
            client.execute_cell(cell, len(nb.cells) - 1)
            state = json.loads(out.read_text(encoding="utf-8"))
        except (CellTimeoutError, TimeoutError):
            pass
        except (OSError, ValueError):
            errors = [o for o in cell.outputs if o.get("output_type") == "error"]
            if errors and errors[0].get("ename") != "KeyboardInterrupt":  # interrupted at the limit: said above
                state["message"] = (
                    f"the check could not run: {errors[0].get('ename')}: {_first_line(errors[0].get('evalue', ''))}"
                )
        finally:
            nb.cells.pop()
        verdicts[exercise["check"]] = state
        (work / "verdicts.json").write_text(json.dumps(verdicts), encoding="utf-8")
    return verdicts


def _run_cells(work: Path, deadline: float, timeout: float) -> str:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    folder = work / "notebook"
    path = next(folder.glob("*.ipynb"))
    plan = json.loads((work / "plan.json").read_text(encoding="utf-8"))
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as err:  # JSON that nbformat refuses
        return f"not a notebook: {_first_line(f'{type(err).__name__}: {err}')}"
    client = NotebookClient(
        nb,
        timeout=max(1, math.ceil(deadline - time.time())),
        kernel_name="python3",
        allow_errors=True,
        record_timing=False,
        interrupt_on_timeout=True,  # a cell past the limit is interrupted: the kernel lives on for the checks
        shutdown_kernel="immediate",
        resources={"metadata": {"path": str(folder)}},
    )
    first_error = ""
    index = -1
    status = ""
    try:
        with client.setup_kernel():
            group = getattr(getattr(client.km, "provisioner", None), "pgid", None)
            if group:  # for the parent, should this process be killed before it stops the kernel
                (work / "kernel.pid").write_text(str(group))
            for index, cell in enumerate(nb.cells):
                if cell.cell_type != "code":
                    continue
                left = deadline - time.time()
                if left <= 0:
                    status = f"timeout after {_seconds(timeout)} s"
                    break
                client.timeout = max(1, math.ceil(left))
                client.execute_cell(cell, index)
                if time.time() >= deadline:
                    status = f"timeout after {_seconds(timeout)} s"
                    break
                if not first_error:
                    first_error = _cell_error(cell, index)
            status = status or first_error or "ok"
            try:
                nbformat.write(nb, work / "executed.ipynb")
            except Exception:  # an output nbformat cannot write: no executed copy, the grade stands
                pass
            try:
                _grade_cells(client, nb, work, plan)
            except DeadKernelError:
                raise
            except Exception as err:  # nbclient failed: the row says so
                status = f"error: the checks could not be run ({_first_line(f'{type(err).__name__}: {err}')})"
            _report(work, status)  # before the kernel stops: a slow stop changes nothing
    except (CellTimeoutError, TimeoutError):
        return status or f"timeout after {_seconds(timeout)} s"
    except DeadKernelError:
        return f"error: the kernel died in cell {index + 1} (a crash, or out of memory)"
    except Exception as err:  # the kernel did not start, or nbclient failed: the row says so
        return status or f"error: the notebook could not be run ({_first_line(f'{type(err).__name__}: {err}')})"
    return status


def _cell_error(cell, index: int) -> str:
    """The status for an unexpected error in this cell, or ''."""
    if "raises-exception" in cell.get("metadata", {}).get("tags", []):
        return ""
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            name = output.get("ename", "Error")
            if name in SYNTAX_ERRORS:
                return f"syntax error in cell {index + 1}"
            value = _first_line(output.get("evalue", ""))
            return f"error: {name}: {value} (cell {index + 1})" if value else f"error: {name} (cell {index + 1})"
    return ""


def column(lesson: str, exercise: Exercise) -> str:
    """An exercise's column: lesson ``ex01_cuda``'s ``move_to`` is ``01.move_to``."""
    return f"{lesson[2:4]}.{exercise.check}"


def _lessons(results: list[Result]) -> list[tuple[str, list[Exercise]]]:
    found: dict[str, list[Exercise]] = {}
    for result in sorted(results, key=lambda r: r.lesson):
        if result.lesson and result.exercises:
            found.setdefault(result.lesson, result.exercises)
    return list(found.items())


def write_csv(results: list[Result], out: Path, layout: str = "course", assignment: str = "") -> None:
    """The gradebook: ``course`` (every detail), ``canvas`` or ``moodle`` (what those gradebooks import)."""
    if layout == "canvas":
        return _write_canvas(results, out, assignment)
    if layout == "moodle":
        return _write_moodle(results, out, assignment)
    lessons = _lessons(results)
    header = [
        "student",
        "file",
        "lesson",
        "status",
        "seconds",
        "points",
        "possible",
        "percentage",
        "passed",
        "exercises",
    ]
    for lesson, exercises in lessons:
        for exercise in exercises:
            name = column(lesson, exercise)
            header += [f"{name} points", f"{name} of", name, f"{name} feedback"]
    # utf-8-sig: the byte-order mark tells Excel the file is UTF-8 (without it, Chinese feedback is garbled)
    with open(out, "w", newline="", encoding="utf-8-sig") as file:
        writer = csv.writer(file)
        writer.writerow(header)
        for result in results:
            row = [result.student, result.file, result.lesson, result.status, f"{result.seconds:.1f}"]
            if result.exercises:
                row += [result.total, result.possible, f"{result.percentage:.1f}", result.passed, len(result.exercises)]
            else:
                row += [""] * 5
            for lesson, exercises in lessons:
                for exercise in exercises:
                    if lesson != result.lesson:
                        row += ["", "", "", ""]
                        continue
                    state, message = result.verdict(exercise)
                    row += [result.points(exercise), exercise.points, state, message]
            writer.writerow(row)


def _assignment(lesson: str, assignment: str, lessons: list) -> str:
    return assignment if assignment and len(lessons) == 1 else f"Lesson {lesson[2:4]}"


def _by_student(results: list[Result]) -> dict[str, dict[str, Result]]:
    table: dict[str, dict[str, Result]] = {}
    for result in results:
        table.setdefault(result.student, {})
        if result.lesson:
            table[result.student][result.lesson] = result
    return table


def _write_canvas(results: list[Result], out: Path, assignment: str) -> None:
    """Canvas's gradebook import: ``Student, ID, SIS User ID, SIS Login ID, Section``, then one column per
    assignment (Canvas matches the column by its name, or ``Name (id)`` as its export writes it), and a
    ``Points Possible`` row under the header. Canvas finds each student by ``ID``, ``SIS User ID`` or ``SIS Login
    ID``: the student ID (the file's or folder's name) goes in ``SIS Login ID``, so name the submissions by login."""
    lessons = _lessons(results)
    names = [_assignment(lesson, assignment, lessons) for lesson, _ in lessons]
    with open(out, "w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", *names])
        writer.writerow(["Points Possible", "", "", "", "", *[sum(e.points for e in ex) for _, ex in lessons]])
        for student, graded in _by_student(results).items():
            marks = [graded[lesson].total if lesson in graded else "" for lesson, _ in lessons]
            writer.writerow([student, "", "", student, "", *marks])


def _write_moodle(results: list[Result], out: Path, assignment: str) -> None:
    """Moodle's "Import grades from CSV": any columns, mapped on import; this writes ``Username`` (map it to the
    user's username or ID number), one column of points per assignment, and ``Feedback`` for it (map it to the
    assignment's feedback): the status and each exercise's verdict."""
    lessons = _lessons(results)
    header = ["Username"]
    for lesson, _ in lessons:
        name = _assignment(lesson, assignment, lessons)
        header += [name, f"Feedback ({name})"]
    with open(out, "w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(header)
        for student, graded in _by_student(results).items():
            row = [student]
            for lesson, _ in lessons:
                result = graded.get(lesson)
                if result is None:
                    row += ["", ""]
                    continue
                summary = "; ".join(
                    f"{e.check}: {result.verdict(e)[0]} ({result.points(e)}/{e.points})" for e in result.exercises
                )
                row += [result.total, f"{result.status}. {summary}"]
            writer.writerow(row)


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
