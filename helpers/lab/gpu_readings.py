"""Readings recorded on a real GPU, drawn for learners without one (supporting code, not the lesson).

The ``readings`` record of ``gpu_traces.json`` (``python tools/gpu_traces.py --record``): allocated, reserved and
``nvidia-smi`` after 3 training steps, peak allocated by batch size, copy bandwidth pageable against pinned. Each
function draws one of them labelled with the GPU and date, or says that no GPU has recorded it.
"""

from __future__ import annotations

import re

from helpers.course.i18n import tr, tr_lazy
from helpers.lab.plots import figure_context, label
from helpers.lab.timeline import recorded

TITLES = (
    tr_lazy("Memory of a training step against the batch size"),
    tr_lazy("Copies between host and GPU, recorded"),
)
SERIES = (tr_lazy("GPU -> pageable"), tr_lazy("GPU -> pinned"))  # with speed_plots' host-to-GPU series


def _recorded_readings() -> dict | None:
    from helpers.course.gpu_figures import NOT_RECORDED
    from helpers.course.gpu_figures import label as recorded_on

    record = recorded("readings")
    if record is None:
        print(tr(NOT_RECORDED))
        return None
    print(tr("{label}:", label=recorded_on(record)))
    return record


def _machine(record: dict) -> str:
    return f"{record['gpu']}, torch {record['torch']}, {record['date']}"


def show_recorded_memory_counts() -> dict | None:
    """Allocated, reserved and what nvidia-smi showed, after 3 steps of Tudui (batch 256): the record's numbers."""
    record = _recorded_readings()
    if record is None:
        return None
    import matplotlib.pyplot as plt

    after = record["data"]["after_3_steps_b256"]
    bars = {
        "torch.cuda.memory_allocated()": after["allocated_mib"],
        "torch.cuda.memory_reserved()": after["reserved_mib"],
        "nvidia-smi": after["nvidia_smi_used_mib"],
    }
    with figure_context():
        fig, ax = plt.subplots(figsize=(7, 2.4))
        ax.barh(list(bars), list(bars.values()), color=["tab:blue", "tab:orange", "tab:gray"])
        for y, value in enumerate(bars.values()):
            ax.text(value, y, f" {value:.0f} MiB", va="center", fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("MiB")
        ax.set_xlim(0, max(bars.values()) * 1.25)
        ax.set_title(
            label(tr_lazy("After 3 training steps of Tudui, batch 256")) + f"\n{_machine(record)}", fontsize=10
        )
        fig.tight_layout()
    plt.show()
    return bars


def plot_peaks_by_batch(estimated_mib: dict[int, float], recorded_mib: dict[int, float] | None = None, note=""):
    """Peak memory against batch size (log-log): the course's count, and a GPU's recorded peak where there is one."""
    import matplotlib.pyplot as plt

    with figure_context():
        fig, ax = plt.subplots(figsize=(6.5, 3.4))
        ax.plot(list(estimated_mib), list(estimated_mib.values()), "o-",
                label=label(tr_lazy("what a step keeps, counted on meta")))  # fmt: skip
        if recorded_mib:
            ax.plot(list(recorded_mib), list(recorded_mib.values()), "s-",
                    label=label(tr_lazy("peak allocated on a GPU (recorded)")))  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(label(tr_lazy("batch size")))
        ax.set_ylabel("MiB")
        ax.set_title(label(TITLES[0]) + (f"\n{note}" if note else ""), fontsize=10)
        ax.legend(fontsize=8)
        fig.tight_layout()
    return fig


def recorded_peaks() -> tuple[dict[int, float], str] | None:
    """The recorded peak allocated by batch size (MiB) and the machine it was recorded on, or None."""
    record = _recorded_readings()
    if record is None:
        return None
    return {int(b): mib for b, mib in record["data"]["peak_allocated_mib_by_batch"].items()}, _machine(record)


def show_recorded_copy_sweep() -> dict | None:
    """Host-to-GPU and GPU-to-host copies, pageable against pinned, 4 KB to 256 MB, as a GPU recorded them."""
    record = _recorded_readings()
    if record is None:
        return None
    import matplotlib.pyplot as plt

    from helpers.lab.speed_plots import plot_bandwidth

    sweep = record["data"]["copy_gb_per_s"]
    series = {"pageable -> GPU": "h2d_pageable", "pinned -> GPU": "h2d_pinned", "GPU -> pageable": "d2h_pageable",
              "GPU -> pinned": "d2h_pinned"}  # fmt: skip
    rates = {name: sweep[key] for name, key in series.items()}
    plot_bandwidth(sweep["bytes"], rates, label(TITLES[1]) + f"\n{_machine(record)}")
    plt.show()
    return rates


LADDER_ROW = re.compile(
    r"^(?P<rung>\S.*?)\s{2,}(?P<rate>\d+)\s+(?P<ratio>[\d.]+)x\s+(?P<accuracy>[\d.]+)%\s*(?P<note>.*)$"
)


def recorded_ladder() -> tuple[list[dict], dict] | None:
    """The rungs of the speed ladder a GPU recorded (from the lines it printed) and the record, or None."""
    from helpers.course.gpu_figures import recorded as recorded_figure

    record = recorded_figure("speed_ladder")
    if record is None:
        return None
    rows = [m.groupdict() for line in record["printed"].splitlines() if (m := LADDER_ROW.match(line.strip()))]
    return [{**r, "rate": int(r["rate"]), "ratio": float(r["ratio"]), "accuracy": float(r["accuracy"]) / 100}
            for r in rows], record  # fmt: skip


def plot_recorded_ladder(rows: list[dict], record: dict):
    """The recorded rungs as bars (x the article's loop): grey where the run could not tell, hatched where the rung
    learned less than the one above it, as lesson 06's own ladder plot draws them; returns the figure."""
    import matplotlib.pyplot as plt

    from helpers.lab.speed_plots import RUNG_LABELS

    with figure_context():
        fig, ax = plt.subplots(figsize=(7, 3.2))
        for y, row in enumerate(rows):
            grey = "not distinguishable" in row["note"]
            ax.barh(y, row["ratio"], color="tab:gray" if grey else "tab:blue",
                    hatch="//" if "lower accuracy" in row["note"] else None, edgecolor="white")  # fmt: skip
            ax.text(row["ratio"], y, f" {row['ratio']:.2f}x", va="center", fontsize=8)
        names = [label(RUNG_LABELS[r["rung"]]) if r["rung"] in RUNG_LABELS else r["rung"] for r in rows]
        ax.set_yticks(range(len(rows)), names)
        ax.invert_yaxis()
        ax.axvline(1, color="black", linewidth=0.8)
        ax.set_xlabel(label(tr_lazy("images/s, as a multiple of the article's loop")))
        ax.set_xlim(0, max(r["ratio"] for r in rows) * 1.2)
        ax.set_title(label(tr_lazy("The speed ladder on a GPU, recorded")) + f"\n{_machine(record)}", fontsize=10)
        fig.tight_layout()
    return fig
