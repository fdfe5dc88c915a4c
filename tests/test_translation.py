"""The zh-CN edition cannot drift from the English: catalogs complete and in step, notebooks as generated.

``python tools/translate.py status`` lists what these tests report; ``update`` refreshes the catalogs after
the English changed (entries whose English changed become fuzzy: outdated), ``build`` regenerates the
Chinese notebooks. One Chinese lesson and one solutions notebook are run for real (the others share the
same code, checked token by token).
"""

from __future__ import annotations

import io
import re
import shutil
import tokenize

import nbformat
import pytest
from nbclient import NotebookClient

from helpers.course import i18n
from tools import course, translate

STATUS = "`python tools/translate.py status` lists them; `update` after changing the English, then translate"
CJK = re.compile(r"[\u4e00-\u9fff]")
LINK = re.compile(r"\]\(([^)\s]+)")
SPLIT_CHINESE = re.compile(r"[\u4e00-\u9fff，。：；、）]\n[ \t]*(?![-*]\s|\d+\.\s|#|\||>)[\u4e00-\u9fff（]")
LIST_ITEM = re.compile(r"^\s*(?:[-*]|\d+\.) ", re.MULTILINE)
# Words a Chinese learner would not find in the course's glossary (site/glossary.md) or the articles.
AVOID = {
    "图形卡": "显卡 / GPU",
    "显示卡": "显卡 / GPU",
    "设配": "设备",
    "元设备": "meta 设备",
    "笔记簿": "笔记本",
    "错误诊所": "报错诊所",
}
SOURCES = translate.sources()


@pytest.mark.parametrize("source", SOURCES, ids=lambda s: s.name)
def test_catalog_is_complete_and_in_step(source):
    found = translate.problems(source)
    assert not found, f"{len(found)} entries to translate or update ({STATUS}):\n" + "\n".join(map(str, found))


def test_every_notebook_and_every_translated_module_has_a_catalog():
    names = {s.english for s in SOURCES}
    assert set(course.all_notebooks()) <= names
    assert {
        course.ROOT / "helpers" / "exercises" / "__init__.py",
        course.ROOT / "helpers" / "clinic" / "doctor.py",
    } <= names
    orphans = {p for p in translate.RUNTIME_CATALOGS.glob("*.po")} - {s.catalog for s in SOURCES}
    assert orphans <= {translate.HEADINGS_CATALOG}, f"catalogs of modules without messages: {sorted(orphans)}"


def test_a_module_without_messages_gets_no_catalog():
    with pytest.raises(SystemExit, match="no tr"):
        translate.main(["update", str(course.ROOT / "helpers" / "course" / "config.py")])
    assert not (translate.RUNTIME_CATALOGS / "config.po").exists()


def test_committed_chinese_notebooks_are_what_the_catalogs_generate():
    differ = translate.build(check=True)
    assert not differ, f"regenerate with `python tools/translate.py build`: {[course.repo_path(p) for p in differ]}"


def code_tokens(source: str) -> list[tuple[int, str]]:
    source = source.replace(translate.SETUP_CALL_ZH, translate.SETUP_CALL)
    text = "\n".join(translate.python_lines(source))
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    return [(t.type, t.string) for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type not in skip]


@pytest.mark.parametrize("english", course.all_notebooks(), ids=lambda p: p.stem)
def test_chinese_notebook_has_the_same_code_and_outputs(english):
    en = nbformat.read(english, as_version=4)
    zh = nbformat.read(translate.zh_path(english), as_version=4)
    assert [c.cell_type for c in zh.cells] == [c.cell_type for c in en.cells]
    setups = 0
    for a, b in zip(en.cells, zh.cells, strict=True):
        if a.cell_type != "code":
            continue
        if a.source.lstrip().startswith("%%"):
            assert b.source == a.source
        else:
            assert code_tokens(b.source) == code_tokens(a.source), a.source[:200]
        assert b.outputs == a.outputs and b.metadata == a.metadata
        setups += translate.SETUP_CALL_ZH in b.source
    assert setups == 1, "the setup cell should make the course speak Chinese: setup(lang='zh-CN')"
    assert zh.metadata["course"] == {"language": "zh-CN", "translated_from": course.repo_path(english)}


