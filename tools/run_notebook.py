"""Run a notebook in place in the mode every stored output is made in (quick mode, CPU only), and keep of its
tracebacks what the error clinic shows. ``tools/refresh_notebooks.py`` runs the English notebooks with it,
``tools/translate.py build --outputs`` their Chinese twins.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbconvert.preprocessors import CoalesceStreamsPreprocessor

from tools import course, stored_state

QUICK = {"COURSE_QUICK": "1"}
HIDE_ACCELERATORS = {"COURSE_DEVICE": "cpu", "CUDA_VISIBLE_DEVICES": ""}
ANSI = re.compile(r"\x1b\[[0-9;]*m")
FRAME_FILE = re.compile(r"^File (\S+?):\d+")  # IPython's header of a frame in a file: "File /path/x.py:12, in f()"
CHAINED = "Traceback (most recent call last)"


def trim_traceback(nb: nbformat.NotebookNode, folder: Path) -> None:
    """Keep what the error clinic shows (helpers/clinic/__init__.py): the learner's own frames (the notebook's cells,
    and files of the notebook's folder, named relative to it) and the error's last line; the frames inside torch, the
    course's helpers and Python's own name files on this machine and go. Of a chained error, the last one."""
    from helpers.clinic import is_learners

    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.output_type != "error" or not out.traceback:
                continue
            parts = [ANSI.sub("", part) for part in out.traceback]
            header = max((i for i, part in enumerate(parts[:-1]) if CHAINED in part), default=None)
            if header is None:  # no frames (a SyntaxError): its last line
                out.traceback = parts[-1:]
                continue
            kept = []
            for part in parts[header + 1 : -1]:
                found = FRAME_FILE.match(part)
                if found is None:  # a cell's frame ("Cell In[3], line 2"), or the clinic's line about %tb
                    kept.append(part)
                    continue
                path = Path(os.path.expanduser(found.group(1)))
                if is_learners(str(path)) and path.resolve().is_relative_to(folder.resolve()):
                    kept.append(part.replace(found.group(1), os.path.relpath(path, folder), 1))
            out.traceback = [parts[header], *kept, parts[-1]]


def refresh(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=600, kernel_name="python3", record_timing=False, resources={"metadata": {"path": str(path.parent)}}
    )
    start = time.perf_counter()
    client.execute()
    trim_traceback(nb, path.parent)
    # one output per stream, however the kernel's flushes split it (the checks' tests read the stored text)
    nb, _ = CoalesceStreamsPreprocessor().preprocess(nb, {})
    stored_state.strip(nb)  # no progress-bar widgets or editor leftovers: a refresh rewrites only changed outputs
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    path.write_text(nbformat.writes(nb) + "\n", encoding="utf-8")
    print(f"refreshed {course.repo_path(path)} in {time.perf_counter() - start:.1f} s")


def quick_cpu_environment() -> None:
    """Quick mode, and no accelerator visible where there is one: the mode every stored output is run in."""
    os.environ.update(QUICK)
    import torch

    if torch.cuda.is_available() or torch.backends.mps.is_available():
        os.environ.update(HIDE_ACCELERATORS)
