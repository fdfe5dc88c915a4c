"""The course's website: built from the tested notebooks (``python tools/build_site.py``), then opened page by page
in headless Chromium, at a desktop's width and at a phone's.

Needs the site extra (``pip install -e ".[site]"``: Sphinx, myst-nb, the book theme, Playwright's Python package)
and a Chromium on the machine (Debian/Ubuntu: ``apt-get install -y chromium``; or set ``COURSE_CHROMIUM`` to a
Chromium or Chrome executable); without them these tests skip and say so. Playwright drives that Chromium:
``playwright install`` (a browser download) is not needed.
"""

from __future__ import annotations

import functools
import html
import http.server
import importlib.util
import json
import re
import threading
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

import nbformat
import pytest
from headless import launched

from tools import course

MISSING = [name for name in ("sphinx", "myst_nb", "sphinx_book_theme") if importlib.util.find_spec(name) is None]
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f'{", ".join(MISSING)} missing: pip install -e ".[site]"')

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}
SCAFFOLDING_TEXT = ("NBVAL", "nbval-")
BUILD_LIMIT_S = 300  # both languages, on a 2-core machine


@pytest.fixture(scope="module")
def built():
    from tools import build_site

    start = time.perf_counter()
    index = build_site.build()
    return {"index": index, "html": index.parent, "seconds": time.perf_counter() - start}


def test_site_builds_with_warnings_as_errors_in_time(built):
    """``build()`` runs Sphinx with -W: a warning (a broken link, a missing label) fails it before this line."""
    assert built["index"].exists()
    assert built["seconds"] < BUILD_LIMIT_S, f"the site took {built['seconds']:.0f} s to build"


@pytest.mark.parametrize("lang", ["en", "zh-CN"])
def test_every_notebook_has_its_page_and_its_download(built, lang):
    from tools import build_site

    root = build_site.html_dir(lang)
    for path in course.all_notebooks():
        page = (root / course.repo_path(path)).with_suffix(".html")
        assert page.exists(), f"no page for {course.repo_path(path)}"
        download = (root / course.repo_path(path)).read_bytes()
        assert download == build_site.published(path, lang).read_bytes(), "download: the notebook"


def test_check_only_cells_are_left_out_of_the_pages(built):
    """A cell the convention tags ``remove-cell`` (asserts only) is not on the page; the lesson's code is."""
    from tools import build_site, cell_tags

    path = course.NOTEBOOKS / "03_device_objects.ipynb"
    staged = build_site.stage_notebook(path)
    hidden = [c for c in staged.cells if cell_tags.is_hidden(c)]
    shown = [c for c in staged.cells if c.cell_type == "code" and not cell_tags.is_hidden(c) and c.source.strip()]
    assert hidden and shown
    page = (built["html"] / course.repo_path(path)).with_suffix(".html").read_text(encoding="utf-8")
    text = re.sub(r"<[^>]+>", "", page)
    assert not [c.source for c in hidden if last_line(c.source) in text], "a check-only cell is on the page"
    assert sum(last_line(c.source) in text for c in shown) >= len(shown) * 0.9


PRAGMA_SHOWN = re.compile(r"#\s*(?:fmt:|noqa)")
CELL_INPUT = re.compile(r'<div class="cell_input[^"]*">.*?<pre>(.*?)</pre>', re.DOTALL)
CELL_OUTPUT = re.compile(r'<div class="cell_output[^"]*">(.*?)\n</div>\n</div>', re.DOTALL)


def page_text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def notebook_pages(root: Path) -> list[Path]:
    """The pages of the lessons and their solutions, in both languages."""
    return sorted(
        p for p in root.rglob("notebooks/**/*.html") if re.match(r"\d\d_", p.name) and "guides" not in p.parts
    )