def _prose(text: str) -> str:
    """Markdown without its fenced code (comments there keep their lines)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)


def translated_pairs(kinds=(".ipynb", ".md")):
    for source in SOURCES:
        if source.english.suffix in kinds:
            for english, chinese in translate.translations(source.catalog).items():
                yield source.name, english, chinese


def test_translations_keep_the_markdown_structure():
    """Same links (targets), heading level, fences and list items, and bold that CommonMark closes."""
    wrong = []
    for name, english, chinese in translated_pairs():
        if sorted(LINK.findall(english)) != sorted(LINK.findall(chinese)):
            wrong.append((name, "links", english))
        elif re.match(r"#+ ", english) and re.match(r"#+ ", english).group() != (re.match(r"#+ ", chinese) or [""])[0]:
            wrong.append((name, "heading level", english))
        elif english.count("```") != chinese.count("```"):
            wrong.append((name, "code fences", english))
        elif len(re.findall(r"(?m)^\s*(?:[-*]|\d+\.) ", english)) != len(
            re.findall(r"(?m)^\s*(?:[-*]|\d+\.) ", chinese)
        ):
            wrong.append((name, "list items", english))
    assert not wrong, "\n".join(f"{n}: {what} differ in {e[:80]!r}" for n, what, e in wrong)


def test_translations_use_the_glossary():
    found = [
        (name, bad, good, english[:60])
        for name, english, chinese in translated_pairs((".ipynb", ".md", ".py"))
        for bad, good in AVOID.items()
        if bad in chinese
    ]
    assert not found, "\n".join(f"{n}: {bad!r} (the glossary says {good!r}) in {e!r}" for n, bad, good, e in found)


@pytest.mark.parametrize("english", course.lessons(), ids=lambda p: p.stem)
def test_chinese_title_cell_keeps_the_time_line(english):
    """The site and the README read a lesson's minutes from its title cell, in both languages."""
    zh = nbformat.read(translate.zh_path(english), as_version=4)
    assert re.search(r"^\*\*时间\*\*：核心内容约 \d+ 分钟，整个笔记本约 \d+ 分钟。$", zh.cells[0].source, re.MULTILINE)


def test_headings_catalog_maps_every_section_a_check_names(monkeypatch):
    """A check's "where to look" names a section by its English heading; in Chinese it names the Chinese one."""
    from helpers.exercises import heading

    monkeypatch.setenv("COURSE_LANG", "zh-CN")
    named = set()
    for path in sorted((course.ROOT / "helpers" / "exercises").glob("ex*.py")):
        named |= set(re.findall(r'^SECTION\w* = "([^"]+)"', path.read_text(encoding="utf-8"), re.MULTILINE))
    assert named, "the checks name their sections in SECTION_* constants"
    missing = sorted(see for see in named if not CJK.search(heading(see)))
    assert not missing, f"sections named by checks without a Chinese heading: {missing}"


def test_language_follows_course_lang_then_the_locale(monkeypatch):
    for name in ("COURSE_LANG", *i18n.LOCALE_VARIABLES):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    assert i18n.language() == "zh-CN"
    monkeypatch.setenv("LANG", "en_US.UTF-8")
    assert i18n.language() == "en"
    monkeypatch.setenv("COURSE_LANG", "zh-CN")
    assert i18n.language() == "zh-CN"
    monkeypatch.setenv("COURSE_LANG", "fr")
    with pytest.warns(UserWarning, match="not a language the course speaks"):
        assert i18n.language() == "en"
    with pytest.raises(ValueError, match="zh-CN"):
        i18n.set_language("klingon")


def test_tr_translates_formats_and_falls_back(monkeypatch):
    table = {"{n} tensors on {device}": "{device} 上有 {n} 个张量", "broken {x}": "坏了 {y}"}
    monkeypatch.setattr(i18n, "_catalog", lambda: table)
    monkeypatch.setenv("COURSE_LANG", "zh-CN")
    assert i18n.tr("{n} tensors on {device}", n=2, device="cuda:0") == "cuda:0 上有 2 个张量"
    assert i18n.tr("not translated {x}", x=1) == "not translated 1"
    assert i18n.tr("broken {x}", x=1) == "broken 1"  # a translation that lost its field: the English, not a crash
    monkeypatch.setenv("COURSE_LANG", "en")
    assert i18n.tr("{n} tensors on {device}", n=2, device="cpu") == "2 tensors on cpu"


