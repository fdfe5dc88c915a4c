"""Slides from the notebooks (tools/slides.py), in headless Chromium: live with jupyterlab-rise, and exported.

Needs the teach extra (``pip install -e ".[teach]"``: jupyterlab-rise), Playwright and a Chromium (see
tests/headless.py); without them these tests skip and say so. Every request to a host other than this machine
is blocked and recorded: a classroom without network must see the same slides (only the Colab badge's image,
a link for learners at home, is allowed to fail: its alt text shows).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit

import pytest
from headless import HOW_TO_INSTALL, launched

from tools import course

LESSON = course.NOTEBOOKS / "01_cpu_to_gpu_cuda.ipynb"
TITLE = "CPU to GPU"
TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def browser():
    with launched(f'{HOW_TO_INSTALL}; pip install -e ".[teach]"') as browser:
        yield browser


def offline_page(browser):
    """A tab that blocks, and records, every request that would leave this machine."""
    page = browser.new_page(viewport={"width": 1280, "height": 800})
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


def test_a_lesson_presents_live_with_rise(browser, lab):
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
        assert set(remote) <= {course.BADGE_IMAGE}, f"the live slides asked the network for: {remote}"
    finally:
        page.close()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from tools import slides

    try:
        slides.vendor()  # the npm registry, once; then the cache
    except OSError as err:
        pytest.skip(f"reveal.js is not cached and the npm registry cannot be reached ({err}): the first export "
                    "needs the network once (python tools/slides.py export)")  # fmt: skip
    out = tmp_path_factory.mktemp("slides")
    (made,) = slides.export([LESSON], out)
    return made


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
