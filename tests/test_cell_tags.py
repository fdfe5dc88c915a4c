"""The cell-tag convention (tools/cell_tags.py): scaffolding is tagged and collapsed, the lesson stays in view."""

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from tools import cell_tags, course, slide_rule, slides

NOTEBOOKS = course.all_notebooks()
LESSONS = course.lessons()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[course.repo_path(p) for p in NOTEBOOKS])
def test_notebook_follows_the_cell_tag_convention(path):
    found = cell_tags.problems(nbformat.read(path, as_version=4), course.repo_path(path))
    assert not found, "\n".join(found)


@pytest.mark.parametrize("path", LESSONS, ids=[p.stem for p in LESSONS])
def test_the_code_a_learner_sees_is_mostly_lesson_code(path):
    """Of the code lines in the cells a learner sees (not collapsed), at least 85 % are not checks."""
    visible = [
        c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code" and not cell_tags.is_hidden(c)
    ]
    lines = sum(
        1 for c in visible for line in c.source.splitlines() if line.strip() and not line.lstrip().startswith("#")
    )
    checks = sum(cell_tags.check_lines(c) for c in visible)
    assert 1 - checks / lines >= 0.85, f"{checks} of {lines} visible code lines are asserts: move them to a check cell"


# No cell a learner sees holds mostly checks, and no formatter or linter switch-off is in view.
SWITCH_OFFS = ("# fmt: skip", "# fmt: off", "# noqa")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[course.repo_path(p) for p in NOTEBOOKS])
def test_no_cell_a_learner_sees_is_mostly_checks_or_shows_a_switch_off(path):
    found = []
    for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
        if cell.cell_type != "code" or cell_tags.is_hidden(cell):
            continue
        lines = [line for line in cell.source.splitlines() if line.strip() and not line.lstrip().startswith("#")]
        checks = cell_tags.check_lines(cell)
        if checks > 1 and 2 * checks >= len(lines):
            found.append(f"cell {i}: {checks} of its {len(lines)} code lines are asserts: move them to a check cell")
        found += [f"cell {i}: {marker!r} in view" for marker in SWITCH_OFFS if marker in cell.source]
    assert not found, "\n".join(found)


def _notebook():
    return new_notebook(
        cells=[
            new_code_cell("# NBVAL_IGNORE_OUTPUT\nprint(torch.cuda.is_available())"),
            new_code_cell("assert x.device.type in {'cpu', 'cuda'}\nif HAS_CUDA:\n    assert y.is_cuda"),
            new_code_cell("assert check.exercise(fn)", outputs=[new_output("stream", text="[PASS] well done\n")]),
            new_code_cell("y = x + 1  # the lesson\nassert y.device == x.device"),
        ]
    )


def test_apply_moves_markers_to_tags_and_hides_only_the_checks():
    nb = _notebook()
    tag_problems = [p for p in cell_tags.problems(nb) if p not in slide_rule.problems(nb, cell_tags.is_hidden)]
    assert len(tag_problems) == 2  # the marker comment, the untagged check cell (the rest: no slide types yet)
    cell_tags.apply(nb)
    marker, checks, with_output, lesson = nb.cells
    assert marker.source == "print(torch.cuda.is_available())" and marker.metadata.tags == ["nbval-ignore-output"]
    assert checks.metadata.tags == ["remove-cell"]
    assert checks.metadata.jupyter == {"source_hidden": True} and checks.metadata.slideshow == {"slide_type": "skip"}
    assert "tags" not in with_output.metadata, "a check that prints its verdict is shown"
    assert "tags" not in lesson.metadata, "lesson code with a one-line assert stays in view"
    assert cell_tags.problems(nb) == []


def test_a_hidden_cell_that_gains_lesson_code_is_named_and_shown_again():
    nb = _notebook()
    cell_tags.apply(nb)
    nb.cells[1].source = "z = x * 2\nassert z.device == x.device"
    assert any("tagged 'remove-cell' but is not a check-only cell" in p for p in cell_tags.problems(nb))
    cell_tags.apply(nb)
    assert "tags" not in nb.cells[1].metadata and "jupyter" not in nb.cells[1].metadata
    assert cell_tags.problems(nb) == []


def test_check_mode_names_the_cells_and_fails(monkeypatch, tmp_path, capsys):
    path = tmp_path / "00_x.ipynb"
    nbformat.write(_notebook(), path)
    monkeypatch.setattr(course, "all_notebooks", lambda: [path])
    monkeypatch.setattr(course, "repo_path", lambda p: p.name)
    assert cell_tags.main(["--check"]) == 1
    assert "00_x.ipynb cell 0: the comment '# NBVAL_IGNORE_OUTPUT'" in capsys.readouterr().out
    assert cell_tags.main([]) == 0 and cell_tags.main(["--check"]) == 0


