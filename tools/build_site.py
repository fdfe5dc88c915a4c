"""Build the course's website from the notebooks as they are tested: their stored outputs, never re-run.

    pip install -e ".[site]"
    python tools/build_site.py          # builds site/_build/html/ (warnings are errors), prints where to open it

The site comes in two languages: English at the root, the zh-CN edition (中文版) under ``zh-CN/``, built from
the Chinese notebooks (``notebooks/zh-CN/``) and the pages translated by their catalogs (``locale/zh_CN/site/``,
``tools/translate.py``). Every page links to the same page in the other language.

The notebooks are read where they live (``notebooks/``, ``notebooks/solutions/``) and staged, with the same
paths, in ``site/_build/src/`` (git-ignored), where each copy gets what a web page needs and the notebook does
not: the cell-tag convention applied (``tools/cell_tags.py``: check-only cells are tagged ``remove-cell``
and dropped from the page, nbval's markers become tags, which are not shown), the Colab badge replaced by
three buttons (open in Colab, download the notebook, view its source), links to other course notebooks in
Colab pointed at their pages, a label on each numbered section (``lessonNN-section-N``, which the error
index links to), frozen progress-bar widgets left out, and the linters' pragmas (``# fmt: skip``, ``# noqa``) taken
off the helpers' source that a cell prints. Pages generated here: the lesson table of the landing page
(titles and minutes from each title cell) and the index of known device errors
(``helpers/clinic/known_errors.py``). The teacher's guides (``notebooks/guides/``) are pages as they are; the zh
site shows each guide's Chinese (``notebooks/zh-CN/guides/``, written by ``tools/translate.py build``) in its
place, where it is written. The sources in ``site/`` (configuration, landing page, templates) are copied beside
them.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import nbformat

from helpers.clinic import known_errors
from helpers.course import i18n
from tools import cell_tags, course, stored_state, translate
from tools.sync_links import BADGE, COLAB_LINK

SITE = course.ROOT / "site"
BUILD = SITE / "_build"
SRC = BUILD / "src"
HTML = BUILD / "html"
TIME_LINE = re.compile(
    r"\*\*Time:\*\* essentials about (\d+) min, whole notebook about (\d+) min\."
    r"|\*\*时间\*\*：核心内容约 (\d+) 分钟，全部内容约 (\d+) 分钟。"
)
ENGLISH, CHINESE = i18n.ENGLISH, i18n.CHINESE
LANGUAGES = (ENGLISH, CHINESE)
SWITCH = {ENGLISH: "中文", CHINESE: "English"}  # the link to the other language, in that language


def source_dir(lang: str) -> Path:
    return SRC if lang == ENGLISH else BUILD / f"src-{lang}"


def html_dir(lang: str) -> Path:
    return HTML if lang == ENGLISH else HTML / lang


def published(path: Path, lang: str) -> Path:
    """The notebook a page shows: the English one, or its Chinese twin."""
    return path if lang == ENGLISH else translate.zh_path(path)


SECTION = re.compile(r"^## (\d+)\. ", re.MULTILINE)
NOTEBOOK_SECTION = re.compile(r"notebook (\d\d)\b[^,;]*(?:, section (\d+))?|第 (\d\d) 课[^，；]*(?:，第 (\d+) 节)?")
PRAGMA = re.compile(r"  # (?:fmt: (?:skip|off|on)|noqa\b[^\n]*)$", re.MULTILINE)  # ruff's, at a line's end
FIXTURES = course.ROOT / "tests" / "fixtures"


def github_url(rel: str) -> str:
    return f"https://github.com/{course.github_slug()}/blob/{course.branch()}/{rel}"


def section_label(number: str, section: str) -> str:
    return f"lesson{number}-section-{section}"


BUTTONS = {
    ENGLISH: ("Open in Colab", "Download the notebook", "View the source"),
    CHINESE: ("在 Colab 中打开", "下载笔记本", "查看源文件"),
}


def buttons(path: Path, lang: str = ENGLISH) -> str:
    """The button bar under a notebook page's title (raw HTML in its markdown)."""
    rel = course.repo_path(path)
    colab, download, source = BUTTONS[lang]
    links = [
        (course.colab_url(path), "colab", colab, ""),
        (path.name, "download", download, f' download="{path.name}"'),
        (github_url(rel), "source", source, ""),
    ]
    anchors = "\n".join(
        f'<a class="course-button course-button-{kind}" href="{html.escape(url)}"{extra}>{text}</a>'
        for url, kind, text, extra in links
    )
    return f'<div class="course-buttons">\n{anchors}\n</div>'


