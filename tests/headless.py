"""Headless Chromium for the browser tests (tests/test_site.py, tests/test_slides.py), driven by Playwright.

The browser is the machine's own Chromium (Debian/Ubuntu: ``apt-get install -y chromium``; or set ``COURSE_CHROMIUM``
to a Chromium or Chrome executable): ``playwright install`` (a browser download) is not needed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil

import pytest

HOW_TO_INSTALL = 'apt-get install -y chromium (Debian/Ubuntu) and pip install -e ".[site]"; or set COURSE_CHROMIUM'


def chromium() -> str | None:
    candidates = [os.environ.get("COURSE_CHROMIUM"), "chromium", "chromium-browser", "google-chrome", "chrome"]
    return next((shutil.which(c) for c in candidates if c and shutil.which(c)), None)


@contextlib.contextmanager
def launched(how_to_install: str = HOW_TO_INSTALL):
    """A headless Chromium for a test module; the test skips, saying ``how_to_install``, without one."""
    if importlib.util.find_spec("playwright") is None:
        pytest.skip(f"Playwright's Python package is missing: {how_to_install}")
    executable = chromium()
    if executable is None:
        pytest.skip(f"no Chromium on this machine: {how_to_install}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield browser
        browser.close()