CHECK_ONLY = {  # every form of a check: each cell is scaffolding when nothing below needs what it binds
    "asserts behind comments": "# why it holds\nassert x.device.type == 'cpu'  # the fact",
    "an expected error": "try:\n    pick_device('cuda: 0')\n    raise AssertionError('accepted')\n"
    "except DeviceError as err:\n    assert \"'cuda:0'\" in str(err)",
    "an expected error, else": "try:\n    f()\nexcept RuntimeError:\n    pass\n"
    "else:\n    raise AssertionError('no error')",
    "if ... raise AssertionError": "if not torch.equal(a, b):\n    raise AssertionError(f'{a} != {b}')",
    "a loop with its own names": "for name, t in made.items():\n    same = t.device == x.device\n    assert same, name",
    "with a helper name": "with mock.patch.dict(os.environ, {'A': '1'}):\n    assert read() == '1'",
    "names only the checks read": "import numpy as np\n\nassert a.tolist() == [1.0]\n"
    "build = torch.version.cuda is not None\nassert build or a.dtype == np.float32",
    "a constant for the checks": "KNOWN = ('a', 'b')\nassert message.startswith(KNOWN)",
    "helper calls": "run.check()\ntorch.testing.assert_close(a, b)\ncheck_devices(model)",
}
NOT_CHECK_ONLY = {
    "lesson code a later cell uses": ("assert a.is_cuda\na = a.to(device)\nassert a.device == device", "print(a)"),
    "lesson code that opens the cell": ("y = x + 1\nassert y.device == x.device", ""),
    "a side effect": ("model.weight.data.zero_()\nassert model.weight.sum() == 0", ""),
    "a helper function": ("def f(x):\n    return x + 1\n\n\nassert f(1) == 2", ""),
    "a call that is not a check": ("torch.manual_seed(0)\nassert True", ""),
    "a try that does not expect an error": ("try:\n    x = f()\nexcept RuntimeError:\n    x = None\nassert x", ""),
    "an exercise's verdict": ("assert check.some_exercise(fn)", ""),
}


@pytest.mark.parametrize("source", CHECK_ONLY.values(), ids=CHECK_ONLY.keys())
def test_every_form_of_a_check_is_scaffolding(source):
    nb = new_notebook(cells=[new_code_cell(source), new_code_cell("print(x)")])
    cell_tags.apply(nb)
    assert cell_tags.is_hidden(nb.cells[0]) and not cell_tags.is_hidden(nb.cells[1])
    assert cell_tags.mostly_checks(nb.cells[0])


@pytest.mark.parametrize("source, below", NOT_CHECK_ONLY.values(), ids=NOT_CHECK_ONLY.keys())
def test_lesson_code_with_a_check_stays_in_view(source, below):
    nb = new_notebook(cells=[new_code_cell(source), new_code_cell(below)])
    cell_tags.apply(nb)
    assert not cell_tags.is_hidden(nb.cells[0])


def test_a_shown_cell_that_is_mostly_checks_is_named():
    cell = new_code_cell("print(x)\nassert x.is_cuda\nassert x.dtype == torch.float32", outputs=[new_output("stream")])
    assert cell_tags.check_lines(cell) == 2 and cell_tags.mostly_checks(cell)
    cell.source = "y = x + 1\nz = y * 2\nprint(z)\nassert z.device == x.device"
    assert cell_tags.check_lines(cell) == 1 and not cell_tags.mostly_checks(cell)


def _lesson():
    return new_notebook(
        cells=[
            new_markdown_cell("# 01 · A lesson\n\nThe badge."),
            new_code_cell("# Setup (supporting code, not the lesson)\nsetup()"),
            new_markdown_cell("## 1. A section\n\nWhich device does `x` live on?"),
            new_code_cell("print(x.device)", outputs=[new_output("stream", text="cpu\n")]),
            new_code_cell("assert x.device.type == 'cpu'"),
            new_markdown_cell("### Common error\n\nProse."),
            new_code_cell("y = x + 1"),
            new_code_cell("ok = check.some_exercise(fn)", outputs=[new_output("stream", text="[TRY AGAIN] ...\n")]),
        ]
    )


def test_every_cell_gets_its_slide_type_by_rule():
    nb = _lesson()
    cell_tags.apply(nb)
    types = [c.metadata.slideshow["slide_type"] for c in nb.cells]
    assert types == ["slide", "skip", "slide", "fragment", "skip", "subslide", "-", "fragment"]
    assert nb.metadata.rise["scroll"] is True and nb.metadata.rise["enable_chalkboard"] is False
    assert cell_tags.problems(nb) == []


def test_a_lesson_without_slide_metadata_fails_the_check(monkeypatch, tmp_path, capsys):
    nb = _lesson()
    cell_tags.apply(nb)
    del nb.cells[6].metadata["slideshow"]  # a new cell, added without running the tool
    nb.cells[0].metadata["slideshow"] = {"slide_type": "-"}
    del nb.metadata["rise"]
    found = cell_tags.problems(nb, "01_x.ipynb")
    assert "01_x.ipynb cell 6: slide type None, the slide rule says '-'" in found
    assert "01_x.ipynb cell 0: slide type '-', the slide rule says 'slide'" in found
    assert any("metadata.rise lacks scroll" in p for p in found)
    path = tmp_path / "01_x.ipynb"
    nbformat.write(nb, path)
    monkeypatch.setattr(course, "all_notebooks", lambda: [path])
    monkeypatch.setattr(course, "repo_path", lambda p: p.name)
    assert cell_tags.main(["--check"]) == 1 and slides.main(["--check"]) == 1
    assert "the slide rule says" in capsys.readouterr().out
    assert cell_tags.main([]) == 0 and slides.main(["--check"]) == 0
    assert nbformat.read(path, as_version=4).cells[3].outputs == nb.cells[3].outputs, "metadata only"
