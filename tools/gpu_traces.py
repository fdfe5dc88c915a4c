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

Without a CUDA GPU it says so and writes nothing.
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/gpu_traces.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs") / "gpu_traces")
    args = parser.parse_args(argv)
    smi_before = nvidia_smi_used_mib()
    if not torch.cuda.is_available():
        print("No CUDA GPU here: nothing recorded. Run this on a machine with an NVIDIA GPU.")
        return 0
    device = torch.device("cuda", 0)
    args.out.mkdir(parents=True, exist_ok=True)
    machine = {"gpu": torch.cuda.get_device_name(device), "torch": torch.__version__, "cuda": torch.version.cuda,
               "date": datetime.date.today().isoformat(), "files": {}}  # fmt: skip
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
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
