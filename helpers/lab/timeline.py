"""A profiler trace drawn as lanes (supporting code, not the lesson): what the CPU and the GPU did, and when.

:func:`spans` reads a ``torch.profiler`` trace (the profiler itself, a Chrome trace file, or its JSON) into
``Span``s on a few lanes a learner can read: the batches the ``DataLoader`` hands over, the training steps the
loop marks with ``record_function``, the CPU's operators, the CPU waiting for the GPU, a process group's
collectives, the GPU's kernels and its copies. :func:`plot_timeline` draws them. A GPU's lanes for a machine
without one come from traces recorded on a real GPU (``gpu_traces.json`` beside ``helpers/course/gpu_figures.json``,
written by ``python tools/gpu_traces.py --record``): :func:`recorded` returns one with the GPU and date it was
recorded on, or None.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from helpers.course.i18n import tr_lazy
from helpers.lab.plots import figure_context, label

TRACES_FILE = Path(__file__).resolve().parent.parent / "course" / "gpu_traces.json"
LANES = {  # lane -> what the figure calls it, top to bottom
    "data": tr_lazy("next batch from the DataLoader"),
    "step": tr_lazy("training step (record_function)"),
    "ops": tr_lazy("CPU: operators"),
    "wait": tr_lazy("CPU waits for the GPU"),
    "comm": tr_lazy("collectives (the backend's thread)"),
    "kernels": tr_lazy("GPU: kernels"),
    "copies": tr_lazy("GPU: copies"),
}
COLOURS = {"data": "tab:orange", "step": "tab:gray", "ops": "tab:blue", "wait": "tab:red", "comm": "tab:brown",
           "kernels": "tab:green", "copies": "tab:purple"}  # fmt: skip
# Titles the notebooks pass in, so the catalog has them.
TITLES = (
    tr_lazy("The article's loop on {device}: 3 profiled steps"),
    tr_lazy("The article's loop, batch 1024: 3 steps"),
    tr_lazy("2 workers, pinned, non_blocking, batch 1024: 3 steps"),
    tr_lazy("Rank 0 of 2 DDP processes on the CPU: 3 profiled steps"),
)
WAITS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy", "cudaMemcpyAsync")


@dataclass(frozen=True)
class Span:
    lane: str  # a key of LANES
    name: str  # the operator, kernel or range
    start_ms: float  # from the first profiled step's start
    ms: float


def _events(trace) -> list[dict]:
    """The complete events ("ph": "X") of a profiler, a trace file (.json or .json.gz) or its loaded JSON."""
    if hasattr(trace, "export_chrome_trace"):  # a torch.profiler.profile that has run
        fd, path = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        try:
            trace.export_chrome_trace(path)
            return _events(Path(path))
        finally:
            os.unlink(path)
    if isinstance(trace, (str, Path)):
        opener = gzip.open if str(trace).endswith(".gz") else open
        with opener(trace, "rt", encoding="utf-8") as f:
            trace = json.load(f)
    return [e for e in trace["traceEvents"] if e.get("ph") == "X" and "dur" in e]


def _top_level(events: list[dict]) -> list[dict]:
    """The events not nested inside another one of the same thread (an operator, not the operators it calls)."""
    kept, ends = [], {}
    for e in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        if e["ts"] >= ends.get(e["tid"], float("-inf")):
            kept.append(e)
            ends[e["tid"]] = e["ts"] + e["dur"]
    return kept


def lane_of(event: dict, queued: frozenset = frozenset()) -> str | None:
    """Which lane an event is drawn on (None: not drawn). ``queued``: the correlation ids of copies the CPU does
    not wait for (from pinned memory): their ``cudaMemcpyAsync`` only queues them."""
    cat, name = event.get("cat", ""), event["name"]
    if cat == "user_annotation":
        if name.startswith("enumerate(DataLoader)"):
            return "data"
        if name.startswith(("gloo:", "nccl:")):  # a collective, as the process group's backend runs it
            return "comm"
        return None if name.startswith(("ProfilerStep#", "Optimizer.", "DistributedDataParallel.")) else "step"
    if cat == "cuda_runtime" and name in WAITS:
        return None if event.get("args", {}).get("correlation") in queued else "wait"
    return {"cpu_op": "ops", "kernel": "kernels", "gpu_memcpy": "copies", "gpu_memset": "copies"}.get(cat)


def spans(trace) -> list[Span]:
    """The trace's events on their lanes, times in ms from the first profiled step (or the first event). A wait
    outside the marked steps (the profiler's own, as it stops) is left out."""
    every = _events(trace)
    queued = frozenset(e.get("args", {}).get("correlation") for e in every
                       if e.get("cat") == "gpu_memcpy" and "Pageable" not in e["name"])  # fmt: skip
    events = [e for e in every if lane_of(e, queued)]
    ops = _top_level([e for e in events if lane_of(e) == "ops"])
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events if lane_of(e) == "step"]
    waits = [
        e for e in events if lane_of(e, queued) == "wait" and (not steps or any(a <= e["ts"] <= b for a, b in steps))
    ]
    events = [e for e in events if lane_of(e, queued) not in ("ops", "wait")] + ops + waits
    if not events:
        return []
    starts = [e["ts"] for e in every if e["name"].startswith("ProfilerStep#")]
    origin = min(starts) if starts else min(e["ts"] for e in events)
    return sorted((Span(lane_of(e, queued), e["name"], (e["ts"] - origin) / 1e3, e["dur"] / 1e3) for e in events),
                  key=lambda s: (s.start_ms, s.lane))  # fmt: skip


