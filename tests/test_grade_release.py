"""The student release (tools/release.py): the lessons without links to the solutions, the rest unchanged."""

import json
from pathlib import Path

import pytest

from helpers.course import grade
from tools import course, release

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


@pytest.mark.parametrize("lang", ["en", "zh-CN"])
def test_an_assignment_has_the_lessons_without_any_way_to_the_solutions(tmp_path, lang):
    written = release.release(tmp_path, assignment=True, lang=lang)
    sources = release.lessons(lang, None)
    assert [p.name for p in written] == [p.name for p in sources] and len(sources) == len(course.lessons())
    assert not (tmp_path / "solutions").exists()
    for source, target in zip(sources, written, strict=True):
        before, after = cells(source), cells(target)
        text = json.dumps(after, ensure_ascii=False)
        assert "_solutions" not in text and "solutions/" not in text, target.name
        assert [c["source"] for c in before if c["cell_type"] == "code"] == [
            c["source"] for c in after if c["cell_type"] == "code"
        ]  # the code, its outputs and its points as shipped: the notebook runs and is graded as the course's
        assert grade.exercises_in({"cells": after}) == grade.exercises_in({"cells": before})
        words = sum(len("".join(c["source"])) for c in before if c["cell_type"] == "markdown")
        kept = sum(len("".join(c["source"])) for c in after if c["cell_type"] == "markdown")
        assert words - 700 < kept < words  # one sentence and its two links out, nothing else


def test_a_release_for_practice_keeps_the_solutions_apart(tmp_path):
    assert release.main([str(tmp_path), "--lessons", "3", "05"]) == 0
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.ipynb")) == [
        "03_device_objects.ipynb",
        "05_train_tudui.ipynb",
        "solutions/03_device_objects_solutions.ipynb",
        "solutions/05_train_tudui_solutions.ipynb",
    ]
    released = cells(tmp_path / "03_device_objects.ipynb")
    text = next("".join(c["source"]) for c in released if "".join(c["source"]).startswith("## Exercises"))
    assert text.rstrip().endswith("with a hint.") or "with a hint.\n" in text  # the sentence before the link stays
    assert "solutions/" not in text
    assert release.main([str(tmp_path / "none"), "--lessons", "42"]) == 1


def test_the_link_goes_with_its_label_and_colab_twin():
    line = (
        "Worked solutions: [x](solutions/01_x_solutions.ipynb) ([in Colab](https://c/solutions/01_x_solutions.ipynb))."
    )
    assert release.without_solution_links(f"Intro.\n\n{line}\n\n## Summary") == "Intro.\n\n## Summary"
    zh = "附上提示。参考答案见 [a](solutions/05_a_solutions.ipynb)（[在 Colab 中打开](https://c/solutions/05_a.ipynb)）。"
    assert release.without_solution_links(zh) == "附上提示。"


def test_lessons_that_match_nothing_write_nothing_and_say_why(tmp_path, capsys):
    from tools import nbgrader_source

    assert release.main([str(tmp_path / "class"), "--lessons", "99"]) == 1
    assert nbgrader_source.main([str(tmp_path / "course"), "--lessons", "99", "--assignment", "lab99"]) == 1
    assert capsys.readouterr().err.count("No lesson matches --lessons: nothing written.") == 2
    assert not any(tmp_path.rglob("*.ipynb"))