# The label of the second link of a pair (CONTRIBUTING.md, "Anatomy"): it opens Colab, in either language.
IN_COLAB = {"in Colab", "在 Colab 中打开"}


def local_links(text: str, path: Path) -> str:
    """``[04 · Title](colab URL of a course notebook)`` -> the relative link, so the site stays on the site."""

    def relative(m: re.Match) -> str:
        label, target = m.group(1), course.ROOT / m.group(3)
        if label in IN_COLAB or not target.exists():
            return m.group(0)
        return f"[{label}]({os.path.relpath(target, path.parent).replace(os.sep, '/')})"

    return re.sub(rf"\[([^\]]+)\]\(({COLAB_LINK.pattern})\)", relative, text)


def stage_notebook(path: Path, lang: str = ENGLISH) -> nbformat.NotebookNode:
    """The web page's copy of a notebook (see the module's docstring); the notebook itself is not touched.

    ``path`` is the English notebook; in Chinese the page shows its twin, with the twin's buttons and links.
    """
    english, path = path, published(path, lang)
    nb = nbformat.read(path, as_version=4)
    cell_tags.apply(nb)
    lesson = course.LESSON_NAME.match(english.name) and english.parent == course.NOTEBOOKS
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            text = BADGE.sub(lambda _: buttons(path, lang), cell.source, count=1) if i == 0 else cell.source
            text = local_links(text, path)
            if lesson:
                text = SECTION.sub(lambda m: f"({section_label(path.name[:2], m.group(1))})=\n{m.group(0)}", text)
            cell.source = text
        elif cell.cell_type == "code":
            for out in cell.get("outputs", []):
                if out.get("output_type") == "stream":
                    out.text = PRAGMA.sub("", out.text)
    return stored_state.strip(nb)


README = {ENGLISH: "README.md", CHINESE: "README.zh-CN.md"}


def lesson_rows(lang: str = ENGLISH) -> list[dict]:
    """Number, title, page, minutes (from the title cell) and the README's 'what you learn' of each lesson."""
    readme_path = course.ROOT / README[lang]
    readme = readme_path.read_text(encoding="utf-8") if readme_path.exists() else ""
    learn = {}
    for line in readme.splitlines():
        parts = [p.strip() for p in line.strip().strip("|").split("|")]
        if len(parts) > 3 and re.fullmatch(r"\d\d", parts[0]):
            learn[parts[0]] = parts[2]
    rows = []
    for path in course.lessons():
        title_cell = nbformat.read(published(path, lang), as_version=4).cells[0].source
        title = title_cell.splitlines()[0].lstrip("# ").strip()
        found = TIME_LINE.search(title_cell)
        minutes = [int(m) for m in found.groups() if m] if found else None
        solutions = course.SOLUTIONS / f"{path.stem}_solutions.ipynb"
        rows.append(
            {
                "number": path.name[:2],
                "title": title,
                "page": course.repo_path(path),
                "solutions": course.repo_path(solutions) if solutions.exists() else None,
                "essentials": minutes[0] if minutes else None,
                "whole": minutes[1] if minutes else None,
                "learn": learn.get(path.name[:2], ""),
            }
        )
    return rows


def essentials_range(readme: str, numbers: list[str]) -> list[str]:
    """The lessons the README's essentials path covers ("The essentials of notebooks 00-05"), else all."""
    found = re.search(r"essentials of notebooks (\d\d)-(\d\d)", readme)
    return [n for n in numbers if not found or found.group(1) <= n <= found.group(2)]


