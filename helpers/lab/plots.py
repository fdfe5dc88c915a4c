"""Figures for the notebooks (supporting code, not the lesson).

A figure's titles, labels and legends speak the course's language where a font can draw it: in Chinese when
matplotlib finds one of ``CJK_FONTS`` (on Colab: ``!apt-get install -y -q fonts-noto-cjk``, then restart the
session), in English otherwise, never as boxes.
"""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path

from helpers.course.i18n import ENGLISH, language, tr, tr_lazy

CJK_FONTS = (
    "Noto Sans CJK SC",
    "WenQuanYi Zen Hei",
    "Source Han Sans SC",
    "Microsoft YaHei",
    "PingFang SC",
    "SimHei",
    "Noto Sans CJK JP",  # the first face of fonts-noto-cjk's file, which matplotlib names it by: it has the hanzi
)
# Where Debian and Ubuntu put them (fonts-noto-cjk, fonts-wqy-zenhei): a font installed after matplotlib cached its
# list of fonts (as on Colab) is found there.
CJK_FONT_FILES = (
    "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc",
)
# Titles the notebooks pass in, so the catalog has them.
TITLES = (tr_lazy("One epoch of 512 images (lower is better)"),)
DATA_NAMES = (tr_lazy("synthetic CIFAR-shaped data (fallback, not CIFAR-10)"),)  # helpers.lesson.data's names


@functools.cache
def chinese_font() -> str | None:
    """The first of ``CJK_FONTS`` matplotlib can draw with, or None."""
    import logging

    from matplotlib import font_manager

    # a CJK font may have one weight (WenQuanYi's is 500): matplotlib logs that for each text, a line in the output
    logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)
    for path in CJK_FONT_FILES:
        if Path(path).exists():
            font_manager.fontManager.addfont(path)
    for name in CJK_FONTS:
        try:
            font_manager.findfont(font_manager.FontProperties(family=name), fallback_to_default=False)
        except ValueError:
            continue
        return name
    return None


def speaks_chinese() -> bool:
    """Whether figures are labelled in Chinese: the course speaks it and a font can draw it."""
    return language() != ENGLISH and chinese_font() is not None


def label(english: str, /, **fields) -> str:
    """A figure's text: translated where the figure speaks Chinese, else the English (``str.format`` fields)."""
    if speaks_chinese():
        return tr(english, **fields)
    english = {tr(name): name for name in DATA_NAMES}.get(english, english)  # a dataset's name, already translated
    return english.format(**fields) if fields else english


def figure_style() -> dict:
    """The matplotlib settings a figure is drawn with (:func:`figure_context`): the Chinese font first, if any."""
    if not speaks_chinese():
        return {}
    # the family each text keeps (a generic name would be looked up when the figure is drawn, after this context)
    return {"font.family": [chinese_font(), "sans-serif"], "axes.unicode_minus": False}


@contextlib.contextmanager
def figure_context():
    """Draw the figures made inside with :func:`figure_style`, and put back only those settings afterwards.

    Not ``plt.rc_context``: it puts back every setting, the interactive mode Jupyter's inline backend turns on when
    the first figure of a kernel is made included, so no later figure of the notebook would show."""
    import matplotlib

    settings = figure_style()
    saved = {key: matplotlib.rcParams[key] for key in settings}
    matplotlib.rcParams.update(settings)
    try:
        yield
    finally:
        matplotlib.rcParams.update(saved)


def plot_history(history, title: str | None = None):
    """Train/test loss and test accuracy per epoch, side by side; returns the figure."""
    import matplotlib.pyplot as plt

    with figure_context():
        fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(9, 3.2))
        ax_loss.plot(history.epochs, history.train_loss, "o-", label=label(tr_lazy("train loss")))
        ax_loss.plot(history.epochs, history.test_loss, "s-", label=label(tr_lazy("test loss")))
        ax_loss.set_xlabel(label(tr_lazy("epoch")))
        ax_loss.set_ylabel(label(tr_lazy("cross-entropy (mean per image)")))
        ax_loss.legend()
        ax_acc.plot(history.epochs, history.test_accuracy, "o-", color="tab:green")
        ax_acc.axhline(0.1, color="gray", linestyle=":", label=label(tr_lazy("chance (10 classes)")))
        ax_acc.set_xlabel(label(tr_lazy("epoch")))
        ax_acc.set_ylabel(label(tr_lazy("test accuracy")))
        ax_acc.set_ylim(0, 1)
        ax_acc.legend()
        fig.suptitle(label(title) if title else label(tr_lazy("Tudui on {data}"), data=label(history.data_name)))
        fig.tight_layout()
    return fig


def plot_timings(seconds: dict[str, float], title: str = tr_lazy("Time per epoch"), unit: str = "s"):
    """A bar per label (e.g. device) of ``seconds``; returns the figure."""
    import matplotlib.pyplot as plt

    with figure_context():
        fig, ax = plt.subplots(figsize=(5, 2.8))
        labels = list(seconds)
        bars = ax.bar(labels, [seconds[k] for k in labels], color="tab:blue")
        ax.bar_label(bars, fmt=f"%.2f {unit}")
        ax.set_ylabel(unit)
        ax.set_title(label(title))
        fig.tight_layout()
    return fig


def plot_sampler_split(read: dict, items: list[int]):
    """Which rank reads each item, epoch by epoch, without and with ``set_epoch`` (notebook 08's ``read``:
    (set_epoch called?, rank) -> the indices that rank reads in each epoch); returns the figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    colours = ("tab:blue", "tab:orange")
    epochs = len(read[False, 0])
    with figure_context():
        fig, axes = plt.subplots(1, 2, figsize=(9, 2.6), sharey=True)
        for ax, call_set_epoch in zip(axes, (False, True), strict=True):
            for epoch in range(epochs):
                for rank in (0, 1):
                    for position, item in enumerate(read[call_set_epoch, rank][epoch]):
                        ax.add_patch(plt.Rectangle((item, epoch), 0.9, 0.8, color=colours[rank]))
                        ax.text(item + 0.45, epoch + 0.4, str(position), ha="center", va="center", fontsize=7,
                                color="white")  # fmt: skip
            ax.set_xlim(0, len(items))
            ax.set_ylim(epochs, 0)
            ax.set_xticks([i + 0.45 for i in items], [str(i) for i in items])
            ax.set_yticks([e + 0.4 for e in range(epochs)], [label(tr_lazy("epoch {e}"), e=e) for e in range(epochs)])
            ax.set_xlabel(label(tr_lazy("item of the dataset")))
            ax.set_title(label(tr_lazy("with set_epoch") if call_set_epoch else tr_lazy("without set_epoch")))
        handles = [Patch(color=colours[r], label=label(tr_lazy("read by rank {r}"), r=r)) for r in (0, 1)]
        fig.legend(handles=handles, loc="upper center", ncols=2, fontsize=8, bbox_to_anchor=(0.5, 1.02))
        fig.tight_layout(rect=(0, 0, 1, 0.9))
    return fig
