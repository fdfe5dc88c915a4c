"""Grade a class's notebooks: ``python -m helpers grade FOLDER`` runs each and writes one CSV.

    python -m helpers grade submissions/                  # writes grades.csv here
    python -m helpers grade submissions/ --out 01.csv --timeout 180 --jobs 2

Every ``*.ipynb`` directly in FOLDER is run from top to bottom in a fresh kernel, the way "Restart and
run all" would, and the verdict of each exercise check is collected. The CSV has one row per file:

- ``file``, ``lesson`` (the check module the notebook imports, e.g. ``ex01_cuda``), ``status``,
  ``passed`` and ``exercises`` (how many of the lesson's exercises passed, out of how many);
- for each exercise of the lessons found, two columns, e.g. ``01.move_to`` (``passed``, ``not passed``
  or ``not run``) and ``01.move_to feedback`` (the first line of the check's feedback).

The lesson comes from the notebook's cells (its ``from helpers.exercises import exNN_... as check``
line), never from the file name, and the exercises are all the checks of that module: one the learner
never ran reads ``not run``. A check called more than once counts with its last verdict.

``status`` is ``ok`` (every cell ran; cells tagged ``raises-exception`` may raise), ``syntax error in
cell N``, ``error: <the first error's first line> (cell N)``, ``error: the kernel died in cell N ...``,
``timeout after N s`` (exercises checked before the limit keep their verdicts), ``not a notebook: ...``,
or ``no exercises: ...`` for a notebook that imports no lesson's checks (not run). Cells are counted from
the top, markdown cells included, from 1. After an error the remaining cells still run, so a later
exercise is still graded.

How a notebook runs:

- in a copy, in a temporary folder that is also its working directory (what it writes, ``data/``,
  ``checkpoints/``, ``runs/``, goes there and is deleted): the learner's file and folder are never
  changed;
- in a kernel of this Python (the course installed), one notebook after another, or ``--jobs N`` at a
  time; each within ``--timeout`` seconds in all, kernel start included (default 600: the ten shipped
  lessons used about 50 s of CPU time each on average, and took 40 s to 7 min each on a busy 2-core
  machine). A notebook that hangs, crashes its kernel or is not a notebook is reported in its row and the
  others go on;
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
inside a container or virtual machine without a network (``docker run --network none ...``). Nor is it
an exam proctor: a notebook's code can print or write anything, a forged verdict included.

How verdicts are read: with ``COURSE_VERDICTS`` set (see ``helpers.exercises``), every exercise check
also appends its verdict, as one JSON line with the check's module and name, to a file outside the
notebook's folder; the notebook's printed output is not parsed.
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
KILL_GRACE_S = 30  # how long past the limit the runner may take to stop the kernel before both are killed
SYNTAX_ERRORS = {"SyntaxError", "IndentationError", "TabError"}
LESSON_IMPORT = re.compile(
    r"^\s*(?:from\s+helpers\.exercises\s+import\s+(ex\d\d_\w+)"
    r"|from\s+helpers\.exercises\.(ex\d\d_\w+)\s+import"
    r"|import\s+helpers\.exercises\.(ex\d\d_\w+))",
    re.MULTILINE,
)
PASSED, NOT_PASSED, NOT_RUN = "passed", "not passed", "not run"


@dataclass
class Result:
    """One notebook's row."""

    file: str
    lesson: str = ""
    status: str = "ok"
    exercises: list[str] = field(default_factory=list)
    """The lesson's checks, as ``helpers.exercises.exNN_x.name``."""
    verdicts: dict[str, tuple[bool, str]] = field(default_factory=dict)
    """Check name: (passed, first line of its feedback), the last verdict of each check."""
    seconds: float = 0.0

    @property
    def passed(self) -> int:
        return sum(self.verdicts.get(name, (False, ""))[0] for name in self.exercises)


def lesson_of(nb: dict) -> str | None:
    """The check module a notebook imports (``ex01_cuda``), from its code cells; None if it imports none."""
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        match = LESSON_IMPORT.search(source if isinstance(source, str) else "".join(source))
        if match:
            return next(group for group in match.groups() if group)
    return None