LESSONS_TEXT = {
    ENGLISH: {
        "path": "**The essentials path:** notebooks {first}-{last}, about {minutes} min (about {hours:g} hours; the "
        "whole notebooks about {whole} min). Read each notebook top to bottom, run its cells and do its exercises, "
        'and skip every section whose heading starts with "Going deeper:"; nothing after such a section depends on '
        "it. Notebooks {further} go further.",
        "row": "- **[{title}]({page})**: essentials {essentials} min, whole {whole} min{solutions}",
        "solutions": " ([solutions]({page}))",
        "start": "Where to start",
        "colab": "- **In Colab, nothing to install:** open [notebook {number} in Colab]({url}) (for a GPU: Runtime > "
        "Change runtime type > GPU). Its first cell installs the course's helpers; every lesson page has an *Open in "
        "Colab* button.",
        "laptop": "- **On a laptop:**",
        "cpu_first": "# on Linux without an NVIDIA GPU, install the CPU-only torch first:",
        "doctor": "# what this machine has, and the device the course will use",
    },
    CHINESE: {
        "path": "**核心路线**：第 {first}-{last} 课，约 {minutes} 分钟（约 {hours:g} 小时；完整学完约 {whole} 分钟）。"
        "每个笔记本从上到下读，运行每个单元格，完成练习；标题以“深入一步：”开头的小节可以跳过，后面的内容不依赖它们。"
        "第 {further} 课是进阶内容。",
        "row": "- **[{title}]({page})**：核心内容 {essentials} 分钟，完整 {whole} 分钟{solutions}",
        "solutions": "（[参考答案]({page})）",
        "start": "从哪里开始",
        "colab": "- **在 Colab 中，什么都不用装**：打开 [Colab 中的第 {number} 课]({url})（要用 GPU：Runtime > "
        "Change runtime type > GPU，即“代码执行程序 > 更改运行时类型”）。它的第一个单元格会安装课程的辅助代码；"
        "每一课的页面上都有“在 Colab 中打开”按钮。",
        "laptop": "- **在自己的电脑上**：",
        "cpu_first": "# Linux 上没有 NVIDIA GPU 时，先装只支持 CPU 的 torch：",
        "doctor": "# 看看这台机器有什么，课程会用哪个设备（COURSE_LANG=zh-CN：中文）",
    },
}


def lessons_page(rows: list[dict], lang: str = ENGLISH) -> str:
    text = LESSONS_TEXT[lang]
    readme = (course.ROOT / "README.md").read_text(encoding="utf-8")
    path = essentials_range(readme, [r["number"] for r in rows])
    minutes = sum(r["essentials"] or 0 for r in rows if r["number"] in path)
    whole = sum(r["whole"] or 0 for r in rows if r["number"] in path)
    further = f"{rows[len(path)]['number'] if len(rows) > len(path) else ''}-{rows[-1]['number']}"
    lines = [
        text["path"].format(
            first=path[0], last=path[-1], minutes=minutes, hours=round(minutes / 60, 1), whole=whole, further=further
        ),
        "",
    ]
    for r in rows:
        solutions = text["solutions"].format(page=r["solutions"]) if r["solutions"] else ""
        lines.append(text["row"].format(**{**r, "solutions": solutions}))
        if r["learn"]:
            lines += ["", f"  {r['learn']}", ""]
    first = course.lessons()[0]
    start = [
        "",
        "(start-here)=",
        f"## {text['start']}",
        "",
        text["colab"].format(number=first.name[:2], url=course.colab_url(published(first, lang))),
        text["laptop"],
        "",
        "  ```bash",
        f"  git clone https://github.com/{course.github_slug()}.git",
        f"  cd {course.github_slug().split('/')[1]}",
        "  python -m venv .venv && source .venv/bin/activate   # Windows: .venv\\Scripts\\activate",
        f'  pip install -e ".[lab]"          {text["cpu_first"]}',
        "                                   # pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu",
        f"  python -m helpers doctor         {text['doctor']}",
        f"  jupyter lab {course.repo_path(published(first, lang))}",
        "  ```",
        "",
    ]
    return "\n".join(lines + start)


