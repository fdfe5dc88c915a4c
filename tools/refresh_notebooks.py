"""Re-execute notebooks in place, in the mode the tests check them in (quick mode, CPU only).

    python tools/refresh_notebooks.py                       # every lesson and solutions notebook
    python tools/refresh_notebooks.py notebooks/01_*.ipynb  # some of them

The stored outputs are always the CPU-fallback ones (on a machine with a GPU, the GPU is hidden while
refreshing), so they are the same whoever refreshes them; tests/nbval_sanitize.cfg makes them compare
equal on a GPU too. On a CPU-only machine nothing is hidden, so the stored outputs (the doctor's report,
for one) show a plain machine rather than one with CUDA_VISIBLE_DEVICES set.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import nbformat
from nbclient import NotebookClient

from tools import course

QUICK = {"COURSE_QUICK": "1"}
HIDE_ACCELERATORS = {"COURSE_DEVICE": "cpu", "CUDA_VISIBLE_DEVICES": ""}
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def trim_traceback(nb: nbformat.NotebookNode) -> None:
    """Keep only the last line of a stored traceback: the rest names files on this machine."""
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.output_type == "error":
                out.traceback = [ANSI.sub("", out.traceback[-1])] if out.traceback else []


def refresh(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=600, kernel_name="python3", record_timing=False, resources={"metadata": {"path": str(path.parent)}}
    )
    start = time.perf_counter()
    client.execute()
    trim_traceback(nb)
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    path.write_text(nbformat.writes(nb) + "\n", encoding="utf-8")
    print(f"refreshed {course.repo_path(path)} in {time.perf_counter() - start:.1f} s")


def main(argv: list[str]) -> int:
    os.environ.update(QUICK)
    import torch

    if torch.cuda.is_available() or torch.backends.mps.is_available():
        os.environ.update(HIDE_ACCELERATORS)
    paths = [Path(a).resolve() for a in argv] or course.all_notebooks()
    for path in paths:
        refresh(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