def busy_fraction(spans_: list[Span], lane: str) -> float:
    """The share of the drawn time (first span's start to last span's end) that ``lane`` is busy (overlaps merged)."""
    if not spans_:
        return 0.0
    start, end = min(s.start_ms for s in spans_), max(s.start_ms + s.ms for s in spans_)
    busy, reach = 0.0, start
    for s in sorted((s for s in spans_ if s.lane == lane), key=lambda s: s.start_ms):
        lo, hi = max(s.start_ms, reach), s.start_ms + s.ms
        if hi > lo:
            busy, reach = busy + hi - lo, hi
    return busy / (end - start) if end > start else 0.0


def _draw(ax, spans_: list[Span], title: str) -> None:
    lanes = [lane for lane in LANES if any(s.lane == lane for s in spans_)]
    for row, lane in enumerate(lanes):
        bars = [(s.start_ms, max(s.ms, 0.002)) for s in spans_ if s.lane == lane]
        ax.broken_barh(bars, (len(lanes) - 1 - row - 0.35, 0.7), color=COLOURS[lane])
    ax.set_yticks(range(len(lanes)), [label(LANES[lane]) for lane in reversed(lanes)])
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", linestyle=":", linewidth=0.5)


def plot_timeline(spans_: list[Span], title: str, **fields):
    """The spans as horizontal bars, one row per lane that has any; returns the figure. ``title`` is English, its
    ``{fields}`` filled from ``fields`` (the figure translates it where it speaks Chinese)."""
    import matplotlib.pyplot as plt

    lanes = {s.lane for s in spans_}
    with figure_context():
        fig, ax = plt.subplots(figsize=(9, 0.55 * len(lanes) + 1.4))
        _draw(ax, spans_, label(title, **fields))
        ax.set_xlabel(label(tr_lazy("time (ms)")))
        ax.set_xlim(left=min((s.start_ms for s in spans_), default=0))
        fig.tight_layout()
    return fig


def recorded(key: str, path: Path | str | None = None) -> dict | None:
    """The newest record of ``key`` recorded on a real GPU (its ``data``, the machine and date, as gpu_figures'
    records; a trace's lanes also as ``spans``), or None."""
    path = Path(path or TRACES_FILE)
    if not path.exists():
        return None
    matching = [r for r in json.loads(path.read_text(encoding="utf-8"))["records"] if r["key"] == key]
    if not matching:
        return None
    record = dict(max(matching, key=lambda r: r["date"]))
    if "spans" in record["data"]:
        record["spans"] = [Span(*s) for s in record["data"]["spans"]]
    return record


def show_recorded_timelines(traces: list[tuple[str, str]], path: Path | str | None = None) -> list[dict | None]:
    """Draw traces recorded on a real GPU (``(key, English title)`` each) one above the other, on one time axis,
    labelled with where and when; or say that none is recorded. The records (None where there is none)."""
    from helpers.course.gpu_figures import NOT_RECORDED
    from helpers.course.gpu_figures import label as recorded_on
    from helpers.course.i18n import tr

    records = [recorded(key, path) for key, _ in traces]
    if not any(records):
        print(tr(NOT_RECORDED))
        return records
    import matplotlib.pyplot as plt

    shown = [(r, title) for r, (_, title) in zip(records, traces, strict=True) if r]
    for record in {recorded_on(r): r for r, _ in shown}.values():
        print(tr("{label}:", label=recorded_on(record)))
    heights = [len({s.lane for s in r["spans"]}) for r, _ in shown]
    with figure_context():
        fig, axes = plt.subplots(len(shown), 1, figsize=(9, 0.5 * sum(heights) + 1.2 * len(shown)), sharex=True,
                                 gridspec_kw={"height_ratios": heights}, squeeze=False)  # fmt: skip
        for ax, (record, title) in zip(axes[:, 0], shown, strict=True):
            _draw(ax, record["spans"], label(title))
        machines = dict.fromkeys(f"{r['gpu']}, torch {r['torch']}, {r['date']}" for r, _ in shown)
        fig.suptitle("; ".join(machines), fontsize=9)
        axes[-1, 0].set_xlabel(label(tr_lazy("time (ms)")))
        axes[-1, 0].set_xlim(left=0)
        fig.tight_layout()
    plt.show()
    return records
