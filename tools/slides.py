"""Slides from the same notebooks: every cell of every notebook carries ``slideshow.slide_type``, by rule.

    python tools/slides.py                   # apply the slide rule (with the cell tags: python tools/cell_tags.py)
    python tools/slides.py --check           # name the cells without their slide type (or tags); exit 1 if any
    python tools/slides.py export NOTEBOOK... --out DIR   # static HTML slides that open without network

Present live (``pip install -e ".[teach]"``): open a notebook in JupyterLab and press Alt+R (or the toolbar's
"Render as Reveal Slideshow" button), or open ``http://localhost:8888/rise/notebooks/01_cpu_to_gpu_cuda.ipynb``
(jupyterlab-rise's route; the path is relative to the server's root). Space or the arrows advance, Shift+Enter
runs the cell in view. jupyterlab-rise serves reveal.js and its theme from the server (the ``white`` theme's font
ships with it; MathJax 3 comes with jupyterlab-mathjax3): only the Colab badge's image is remote.

The slide rule (tools/slide_rule.py) gives every cell its slide type and every notebook its presentation options,
``metadata.rise``; tools/cell_tags.py applies and checks it with the cell tags, in one pass.

``metadata.rise`` is the one place for a notebook's presentation options, in jupyterlab-rise's own keys: the live
slides read it as they are, and ``export`` turns ``slideNumber``, ``transition``, ``scroll`` and ``theme`` into the
options of nbconvert's slides exporter (``exporter_options``).

``export`` runs nbconvert's slides exporter (``jupyter nbconvert --to slides``) with every script and style
sheet pointed at DIR/_reveal/: reveal.js 4.0.2 (the version nbconvert's reveal template is written for),
require.js 2.1.10 and jQuery 2.2.4, fetched once from the npm registry (https://registry.npmjs.org) into a cache
(``$COURSE_SLIDES_CACHE``, by default ``~/.cache/pytorch-cpu-gpu-course/slides``) and copied into DIR. So the
first export needs the network; after that exports and the exported slides work offline (DIR can be copied to a
USB stick: open DIR/NN_name.slides.html). MathJax and mermaid, which the template also loads from CDNs, are
replaced by a local no-op: the lessons have no formulas and no mermaid diagrams (their diagrams are images that cells
draw, stored in the notebooks). A notebook's widget state is left out
(the progress bars show their text). Only the Colab badge's image stays remote: offline its alt text shows.

The exported slides are made for a projector (tools/slides_template/: nbconvert's reveal template with the course's
style sheets and script): a slide is 1280x720, which reveal.js scales to the screen; a code line of 120 characters
(the course's line length) shows whole, without the cells' execution counts; with ``scroll`` a slide taller than the
screen scrolls inside it, and a fragment (an exercise's verdict) is scrolled into view as it appears.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import sys
import tarfile
import urllib.request
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import nbformat

from tools import cell_tags, stored_state

NPM = "https://registry.npmjs.org"
REVEAL = "4.0.2"
VENDOR = {  # npm package, version, {file in the package: file in DIR/_reveal}
    "reveal.js": (REVEAL, None),  # dist/ and plugin/ kept as they are: nbconvert's template names them
    "requirejs": ("2.1.10", {"require.js": "require.js"}),
    "jquery": ("2.2.4", {"dist/jquery.min.js": "jquery.min.js"}),
}
STUBS = {  # what the template also loads and the lessons do not use
    "mathjax-none.js": "window.MathJax = {Hub: {getAllJax: function () { return []; }, Rerender: function () {},"
    " Config: function () {}, Queue: function () {}}};\n",
    "mermaid-none.js": "export default {initialize: function () {}};\n",
}
TEMPLATE = Path(__file__).resolve().parent / "slides_template"  # nbconvert's reveal template, style sheets, a script
SIZE = {"reveal_width": "1280", "reveal_height": "720"}  # a projector's pixels: reveal.js scales a slide to the screen


def cache_dir() -> Path:
    return Path(os.environ.get("COURSE_SLIDES_CACHE", Path.home() / ".cache" / "pytorch-cpu-gpu-course" / "slides"))


def vendor(cache: Path | None = None) -> Path:
    """reveal.js, require.js and jQuery in ``cache`` (fetched from the npm registry the first time only)."""
    cache = cache or cache_dir()
    done = cache / f"reveal-{REVEAL}.ok"
    if done.exists():
        return cache
    cache.mkdir(parents=True, exist_ok=True)
    for package, (version, files) in VENDOR.items():
        url = f"{NPM}/{package}/-/{package}-{version}.tgz"
        with urllib.request.urlopen(url, timeout=60) as response:
            data = response.read()
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for member in tar.getmembers():
                if not member.isfile():
                    continue
                inner = member.name.split("/", 1)[1]
                if files is None:
                    if not inner.startswith(("dist/", "plugin/")):
                        continue
                    target = cache / "reveal.js" / inner
                elif inner in files:
                    target = cache / files[inner]
                else:
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(tar.extractfile(member).read())
    for name, text in STUBS.items():
        (cache / name).write_text(text)
    done.write_text(f"reveal.js {REVEAL}\n")
    return cache


def exporter_options(rise: dict) -> dict:
    """nbconvert's SlidesExporter options for a notebook's presentation options (``metadata.rise``, all keys set)."""
    number = rise["slideNumber"]  # True, False or a format: reveal.js numbers ``h.v`` when given True
    return {
        "reveal_number": "h.v" if number is True else number or "",
        "reveal_transition": rise["transition"],
        "reveal_scroll": bool(rise["scroll"]),
        "reveal_theme": rise["theme"],
    }


def export(notebooks: list[Path], out: Path, cache: Path | None = None) -> list[Path]:
    """Static HTML slides of ``notebooks`` in ``out``, loading only files under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    local = out / "_reveal"
    shutil.copytree(vendor(cache), local, dirs_exist_ok=True)
    from nbconvert import SlidesExporter

    made = []
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        cell_tags.apply(nb)  # the notebook as python tools/cell_tags.py leaves it: tagged, with its slide types
        stored_state.strip(nb)  # widget state would load the widget manager from a CDN
        exporter = SlidesExporter(
            template_file="course_slides.html.j2",  # nbconvert's reveal template with the course's style and script
            extra_template_paths=[str(TEMPLATE)],
            reveal_url_prefix="_reveal/reveal.js",
            require_js_url="_reveal/require.js",
            jquery_url="_reveal/jquery.min.js",
            mathjax_url="_reveal/mathjax-none.js",
            mermaid_js_url="./_reveal/mermaid-none.js",  # not settable from nbconvert's command line
            **SIZE,
            **exporter_options(nb.metadata.rise),
        )
        body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": path.stem}})
        target = out / f"{path.stem}.slides.html"
        target.write_text(body, encoding="utf-8")
        made.append(target)
    return made


def main(argv: list[str]) -> int:
    if argv[:1] == ["export"]:
        parser = argparse.ArgumentParser(prog="tools/slides.py export", description="static HTML slides, offline")
        parser.add_argument("notebooks", nargs="+", type=Path)
        parser.add_argument("--out", type=Path, required=True)
        args = parser.parse_args(argv[1:])
        for made in export(args.notebooks, args.out):
            print(f"wrote {made}")
        return 0
    return cell_tags.main(argv)  # the slide rule is part of the cell-tag convention: one pass applies (or checks) both


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
