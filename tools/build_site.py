"""Build the course's website from the notebooks as they are tested: their stored outputs, never re-run.

    pip install -e ".[site]"
    python tools/build_site.py          # builds site/_build/html/ (warnings are errors), prints where to open it

The notebooks are read where they live (``notebooks/``, ``notebooks/solutions/``) and staged, with the same
paths, in ``site/_build/src/`` (git-ignored), where each copy gets what a web page needs and the notebook does
not: the cell-tag convention applied (``tools/cell_tags.py``: check-only cells are tagged ``remove-cell``
and dropped from the page, nbval's markers become tags, which are not shown), the Colab badge replaced by
three buttons (open in Colab, download the notebook, view its source), links to other course notebooks in
Colab pointed at their pages, a label on each numbered section (``lessonNN-section-N``, which the error
index links to), and frozen progress-bar widgets left out. Pages generated here: the lesson table of the
landing page (titles and minutes from each title cell) and the index of known device errors
(``helpers/known_errors.py``). The sources in ``site/`` (configuration, landing page, templates) are
copied beside them.
"""

from __future__ import annotations

import argparse
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

from helpers import known_errors
from tools import cell_tags, course
from tools.sync_links import BADGE, COLAB_LINK

SITE = course.ROOT / "site"
BUILD = SITE / "_build"
SRC = BUILD / "src"
HTML = BUILD / "html"
TIME_LINE = re.compile(r"\*\*Time:\*\* essentials about (\d+) min, whole notebook about (\d+) min\.")
SECTION = re.compile(r"^## (\d+)\. ", re.MULTILINE)
NOTEBOOK_SECTION = re.compile(r"notebook (\d\d)\b[^,;]*(?:, section (\d+))?")
WIDGET = "application/vnd.jupyter.widget-view+json"
FIXTURES = course.ROOT / "tests" / "fixtures"


def github_url(rel: str) -> str:
    return f"https://github.com/{course.github_slug()}/blob/{course.branch()}/{rel}"


def section_label(number: str, section: str) -> str:
    return f"lesson{number}-section-{section}"


def buttons(path: Path) -> str:
    """The button bar under a notebook page's title (raw HTML in its markdown)."""
    rel = course.repo_path(path)
    links = [
        (course.colab_url(path), "colab", "Open in Colab", ""),
        (path.name, "download", "Download the notebook", f' download="{path.name}"'),
        (github_url(rel), "source", "View the source", ""),
    ]
    anchors = "\n".join(
        f'<a class="course-button course-button-{kind}" href="{html.escape(url)}"{extra}>{text}</a>'
        for url, kind, text, extra in links
    )
    return f'<div class="course-buttons">\n{anchors}\n</div>'


def local_links(text: str, path: Path) -> str:
    """``[04 · Title](colab URL of a course notebook)`` -> the relative link, so the site stays on the site."""

    def relative(m: re.Match) -> str:
        label, target = m.group(1), course.ROOT / m.group(3)
        if label == "in Colab" or not target.exists():
            return m.group(0)
        return f"[{label}]({os.path.relpath(target, path.parent).replace(os.sep, '/')})"

    return re.sub(rf"\[([^\]]+)\]\(({COLAB_LINK.pattern})\)", relative, text)


def stage_notebook(path: Path) -> nbformat.NotebookNode:
    """The web page's copy of a notebook (see the module's docstring); the notebook itself is not touched."""
    nb = nbformat.read(path, as_version=4)
    cell_tags.apply(nb)
    lesson = course.LESSON_NAME.match(path.name) and path.parent == course.NOTEBOOKS
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            text = BADGE.sub(lambda _: buttons(path), cell.source, count=1) if i == 0 else cell.source
            text = local_links(text, path)
            if lesson:
                text = SECTION.sub(lambda m: f"({section_label(path.name[:2], m.group(1))})=\n{m.group(0)}", text)
            cell.source = text
        elif cell.cell_type == "code":
            cell.outputs = [o for o in cell.get("outputs", []) if WIDGET not in o.get("data", {})]
    nb.metadata.pop("widgets", None)
    return nb


def lesson_rows() -> list[dict]:
    """Number, title, page, minutes (from the title cell) and the README's 'what you learn' of each lesson."""
    readme = (course.ROOT / "README.md").read_text(encoding="utf-8")
    learn = {}
    for line in readme.splitlines():
        parts = [p.strip() for p in line.strip().strip("|").split("|")]
        if len(parts) > 3 and re.fullmatch(r"\d\d", parts[0]):
            learn[parts[0]] = parts[2]
    rows = []
    for path in course.lessons():
        title_cell = nbformat.read(path, as_version=4).cells[0].source
        title = title_cell.splitlines()[0].lstrip("# ").strip()
        minutes = TIME_LINE.search(title_cell)
        solutions = course.SOLUTIONS / f"{path.stem}_solutions.ipynb"
        rows.append(
            {
                "number": path.name[:2],
                "title": title,
                "page": course.repo_path(path),
                "solutions": course.repo_path(solutions) if solutions.exists() else None,
                "essentials": int(minutes.group(1)) if minutes else None,
                "whole": int(minutes.group(2)) if minutes else None,
                "learn": learn.get(path.name[:2], ""),
            }
        )
    return rows


def essentials_range(readme: str, numbers: list[str]) -> list[str]:
    """The lessons the README's essentials path covers ("The essentials of notebooks 00-05"), else all."""
    found = re.search(r"essentials of notebooks (\d\d)-(\d\d)", readme)
    return [n for n in numbers if not found or found.group(1) <= n <= found.group(2)]


