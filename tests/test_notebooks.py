"""Structure of every notebook: what strict nbval, Colab and a reader depend on.

The notebooks' outputs themselves are checked by nbval (``pytest`` collects notebooks/ with --nbval).
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager

from tools import course, stored_state, translate

NOTEBOOKS = course.all_notebooks()
IDS = [course.repo_path(p) for p in NOTEBOOKS]
TWINS = [translate.zh_path(p) for p in NOTEBOOKS]
LOCAL_PATH = re.compile(r"(/root/|/home/\w|/Users/\w|/work/|[A-Z]:\\\\Users|/tmp/(?!ipykernel_))")
MAX_BYTES = 1_500_000


def read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]


def test_lessons_are_numbered_in_order_without_gaps():
    names = sorted(p.name for p in course.NOTEBOOKS.glob("*.ipynb"))
    assert names, "no notebooks found"
    assert all(course.LESSON_NAME.match(n) for n in names), f"not named NN_topic.ipynb: {names}"
    assert [int(n[:2]) for n in names] == list(range(len(names)))


def test_every_lesson_has_a_solutions_notebook_and_no_orphans():
    expected = {f"{p.stem}_solutions.ipynb" for p in course.lessons()}
    assert {p.name for p in course.solutions()} == expected


def test_links_agree_with_the_slug_in_pyproject():
    result = subprocess.run(
        [sys.executable, "tools/sync_links.py", "--check"], cwd=course.ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout


SETUP_CELL = f"""\
# Setup (supporting code, not the lesson). In Colab this installs the course helpers;
# locally they come with `pip install -e ".[lab]"` and this cell prints nothing.
import sys

if "google.colab" in sys.modules:
    %pip install -q "{course.install_spec()}"

from helpers.colab import setup

setup()"""  # CONTRIBUTING.md, "Anatomy of a lesson notebook"; the twins' is this one translated (test_translation.py)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_title_badge_and_setup_cell(path):
    nb = read(path)
    first, setup = nb.cells[0], nb.cells[1]
    assert first.cell_type == "markdown" and first.source.startswith("# "), "first cell: a markdown title"
    assert course.badge(path) in first.source, "the Colab badge must open this very notebook"
    assert setup.cell_type == "code" and setup.source == SETUP_CELL, "the setup cell, word for word"
    assert setup.outputs == [], "the setup cell prints nothing locally"


@pytest.mark.parametrize("path", NOTEBOOKS + TWINS, ids=IDS + [course.repo_path(p) for p in TWINS])
def test_no_widget_state_or_editor_leftovers(path):
    """A refresh rewrites only the outputs that changed: no progress-bar widgets (new ids on every run), no jupytext
    leftovers (tools/stored_state.py strips them when outputs are stored)."""
    assert stored_state.leftovers(read(path)) == []


@pytest.mark.parametrize("path", course.lessons(), ids=[course.repo_path(p) for p in course.lessons()])
def test_lesson_links_to_the_next_one(path):
    lessons = course.lessons()
    index = lessons.index(path)
    text = "".join(c.source for c in read(path).cells if c.cell_type == "markdown")
    if index + 1 < len(lessons):
        following = lessons[index + 1]
        both = f"]({following.name}) ([in Colab]({course.colab_url(following)}))"
        assert both in text, "end with a link to the next notebook, relative (JupyterLab) and to Colab"
    solutions = course.SOLUTIONS / f"{path.stem}_solutions.ipynb"
    assert f"](solutions/{solutions.name}) ([in Colab]({course.colab_url(solutions)}))" in text
    assert "## Summary" in text and "## Exercises" in text


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_relative_notebook_links_resolve(path):
    """A relative link opens a notebook that exists in the repository (as local JupyterLab resolves it)."""
    text = "".join(c.source for c in read(path).cells if c.cell_type == "markdown")
    for target in re.findall(r"(?<!!)\]\(([\w./-]+\.ipynb)\)", text):
        assert (path.parent / target).is_file(), f"{target} does not exist next to {path.name}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_kernelspec_exists(path):
    name = read(path).metadata.kernelspec.name
    assert name in KernelSpecManager().find_kernel_specs()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_every_code_cell_executed_in_order(path):
    counts = [c.execution_count for c in code_cells(read(path))]
    assert None not in counts, "refresh the notebook: some cells were never run"
    assert counts == list(range(1, len(counts) + 1)), "re-run top to bottom in a fresh kernel"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_no_unexpected_errors(path):
    for cell in code_cells(read(path)):
        errors = [o for o in cell.outputs if o.output_type == "error"]
        if errors:
            assert "raises-exception" in cell.metadata.get("tags", []), (
                f"unexpected {errors[0].ename} in:\n{cell.source}"
            )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_no_local_paths_or_user_names(path):
    for cell in code_cells(read(path)):
        text = json.dumps(cell.outputs)
        assert not LOCAL_PATH.search(text), f"output shows a local path:\n{cell.source}"
        assert str(Path.home()) + "/" not in text


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_reasonable_size(path):
    assert path.stat().st_size < MAX_BYTES


@pytest.mark.parametrize("name", ["00_prerequisites.ipynb", "05_train_tudui.ipynb"])
def test_notebook_copied_alone_runs(tmp_path, name):
    """What Colab does: one notebook, no repository around it, the helpers package installed."""
    source = course.NOTEBOOKS / name
    if not source.exists():
        pytest.skip(f"{name} not written yet")
    lone = tmp_path / name
    lone.write_bytes(source.read_bytes())
    sanitize = course.ROOT / "tests" / "nbval_sanitize.cfg"
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval", "--nbval-current-env",
         f"--nbval-sanitize-with={sanitize}", name],
        cwd=tmp_path, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:]


def test_kernels_ignore_only_the_one_time_cublas_context_warning():
    # conftest.py sets PYTHONWARNINGS for the kernels nbval starts; a malformed filter is ignored silently.
    code = (
        "import warnings\n"
        "warnings.warn('Attempting to run cuBLAS, but there was no current CUDA context! Attempting to set the "
        "primary context...', UserWarning)\n"
        "warnings.warn('any other warning', UserWarning)\n"
    )
    stderr = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stderr
    assert "cuBLAS" not in stderr and "Invalid -W option" not in stderr
    assert "any other warning" in stderr
