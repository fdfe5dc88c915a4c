"""The README's notebook table and essentials path agree with what each notebook's title cell states."""

import re

import nbformat
import pytest

from tools import course

README = (course.ROOT / "README.md").read_text(encoding="utf-8")
TIME_LINE = re.compile(r"^\*\*Time:\*\* essentials about (\d+) min, whole notebook about (\d+) min\.$", re.MULTILINE)
ESSENTIALS, WHOLE = "essentials (min)", "whole notebook (min)"
LESSONS = course.lessons()
LESSON_IDS = [course.repo_path(p) for p in LESSONS]


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def readme_table() -> dict[str, dict[str, str]]:
    """{"00": {"notebook": ..., "essentials (min)": "15", ...}, ...} from the README's notebook table."""
    lines = README.split("## Notebooks", 1)[1].split("\n## ", 1)[0].splitlines()
    header = next(cells(line) for line in lines if line.startswith("| # |"))
    return {row[0]: dict(zip(header, row, strict=True)) for row in map(cells, lines) if re.fullmatch(r"\d\d", row[0])}


def notebook_minutes(path) -> tuple[int, int]:
    """(essentials, whole notebook) minutes from the title cell's Time line."""
    title = nbformat.read(path, as_version=4).cells[0].source
    found = TIME_LINE.search(title)
    assert found, "the title cell needs the line: **Time:** essentials about N min, whole notebook about M min."
    return int(found.group(1)), int(found.group(2))


@pytest.mark.parametrize("path", LESSONS, ids=LESSON_IDS)
def test_lesson_states_its_time(path):
    essentials, whole = notebook_minutes(path)
    assert 0 < essentials <= whole


def test_readme_table_has_both_minutes_columns():
    header = next(cells(line) for line in README.splitlines() if line.startswith("| # |"))
    assert header.index(ESSENTIALS) + 1 == header.index(WHOLE), "the essentials column sits beside the whole one"


def test_readme_table_lists_every_lesson_once():
    assert sorted(readme_table()) == [p.name[:2] for p in LESSONS]


@pytest.mark.parametrize("path", LESSONS, ids=LESSON_IDS)
def test_readme_minutes_are_the_notebooks(path):
    row = readme_table().get(path.name[:2])
    assert row, f"README: add a row for {path.name}"
    essentials, whole = notebook_minutes(path)
    assert (row[ESSENTIALS], row[WHOLE]) == (str(essentials), str(whole)), f"README row {path.name[:2]}"
    assert course.colab_url(path) in row["Colab"]


def test_essentials_path_adds_up():
    """Each stated path (notebooks AA-BB) is within a quarter of an hour of the notebooks' own minutes."""
    found = re.findall(
        r"essentials of notebooks (\d\d)-(\d\d) take about ([\d.]+) hours\s+"
        r"\(the whole\s+notebooks about ([\d.]+) hours\)",
        README,
    )
    assert found, "README: state the essentials path (essentials of notebooks AA-BB take about N hours ...)"
    covered = []
    for first, last, hours, whole_hours in found:
        minutes = [notebook_minutes(p) for p in LESSONS if int(first) <= int(p.name[:2]) <= int(last)]
        assert len(minutes) == int(last) - int(first) + 1
        assert abs(float(hours) - sum(e for e, _ in minutes) / 60) <= 0.25, f"essentials of {first}-{last}"
        assert abs(float(whole_hours) - sum(w for _, w in minutes) / 60) <= 0.25, f"whole {first}-{last}"
        covered += range(int(first), int(last) + 1)
    assert sorted(covered) == [int(p.name[:2]) for p in LESSONS], "the stated paths cover every lesson once"
    assert '"Going deeper:"' in README


README_ZH = (course.ROOT / "README.zh-CN.md").read_text(encoding="utf-8")
RUNTIME_ZH = course.ROOT / "helpers" / "locale" / "zh_CN" / "LC_MESSAGES"


def sections(text: str) -> list[str]:
    """The bodies of a README's `## ` sections, in order (the text before the first one is left out)."""
    return re.split(r"^## .*$", text, flags=re.MULTILINE)[1:]


def commands(section: str) -> list[str]:
    """The lines of a section's code blocks without their comments (written in the reader's language)."""
    blocks = re.findall(r"^```\w*\n(.*?)^```", section, flags=re.MULTILINE | re.DOTALL)
    lines = (line.split("  #")[0].split(" # ")[0].rstrip() for block in blocks for line in block.splitlines())
    return [line for line in lines if line]


def test_chinese_readme_has_a_section_for_every_english_one():
    english, chinese = sections(README), sections(README_ZH)
    assert len(chinese) == len(english), "README.zh-CN.md: one `## ` section per section of README.md, in order"
    for number, (en, zh) in enumerate(zip(english, chinese, strict=True), start=1):
        # the Chinese edition runs the same commands in Chinese: the doctor with COURSE_LANG, the Chinese twins
        chinese_lines = [
            line.replace("COURSE_LANG=zh-CN ", "").replace("notebooks/zh-CN/", "notebooks/") for line in commands(zh)
        ]
        missing = [line for line in commands(en) if line not in chinese_lines]
        assert not missing, f"README.zh-CN.md section {number}: the English section's commands {missing}"
        assert zh.count("\n| ") >= en.count("\n| "), f"README.zh-CN.md section {number}: a table lost rows"


def test_chinese_readme_states_what_the_tools_print_in_chinese():
    """The levels and verdicts it quotes are the ones the Chinese doctor and checks print."""
    for english in ("[OK]", "[WARN]", "[FAIL]", "[PASS]", "[TRY AGAIN]"):
        assert english not in README_ZH, f"README.zh-CN.md quotes the English {english}"
    catalog = (RUNTIME_ZH / "clinic.doctor.po").read_text("utf-8")
    for level in ("OK", "WARN", "FAIL"):
        chinese = re.search(rf'msgid "\[{level}\]"\nmsgstr "(\[[^"]+\])"', catalog).group(1)
        assert chinese in README_ZH, f"README.zh-CN.md: the doctor prints {chinese}"
    verdicts = (RUNTIME_ZH / "exercises.__init__.po").read_text("utf-8")
    for verdict in ("PASS", "TRY AGAIN"):
        found = re.search(rf'msgid "\[{verdict}\] {{message}}"\nmsgstr "(\[[^"\]]+\])', verdicts)
        assert found and found.group(1) in README_ZH, f"README.zh-CN.md: the checks print {verdict} in Chinese"
