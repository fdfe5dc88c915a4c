"""Sphinx configuration of the course's website. Build it with ``python tools/build_site.py``.

The sources Sphinx reads are staged in ``site/_build/src/`` by that command (the notebooks with their stored,
tested outputs, never re-executed, and the pages of this folder); this file stays here (``sphinx-build -c``).
"""

import logging
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tools import course  # noqa: E402

# tools/build_site.py builds the site twice: English at the root, then the zh-CN edition under zh-CN/, with
# COURSE_SITE_LANG=zh-CN. Chinese search segments words with jieba (the site extra installs it).
SITE_LANGUAGE = os.environ.get("COURSE_SITE_LANG", "en")
CHINESE = SITE_LANGUAGE == "zh-CN"
if CHINESE:  # jieba sets its logger to DEBUG when imported: its "Building prefix dict" lines are not the build's
    import jieba

    jieba.setLogLevel(logging.WARNING)

project = "PyTorch 在 CPU 与 GPU 上：动手学" if CHINESE else "PyTorch on CPU and GPU, hands-on"
author = "课程作者" if CHINESE else "the course's authors"
copyright = "课程作者；文字 CC BY 4.0，代码 MIT" if CHINESE else "the course's authors; text CC BY 4.0, code MIT"
language = "zh_CN" if CHINESE else "en"
smartquotes = False  # code in prose ('ignore', "cuda") stays as a learner must type it

extensions = ["myst_nb", "sphinx_copybutton"]
# The copy button: on code (a cell's input, a code block), never on an output; without prompts ("$ ", ">>> ").
copybutton_selector = 'div[class*="highlight-"]:not(.output) > div.highlight > pre'
copybutton_prompt_text = r">>> |\.\.\. |\$ "
copybutton_prompt_is_regexp = True
nb_execution_mode = "off"  # the stored outputs are the ones the tests check under strict nbval
nb_merge_streams = True
nb_ipywidgets_js = {}  # no widget JavaScript from a CDN: the pages load offline
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
exclude_patterns = ["_build", "_generated", "**.ipynb_checkpoints", "jupyter_execute"]
# a traceback the lexer reads only in its relaxed mode is still shown, highlighted
suppress_warnings = ["mystnb.unknown_mime_type", "misc.highlighting_failure"]

html_theme = "sphinx_book_theme"
html_title = project
html_static_path = [str(ROOT / "site" / "_static")]
html_css_files = ["course.css"]
html_favicon = str(ROOT / "site" / "_static" / "favicon.svg")  # a browser asks for /favicon.ico without one
html_show_sourcelink = False
html_last_updated_fmt = None
html_js_files = ["course-search.js"]  # search snippets from the lesson's text, not the page's menus
html_search_scorer = str(ROOT / "site" / "_static" / "course-scorer.js")  # the page that teaches a term first
# one search box: the one in the sidebar (the search page has its own form instead)
html_sidebars = {"**": ["navbar-logo.html", "icon-links.html", "search-button-field.html", "sbt-sidebar-nav.html"]}
html_sidebars["search"] = [item for item in html_sidebars["**"] if item != "search-button-field.html"]
html_theme_options = {
    "navbar_persistent": [],  # the header's search box: a second one
    "repository_url": f"https://github.com/{course.github_slug()}",
    "repository_branch": course.branch(),
    "path_to_docs": "",  # the staged sources keep the repository's paths: notebooks/NN_topic.ipynb
    "use_repository_button": True,
    "use_download_button": False,  # each notebook page has its own download button (the notebook itself)
    "use_source_button": False,
    "use_edit_page_button": False,
    "use_issues_button": False,
    # the theme's launch button opens the English notebook: the Chinese pages keep only their own Colab button
    "launch_buttons": {} if CHINESE else {"colab_url": "https://colab.research.google.com"},
    "show_toc_level": 2,
    "home_page_in_toc": True,
}
html_context = {"default_mode": "auto"}  # light or dark, as the reader's system is

# Each page links to the same page in the other language (the English site's zh-CN/ folder, and back).
OTHER_LANGUAGE = {"en": ("zh-CN", "中文"), "zh_CN": ("en", "English")}


def language_switch(app, pagename, templatename, context, doctree):
    if "body" not in context:  # search and index pages carry no body of their own
        return
    target, label = OTHER_LANGUAGE[app.config.language]
    up = "../" * pagename.count("/")
    href = f"{up}zh-CN/{pagename}.html" if target == "zh-CN" else f"{up}../{pagename}.html"
    link = f'<p class="course-language-switch"><a href="{href}" hreflang="{target}" lang="{target}">{label}</a></p>'
    context["body"] = link + context["body"]


def chinese_search():
    """Sphinx's Chinese search (jieba for Chinese words, the English stemmer for the others), with its script
    naming the stemmer it ships: Sphinx 9's names a ``ChineseStemmer`` that does not exist, and every page fails
    with "ChineseStemmer is not defined"."""
    from sphinx.search.zh import SearchChinese

    class ChineseSearch(SearchChinese):
        language_name = "English"  # the script's `window.Stemmer = EnglishStemmer`: the stemmer it includes

    return ChineseSearch


def setup(app):
    app.connect("html-page-context", language_switch)
    if CHINESE:
        app.add_search_language(chinese_search())
