"""Record, on a CUDA GPU, the traces and memory readings the lessons' pictures of a GPU are drawn from.

    python tools/gpu_traces.py --out runs/gpu_traces      # on a machine with an NVIDIA GPU

Each measurement runs on its own and writes its own file, so one that fails leaves the others:

- ``trace_<loop>_b<batch>.json.gz``: a ``torch.profiler`` trace (CPU and CUDA activities, Chrome's trace format)
  of 3 training steps of Tudui after 3 warm-up steps, for the article's loop (blocking ``.cuda()``, ``loss.item()``
  each step) and the overlapped loop (pinned batches copied with ``non_blocking=True``, the loss summed on the
  device), at batch 64 and 1024, on the synthetic data every machine has;
- ``memory_timeline.json``: the profiler's memory timeline of 3 steps (batch 256, Adam) by category, on ``cuda:0``;
- ``memory_history.json``: the caching allocator's own record of the same steps (every alloc and free, with the
  reserved segments), reduced to sizes and times;
- ``readings.json``: allocated, reserved, ``mem_get_info`` and ``nvidia-smi`` after the steps; peak allocated against
  batch size; host-to-device and device-to-host copy bandwidth, pageable against pinned, 4 KB to 256 MB.

With ``--record [FILE]`` it also reduces them to what the lessons draw and merges them, as records labelled with the
GPU, driver, torch, CUDA version and date, into ``helpers/course/gpu_traces.json`` (or FILE): the traces as the
lanes of ``helpers.lab.timeline``, the memory timeline in MiB by category, and the readings. A new record replaces
the one with the same key and GPU. Without a CUDA GPU it says so and writes nothing.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import shutil
import subprocess
import sys
import traceback
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from helpers.lab import timeline  # noqa: E402
from helpers.lesson.models import Tudui  # noqa: E402

MiB = 2**20
WARMUP, ACTIVE = 3, 3


def loader(batch: int, pin: bool, workers: int) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    n = batch * (WARMUP + ACTIVE + 2)
    data = TensorDataset(torch.randn(n, 3, 32, 32, generator=g), torch.randint(0, 10, (n,), generator=g))
    return DataLoader(data, batch_size=batch, shuffle=True, pin_memory=pin, num_workers=workers, generator=g)


def article_step(model, opt, loss_fn, imgs, targets, device, state):
    imgs, targets = imgs.to(device), targets.to(device)  # as the article's .cuda(): a blocking copy
    loss = loss_fn(model(imgs), targets)
    opt.zero_grad()
    loss.backward()
    opt.step()
    state["total"] += loss.item()  # waits for the GPU every step


def overlapped_step(model, opt, loss_fn, imgs, targets, device, state):
    imgs, targets = imgs.to(device, non_blocking=True), targets.to(device, non_blocking=True)
    loss = loss_fn(model(imgs), targets)
    opt.zero_grad()
    loss.backward()
    opt.step()
    state["total"] = state["total"] + loss.detach()  # stays on the GPU: no wait


LOOPS = {"article": (article_step, False, 0), "overlapped": (overlapped_step, True, 2)}  # step, pin, workers


def record_trace(out: Path, loop: str, batch: int, device: torch.device) -> str:
    step_fn, pin, workers = LOOPS[loop]
    torch.manual_seed(0)
    model = Tudui().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    state = {"total": 0.0}
    path = out / f"trace_{loop}_b{batch}.json"
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    schedule = torch.profiler.schedule(wait=0, warmup=WARMUP, active=ACTIVE, repeat=1)
    with torch.profiler.profile(activities=activities, schedule=schedule,
                                on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:  # fmt: skip
        for i, (imgs, targets) in enumerate(loader(batch, pin, workers)):
            if i == WARMUP + ACTIVE:
                break
            with torch.profiler.record_function(f"step {i}"):
                step_fn(model, opt, loss_fn, imgs, targets, device, state)
            prof.step()
    torch.cuda.synchronize()
    with open(path, "rb") as f, gzip.open(f"{path}.gz", "wb") as g:
        shutil.copyfileobj(f, g)
    path.unlink()
    return f"{path.name}.gz"


def train_steps(device: torch.device, batch: int, steps: int = 3):
    torch.manual_seed(0)
    model = Tudui().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    for imgs, targets in list(loader(batch, True, 0))[:steps]:
        imgs, targets = imgs.to(device, non_blocking=True), targets.to(device, non_blocking=True)
        loss = loss_fn(model(imgs), targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    return model, opt


def record_memory_timeline(out: Path, device: torch.device) -> str:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
                                profile_memory=True, record_shapes=True, with_stack=True) as prof:  # fmt: skip
        train_steps(device, 256)
    path = out / "memory_timeline.json"
    prof.export_memory_timeline(str(path), device=str(device))
    return path.name


def record_memory_history(out: Path, device: torch.device) -> str:
    torch.cuda.memory._record_memory_history(max_entries=100_000)
    try:
        train_steps(device, 256)
        snapshot = torch.cuda.memory._snapshot()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    events = [
        {k: e.get(k) for k in ("action", "addr", "size", "stream", "time_us")} for e in snapshot["device_traces"][0]
    ]
    segments = [{k: s.get(k) for k in ("address", "total_size", "allocated_size", "segment_type")}
                for s in snapshot["segments"]]  # fmt: skip
    path = out / "memory_history.json"
    path.write_text(json.dumps({"events": events, "segments": segments}))
    return path.name


def nvidia_smi_used_mib() -> int | None:
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                              capture_output=True, text=True, timeout=20)  # fmt: skip
        return int(done.stdout.split()[0])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


def copy_bandwidth(device: torch.device) -> dict:
    """GB/s of each copy (median of 5, timed with CUDA events) for 4 KB to 256 MB."""
    rates = {"bytes": [], "h2d_pageable": [], "h2d_pinned": [], "d2h_pageable": [], "d2h_pinned": []}
    for shift in range(12, 29, 2):
        n = 2**shift
        pageable, pinned = torch.empty(n, dtype=torch.uint8), torch.empty(n, dtype=torch.uint8).pin_memory()
        on_gpu = torch.empty(n, dtype=torch.uint8, device=device)
        rates["bytes"].append(n)
        copies = {"h2d_pageable": (on_gpu, pageable), "h2d_pinned": (on_gpu, pinned),
                  "d2h_pageable": (pageable, on_gpu), "d2h_pinned": (pinned, on_gpu)}  # fmt: skip
        for name, (dst, src) in copies.items():
            dst.copy_(src, non_blocking=src.is_pinned() or dst.is_pinned())
            times = []
            for _ in range(5):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                dst.copy_(src, non_blocking=src.is_pinned() or dst.is_pinned())
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / 1e3)
            rates[name].append(n / sorted(times)[2] / 1e9)
    return rates


def record_readings(out: Path, device: torch.device, smi_before: int | None) -> str:
    readings = {"nvidia_smi_used_mib_before_cuda": smi_before}
    model, opt = train_steps(device, 256)
    readings["after_3_steps_b256"] = {
        "allocated_mib": torch.cuda.memory_allocated(device) / MiB,
        "reserved_mib": torch.cuda.memory_reserved(device) / MiB,
        "max_allocated_mib": torch.cuda.max_memory_allocated(device) / MiB,
        "mem_get_info_free_total_mib": [v / MiB for v in torch.cuda.mem_get_info(device)],
        "nvidia_smi_used_mib": nvidia_smi_used_mib(),
    }
    del model, opt
    peaks = {}
    for batch in (16, 32, 64, 128, 256, 512, 1024, 2048):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        model, opt = train_steps(device, batch, steps=2)
        peaks[batch] = (torch.cuda.max_memory_allocated(device) - base) / MiB
        del model, opt
    readings["peak_allocated_mib_by_batch"] = peaks
    readings["copy_gb_per_s"] = copy_bandwidth(device)
    path = out / "readings.json"
    path.write_text(json.dumps(readings, indent=1))
    return path.name


MEMORY_CATEGORIES = (
    "parameter",
    "optimizer_state",
    "input",
    "temporary",
    "activation",
    "gradient",
    "autograd_detail",
    "unknown",
)  # torch.profiler's order in export_memory_timeline, after a 0 column
WHAT = {
    "trace_article_b64": "notebook 06: 3 steps of the article's loop (blocking copies, loss.item() each step), "
    "batch 64",
    "trace_overlapped_b64": "notebook 06: 3 steps of the overlapped loop (2 workers, pinned batches, non_blocking "
    "copies, the loss kept on the GPU), batch 64",
    "trace_article_b1024": "notebook 06: 3 steps of the article's loop, batch 1024",
    "trace_overlapped_b1024": "notebook 06: 3 steps of the overlapped loop, batch 1024",
    "memory_timeline": "notebook 07: memory by category over 3 training steps of Tudui (batch 256, Adam), MiB",
    "readings": "notebook 07: allocated, reserved and nvidia-smi after 3 steps; peak allocated by batch size; "
    "copy bandwidth 4 KB to 256 MB, pageable and pinned, both ways",
}


def merged(spans: list, gap_ms: float) -> list:
    """Adjacent spans of a lane closer than ``gap_ms`` drawn as one (what the figure shows, in fewer numbers)."""
    out = []
    for s in sorted(spans, key=lambda s: (s.lane, s.start_ms)):
        last = out[-1] if out else None
        if last and last.lane == s.lane and s.start_ms - (last.start_ms + last.ms) < gap_ms:
            end = max(last.start_ms + last.ms, s.start_ms + s.ms)
            out[-1] = timeline.Span(s.lane, "", last.start_ms, end - last.start_ms)
        else:
            out.append(s if s.lane in ("data", "step", "wait") else timeline.Span(s.lane, "", s.start_ms, s.ms))
    return sorted(out, key=lambda s: s.start_ms)


def reduced(name: str, path: Path):
    """What a lesson draws of a recorded file."""
    if name.startswith("trace_"):
        return {"spans": [[s.lane, s.name, round(s.start_ms, 3), round(s.ms, 3)]
                          for s in merged(timeline.spans(path), gap_ms=0.02)]}  # fmt: skip
    if name == "memory_timeline":  # the steps only: 1 ms before the first activation to the last with Adam's state
        times, sizes = json.loads(path.read_text())
        moving = [i for i, row in enumerate(sizes) if row[1 + MEMORY_CATEGORIES.index("activation")] > 0]
        state = [row[1 + MEMORY_CATEGORIES.index("optimizer_state")] for row in sizes]
        whole = [i for i, v in enumerate(state) if v == max(state)]  # after these, the model and its state are freed
        start = times[moving[0]] - 1000  # µs
        kept = [k for k, t in enumerate(times[: whole[-1] + 1]) if t >= start]
        mib = {c: [round(sizes[k][i + 1] / MiB, 3) for k in kept] for i, c in enumerate(MEMORY_CATEGORIES)}
        return {"ms": [round((times[k] - start) / 1e3, 3) for k in kept], "mib": mib}
    return json.loads(path.read_text())


def records(out: Path, machine: dict) -> list[dict]:
    """The records of what was recorded in ``out`` (files that failed are left out)."""
    fields = {k: machine[k] for k in ("gpu", "driver", "torch", "cuda", "date")}
    return [{"key": name, "what": WHAT[name], "data": reduced(name, out / file), **fields,
             "command": "python tools/gpu_traces.py --record"}
            for name, file in machine["files"].items() if file and name in WHAT]  # fmt: skip


def write_records(path: Path, new: list[dict]) -> None:
    what = "Traces and memory recorded on a real GPU for the lessons' pictures (tools/gpu_traces.py)."
    data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"what": what}
    replaced = {(r["key"], r["gpu"]) for r in new}
    kept = [r for r in data.get("records", []) if (r["key"], r["gpu"]) not in replaced]
    data["records"] = sorted(kept + new, key=lambda r: (r["key"], r["gpu"]))
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def nvidia_driver() -> str:
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", "-i", "0"],
                              capture_output=True, text=True, timeout=20)  # fmt: skip
        return done.stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/gpu_traces.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs") / "gpu_traces")
    parser.add_argument("--record", nargs="?", const=timeline.TRACES_FILE, type=Path, metavar="FILE",
                        help="also merge what was recorded into FILE (default: the course's data file)")  # fmt: skip
    args = parser.parse_args(argv)
    smi_before = nvidia_smi_used_mib()
    if not torch.cuda.is_available():
        print("No CUDA GPU here: nothing recorded. Run this on a machine with an NVIDIA GPU.")
        return 0
    device = torch.device("cuda", 0)
    args.out.mkdir(parents=True, exist_ok=True)
    machine = {"gpu": torch.cuda.get_device_name(device), "driver": nvidia_driver(), "torch": torch.__version__,
               "cuda": torch.version.cuda, "date": datetime.date.today().isoformat(), "files": {}}  # fmt: skip
    jobs = [(f"trace_{loop}_b{batch}", lambda loop=loop, batch=batch: record_trace(args.out, loop, batch, device))
            for batch in (64, 1024) for loop in LOOPS]  # fmt: skip
    jobs += [("memory_timeline", lambda: record_memory_timeline(args.out, device)),
             ("memory_history", lambda: record_memory_history(args.out, device)),
             ("readings", lambda: record_readings(args.out, device, smi_before))]  # fmt: skip
    failed = 0
    for name, job in jobs:
        try:
            machine["files"][name] = job()
            print(f"{name}: written")
        except Exception:  # one measurement failing leaves the others
            failed += 1
            machine["files"][name] = None
            print(f"{name}: FAILED\n{traceback.format_exc()}")
    (args.out / "machine.json").write_text(json.dumps(machine, indent=1))
    if args.record:
        new = records(args.out, machine)
        write_records(args.record, new)
        print(f"recorded {len(new)} record(s) in {args.record}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
