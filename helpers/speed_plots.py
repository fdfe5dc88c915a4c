"""Figures for notebook 06 (supporting code, not the lesson): copy bandwidth and the speed ladder."""

from __future__ import annotations

PCIE_X16_GB_S = {"PCIe 3.0 x16": 16, "PCIe 4.0 x16": 32, "PCIe 5.0 x16": 64}


def plot_bandwidth(sizes_bytes: list[int], rates: dict[str, list[float]], title: str):
    """GB/s against copy size (log-log) for each series in ``rates``, with the PCIe x16 limits as lines."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    for label, values in rates.items():
        ax.plot(sizes_bytes, values, "o-", label=label)
    for i, (name, limit) in enumerate(PCIE_X16_GB_S.items()):
        ax.axhline(limit, color="gray", linestyle=[":", "--", "-."][i], linewidth=1, label=f"{name} ~{limit} GB/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("bytes copied")
    ax.set_ylabel("GB/s")
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_ladder(result):
    """One bar per rung: speed as a multiple of the article's loop, the accuracy written beside it."""
    import matplotlib.pyplot as plt

    rows = [r for r in result.rows() if r["ratio"] is not None]
    fig, ax = plt.subplots(figsize=(7, 3.4))
    names = [r["rung"] for r in rows]
    colours = ["tab:gray" if r["note"] else "tab:blue" for r in rows]
    bars = ax.barh(names[::-1], [r["ratio"] for r in rows][::-1], color=colours[::-1])
    labels = [f"{r['ratio']:.2f}x, acc {r['accuracy']:.0%}" for r in rows][::-1]
    ax.bar_label(bars, labels=labels, fontsize=8, padding=3)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("images/s as a multiple of the article's loop (grey: slower than the rung above)")
    ax.set_title(f"Speed ladder on {result.device} (accuracy after {result.steps} steps each)")
    ax.set_xlim(0, max(r["ratio"] for r in rows) * 1.35)
    fig.tight_layout()
    return fig