def lessons_page(rows: list[dict]) -> str:
    readme = (course.ROOT / "README.md").read_text(encoding="utf-8")
    path = essentials_range(readme, [r["number"] for r in rows])
    minutes = sum(r["essentials"] or 0 for r in rows if r["number"] in path)
    whole = sum(r["whole"] or 0 for r in rows if r["number"] in path)
    lines = [
        f"**The essentials path:** notebooks {path[0]}-{path[-1]}, about {minutes} min "
        f"(about {round(minutes / 60, 1):g} hours; the whole notebooks about {whole} min). Read each notebook top "
        'to bottom, run its cells and do its exercises, and skip every section whose heading starts with "Going '
        'deeper:"; nothing after such a section depends on it. Notebooks '
        f"{rows[len(path)]['number'] if len(rows) > len(path) else ''}-{rows[-1]['number']} go further.",
        "",
    ]
    for r in rows:
        solutions = f" ([solutions]({r['solutions']}))" if r["solutions"] else ""
        lines.append(
            f"- **[{r['title']}]({r['page']})**: essentials {r['essentials']} min, whole {r['whole']} min{solutions}"
        )
        if r["learn"]:
            lines += ["", f"  {r['learn']}", ""]
    first = course.lessons()[0]
    start = [
        "",
        "(start-here)=",
        "## Where to start",
        "",
        f"- **In Colab, nothing to install:** open [notebook {first.name[:2]} in Colab]({course.colab_url(first)}) "
        "(for a GPU: Runtime > Change runtime type > GPU). Its first cell installs the course's helpers; every "
        "lesson page has an *Open in Colab* button.",
        "- **On a laptop:**",
        "",
        "  ```bash",
        f"  git clone https://github.com/{course.github_slug()}.git",
        f"  cd {course.github_slug().split('/')[1]}",
        "  python -m venv .venv && source .venv/bin/activate   # Windows: .venv\\Scripts\\activate",
        '  pip install -e ".[lab]"          # on Linux without an NVIDIA GPU, install the CPU-only torch first:',
        "                                   # pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu",
        "  python -m helpers.doctor         # what this machine has, and the device the course will use",
        f"  jupyter lab {course.repo_path(first)}",
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
        number, section = m.group(1), m.group(2)
        label = section_label(number, section) if section else None
        if label in labels:
            return f"[{m.group(0)}](#{label})"
        return f"[{m.group(0)}]({pages[number]})" if number in pages else m.group(0)

    return NOTEBOOK_SECTION.sub(link, lesson)


def errors_page(labels: set[str]) -> str:
    """One section per entry of ``helpers.known_errors.KNOWN_ERRORS``, from whatever fields the entries have."""
    examples = example_messages()
    out = []
    for entry in known_errors.KNOWN_ERRORS:
        seen = list(dict.fromkeys(m for m in examples if known_errors.match(m) is entry))[:3]
        out += [f"(error-{entry.key})=", f"## {escape(entry.title)}", ""]
        if seen:
            out += ["As it appears in a traceback:", "", "```text", *seen, "```", ""]
        for label, field in (("What it means", "meaning"), ("How to fix it", "fix")):
            if getattr(entry, field, None):
                out += [f"**{label}.** {escape(getattr(entry, field))}", ""]
        if getattr(entry, "lesson", None):
            shown = getattr(entry, "shown", True)
            where = "Where the course teaches it" if shown else "The lesson on its topic (no lesson shows this message)"
            out += [f"**{where}:** {lesson_links(entry.lesson, labels)}", ""]
    return "\n".join(out)


def explain_example() -> str:
    """What ``python -m helpers.doctor --explain`` prints for the classic mixed-device message."""
    message = (
        "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"
    )
    entry = known_errors.match(message)
    return "\n".join(
        ["```text", f'$ python -m helpers.doctor --explain "{message}"', known_errors.render(entry), "```"]
    )


def stage() -> None:
    """Fill ``site/_build/src/`` with the site's sources, the staged notebooks and the generated pages."""
    if SRC.exists():
        shutil.rmtree(SRC)
    shutil.copytree(SITE, SRC, ignore=shutil.ignore_patterns("_build", "conf.py", "__pycache__"))
    labels = set()
    for path in course.all_notebooks():
        target = SRC / course.repo_path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        nb = stage_notebook(path)
        for cell in nb.cells:
            labels.update(re.findall(r"^\((lesson\d\d-section-\d+)\)=$", cell.source, re.MULTILINE))
        nbformat.write(nb, target)
    generated = SRC / "_generated"
    generated.mkdir()
    (generated / "lessons.md").write_text(lessons_page(lesson_rows()), encoding="utf-8")
    (generated / "errors.md").write_text(errors_page(labels), encoding="utf-8")
    (generated / "explain.md").write_text(explain_example(), encoding="utf-8")


def build(jobs: str = "auto", quiet: bool = True) -> Path:
    """Stage and build; raises SystemExit with Sphinx's status when the build fails (warnings included)."""
    from sphinx.cmd.build import build_main

    stage()
    for old in (HTML, BUILD / "doctrees"):  # a clean build: no page of an earlier build survives
        shutil.rmtree(old, ignore_errors=True)
    args = ["-W", "--keep-going", "-b", "html", "-c", str(SITE), "-d", str(BUILD / "doctrees"), "-j", jobs]
    status = build_main([*args, *(["-q"] if quiet else []), str(SRC), str(HTML)])
    if status:
        raise SystemExit(status)
    for path in course.all_notebooks():  # the download button: the notebook itself, as in the repository
        shutil.copy2(path, HTML / course.repo_path(path))
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
