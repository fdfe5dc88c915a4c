"""The lessons' pictures: how many each stored lesson shows, and the same pictures in the Chinese edition."""

from __future__ import annotations

import json
import re

import pytest

from tools import course

# pictures (stored image outputs) each lesson shows at least; raise a number when a lesson gains one
AT_LEAST = {"00": 1, "01": 1, "02": 2, "03": 1, "04": 2, "05": 3, "06": 8, "07": 5, "08": 4, "09": 2, "10": 1}
COURSE_AT_LEAST = 30


def pictures(path) -> int:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return sum(1 for c in cells if c["cell_type"] == "code" for o in c["outputs"] if "image/png" in o.get("data", {}))


def test_every_lesson_is_counted():
    assert sorted(AT_LEAST) == sorted(p.name[:2] for p in course.lessons())


@pytest.mark.parametrize("path", course.lessons(), ids=lambda p: p.name[:2])
def test_a_lesson_keeps_its_pictures_and_its_twin_shows_them_too(path):
    found = pictures(path)
    assert found >= AT_LEAST[path.name[:2]], f"{path.name}: {found} pictures, fewer than {AT_LEAST[path.name[:2]]}"
    twin = course.ROOT / "notebooks" / "zh-CN" / path.name
    assert pictures(twin) == found, f"{twin.name}: the Chinese edition shows another number of pictures"


def test_the_course_shows_at_least_its_pictures():
    assert sum(pictures(p) for p in course.lessons()) >= COURSE_AT_LEAST


CJK = re.compile(r"[\u4e00-\u9fff]")


def alt_text(cell) -> str:
    return cell["metadata"].get("mystnb", {}).get("image", {}).get("alt", "")


@pytest.mark.parametrize("path", course.lessons(), ids=lambda p: p.name[:2])
def test_every_picture_has_alt_text_in_its_language(path):
    """The site shows a picture with the alt text its cell gives (metadata.mystnb.image.alt); the Chinese twin's is
    the catalog's Chinese."""
    twin = course.ROOT / "notebooks" / "zh-CN" / path.name
    for cell, twin_cell in zip(json.loads(path.read_text(encoding="utf-8"))["cells"],
                               json.loads(twin.read_text(encoding="utf-8"))["cells"], strict=True):  # fmt: skip
        if cell["cell_type"] != "code" or not any("image/png" in o.get("data", {}) for o in cell["outputs"]):
            continue
        assert len(alt_text(cell).split()) >= 8, f"{path.name}, cell {cell['id']}: no alt text that says what it shows"
        assert CJK.search(alt_text(twin_cell)), f"{twin.name}, cell {cell['id']}: the alt text is not translated"
