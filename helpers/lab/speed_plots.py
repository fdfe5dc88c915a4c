"""Figures for notebook 06 (supporting code, not the lesson): copy bandwidth and the speed ladder."""

from __future__ import annotations

PCIE_X16_GB_S = {"PCIe 3.0 x16": 16, "PCIe 4.0 x16": 32, "PCIe 5.0 x16": 64}


def plot_bandwidth(sizes_bytes: list[int], rates: dict[str, list[float]], title: str, pcie_lines: bool = True):
    """GB/s against copy size (log-log) for each series in ``rates``, with the PCIe x16 limits as lines.

    ``pcie_lines=False`` leaves the limits out: a copy that crosses no bus (a CPU copying its own memory) is not
    to be read against them."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    for label, values in rates.items():
        ax.plot(sizes_bytes, values, "o-", label=label)
    for i, (name, limit) in enumerate(PCIE_X16_GB_S.items() if pcie_lines else []):
        ax.axhline(limit, color="gray", linestyle=[":", "--", "-."][i], linewidth=1, label=f"{name} ~{limit} GB/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("bytes copied")
    ax.set_ylabel("GB/s")
    ax.set_title(title)
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
    "baseline": "the article's loop (1.00x by definition)",
    "faster": "faster than the article's loop in every round",
    "slower": "slower than the article's loop in every round",
    "not distinguishable": "grey: not distinguishable here (rounds on both sides of 1.0x, or too few rounds)",
}


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
    fig, ax = plt.subplots(figsize=(7, 4.8))
    names = [b["rung"] for b in bars][::-1]
    drawn = ax.barh(names, [b["ratio"] for b in bars][::-1], color=[SPEED_COLOURS[b["verdict"]] for b in bars][::-1])
    for patch, bar in zip(drawn, bars[::-1], strict=True):
        if bar["less_accurate"]:
            patch.set_hatch("//")
            patch.set_edgecolor("black")
    labels = [
        f"{b['ratio']:.2f}x{' (?)' if b['verdict'] == 'not distinguishable' else ''}, acc {b['accuracy']:.0%}"
        for b in bars
    ][::-1]
    ax.bar_label(drawn, labels=labels, fontsize=8, padding=3)
    ax.axvline(1.0, color="black", linewidth=0.8)
    shown = list(dict.fromkeys(b["verdict"] for b in bars))
    legend = [Patch(color=SPEED_COLOURS[v], label=SPEED_LABELS[v]) for v in SPEED_COLOURS if v in shown]
    if any(b["less_accurate"] for b in bars):
        legend.append(
            Patch(facecolor="white", edgecolor="black", hatch="//", label="lower accuracy than the rung above")
        )
    ax.legend(handles=legend, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1, frameon=False)
    ax.set_xlabel("images/s as a multiple of the article's loop")
    ax.set_title(f"Speed ladder on {result.device}\n{result.length()}", fontsize=10)
    ax.set_xlim(0, max(b["ratio"] for b in bars) * 1.45)
    fig.tight_layout()
    return fig
