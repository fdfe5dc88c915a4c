"""helpers.lab.timeline and helpers.lab.memory_timeline: a profiler's trace and memory drawn for the lessons, and the
GPU recordings they show (tools/gpu_traces.py)."""

from __future__ import annotations

import json
import sys
import tomllib

import matplotlib
import pytest
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule
from torch.utils.data import DataLoader, TensorDataset

from helpers.lab import memory_timeline, timeline
from helpers.lab.timeline import Span
from helpers.lesson.models import Tudui
from tools import course

matplotlib.use("Agg")
sys.path.insert(0, str(course.ROOT / "tools"))
import gpu_traces  # noqa: E402


def profiled_steps(tmp_path, steps=3):
    """A CPU trace of ``steps`` steps of Tudui after one warm-up step, as lesson 06 records it."""
    data = TensorDataset(torch.rand(16 * (steps + 1), 3, 32, 32), torch.randint(0, 10, (16 * (steps + 1),)))
    model, loss_fn = Tudui(), nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    path = tmp_path / "trace.json"
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:  # fmt: skip
        for imgs, targets in DataLoader(data, batch_size=16):
            with record_function("training step"):
                loss = loss_fn(model(imgs), targets)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            prof.step()
    return path


def test_a_cpu_trace_has_its_steps_batches_and_operators_on_their_lanes(tmp_path):
    spans = timeline.spans(profiled_steps(tmp_path))
    lanes = [s.lane for s in spans]
    assert lanes.count("step") == 3 and lanes.count("data") == 3 and "ops" in lanes
    assert not {"kernels", "copies", "wait"} & set(lanes)  # no GPU: nothing of one is drawn
    steps = [s for s in spans if s.lane == "step"]
    assert all(s.name == "training step" for s in steps) and 0 <= steps[0].start_ms < steps[1].start_ms
    ops = sorted((s for s in spans if s.lane == "ops"), key=lambda s: s.start_ms)
    assert all(a.start_ms + a.ms <= b.start_ms + 1e-3 for a, b in zip(ops, ops[1:], strict=False))  # top level only
    assert 0 < timeline.busy_fraction(spans, "step") <= 1


def test_the_gpus_events_go_on_the_gpu_lanes():
    event = {"ph": "X", "ts": 0, "dur": 1}
    assert timeline.lane_of({**event, "cat": "kernel", "name": "volta_sgemm"}) == "kernels"
    assert timeline.lane_of({**event, "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)"}) == "copies"
    assert timeline.lane_of({**event, "cat": "cuda_runtime", "name": "cudaStreamSynchronize"}) == "wait"
    assert timeline.lane_of({**event, "cat": "cuda_runtime", "name": "cudaLaunchKernel"}) is None  # a launch
    assert timeline.lane_of({**event, "cat": "user_annotation", "name": "ProfilerStep#3"}) is None
    assert timeline.lane_of({**event, "cat": "user_annotation", "name": "Optimizer.step#SGD.step"}) is None


def test_busy_fraction_counts_overlapping_spans_once():
    spans = [Span("kernels", "", 0, 4), Span("kernels", "", 2, 4), Span("step", "", 0, 10)]
    assert timeline.busy_fraction(spans, "kernels") == pytest.approx(0.6)
    assert timeline.busy_fraction(spans, "copies") == 0 and timeline.busy_fraction([], "step") == 0


def test_the_figure_has_a_row_per_lane_and_the_title_filled_in(tmp_path):
    spans = timeline.spans(profiled_steps(tmp_path, steps=2))
    fig = timeline.plot_timeline(spans, "The article's loop on {device}: 3 profiled steps", device="cpu")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["CPU: operators", "training step (record_function)",
                                                            "next batch from the DataLoader"]  # fmt: skip
    assert ax.get_title() == "The article's loop on cpu: 3 profiled steps"


def test_the_recordings_shipped_name_their_gpu_and_lanes():
    data = json.loads(timeline.TRACES_FILE.read_text(encoding="utf-8"))
    keys = {r["key"] for r in data["records"]}
    assert {"trace_article_b1024", "trace_overlapped_b1024", "memory_timeline", "readings"} <= keys
    for record in data["records"]:
        assert all(record[f] for f in ("gpu", "driver", "torch", "cuda", "date", "command", "what")), record["key"]
    article = timeline.recorded("trace_article_b1024")
    assert {s.lane for s in article["spans"]} == set(timeline.LANES) - {"comm"}  # every lane but collectives


def test_two_recorded_traces_share_one_time_axis(monkeypatch, capsys):
    import matplotlib.pyplot as plt

    drawn = []
    monkeypatch.setattr(plt, "show", lambda: drawn.append(plt.gcf()))
    records = timeline.show_recorded_timelines([("trace_article_b1024", "a"), ("trace_overlapped_b1024", "b")])
    assert all(records) and len(drawn) == 1
    top, bottom = drawn[0].axes
    assert top.get_shared_x_axes().joined(top, bottom) and [top.get_title(), bottom.get_title()] == ["a", "b"]
    assert capsys.readouterr().out.count("Recorded on NVIDIA H200") == 1  # one label: one machine and date
    with open(course.ROOT / "pyproject.toml", "rb") as f:
        package_data = tomllib.load(f)["tool"]["setuptools"]["package-data"]["helpers"]
    assert "course/" + timeline.TRACES_FILE.name in package_data