def exercises_of(lesson: str) -> list[str]:
    """Every exercise check of ``helpers.exercises.<lesson>``, in the order the module defines them."""
    module = importlib.import_module(f"helpers.exercises.{lesson}")
    return [
        f"{module.__name__}.{name}"
        for name, value in vars(module).items()
        if getattr(value, "is_exercise_check", False) and getattr(value, "__module__", "") == module.__name__
    ]


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


def environment(device: str, work: Path) -> dict[str, str]:
    """The variables a notebook runs with: quick mode, the device, the network cut, verdicts recorded."""
    env = dict(os.environ)
    env.update({QUICK_ENV: "1", DEVICE_ENV: device, VERDICTS_ENV: str(work / "verdicts.jsonl")})
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    env.update(dict.fromkeys(PROXY_VARIABLES, CLOSED_PORT))
    env.update({"no_proxy": "", "NO_PROXY": "", "PIP_NO_INDEX": "1"})
    env.update({"IPYTHONDIR": str(work / "ipython"), "JUPYTER_RUNTIME_DIR": str(work / "runtime")})
    env.pop(FULL_ENV, None)
    return env


def grade_one(path: Path, timeout: float, device: str) -> Result:
    """Run one notebook in a temporary copy and collect its exercises' verdicts."""
    result = Result(file=path.name)
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
        result.exercises = exercises_of(lesson)
    except ModuleNotFoundError as err:
        if err.name != f"helpers.exercises.{lesson}":
            raise
        result.status = f"no exercises: helpers.exercises.{lesson} is not a lesson of this course"
        return result
    with tempfile.TemporaryDirectory(prefix="grade-", ignore_cleanup_errors=True) as tmp:
        work = Path(tmp)
        (work / "notebook").mkdir()
        shutil.copyfile(path, work / "notebook" / path.name)
        result.status = _run_child(work, timeout, environment(device, work))
        result.verdicts = _verdicts(work / "verdicts.jsonl")
    result.seconds = time.perf_counter() - start
    return result


def _run_child(work: Path, timeout: float, env: dict[str, str]) -> str:
    """Run the notebook in a child process (which starts the kernel); its status line."""
    deadline = time.time() + timeout  # the runner stops the notebook then, counting its own start-up
    command = [sys.executable, "-m", "helpers", "grade", str(work), "--child", "--deadline", repr(deadline)]
    command += ["--timeout", repr(timeout)]
    with open(work / "runner.log", "wb") as log:
        child = subprocess.Popen(
            command, env=env, cwd=work, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            child.wait(timeout=timeout + KILL_GRACE_S)
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


def _verdicts(path: Path) -> dict[str, tuple[bool, str]]:
    verdicts: dict[str, tuple[bool, str]] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return verdicts
    for line in lines:
        try:
            record = json.loads(line)
            message = str(record.get("message", "")).strip()
            verdicts[str(record["check"])] = (record["passed"] is True, message.splitlines()[0] if message else "")
        except (ValueError, KeyError, TypeError, AttributeError):
            continue  # a line cut short by a kill, or not a verdict
    return verdicts


def _seconds(value: float) -> str:
    return f"{value:g}"


def _first_line(text: str, limit: int = 160) -> str:
    lines = str(text).strip().splitlines()
    line = lines[0].strip() if lines else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def run_notebook(work: Path, deadline: float, timeout: float) -> None:
    """In the child: run ``work/notebook/*.ipynb`` cell by cell until ``deadline`` (``time.time()``).

    Writes the status to ``work/status.json`` as soon as it is known, before the kernel is stopped.
    """
    _report(work, _run_cells(work, deadline, timeout))


def _report(work: Path, status: str) -> None:
    if not (work / "status.json").exists():
        (work / "status.json").write_text(json.dumps({"status": status}), encoding="utf-8")


def _run_cells(work: Path, deadline: float, timeout: float) -> str:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    folder = work / "notebook"
    path = next(folder.glob("*.ipynb"))
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
        shutdown_kernel="immediate",
        resources={"metadata": {"path": str(folder)}},
    )
    first_error = ""
    index = -1
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
                    raise CellTimeoutError("out of time")
                client.timeout = max(1, math.ceil(left))
                client.execute_cell(cell, index)
                if not first_error:
                    first_error = _cell_error(cell, index)
            _report(work, first_error or "ok")  # before the kernel stops: a slow stop changes nothing
    except (CellTimeoutError, TimeoutError):
        return f"timeout after {_seconds(timeout)} s"
    except DeadKernelError:
        return f"error: the kernel died in cell {index + 1} (a crash, or out of memory)"
    except Exception as err:  # the kernel did not start, or nbclient failed: the row says so
        return f"error: the notebook could not be run ({_first_line(f'{type(err).__name__}: {err}')})"
    return first_error or "ok"


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