def test_fuzzy_marks_a_changed_paragraph_outdated(tmp_path, monkeypatch):
    """Change an English paragraph: its translation is kept but marked outdated, and status names it."""
    english = tmp_path / "page.md"
    english.write_text("# A title\n\nThe tensor moves to the GPU with one call.\n", encoding="utf-8")
    source = translate.Source(english, tmp_path / "page.po", lambda: (
        (text, "page.md", line, False) for text, line in translate.markdown_messages(english.read_text())
    ))  # fmt: skip
    translate.update(source)
    assert {p.kind for p in translate.problems(source)} == {"missing"}
    catalog = translate.load(source.catalog)
    for message in catalog:
        if message.id:
            message.string = "译文：" + message.id
    translate.save(catalog, source.catalog, "page.md")
    assert translate.problems(source) == []
    english.write_text("# A title\n\nThe tensor moves to the GPU with a single call.\n", encoding="utf-8")
    translate.update(source)
    found = translate.problems(source)
    assert [(p.kind, p.english) for p in found] == [("outdated", "The tensor moves to the GPU with a single call.")]
    assert "译文：The tensor moves to the GPU with one call." not in translate.translations(source.catalog).values()


SMOKE = [course.NOTEBOOKS / "01_cpu_to_gpu_cuda.ipynb", course.SOLUTIONS / "01_cpu_to_gpu_cuda_solutions.ipynb"]


@pytest.mark.parametrize("english", SMOKE, ids=lambda p: p.stem)
def test_a_chinese_notebook_runs_and_speaks_chinese(english, tmp_path):
    """Run the Chinese twin for real: no error outside the cells that raise on purpose, checks in Chinese."""
    twin = translate.zh_path(english)
    work = tmp_path / twin.relative_to(course.NOTEBOOKS)
    work.parent.mkdir(parents=True)
    shutil.copy(twin, work)
    nb = nbformat.read(work, as_version=4)
    resources = {"metadata": {"path": str(work.parent)}}
    NotebookClient(nb, timeout=600, kernel_name="python3", resources=resources, allow_errors=True).execute()
    errors = [
        c.source[:80]
        for c in nb.cells
        if c.cell_type == "code"
        and "raises-exception" not in c.metadata.get("tags", [])
        and any(o.output_type == "error" for o in c.outputs)
    ]
    assert not errors, f"cells that raised: {errors}"
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    verdict = "[通过]" if "solutions" in english.parts else "[再试一次]"
    assert verdict in printed and "[PASS]" not in printed and "[TRY AGAIN]" not in printed


def test_chinese_readme_is_linked_first_and_its_links_and_minutes_hold():
    readme = (course.ROOT / "README.md").read_text(encoding="utf-8")
    assert "[中文](README.zh-CN.md)" in "\n".join(readme.splitlines()[:3])
    text = (course.ROOT / "README.zh-CN.md").read_text(encoding="utf-8")
    for target in LINK.findall(text):
        if target.startswith("https://colab.research.google.com/"):
            rel = target.split(f"/blob/{course.branch()}/", 1)[1]
            assert rel.startswith("notebooks/zh-CN/") and (course.ROOT / rel).exists(), target
        elif not target.startswith(("http://", "https://", "#")):
            assert (course.ROOT / target).exists(), target
    rows = re.findall(r"^\| (\d\d) \| .+ \| (\d+) \| (\d+) \| \[打开\]\(([^)]+)\) \|$", text, re.MULTILINE)
    assert [r[0] for r in rows] == [p.name[:2] for p in course.lessons()]
    for (number, essentials, whole, url), english in zip(rows, course.lessons(), strict=True):
        title = nbformat.read(translate.zh_path(english), as_version=4).cells[0].source
        found = re.search(r"核心内容约 (\d+) 分钟，整个笔记本约 (\d+) 分钟", title) or re.search(
            r"essentials about (\d+) min, whole notebook about (\d+) min", title
        )
        assert found and found.groups() == (essentials, whole), number
        assert url == course.colab_url(translate.zh_path(english))


def test_memory_table_speaks_chinese_and_stays_aligned(monkeypatch):
    """Notebook 07's estimate table (and its check's feedback): Chinese labels, columns aligned by display width."""
    from helpers.lesson.memory import TrainingMemory

    memory = TrainingMemory(1 << 20, 2 << 20, 3 << 20, 4 << 20, 5 << 20)
    english = memory.table(memory).splitlines()
    monkeypatch.setenv("COURSE_LANG", "zh-CN")
    chinese = memory.table(memory).splitlines()
    assert chinese[1].startswith("参数") and chinese[-1].startswith("合计") and "估算" in chinese[0]
    assert [i18n.columns(line) for line in chinese] == [len(line) for line in english]
