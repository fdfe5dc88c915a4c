"""Hardware variants, run on any CPU: notebooks under strict nbval in a kernel switched at start-up.

Builds without oneDNN (some macOS arm64 wheels, custom builds) run other CPU kernels, which word some
dtype errors differently. A kernel started with ``torch.backends.mkldnn.enabled = False`` takes those
paths here, so a cell that teaches such a message must hold for either kernel. The switch sits in an
IPython start-up file (a temporary IPYTHONDIR), so it is set before the notebook's first cell runs;
the same file records the switch's state after every cell, which proves that it held throughout.
"""

import os
import re
import subprocess
import sys

import nbformat

from tools import course

# Notebooks whose cells teach a CPU kernel's error message (dtype mix-ups in layers and matmul).
ONEDNN_NOTEBOOKS = [
    "notebooks/01_cpu_to_gpu_cuda.ipynb",
    "notebooks/04_models_vs_tensors.ipynb",
    "notebooks/solutions/04_models_vs_tensors_solutions.ipynb",
]

MARKER_ENV = "COURSE_TEST_VARIANT_MARKER"
ONEDNN_OFF = f"""\
import os

import torch

torch.backends.mkldnn.enabled = False


def _record_variant(event):
    with open(os.environ["{MARKER_ENV}"], "a") as f:
        f.write(f"{{event}}: mkldnn.enabled={{torch.backends.mkldnn.enabled}}\\n")


_record_variant("kernel start")
get_ipython().events.register("post_run_cell", lambda result: _record_variant("cell"))
"""


def run_under_startup(notebooks: list[str], startup: str, tmp_path) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run notebooks under strict nbval (the suite's own settings) in kernels that run ``startup`` first.

    Returns pytest's result and the lines the start-up file's code wrote to the marker file.
    """
    startup_dir = tmp_path / "ipython" / "profile_default" / "startup"
    startup_dir.mkdir(parents=True)
    (startup_dir / "00_variant.py").write_text(startup)
    marker = tmp_path / "marker.txt"
    env = {**os.environ, "IPYTHONDIR": str(tmp_path / "ipython"), MARKER_ENV: str(marker)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", *notebooks],  # in one process: the suite's workers are busy
        cwd=course.ROOT, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    return result, marker.read_text().splitlines() if marker.exists() else []


def code_cells(notebook: str) -> int:
    nb = nbformat.read(course.ROOT / notebook, as_version=4)
    return sum(1 for c in nb.cells if c.cell_type == "code" and c.source.strip())


def test_notebooks_without_onednn(tmp_path):
    """One pytest run for all of them: a kernel start each, but one interpreter and plugin start-up."""
    result, states = run_under_startup(ONEDNN_NOTEBOOKS, ONEDNN_OFF, tmp_path)
    starts = [s for s in states if s.startswith("kernel start:")]
    assert len(starts) == len(ONEDNN_NOTEBOOKS), f"the start-up file ran in {len(starts)} kernels:\n{result.stdout}"
    assert {s.split(": ", 1)[1] for s in states} == {"mkldnn.enabled=False"}, f"oneDNN came back on: {states}"
    cells_run = len(states) - len(starts)
    assert cells_run >= sum(map(code_cells, ONEDNN_NOTEBOOKS)), "some cells ran without the switch recorded"
    failed = re.findall(r"^FAILED (\S+)", result.stdout, re.MULTILINE)
    assert result.returncode == 0, f"fails without oneDNN: {failed}\n{result.stdout[-4000:]}"
