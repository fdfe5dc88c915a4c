"""Figures for notebook 06 (supporting code, not the lesson): copy bandwidth and the speed ladder."""

from __future__ import annotations

from helpers.course.i18n import tr_lazy
from helpers.lab.plots import figure_context, label
from helpers.lesson.speed import RUNG_NAMES

PCIE_X16_GB_S = {"PCIe 3.0 x16": 16, "PCIe 4.0 x16": 32, "PCIe 5.0 x16": 64}


def plot_bandwidth(sizes_bytes: list[int], rates: dict[str, list[float]], title: str, pcie_lines: bool = True):
    """GB/s against copy size (log-log) for each series in ``rates``, with the PCIe x16 limits as lines.

    ``pcie_lines=False`` leaves the limits out: a copy that crosses no bus (a CPU copying its own memory) is not
    to be read against them."""
    import matplotlib.pyplot as plt

    with figure_context():
        fig, ax = plt.subplots(figsize=(6.5, 3.4))
        for series, values in rates.items():
            ax.plot(sizes_bytes, values, "o-", label=label(series))
        for i, (name, limit) in enumerate(PCIE_X16_GB_S.items() if pcie_lines else []):
            ax.axhline(limit, color="gray", linestyle=[":", "--", "-."][i], linewidth=1, label=f"{name} ~{limit} GB/s")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(label(tr_lazy("bytes copied")))
        ax.set_ylabel("GB/s")
        ax.set_title(label(title))
        ax.legend(fontsize=7)
        fig.tight_layout()
    return fig


SPEED_COLOURS = {
    "baseline": "black",
    "faster": "tab:blue",
    "slower": "tab:orange",
    "not distinguishable": "tab:gray",
}
SPEED_LABELS = {
    "baseline": tr_lazy("the article's loop (1.00x by definition)"),
    "faster": tr_lazy("faster than the article's loop in every round"),
    "slower": tr_lazy("slower than the article's loop in every round"),
    "not distinguishable": tr_lazy("grey: not distinguishable here (rounds on both sides of 1.0x, or too few rounds)"),
}
RUNG_LABELS = RUNG_NAMES  # the ladder's rungs as the plot names them, in lesson 06's words (one table)
LENGTH = tr_lazy(
    "{steps_per_run} steps per run, {runs} runs (warm-up + {repeats} timed): accuracy after {steps} steps"
)  # the title's second line: result.length(), in the figure's language
# The series and titles notebook 06 passes in, so the catalog has them.
TITLES = (
    tr_lazy("host memory to host memory on this CPU (no GPU: no transfer to measure)"),
    tr_lazy("this CPU copying host memory (not a transfer)"),
    tr_lazy("pageable -> GPU"),
    tr_lazy("pinned -> GPU"),
    tr_lazy("pinned on the fly -> GPU"),
)


def ladder_bars(result) -> list[dict]:
    """The measured rungs, each with its ``verdict`` against the article's loop (``baseline``, ``faster``,
    ``slower``, ``not distinguishable``) and ``less_accurate`` (the ladder's note for an accuracy drop after the
    same steps, only in runs long enough to tell) kept apart."""
    from helpers.lesson.speed import ACCURACY_DROP

    bars, previous = [], None
    for row in result.rows():
        if row["ratio"] is None:
            continue
        less_accurate = (
            previous is not None and not result.too_short and row["accuracy"] < previous["accuracy"] - ACCURACY_DROP
        )
        bars.append({**row, "less_accurate": less_accurate})
        previous = row
    return bars


def plot_ladder(result):
    """One bar per rung: speed as a multiple of the article's loop, the accuracy written beside it.

    The colour says how the rung compares with the article's loop over the timed rounds: faster or slower in
    every round, or grey when the rounds fall on both sides of 1.0 (or are too few to tell); a hatched bar is a
    rung whose accuracy after the same steps dropped by more than the ladder's threshold."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    bars = ladder_bars(result)
    with figure_context():
        fig, ax = plt.subplots(figsize=(7, 4.8))
        names = [label(RUNG_LABELS[b["rung"]]) if b["rung"] in RUNG_LABELS else b["rung"] for b in bars][::-1]
        drawn = ax.barh(
            names, [b["ratio"] for b in bars][::-1], color=[SPEED_COLOURS[b["verdict"]] for b in bars][::-1]
        )
        for patch, bar in zip(drawn, bars[::-1], strict=True):
            if bar["less_accurate"]:
                patch.set_hatch("//")
                patch.set_edgecolor("black")
        accuracy = label(tr_lazy("acc"))
        unsure = {b["rung"]: " (?)" if b["verdict"] == "not distinguishable" else "" for b in bars}
        labels = [f"{b['ratio']:.2f}x{unsure[b['rung']]}, {accuracy} {b['accuracy']:.0%}" for b in bars][::-1]
        ax.bar_label(drawn, labels=labels, fontsize=8, padding=3)
        ax.axvline(1.0, color="black", linewidth=0.8)
        shown = list(dict.fromkeys(b["verdict"] for b in bars))
        legend = [Patch(color=SPEED_COLOURS[v], label=label(SPEED_LABELS[v])) for v in SPEED_COLOURS if v in shown]
        if any(b["less_accurate"] for b in bars):
            legend.append(
                Patch(
                    facecolor="white",
                    edgecolor="black",
                    hatch="//",
                    label=label(tr_lazy("lower accuracy than the rung above")),
                )
            )
        ax.legend(handles=legend, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1, frameon=False)
        ax.set_xlabel(label(tr_lazy("images/s as a multiple of the article's loop")))
        title = label(tr_lazy("Speed ladder on {device}"), device=result.device)
        length = label(
            LENGTH,
            steps_per_run=result.steps_per_run,
            runs=1 + result.repeats,
            repeats=result.repeats,
            steps=result.steps,
        )
        ax.set_title(f"{title}\n{length}", fontsize=10)
        ax.set_xlim(0, max(b["ratio"] for b in bars) * 1.45)
        fig.tight_layout()
    return fig