def test_no_shown_code_cell_is_only_checks_or_a_linter_pragma(built):
    """What a page shows: no code cell of which half the lines or more are checks (asserts, an expected error,
    ``if ...: raise AssertionError``; an exercise's verdict, ``assert check.x(fn)``, is not one), and no ``# fmt:``
    or ``# noqa`` comment in code or output. Counted on the built HTML, so whatever the page drops is not counted."""
    from nbformat.v4 import new_code_cell

    from tools import cell_tags

    offending = []
    for page in notebook_pages(built["html"]):
        text = page.read_text(encoding="utf-8")
        rel = page.relative_to(built["html"]).as_posix()
        for n, source in enumerate(page_text(m) for m in CELL_INPUT.findall(text)):
            cell, first = new_code_cell(source.rstrip("\n")), source.strip().splitlines()[0] if source.strip() else ""
            if cell_tags.mostly_checks(cell):
                lines = f"{cell_tags.check_lines(cell)} of {cell_tags.code_lines(cell)} lines are checks"
                offending.append(f"{rel}, code cell {n + 1} ({lines}): {first[:70]}")
            if PRAGMA_SHOWN.search(source):
                offending.append(f"{rel}, code cell {n + 1}: a linter comment shows: {first[:70]}")
        for n, output in enumerate(page_text(m) for m in CELL_OUTPUT.findall(text)):
            found = PRAGMA_SHOWN.search(output)
            if found:
                offending.append(
                    f"{rel}, output {n + 1}: a linter comment shows: ...{output[found.start() - 40 : found.end()]}"
                )
    assert not offending, (
        f"{len(offending)} shown cells to fix (split the checks into a cell of their own):\n" + "\n".join(offending)
    )


def test_a_traceback_shows_the_learners_frames_and_its_last_line(built):
    """Like the error clinic (helpers/clinic/__init__.py): the cell's own frame and the error's last line, no library
    frame and no path of the machine that stored it."""
    page = (built["html"] / "notebooks/03_device_objects.html").read_text(encoding="utf-8")
    tracebacks = [page_text(t) for t in re.findall(r'<div class="output traceback[^"]*">(.*?)</pre>', page, re.DOTALL)]
    assert tracebacks, "lesson 03 shows an error on purpose"
    for tb in tracebacks:
        assert "Traceback (most recent call last)" in tb and re.search(r"Cell In\[\d+\], line \d+", tb), tb
        assert "RuntimeError: Invalid device string: 'cuda: 0'" in tb.strip().splitlines()[-1], tb
        assert "site-packages" not in tb and not re.search(r"^File /", tb, re.MULTILINE), tb


def last_line(source: str) -> str:
    return html.escape(source.strip().splitlines()[-1].strip(), quote=False)


def test_staged_notebook_keeps_every_cell_and_output_but_the_widgets():
    from tools import build_site, stored_state

    for path in course.all_notebooks():
        nb, staged = nbformat.read(path, as_version=4), build_site.stage_notebook(path)
        assert len(staged.cells) == len(nb.cells)
        for before, after in zip(nb.cells, staged.cells, strict=True):
            outputs = [o for o in before.get("outputs", []) if not stored_state.is_widget(o)]
            assert len(after.get("outputs", [])) == len(outputs)
            for out, kept in zip(outputs, after.get("outputs", []), strict=True):
                if out.get("output_type") == "stream":
                    assert kept.text == build_site.PRAGMA.sub("", out.text) and not PRAGMA_SHOWN.search(kept.text)
                else:
                    assert kept == out


@pytest.mark.parametrize("lang", ["en", "zh-CN"])
def test_every_in_colab_link_of_a_page_opens_colab(lang):
    """The second link of each pair between notebooks opens Colab (the first stays on the site), in both languages."""
    from tools import build_site

    colab_links = re.compile(r"\[([^\]]+)\]\((https://colab\.research\.google\.com/[^)]+)\)")
    pairs, wrong = 0, []
    for path in course.all_notebooks():
        for cell in build_site.stage_notebook(path, lang).cells:
            if cell.cell_type != "markdown":
                continue
            labels = re.findall(r"\[([^\]]+)\]\(([^)\s]+)\)", cell.source)
            wrong += [
                (path.name, label, url) for label, url in labels if label in build_site.IN_COLAB and "colab" not in url
            ]
            for label, url in colab_links.findall(cell.source):
                pairs += label in build_site.IN_COLAB
                if label in build_site.IN_COLAB and ("/zh-CN/" in url) != (lang == "zh-CN"):
                    wrong.append((path.name, label, url))
    assert pairs > 20, "the pages keep their links to Colab"
    assert not wrong, f"links to Colab that lead elsewhere or to the other language: {wrong[:5]}"


def test_error_index_lists_every_known_error_with_its_lesson(built):
    from helpers.clinic.known_errors import KNOWN_ERRORS

    page = (built["html"] / "errors.html").read_text(encoding="utf-8")
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", "", page)).split())
    for entry in KNOWN_ERRORS:
        assert f'id="error-{entry.key}"' in page, entry.key
        for field in (entry.title, entry.meaning, entry.fix):  # verbatim: no Markdown read into them
            assert " ".join(field.split()) in text, f"{entry.key}: {field[:60]}"
    assert "Expected all tensors to be on the same device" in page
    assert page.count('href="notebooks/') >= len(KNOWN_ERRORS) // 2, "entries link to their lessons"