def column(check: str) -> str:
    """A check's column: ``helpers.exercises.ex01_cuda.move_to`` is ``01.move_to``."""
    module, name = check.rsplit(".", 1)
    return f"{module.rsplit('.', 1)[-1][2:4]}.{name}"


def write_csv(results: list[Result], out: Path) -> None:
    checks: list[str] = []
    for result in sorted(results, key=lambda r: r.lesson):
        checks += [name for name in result.exercises if name not in checks]
    header = ["file", "lesson", "status", "passed", "exercises"]
    for name in checks:
        header += [column(name), f"{column(name)} feedback"]
    # utf-8-sig: the byte-order mark tells Excel the file is UTF-8 (without it, Chinese feedback is garbled)
    with open(out, "w", newline="", encoding="utf-8-sig") as file:
        writer = csv.writer(file)
        writer.writerow(header)
        for result in results:
            row = [result.file, result.lesson, result.status]
            row += [str(result.passed), str(len(result.exercises))] if result.exercises else ["", ""]
            for name in checks:
                if name not in result.exercises:
                    row += ["", ""]
                elif name in result.verdicts:
                    ok, message = result.verdicts[name]
                    row += [PASSED if ok else NOT_PASSED, message]
                else:
                    row += [NOT_RUN, ""]
            writer.writerow(row)


def grade(
    folder: Path, out: Path, timeout: float = DEFAULT_TIMEOUT_S, jobs: int = 1, device: str = "cpu"
) -> list[Result]:
    """Grade every notebook in ``folder``; write the CSV to ``out``; the results, in file-name order."""
    paths = sorted(p for p in folder.glob("*.ipynb") if p.is_file() and not p.name.startswith("."))
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(grade_one, path, timeout, device) for path in paths]
        results = []
        for future in futures:
            result = future.result()
            results.append(result)
            score = f", {result.passed} of {len(result.exercises)} passed" if result.exercises else ""
            print(f"{result.file}: {result.status}{score} ({result.seconds:.1f} s)", flush=True)
    write_csv(results, out)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helpers grade",
        description="Run every learner notebook (*.ipynb) in FOLDER and write one CSV row per file: each "
        "exercise passed, not passed or not run, with the first line of its feedback, and a status.",
        epilog="Each notebook runs in a temporary copy (the learners' files are not changed), in quick mode, with "
        "downloads cut through the proxy variables. It runs learners' code with your rights: this is not a sandbox "
        "(python -c 'import helpers.course.grade; help(helpers.course.grade)' says what is and is not blocked).",
    )
    parser.add_argument("folder", type=Path, help="the folder of notebooks (not searched recursively)")
    parser.add_argument("--out", type=Path, default=Path("grades.csv"), help="the CSV to write (default: grades.csv)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help=f"seconds per notebook, all cells together (default: {DEFAULT_TIMEOUT_S})",
    )
    parser.add_argument("--jobs", type=int, default=1, help="notebooks run at the same time (default: 1)")
    parser.add_argument("--device", default="cpu", help="COURSE_DEVICE for the notebooks (default: cpu, GPUs hidden)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # runs one notebook: internal
    parser.add_argument("--deadline", type=float, help=argparse.SUPPRESS)  # the child's, in time.time() seconds
    args = parser.parse_args(argv)
    if args.child:
        run_notebook(args.folder, args.deadline, args.timeout)
        return 0
    if args.timeout <= 0 or args.jobs < 1:
        parser.error("--timeout must be above 0 and --jobs at least 1")
    if not args.folder.is_dir():
        parser.error(f"{args.folder} is not a folder: give the folder that holds the learners' notebooks")
    if not any(args.folder.glob("*.ipynb")):
        print(f"No notebooks (*.ipynb) in {args.folder}: nothing to grade.", file=sys.stderr)
        return 1
    start = time.perf_counter()
    results = grade(args.folder, args.out, args.timeout, args.jobs, args.device)
    print(f"Wrote {args.out}: {len(results)} notebooks in {time.perf_counter() - start:.0f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
