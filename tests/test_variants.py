"""Hardware variants, run on any CPU: notebooks under strict nbval in a kernel switched at start-up.

Builds without oneDNN (some macOS arm64 wheels, custom builds) run other CPU kernels, which word some
dtype errors differently. A kernel started with ``torch.backends.mkldnn.enabled = False`` takes those
paths here, so a cell that teaches such a message must hold for either kernel. The switch sits in an
IPython start-up file (a temporary IPYTHONDIR), so it is set before the notebook's first cell runs;
the same file records the switch's state after every cell, which proves that it held throughout.
"""

import os
import subprocess
import sys

import pytest

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


def _record_variant(result=None):
    with open(os.environ["{MARKER_ENV}"], "a") as f:
        f.write(f"mkldnn.enabled={{torch.backends.mkldnn.enabled}}\\n")


_record_variant()
get_ipython().events.register("post_run_cell", _record_variant)
"""


def run_under_startup(notebook: str, startup: str, tmp_path) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run one notebook under strict nbval (the suite's own settings) in a kernel that runs ``startup`` first."""
    startup_dir = tmp_path / "ipython" / "profile_default" / "startup"
    startup_dir.mkdir(parents=True)
    (startup_dir / "00_variant.py").write_text(startup)
    marker = tmp_path / "marker.txt"
    env = {**os.environ, "IPYTHONDIR": str(tmp_path / "ipython"), MARKER_ENV: str(marker)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", notebook],
        cwd=course.ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    return result, marker.read_text().splitlines() if marker.exists() else []


@pytest.mark.parametrize("notebook", ONEDNN_NOTEBOOKS)
def test_notebook_without_onednn(notebook, tmp_path):
    import nbformat

    result, states = run_under_startup(notebook, ONEDNN_OFF, tmp_path)
    nb = nbformat.read(course.ROOT / notebook, as_version=4)
    n_cells = sum(1 for c in nb.cells if c.cell_type == "code" and c.source.strip())
    assert states, "the start-up file did not run in the notebook's kernel"
    assert set(states) == {"mkldnn.enabled=False"}, f"oneDNN was switched back on: {states}"
    assert len(states) >= n_cells + 1, f"the switch was recorded before {len(states) - 1} of {n_cells} cells"
    assert result.returncode == 0, result.stdout[-4000:]
