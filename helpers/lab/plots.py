"""Figures for the notebooks (supporting code, not the lesson)."""

from __future__ import annotations


def plot_history(history, title: str | None = None):
    """Train/test loss and test accuracy per epoch, side by side; returns the figure."""
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(9, 3.2))
    ax_loss.plot(history.epochs, history.train_loss, "o-", label="train loss")
    ax_loss.plot(history.epochs, history.test_loss, "s-", label="test loss")
    ax_loss.set_xlabel("epoch")
    ax_loss.set_ylabel("cross-entropy (mean per image)")
    ax_loss.legend()
    ax_acc.plot(history.epochs, history.test_accuracy, "o-", color="tab:green")
    ax_acc.axhline(0.1, color="gray", linestyle=":", label="chance (10 classes)")
    ax_acc.set_xlabel("epoch")
    ax_acc.set_ylabel("test accuracy")
    ax_acc.set_ylim(0, 1)
    ax_acc.legend()
    fig.suptitle(title or f"Tudui on {history.data_name}")
    fig.tight_layout()
    return fig


def plot_timings(seconds: dict[str, float], title: str = "Time per epoch", unit: str = "s"):
    """A bar per label (e.g. device) of ``seconds``; returns the figure."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 2.8))
    labels = list(seconds)
    bars = ax.bar(labels, [seconds[k] for k in labels], color="tab:blue")
    ax.bar_label(bars, fmt=f"%.2f {unit}")
    ax.set_ylabel(unit)
    ax.set_title(title)
    fig.tight_layout()
    return fig
