"""Slides from the notebooks (tools/slides.py), in headless Chromium: live with jupyterlab-rise, and exported.

Needs the teach extra (``pip install -e ".[teach]"``: jupyterlab-rise), Playwright and a Chromium (see
tests/headless.py); without them these tests skip and say so. The window is a projector's, 1280x720. Every request
to a host other than this machine is blocked and recorded: a classroom without network must see the same slides
(only the Colab badge's image, a link for learners at home, is allowed to fail: its alt text shows). Screenshots of
what the room sees are left beside the exported slides (pytest's temporary directory), to look at.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from urllib.parse import urlsplit

import nbformat
import pytest
from headless import HOW_TO_INSTALL, launched
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from tools import course, slide_rule, slides

LESSON = course.NOTEBOOKS / "01_cpu_to_gpu_cuda.ipynb"
TITLE = "CPU to GPU"
TIMEOUT_MS = 60_000
PROJECTOR = {"width": 1280, "height": 720}
LINE_LENGTH = tomllib.loads((course.ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["line-length"]
LONG_LINE = f'print("{"every character of this line shows on the projector, " * 3}'[: LINE_LENGTH - 2] + '")'
SETTINGS = {"transition": "fade", "slideNumber": "c/t"}  # not the course's defaults: the export must read them


@pytest.fixture(scope="module")
def browser():
    with launched(f'{HOW_TO_INSTALL}; pip install -e ".[teach]"') as browser:
        yield browser


def offline_page(browser):
    """A tab that blocks, and records, every request that would leave this machine."""
    page = browser.new_page(viewport=PROJECTOR)
    page.set_default_timeout(TIMEOUT_MS)
    remote = []

    def route(r):
        url = r.request.url
        host = urlsplit(url).hostname
        if url.startswith(("file:", "data:", "blob:")) or host in ("127.0.0.1", "localhost"):
            r.continue_()
        else:
            remote.append(url)
            r.abort()

    page.route("**/*", route)
    return page, remote


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if importlib.util.find_spec("jupyterlab_rise") is None:
        pytest.skip('jupyterlab-rise is missing: pip install -e ".[teach]"')
    root = tmp_path_factory.mktemp("classroom")
    shutil.copytree(course.NOTEBOOKS, root / "notebooks", ignore=shutil.ignore_patterns("data", "checkpoints", "runs"))
    port, token = free_port(), "slides-test-token"
    home = root / "home"
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(home / "config"), "JUPYTER_RUNTIME_DIR": str(home / "runtime")}
    env["JUPYTERLAB_SETTINGS_DIR"] = str(home / "settings")
    env["JUPYTERLAB_WORKSPACES_DIR"] = str(home / "workspaces")
    command = [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1"]
    command += [f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", "--allow-root"]  # CI runs as root
    log = open(root / "server.log", "w")  # closed below, after the server
    server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=5)
                break
            except (urllib.error.URLError, ConnectionError):
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not start:\n{(root / 'server.log').read_text()[-3000:]}")
                time.sleep(0.5)
        yield url, token
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=15)
        log.close()


def test_a_lesson_presents_live_with_rise(browser, lab, tmp_path):
    url, token = lab
    page, remote = offline_page(browser)
    try:
        page.goto(f"{url}/rise/notebooks/{LESSON.name}?token={token}")
        title = page.locator(".reveal section.present", has_text=TITLE).first
        title.wait_for(state="visible")
        assert TITLE.lower() in title.inner_text().lower()  # the theme sets headings in capitals
        for _ in range(6):  # the next slides: a section heading, then its code cell with the stored output
            page.keyboard.press("ArrowRight")
            output = page.locator(".reveal section.present .jp-OutputArea-output").first
            try:
                output.wait_for(state="visible", timeout=5_000)
                break
            except Exception:
                continue
        else:
            pytest.fail("no slide with a code cell's stored output after the title slide")
        assert output.inner_text().strip(), "the stored output is rendered"
        rise = nbformat.read(LESSON, as_version=4).metadata.rise  # read by jupyterlab-rise as the export reads it
        number = page.locator(".reveal .slide-number")
        assert number.is_visible() == bool(rise["slideNumber"]) and number.inner_text().strip()
        assert rise["transition"] in page.evaluate("() => [...document.querySelector('.reveal').classList]")
        assert f"theme-{rise['theme']}" in page.evaluate("() => [...document.body.classList]")
        page.screenshot(path=tmp_path / "live.png", animations="disabled")
        assert set(remote) <= {course.BADGE_IMAGE}, f"the live slides asked the network for: {remote}"
    finally:
        page.close()


def lesson_for_the_room(folder):
    """The lesson, with its own presentation settings changed (``SETTINGS``) and a code line as long as the course
    allows (``LONG_LINE``) after its first code cell; written to ``folder``."""
    nb = nbformat.read(LESSON, as_version=4)
    nb.metadata.rise = {**nb.metadata.rise, **SETTINGS}
    first = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and not c.source.startswith("# Setup"))
    nb.cells.insert(first + 1, new_code_cell(LONG_LINE))
    path = folder / LESSON.name
    nbformat.write(nb, path)
    return path


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    try:
        slides.vendor()  # the npm registry, once; then the cache
    except OSError as err:
        pytest.skip(f"reveal.js is not cached and the npm registry cannot be reached ({err}): the first export "
                    "needs the network once (python tools/slides.py export)")  # fmt: skip
    out = tmp_path_factory.mktemp("slides")
    (made,) = slides.export([lesson_for_the_room(tmp_path_factory.mktemp("lesson"))], out)
    return made


REVEAL = "() => new Promise(done => require(['_reveal/reveal.js/dist/reveal.js'], R => { window.Reveal = R; done(); }))"


def open_slides(browser, exported):
    """A tab with the exported slides, reveal.js ready (as ``Reveal``); and the requests that would leave."""
    page, remote = offline_page(browser)
    page.goto(exported.as_uri())
    page.evaluate(REVEAL)
    page.wait_for_function("() => Reveal.isReady()")
    return page, remote


def go_to(page, selector: str, text: str):
    """Show the slide holding the first ``selector`` element that contains ``text``."""
    page.evaluate(
        """([selector, text]) => {
            const found = [...document.querySelectorAll(selector)].find(e => e.textContent.includes(text));
            const where = Reveal.getIndices(found.closest('section'));
            Reveal.slide(where.h, where.v);
        }""",
        [selector, text],
    )


def test_an_exported_lesson_opens_offline(browser, exported):
    page, remote = offline_page(browser)
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(exported.as_uri())
        first = page.locator(".reveal section.present", has_text=TITLE).first
        first.wait_for(state="visible")
        page.keyboard.press("ArrowRight")
        page.locator(".reveal section.present", has_text="Which machine is this?").first.wait_for(state="visible")
        assert set(remote) <= {course.BADGE_IMAGE}, f"the exported slides asked the network for: {remote}"
        assert not errors, errors
    finally:
        page.close()


LINE = """(line) => {
    const pre = [...document.querySelectorAll('.reveal section.present pre')].find(p => p.textContent.includes(line));
    const start = pre.textContent.indexOf(line), end = start + line.length, range = document.createRange();
    const walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
    for (let node, at = 0; (node = walker.nextNode()); at += node.length) {
        if (at <= start && start < at + node.length) range.setStart(node, start - at);
        if (at < end && end <= at + node.length) range.setEnd(node, end - at);
    }
    const rects = [...range.getClientRects()].filter(r => r.width > 0), box = pre.getBoundingClientRect();
    const scale = box.width / pre.offsetWidth, style = getComputedStyle(pre);
    const padding = (parseFloat(style.paddingLeft) + parseFloat(style.paddingRight)) * scale;
    return {
        scrollWidth: pre.scrollWidth, clientWidth: pre.clientWidth,
        rows: range.getBoundingClientRect().height / (parseFloat(style.lineHeight) * scale),
        left: Math.min(...rects.map(r => r.left)), right: Math.max(...rects.map(r => r.right)),
        boxLeft: box.left, boxRight: box.right, room: pre.clientWidth * scale - padding, window: innerWidth,
    };
}"""


def test_an_exported_slide_shows_a_line_of_120_characters_whole(browser, exported):
    """On a 1280x720 screen the longest line the course writes is not cut, wrapped or scrolled, and fills its cell:
    the type is about as large as fits."""
    assert len(LONG_LINE) == LINE_LENGTH == 120
    page, _ = open_slides(browser, exported)
    try:
        go_to(page, ".reveal pre", LONG_LINE)
        line = page.evaluate(LINE, LONG_LINE)
        page.screenshot(path=exported.parent / "long_line.png", animations="disabled")
        assert line["scrollWidth"] <= line["clientWidth"], f"the code cell scrolls sideways: {line}"
        assert line["rows"] < 1.5, f"the line is wrapped: {line}"
        assert line["boxLeft"] <= line["left"] and line["right"] <= line["boxRight"], f"the line is cut: {line}"
        assert 0 <= line["left"] and line["right"] <= line["window"], f"the line runs off the screen: {line}"
        width = line["right"] - line["left"]
        assert width >= 0.9 * line["room"], f"the line takes {width:.0f} of {line['room']:.0f} px: type too small"
    finally:
        page.close()


def test_the_export_follows_the_notebooks_presentation_settings(browser, exported):
    """metadata.rise (here not the course's defaults): slide numbers in its format, its transition, its theme, and
    a slide taller than the screen scrolls inside it."""
    page, _ = open_slides(browser, exported)
    try:
        page.keyboard.press("ArrowRight")
        number = page.locator(".reveal .slide-number")
        number.wait_for(state="visible")
        total = page.evaluate("() => Reveal.getTotalSlides()")
        assert number.inner_text().replace(" ", "") == f"2/{total}", "slideNumber c/t: the current slide / all"
        assert page.evaluate("() => Reveal.getConfig().transition") == SETTINGS["transition"]
        assert SETTINGS["transition"] in page.evaluate("() => [...document.querySelector('.reveal').classList]")
        theme = page.evaluate("() => document.querySelector('link#theme').href")
        assert theme.endswith(f"/theme/{nbformat.read(LESSON, as_version=4).metadata.rise['theme']}.css")
        go_to(page, ".reveal section section", "A first look at cost")  # a long slide
        scroll = page.evaluate(
            "() => { const s = document.querySelector('.reveal section.present section.present');"
            " return [getComputedStyle(s).overflowY, s.scrollHeight, s.clientHeight, s.getBoundingClientRect().bottom];"
            " }"
        )
        assert scroll[0] in {"auto", "scroll"} and scroll[1] > scroll[2], f"a long slide scrolls: {scroll}"
        assert scroll[3] <= PROJECTOR["height"], f"its scroll box ends on the screen: {scroll}"
    finally:
        page.close()


FRAGMENT = """([i, before]) => {
    const f = document.querySelectorAll('.reveal .fragment')[i];
    if (before) {  // its slide, with the fragments before it shown and not it
        const where = Reveal.getIndices(f.closest('section'));
        Reveal.slide(where.h, where.v, +f.dataset.fragmentIndex - 1);
    }
    const r = f.getBoundingClientRect();
    return {top: r.top, bottom: r.bottom, visible: f.classList.contains('visible'), window: innerHeight};
}"""


def test_a_revealed_fragment_is_on_the_screen(browser, exported):
    """Each fragment (an answer after a question, an exercise's verdict, often at the foot of a long slide) is on the
    screen once it appears: the slide scrolls to it."""
    page, _ = open_slides(browser, exported)
    try:
        fragments = page.evaluate("() => [...document.querySelectorAll('.reveal .fragment')].map(f => f.textContent)")
        assert any(slide_rule.EXERCISE_CHECK.search(text) for text in fragments), "the verdicts are fragments"
        started_below = []
        for i, text in enumerate(fragments):
            before = page.evaluate(FRAGMENT, [i, True])
            assert not before["visible"]
            if before["top"] >= before["window"]:
                started_below.append(text)
            page.keyboard.press("ArrowRight")  # as the presenter does
            page.wait_for_function(f"() => ({FRAGMENT})([{i}, false]).visible")
            after = page.evaluate(FRAGMENT, [i, False])
            page.screenshot(path=exported.parent / f"fragment_{i}.png", animations="disabled")
            assert 0 <= after["top"] < after["window"], f"fragment {i}: revealed at {after}, out of view"
            fits = after["bottom"] - after["top"] <= after["window"]
            assert after["bottom"] <= after["window"] or not fits, f"fragment {i}: revealed at {after}, partly hidden"
        assert any(slide_rule.EXERCISE_CHECK.search(text) for text in started_below), (
            "no verdict started below the screen: this test would show nothing"
        )
    finally:
        page.close()


def test_the_export_options_are_the_notebooks_rise_settings(tmp_path):
    """One source of truth: metadata.rise, as jupyterlab-rise reads it, is what nbconvert's exporter is given."""
    rise = {"slideNumber": True, "transition": "zoom", "scroll": False, "theme": "serif"}
    assert slides.exporter_options(rise) == {
        "reveal_number": "h.v",  # what reveal.js shows for True, as the live slides do
        "reveal_transition": "zoom",
        "reveal_scroll": False,
        "reveal_theme": "serif",
    }
    assert slides.exporter_options({**rise, "slideNumber": False})["reveal_number"] == ""
    assert slides.exporter_options({**rise, "slideNumber": "c/t"})["reveal_number"] == "c/t"
    try:
        slides.vendor()
    except OSError as err:
        pytest.skip(f"reveal.js is not cached and the npm registry cannot be reached ({err})")
    nb = new_notebook(cells=[new_markdown_cell("# 00 · A title"), new_code_cell("x = 1")])
    nb.metadata.rise = rise
    nbformat.write(nb, tmp_path / "00_x.ipynb")
    (made,) = slides.export([tmp_path / "00_x.ipynb"], tmp_path / "out")
    page = made.read_text(encoding="utf-8")
    assert 'transition: "zoom"' in page and 'slideNumber: "h.v"' in page and "/theme/serif.css" in page
    assert "var scroll = false" in page and "max-height: 100%" not in page, "no scroll box when scroll is off"
