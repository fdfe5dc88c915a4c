"""Memory over training steps, by category (supporting code, not the lesson): what the profiler saw alive.

:func:`memory_by_category` reads a ``torch.profiler.profile(profile_memory=True, record_shapes=True,
with_stack=True)`` that has run: the MiB each category (parameters, gradients, optimizer state, activations, the
batch, ...) holds on a device over time, from the profiler's own memory timeline. :func:`plot_memory` draws it
stacked. A GPU's, for a machine without one, comes from a run recorded on a real GPU (``gpu_traces.json``,
``python tools/gpu_traces.py --record``): :func:`show_recorded_memory`.
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

from helpers.course.i18n import tr_lazy
from helpers.lab.plots import figure_context, label

MiB = 2**20
# torch.profiler's categories in the order its memory timeline lists them (after a first, unused column)
CATEGORIES = ("parameter", "optimizer_state", "input", "temporary", "activation", "gradient", "autograd_detail",
              "unknown")  # fmt: skip
NAMES = {
    "parameter": tr_lazy("parameters"),
    "optimizer_state": tr_lazy("optimizer state"),
    "input": tr_lazy("the batch (inputs)"),
    "temporary": tr_lazy("temporaries"),
    "activation": tr_lazy("activations"),
    "gradient": tr_lazy("gradients"),
    "autograd_detail": tr_lazy("autograd's own"),
    "unknown": tr_lazy("not categorised"),
}
COLOURS = {
    "parameter": "darkgreen",
    "optimizer_state": "goldenrod",
    "input": "black",
    "temporary": "mediumpurple",
    "activation": "tab:red",
    "gradient": "mediumblue",
    "autograd_detail": "royalblue",
    "unknown": "grey",
}
TITLES = (
    tr_lazy("Tudui, 2 training steps on {device}: memory by category"),
    tr_lazy("Tudui, batch 256, 3 training steps with Adam"),
)


@dataclass(frozen=True)
class MemoryTimeline:
    ms: list[float]  # from the first event
    mib: dict[str, list[float]]  # category -> MiB at each time

    def peak(self, category: str) -> float:
        return max(self.mib[category], default=0.0)

    def total(self) -> list[float]:
        return [sum(values) for values in zip(*self.mib.values(), strict=True)]

    def held_ms(self, category: str) -> list[float]:
        """How long ``category`` stays above zero each time it does (ms): once per step for the activations."""
        held, since = [], None
        for t, mib in zip(self.ms, self.mib[category], strict=True):
            if mib > 0 and since is None:
                since = t
            elif mib == 0 and since is not None:
                held, since = [*held, t - since], None
        return held


def memory_by_category(prof, device) -> MemoryTimeline | None:
    """The profiler's memory timeline on ``device`` (cpu or cuda; None elsewhere: the profiler keeps none)."""
    import torch

    device = torch.device(device)
    if device.type not in ("cpu", "cuda"):
        return None
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        with warnings.catch_warnings():  # newer torch calls it deprecated; it is the one export with categories
            warnings.simplefilter("ignore", FutureWarning)
            name = "cpu" if device.type == "cpu" else f"cuda:{device.index or 0}"
            prof.export_memory_timeline(path, device=name)
        times, sizes = json.loads(Path(path).read_text())
    finally:
        os.unlink(path)
    return MemoryTimeline(
        ms=[(t - times[0]) / 1e3 for t in times],
        mib={c: [row[i + 1] / MiB for row in sizes] for i, c in enumerate(CATEGORIES)},
    )


def plot_memory(timeline: MemoryTimeline, title: str, subtitle: str | None = None, **fields):
    """The categories stacked over time (the empty ones left out), the legend beside them; returns the figure."""
    import matplotlib.pyplot as plt

    shown = [c for c in CATEGORIES if timeline.peak(c) > 0.01]
    with figure_context():
        fig, ax = plt.subplots(figsize=(9, 3.4))
        ax.stackplot(timeline.ms, *[timeline.mib[c] for c in shown], labels=[label(NAMES[c]) for c in shown],
                     colors=[COLOURS[c] for c in shown], step="post")  # fmt: skip
        ax.set_xlabel(label(tr_lazy("time (ms)")))
        ax.set_ylabel("MiB")
        ax.set_title(label(title, **fields) + (f"\n{subtitle}" if subtitle else ""), fontsize=10)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=7)
        fig.tight_layout()
    return fig


def show_recorded_memory(key: str, title: str, path: Path | str | None = None) -> MemoryTimeline | None:
    """Draw a memory timeline recorded on a real GPU, labelled with where and when; or say none is recorded."""
    from helpers.course.gpu_figures import NOT_RECORDED
    from helpers.course.gpu_figures import label as recorded_on
    from helpers.course.i18n import tr
    from helpers.lab.timeline import recorded

    record = recorded(key, path)
    if record is None:
        print(tr(NOT_RECORDED))
        return None
    import matplotlib.pyplot as plt

    print(tr("{label}:", label=recorded_on(record)))
    timeline = MemoryTimeline(ms=record["data"]["ms"], mib=record["data"]["mib"])
    plot_memory(timeline, title, subtitle=f"{record['gpu']}, torch {record['torch']}, {record['date']}")
    plt.show()
    return timeline