def test_landing_page_minutes_are_the_notebooks(built):
    from tools import build_site

    page = (built["html"] / "index.html").read_text(encoding="utf-8")
    for row in build_site.lesson_rows():
        assert row["essentials"] and row["whole"], f"{row['page']}: the title cell's **Time:** line"
        assert f"essentials {row['essentials']} min, whole {row['whole']} min" in page, row["page"]
    assert "essentials path" in page and "Where to start" in page and "In a classroom" in page
    chinese = (built["html"] / "zh-CN" / "index.html").read_text(encoding="utf-8")
    for row in build_site.lesson_rows("zh-CN"):
        assert f"核心内容 {row['essentials']} 分钟，完整 {row['whole']} 分钟" in chinese, row["page"]
    assert "核心路线" in chinese and "从哪里开始" in chinese


# In the browser ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(built):
    handler = functools.partial(QuietHandler, directory=str(built["html"]))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def browser():
    with launched() as browser:
        yield browser


def pages(html: Path) -> list[str]:
    """Every page a reader can reach (not the theme's template fragments under ``_static``)."""
    found = (p.relative_to(html) for p in html.rglob("*.html"))
    return sorted(p.as_posix() for p in found if not any(part.startswith("_") for part in p.parts))


class Tab:
    """One browser tab that opens pages and keeps what went wrong while each loaded."""

    def __init__(self, browser, server: str, viewport: dict):
        self.page = browser.new_page(viewport=viewport)
        self.server, self.errors = server, []
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(f"console: {m.text}"))
        self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        self.retry: list[str] = []  # static assets of the site whose request failed: fetched again once
        self.page.on("requestfailed", self._failed)
        self.page.on("response", lambda r: r.status < 400 or self.errors.append(f"HTTP {r.status}: {r.url}"))
        self.page.on("request", lambda r: r.url.startswith(server) or self.errors.append(f"left the site: {r.url}"))

    def _failed(self, request) -> None:
        """A page that fails is an error; a static asset of the site (a favicon, a script, a font) whose request
        failed, as one can on a loaded machine (aborted by the next navigation, a slow server), is fetched once
        more, and only a second failure or a missing file is an error: a broken link still fails."""
        if request.resource_type != "document" and request.url.startswith(self.server):
            self.retry.append(request.url)
        else:
            self.errors.append(f"failed: {request.url} ({request.failure})")

    def open(self, rel: str) -> list[str]:
        """Open a page (a path under the site's root); return the errors of its loading."""
        self.errors = []
        self.page.goto(f"{self.server}/{rel}", wait_until="load")
        while self.retry:
            url = self.retry.pop()
            try:
                status = self.page.request.get(url).status
            except Exception as err:  # noqa: BLE001 (the retry's own failure is the error to report)
                self.errors.append(f"failed twice: {url} ({err})")
                continue
            if status >= 400:
                self.errors.append(f"HTTP {status} (retried): {url}")
        return self.errors

    def js(self, expression: str):
        return self.page.evaluate(expression)


BROKEN_IMAGES = "() => [...document.images].filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src)"
LINKS = "() => [...document.querySelectorAll('a[href]')].map(a => a.href)"
OUTPUT_PICTURES = (  # the pictures a page shows in its cells' outputs, loaded, with their alt text
    "() => [...document.querySelectorAll('.cell_output img')]"
    ".filter(i => i.complete && i.naturalWidth > 0 && i.alt).length"
)
COLAB_BUTTONS = (  # the theme's "Launch on Colab" in the header, then ours under the title
    "() => [...document.querySelectorAll('a.dropdown-item[href*=\"colab.research\"], a.course-button-colab')]"
    ".map(a => a.href)"
)
BUTTONS = "() => [...document.querySelectorAll('.course-buttons a')].map(a => a.textContent.trim())"
SWITCH = "() => [...document.querySelectorAll('.course-language-switch a')].map(a => a.href)"
NO_BODY = {"search.html", "genindex.html"}  # Sphinx's own pages: no language link
CLIPPED_OUTPUTS = (  # an output block whose text runs past its box (cut at the right edge, or a scroll bar)
    "() => [...document.querySelectorAll('div.cell_output pre, div.highlight-text pre')]"
    ".filter(p => p.scrollWidth > p.clientWidth + 1).map(p => p.innerText.split('\\n').sort((a, b) => "
    "b.length - a.length)[0].slice(0, 60))"
)
SEARCH_BOXES = (  # the search fields and buttons a reader sees (not the dialog they open)
    "() => [...document.querySelectorAll('.search-button-field, .search-button, input[name=q]')]"
    ".filter(e => !e.closest('dialog') && e.getClientRects().length && getComputedStyle(e).visibility !== 'hidden')"
    ".length"
)
COPY_BUTTONS = (  # [code blocks with a copy button, code blocks, output blocks with one]
    "() => [document.querySelectorAll('div.cell_input button.copybtn').length,"
    " document.querySelectorAll('div.cell_input pre').length,"
    " document.querySelectorAll('div.cell_output button.copybtn').length]"
)