def escape(text: str) -> str:
    """Plain text for Markdown: ``__init__`` stays ``__init__`` (not bold ``init``), ``[x]`` is no link."""
    return re.sub(r"([\\`*_\[\]<>#|~$])", r"\\\1", text)


def example_messages() -> list[str]:
    """Messages as people see them: raised on a real GPU (today's wording, first), then pasted into threads."""
    found = []
    gpu = FIXTURES / "gpu_error_messages.json"
    if gpu.exists():
        for probe in json.loads(gpu.read_text(encoding="utf-8")).get("messages", {}).values():
            if probe.get("message"):
                found.append(f"{probe.get('raised', '').rpartition('.')[2]}: {probe['message']}".lstrip(": "))
    pasted = FIXTURES / "real_error_messages.json"
    if pasted.exists():
        found += [m["message"] for m in json.loads(pasted.read_text(encoding="utf-8")).get("in_scope", [])]
    return found


def lesson_links(lesson: str, labels: set[str]) -> str:
    """``notebook 03 (device objects), section 8; ...`` with each notebook (and section) linked to its page."""
    pages = {p.name[:2]: course.repo_path(p) for p in course.lessons()}

    def link(m: re.Match) -> str:
        number, section = m.group(1) or m.group(3), m.group(2) or m.group(4)
        label = section_label(number, section) if section else None
        if label in labels:
            return f"[{m.group(0)}](#{label})"
        return f"[{m.group(0)}]({pages[number]})" if number in pages else m.group(0)

    return NOTEBOOK_SECTION.sub(link, lesson)


ERRORS_TEXT = {
    ENGLISH: {
        "seen": "As it appears in a traceback:",
        "meaning": "What it means",
        "fix": "How to fix it",
        "shown": "Where the course teaches it",
        "not_shown": "The lesson on its topic (no lesson shows this message)",
        "label": "**{}.** ",
        "where": "**{}:** ",
    },
    CHINESE: {
        "seen": "它在堆栈回溯（traceback）中的样子：",
        "meaning": "什么意思",
        "fix": "怎么修",
        "shown": "课程在哪里讲它",
        "not_shown": "相关主题的那一课（没有哪一课演示这条信息）",
        "label": "**{}**：",  # bold closes before Chinese punctuation (CommonMark)
        "where": "**{}**：",
    },
}


@contextlib.contextmanager
def environment(name: str, value: str):
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def speaking(lang: str):
    """The course's run-time messages (the known errors' notes, the explainer) in ``lang`` within the block."""
    return environment("COURSE_LANG", lang)


def site_language(lang: str):
    """The language ``site/conf.py`` configures Sphinx for."""
    return environment("COURSE_SITE_LANG", lang)


def errors_page(labels: set[str], lang: str = ENGLISH) -> str:
    """One section per entry of ``helpers.clinic.known_errors.KNOWN_ERRORS``, from whatever fields the entries have."""
    text = ERRORS_TEXT[lang]
    examples = example_messages()
    out = []
    with speaking(lang):
        for entry in known_errors.KNOWN_ERRORS:
            seen = list(dict.fromkeys(m for m in examples if known_errors.match(m) is entry))[:3]
            out += [f"(error-{entry.key})=", f"## {escape(i18n.tr(entry.title))}", ""]
            if seen:  # PyTorch's own words: never translated, a learner searches for them
                out += [text["seen"], "", "```text", *seen, "```", ""]
            for field in ("meaning", "fix"):
                if getattr(entry, field, None):
                    out += [text["label"].format(text[field]) + escape(i18n.tr(getattr(entry, field))), ""]
            if getattr(entry, "lesson", None):
                where = text["shown"] if getattr(entry, "shown", True) else text["not_shown"]
                out += [text["where"].format(where) + lesson_links(i18n.tr(entry.lesson), labels), ""]
    return "\n".join(out)


