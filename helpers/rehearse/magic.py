"""``%%rehearse``: a notebook cell rehearsed as a whole script on a pretend GPU, Mac or laptop.

``%load_ext helpers.rehearse`` once, then a cell that starts with ``%%rehearse`` (options as
``python -m helpers.rehearse``: ``--as gpu|gpus:N|mac|laptop``, ``--steps N``, ``--loops N``, ``--static``,
``--fix``) is written to a file and rehearsed there, in a **child process**: the cell is a whole script, as a
learner's ``train.py`` is. It imports what it needs and sees none of the notebook's names, and the names it
defines stay in the child; nothing it patches or trains is left in the kernel. The child works in the notebook's
folder (so ``data/`` and ``checkpoints/`` are the notebook's) and speaks the course's language (``COURSE_LANG``).
The report is printed under the cell, with the cell's own lines as ``<cell>:N``; ``helpers.rehearse.magic.last``
keeps the last run (its ``exit_code``, 0 when the cell would run on that machine, and its ``output``).
A wrong option prints the usage, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from helpers.course.i18n import tr

CELL = "<cell>"
last: dict = {}  # the last %%rehearse run: exit_code, output, options


class UsageError(ValueError):
    """A wrong %%rehearse option: the magic prints the usage and this message."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse would exit the kernel's cell with SystemExit and a traceback
        raise UsageError(message)

    def exit(self, status=0, message=None):  # --help
        raise UsageError(message or "")


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="%%rehearse",
        add_help=True,
        description=tr(
            "Rehearse this cell as a whole script (in a child process) on a pretend machine; the same options "
            "as python -m helpers.rehearse."
        ),
    )
    p.add_argument("--as", dest="machine", default="gpu", help=tr("gpu (default), gpus:N, mac, or laptop"))
    p.add_argument("--steps", type=int, default=3, help=tr("batches per DataLoader loop (default 3)"))
    p.add_argument("--loops", type=int, default=4, help=tr("DataLoader loops before the run stops (default 4)"))
    p.add_argument("--timeout", type=float, default=600, help=tr("seconds before the run stops (default 600)"))
    p.add_argument("--static", action="store_true", help=tr("read the cell without running it"))
    p.add_argument("--fix", action="store_true", help=tr("print the device-agnostic version and rehearse it"))
    p.add_argument("args", nargs="*", help=tr("the script's own arguments (sys.argv[1:])"))
    return p


def options(line: str) -> argparse.Namespace:
    """The magic's line parsed, or UsageError with what is wrong."""
    try:
        words = shlex.split(line)
    except ValueError as err:
        raise UsageError(str(err)) from None
    opts = parser().parse_args(words)
    if opts.steps < 1 or opts.loops < 1:
        raise UsageError(tr("--steps and --loops take a whole number of at least 1"))
    from helpers.rehearse.pretend_gpu import Machine

    try:
        Machine.parse(opts.machine)
    except ValueError as err:
        raise UsageError(str(err)) from None
    return opts


def command(opts: argparse.Namespace, script: Path) -> list[str]:
    """The ``python -m helpers.rehearse`` command the cell runs under."""
    words = [sys.executable, "-m", "helpers.rehearse", "--as", opts.machine]
    words += ["--steps", str(opts.steps), "--loops", str(opts.loops), "--timeout", str(opts.timeout)]
    words += ["--static"] * opts.static + ["--fix"] * opts.fix
    return [*words, str(script), *opts.args]


def rehearse_cell(line: str, cell: str) -> dict:
    """Rehearse ``cell`` with the options in ``line``; print the report; return (and keep in ``last``) the run."""
    try:
        opts = options(line)
    except UsageError as err:
        print(parser().format_usage().rstrip())
        if str(err).strip():
            print(tr("%%rehearse: {problem}", problem=str(err).strip()))
        last.clear()
        last.update(exit_code=2, output="", usage=True)
        return dict(last)
    with tempfile.TemporaryDirectory(prefix="rehearse-cell-") as folder:
        script = Path(folder) / "cell.py"
        script.write_text(cell)
        done = subprocess.run(
            command(opts, script),
            capture_output=True,
            text=True,
            cwd=os.getcwd(),
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            timeout=opts.timeout + 120,
        )
        output = _as_cell(done.stdout + done.stderr, script)
    print(output.rstrip())
    last.clear()
    last.update(exit_code=done.returncode, output=output, machine=opts.machine)
    return dict(last)


def _as_cell(text: str, script: Path) -> str:
    """The report with the cell's file written as ``<cell>`` (its temporary path means nothing to a learner)."""
    for spelling in (str(script), str(script.resolve()), script.name):
        text = text.replace(spelling, CELL)
    return text


def _magic(line: str, cell: str) -> None:
    rehearse_cell(line, cell)


def load_ipython_extension(ipython) -> None:
    """``%load_ext helpers.rehearse``: registers the ``%%rehearse`` cell magic."""
    ipython.register_magic_function(_magic, magic_kind="cell", magic_name="rehearse")


def unload_ipython_extension(ipython) -> None:
    ipython.magics_manager.magics["cell"].pop("rehearse", None)
