"""The grader's runs (:mod:`helpers.course.grade`): one submission in a copy in a temporary folder, in a fresh
kernel started by a child ``python -m helpers grade --child`` within the time limit, quick mode on the CPU and the
proxy variables pointing at a closed port; then each exercise's check called afresh in that kernel, its verdict
written to a file the parent reads. The module docstring of :mod:`helpers.course.grade` says what this closes and
what it does not.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from helpers.course.config import DEVICE_ENV, FULL_ENV, QUICK_ENV, VERDICTS_ENV
from helpers.course.grade_lessons import NOT_PASSED, NOT_RUN, PASSED, Result, lesson_exercises, lesson_of, read_notebook

DEFAULT_TIMEOUT_S = 600  # the slowest lessons (05, 06, 08) took up to 7 min on a busy 2-core machine


CLOSED_PORT = "http://127.0.0.1:9"  # the discard port: nothing listens there, a connection fails at once


PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


CHECK_TIMEOUT_S = 120  # per exercise, after the notebook ran: the slowest checks (05, 07) train small loops


KILL_GRACE_S = 30  # how long past the limit the runner may take to stop the kernel before both are killed


SYNTAX_ERRORS = {"SyntaxError", "IndentationError", "TabError"}


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