def explain_example(lang: str = ENGLISH) -> str:
    """What ``python -m helpers doctor --explain`` prints for the classic mixed-device message."""
    message = (
        "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"
    )
    with speaking(lang):
        rendered = known_errors.render(known_errors.match(message))
    return "\n".join(["```text", f'$ python -m helpers doctor --explain "{message}"', rendered, "```"])


def stage(lang: str = ENGLISH) -> None:
    """Fill the language's source folder with the site's pages, the staged notebooks and the generated pages."""
    src = source_dir(lang)
    if src.exists():
        shutil.rmtree(src)
    shutil.copytree(SITE, src, ignore=shutil.ignore_patterns("_build", "conf.py", "__pycache__"))
    if lang != ENGLISH:
        for page in translate.site_pages():
            table = translate.translations(translate.page_source(page).catalog)
            (src / page.name).write_text(translate.translate_markdown(page.read_text(encoding="utf-8"), table))
    guides = course.NOTEBOOKS / "guides"  # the teacher's guides: the Chinese ones on the zh site, where written
    shutil.copytree(guides, src / course.repo_path(guides), ignore=shutil.ignore_patterns(translate.LANG))
    if lang != ENGLISH:
        for english in translate.translated_guides():
            shutil.copy2(translate.zh_guide_path(english), src / course.repo_path(english))
    labels = set()
    for path in course.all_notebooks():
        target = src / course.repo_path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        nb = stage_notebook(path, lang)
        for cell in nb.cells:
            labels.update(re.findall(r"^\((lesson\d\d-section-\d+)\)=$", cell.source, re.MULTILINE))
        nbformat.write(nb, target)
    generated = src / "_generated"
    generated.mkdir()
    (generated / "lessons.md").write_text(lessons_page(lesson_rows(lang), lang), encoding="utf-8")
    (generated / "errors.md").write_text(errors_page(labels, lang), encoding="utf-8")
    (generated / "explain.md").write_text(explain_example(lang), encoding="utf-8")


def build(jobs: str = "auto", quiet: bool = True) -> Path:
    """Stage and build both languages; raises SystemExit with Sphinx's status when a build fails (warnings
    included). Returns the English landing page; the Chinese one is ``zh-CN/index.html`` beside it."""
    from sphinx.cmd.build import build_main

    for old in (HTML, BUILD / "doctrees"):  # a clean build: no page of an earlier build survives
        shutil.rmtree(old, ignore_errors=True)
    for lang in LANGUAGES:
        stage(lang)
        # Built beside the English site, then moved into it: myst-nb keeps its files next to the output folder
        out = HTML if lang == ENGLISH else BUILD / f"html-{lang}"
        shutil.rmtree(out, ignore_errors=True)
        args = ["-W", "--keep-going", "-b", "html", "-c", str(SITE), "-d", str(BUILD / "doctrees" / lang), "-j", jobs]
        with site_language(lang):
            status = build_main([*args, *(["-q"] if quiet else []), str(source_dir(lang)), str(out)])
        if status:
            raise SystemExit(status)
        for path in course.all_notebooks():  # the download button: the notebook itself, as in the repository
            shutil.copy2(published(path, lang), out / course.repo_path(path))
        if out != html_dir(lang):
            shutil.move(out, html_dir(lang))
    return HTML / "index.html"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-j", "--jobs", default="auto", help="Sphinx's parallel jobs (default: auto)")
    parser.add_argument("-v", "--verbose", action="store_true", help="print Sphinx's progress")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    index = build(args.jobs, quiet=not args.verbose)
    print(f"Built the site in {time.perf_counter() - start:.0f} s. Open it: {index.as_uri()}")
    print(f"or serve it: python -m http.server --directory {os.path.relpath(HTML)} 8000")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