def test_nothing_recorded_is_said(tmp_path, capsys):
    empty = tmp_path / "traces.json"
    empty.write_text(json.dumps({"records": []}))
    assert timeline.recorded("trace_article_b1024", empty) is None
    assert timeline.recorded("trace_article_b1024", tmp_path / "missing.json") is None
    assert timeline.show_recorded_timelines([("trace_article_b1024", "x")], empty) == [None]
    assert memory_timeline.show_recorded_memory("memory_timeline", "x", empty) is None
    assert capsys.readouterr().out == "No GPU has recorded this figure for the course yet.\n" * 2


def test_the_recording_tool_reduces_a_trace_to_the_lanes_it_draws(tmp_path):
    path = profiled_steps(tmp_path)
    raw = timeline.spans(path)
    kept = gpu_traces.reduced("trace_article_b64", path)["spans"]
    assert [s[0] for s in kept].count("step") == 3 and len(kept) < len(raw)  # operators close together merged
    assert timeline.busy_fraction([Span(*s) for s in kept], "ops") >= timeline.busy_fraction(raw, "ops") - 1e-6
    merged = gpu_traces.merged([Span("ops", "a", 0, 1), Span("ops", "b", 1.01, 1), Span("ops", "c", 5, 1)], 0.02)
    assert merged == [Span("ops", "", 0, 2.01), Span("ops", "", 5, 1)]


def test_memory_by_category_over_two_steps_on_the_cpu():
    torch.manual_seed(0)
    model, loss_fn = Tudui(), nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters())
    imgs, targets = torch.rand(16, 3, 32, 32), torch.randint(0, 10, (16,))
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        for _ in range(2):
            loss = loss_fn(model(imgs), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    mib = sum(p.nbytes for p in model.parameters()) / 2**20
    found = memory_timeline.memory_by_category(prof, "cpu")
    state = found.mib["optimizer_state"]
    assert state[0] == 0 and state[-1] == pytest.approx(2 * mib, abs=0.01)  # Adam's state, from the first step
    assert found.peak("activation") > 2 * mib and found.peak("input") == pytest.approx(imgs.nbytes / 2**20, rel=0.01)
    assert len(found.total()) == len(found.ms) and found.ms[0] == 0
    assert memory_timeline.memory_by_category(prof, "meta") is None  # the profiler keeps none for it
    fig = memory_timeline.plot_memory(found, "Tudui, 2 training steps on {device}: memory by category", device="cpu")
    assert "activations" in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def test_the_recorded_readings_are_drawn_with_what_they_say(monkeypatch, capsys):
    import matplotlib.pyplot as plt

    from helpers.lab import gpu_readings

    monkeypatch.setattr(plt, "show", lambda: None)
    counts = gpu_readings.show_recorded_memory_counts()
    assert list(counts) == ["torch.cuda.memory_allocated()", "torch.cuda.memory_reserved()", "nvidia-smi"]
    assert counts["torch.cuda.memory_allocated()"] < counts["torch.cuda.memory_reserved()"] < counts["nvidia-smi"]
    peaks, machine = gpu_readings.recorded_peaks()
    assert sorted(peaks) == [16, 32, 64, 128, 256, 512, 1024, 2048] and "H200" in machine
    assert 1.8 < peaks[2048] / peaks[1024] < 2.2  # twice the batch, about twice the peak
    sweep = gpu_readings.show_recorded_copy_sweep()
    assert set(sweep) == {"pageable -> GPU", "pinned -> GPU", "GPU -> pageable", "GPU -> pinned"}
    assert capsys.readouterr().out.count("Recorded on NVIDIA H200") == 3


def test_the_recorded_ladder_is_read_from_the_lines_the_gpu_printed():
    from helpers.lab import gpu_readings

    rows, record = gpu_readings.recorded_ladder()
    assert [r["rung"] for r in rows][:4] == ["article loop", "no hidden syncs", "data on device", "larger batch"]
    assert max(rows, key=lambda r: r["ratio"])["ratio"] == record["values"]["best_ratio"]
    fig = gpu_readings.plot_recorded_ladder(rows, record)
    bars = fig.axes[0].patches
    assert len(bars) == len(rows) and [b.get_hatch() for b in bars].count("//") == 2  # two rungs learned less
    assert gpu_readings.LADDER_ROW.match("article loop           11000      1.00x    100.0%")


def test_the_ddp_script_profiles_three_steps_of_its_rank(tmp_path):
    """ddp_train --profile DIR (here one process, no torchrun): rank 0's trace, three steps, as lesson 08 draws it."""
    from helpers.distributed import ddp_train

    ddp_train.main(["--device", "cpu", "--epochs", "1", "--samples", "160", "--profile", str(tmp_path)])
    spans = timeline.spans(tmp_path / "rank0.json")
    assert [s.lane for s in spans].count("step") == 3 and "ops" in {s.lane for s in spans}
    assert timeline.lane_of({"cat": "user_annotation", "name": "gloo:all_reduce", "ts": 0, "dur": 1}) == "comm"