def stored_pictures(notebook: Path) -> int:
    """The image outputs a notebook stores (what its page must show)."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return sum("image/png" in o.get("data", {}) for c in cells if c["cell_type"] == "code" for o in c["outputs"])


def notebook_of(rel: str) -> tuple[Path, str]:
    """The notebook a page shows and the page's language: ``zh-CN/notebooks/x.html`` is ``notebooks/zh-CN/x``."""
    lang = "zh-CN" if rel.startswith("zh-CN/") else "en"
    english = course.ROOT / Path(rel.removeprefix("zh-CN/")).with_suffix(".ipynb")
    if lang == "en" or not english.exists():
        return english, lang
    from tools import translate

    return translate.zh_path(english), lang


def test_every_page_in_the_browser(browser, built, server):
    """Loads without console errors or requests off the site; images load, a notebook's pictures all shown; links and
    anchors resolve; a notebook's
    page has its three buttons and every Colab link on it opens that very notebook; no test scaffolding shows; every
    page links to the same page in the other language. Both languages: the Chinese pages are under zh-CN/."""
    from tools import build_site

    html, tab, ids, problems = built["html"], Tab(browser, server, DESKTOP), {}, []
    for rel in pages(html):
        problems += [f"{rel}: {e}" for e in tab.open(rel)]
        problems += [f"{rel}: image not loaded: {src}" for src in tab.js(BROKEN_IMAGES)]
        text = tab.js("() => document.body.innerText")
        problems += [f"{rel}: shows {word!r}" for word in SCAFFOLDING_TEXT if word in text]
        problems += [f"{rel}: an output is cut at the right edge: {line!r}" for line in tab.js(CLIPPED_OUTPUTS)]
        boxes = tab.js(SEARCH_BOXES)
        problems += [f"{rel}: {boxes} search boxes, not one"] * (boxes != 1)
        for href in tab.js(LINKS):
            if not href.startswith(server):
                continue
            parts = urlsplit(href)
            target = unquote(parts.path).lstrip("/") or "index.html"
            target += "index.html" if target.endswith("/") else ""
            if not (html / target).exists():
                problems.append(f"{rel}: link to a missing page {target}")
            elif parts.fragment and target.endswith(".html"):
                if target not in ids:
                    ids[target] = set(re.findall(r'\bid="([^"]+)"', (html / target).read_text(encoding="utf-8")))
                if unquote(parts.fragment) not in ids[target]:
                    problems.append(f"{rel}: link to a missing anchor {target}#{parts.fragment}")
        switch = tab.js(SWITCH)
        if Path(rel).name not in NO_BODY:
            other = [unquote(urlsplit(h).path).lstrip("/") for h in switch]
            if len(other) != 1 or not (html / other[0]).exists() or other[0] == rel:
                problems.append(f"{rel}: the link to the other language is {switch}")
        notebook, lang = notebook_of(rel)
        if notebook.exists():
            shown, stored = tab.js(OUTPUT_PICTURES), stored_pictures(notebook)
            problems += [f"{rel}: shows {shown} of its {stored} pictures"] * (shown != stored)
            own = course.colab_url(notebook)
            buttons = tab.js(COLAB_BUTTONS)
            wanted = [own, own] if lang == "en" else [own]  # the theme's launch button opens the English one
            problems += [f"{rel}: Colab buttons {buttons}, not {wanted}"] * (buttons != wanted)
            buttons = tab.js(BUTTONS)
            wanted = list(build_site.BUTTONS["zh-CN" if lang == "zh-CN" else "en"])
            problems += [f"{rel}: buttons {buttons}, not {wanted}"] * (buttons != wanted)
            with_button, blocks, on_outputs = tab.js(COPY_BUTTONS)
            if with_button != blocks or on_outputs:
                problems.append(f"{rel}: copy buttons on {with_button} of {blocks} code cells, {on_outputs} outputs")
    tab.page.close()
    assert len([p for p in pages(html) if p.startswith("zh-CN/")]) > len(course.all_notebooks())
    assert not problems, "\n".join(problems)


def test_no_page_scrolls_sideways_on_a_phone(browser, built, server):
    """At 390 px nothing but a code block (or a wide table, in its own scroll box) is wider than the screen."""
    problems, tab = [], Tab(browser, server, PHONE)
    for rel in pages(built["html"]):
        tab.open(rel)
        overflow = tab.js(
            """() => {
                const width = document.documentElement.clientWidth;
                const scroll = document.documentElement.scrollWidth;
                if (scroll <= width + 1) return null;
                const wide = [...document.querySelectorAll('body *')]
                    .filter(e => e.getBoundingClientRect().right > width + 1
                                 && e.parentElement.getBoundingClientRect().right <= width + 1)
                    .slice(0, 3).map(e => `${e.tagName}.${e.className} "${e.textContent.slice(0, 40)}"`);
                return `${scroll} px wide: ${wide.join(', ')}`;
            }"""
        )
        if overflow:
            problems.append(f"{rel}: {overflow}")
        problems += [f"{rel}: an output is cut at the right edge: {line!r}" for line in tab.js(CLIPPED_OUTPUTS)]
        boxes = tab.js(SEARCH_BOXES)
        problems += [f"{rel}: {boxes} search boxes, not one"] * (boxes != 1)
    tab.page.close()
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "query, page, first",
    [  # first: the page that teaches the term is the first result (site/_static/course-scorer.js)
        ("map_location", ("notebooks/05_train_tudui.html", "errors.html"), True),
        ("Expected all tensors to be on the same device", ("errors.html",), False),
        ("显存", ("zh-CN/notebooks/07_memory.html",), True),  # jieba segments Chinese words; 07's title has it
        ("分布式训练", ("zh-CN/notebooks/08_many_devices.html",), True),  # 08's title: 多设备与分布式训练
        ("设备", ("zh-CN/notebooks/03_device_objects.html",), False),
        ("map_location", ("zh-CN/notebooks/05_train_tudui.html", "zh-CN/errors.html"), True),
    ],
)
def test_search_finds(browser, built, server, query, page, first):
    tab = Tab(browser, server, DESKTOP)
    tab.open(f"{'zh-CN/' if page[0].startswith('zh-CN/') else ''}search.html?q={query}")
    tab.page.wait_for_function(  # Sphinx lists results one by one: wait for its summary, in either language
        "() => /search finished|did not match|搜索完成|没有匹配/i.test("
        "document.querySelector('#search-results .search-summary')?.innerText || '')",
        timeout=60_000,
    )
    found = tab.js("() => [...document.querySelectorAll('#search-results li a')].map(a => a.href)")
    snippets = tab.js("() => [...document.querySelectorAll('#search-results li p.context')].map(p => p.innerText)")
    tab.page.close()
    paths = [urlsplit(href).path.lstrip("/") for href in found]
    assert any(path in page for path in paths), f"{query!r} found {paths}"
    if first:
        assert paths[0] in page, f"{query!r}: {paths[0]} first, not {' or '.join(page)} ({paths[:5]})"
    menus = ("Download the notebook", "View the source", "Contents", "下载笔记本", "查看源文件", "目录")
    assert not [s for s in snippets if any(m in s for m in menus)], f"menu text in the snippets: {snippets[:3]}"


def test_screenshots_for_a_learners_eye(browser, built, server):
    """One of the landing page and one of a lesson, kept in site/_build/screenshots/ (not committed)."""
    out = built["html"].parent / "screenshots"
    out.mkdir(exist_ok=True)
    tab = Tab(browser, server, DESKTOP)
    shots = [("index.html", "landing.png"), ("notebooks/03_device_objects.html", "lesson_03.png")]
    shots.append(("zh-CN/notebooks/03_device_objects.html", "lesson_03_zh-CN.png"))
    for rel, name in shots:
        assert not tab.open(rel)
        tab.page.screenshot(path=str(out / name))
        assert (out / name).stat().st_size > 10_000
