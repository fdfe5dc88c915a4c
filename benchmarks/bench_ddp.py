"""DDP against one process on the same machine: on the CPU (gloo) or on CUDA GPUs (NCCL), notebook 08.

CPU (the default): 2 processes with 1 thread each against 1 process with 2 threads, the same work. Both
train Tudui on the same images with the same effective batch (2 x 32 against 1 x 64), so both do the same
arithmetic; DDP adds the gradient all-reduce between its two processes (gloo, over loopback).

GPUs (``--device cuda``): N processes, one GPU each (NCCL), against one process on one GPU, each with the
same batch per GPU (``--batch``): N GPUs do N times the work per step, so the ratio of images/s is the
scaling (N for perfect scaling; the course's goal is at least 0.9 x N, 1.8x on 2 GPUs).

The time measured is the training steps only, after warm-up steps: not starting the processes.
Runs alternate (DDP, one process, one process, DDP, ...); the ratio is the median of the ratios
measured within each round, so a busy machine slows both alike.

    python benchmarks/bench_ddp.py                 # CPU: 5 rounds of 20 steps
    python benchmarks/bench_ddp.py --rounds 9 --steps 40
    python benchmarks/bench_ddp.py --quick         # 1 round of 2 steps (the tests)
    python benchmarks/bench_ddp.py --device cuda   # 2 GPUs against 1, batch 256 per GPU, 3 rounds of 200 steps
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

RESULT = "IMAGES_PER_S"
GOAL_PER_GPU = 0.9  # the course's goal for N GPUs: at least 0.9 x N times one GPU's images/s
GPU_DEFAULTS = {"rounds": 3, "steps": 200, "batch": 256}  # GPU steps are short: more of them, larger batches


def worker(steps: int, batch: int, device_type: str = "cpu") -> None:
    """Train ``steps`` steps (after warm-up) and print images/s on rank 0. Runs under torchrun or alone."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    from helpers.lesson.data import SyntheticCIFAR, as_tensors
    from helpers.lesson.models import Tudui

    world_size = int(os.environ.get("WORLD_SIZE", 1))
    rank = int(os.environ.get("RANK", 0))
    device = torch.device("cpu")
    if device_type == "cuda":  # one GPU per process: cuda:LOCAL_RANK
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    if world_size > 1:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    torch.manual_seed(0)
    model = Tudui().to(device)
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None) if world_size > 1 else model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    images, labels = as_tensors(SyntheticCIFAR(batch * world_size * 4, seed=0))
    images, labels = images[rank::world_size].to(device), labels[rank::world_size].to(device)

    def step(i: int) -> None:
        at = (i % 4) * batch
        loss = loss_fn(model(images[at : at + batch]), labels[at : at + batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    def wait_for_all() -> None:  # the GPU's queued work done, on every rank
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if world_size > 1:
            dist.barrier()

    warm_up = 5 if device.type == "cuda" else 1  # the first GPU steps choose kernels and fill the allocator
    for i in range(warm_up):
        step(i)
    wait_for_all()
    start = time.perf_counter()
    for i in range(steps):
        step(i + 1)
    wait_for_all()
    seconds = time.perf_counter() - start
    if rank == 0:
        print(f"{RESULT} {steps * batch * world_size / seconds:.1f}", flush=True)
    if world_size > 1:
        dist.destroy_process_group()


def measure(ddp: bool, steps: int, batch: int, device: str, nproc: int, threads: int, timeout: float) -> float:
    """Images/s of one run: ``nproc`` DDP processes of ``batch`` each, or one process of ``batch``."""
    from helpers.distributed.launch import torchrun
    from helpers.lab.child import run_python

    script = str(Path(__file__).resolve())
    worker_args = ["--worker", "--device", device, "--steps", str(steps), "--batch", str(batch)]
    if ddp:
        run = torchrun(script, *worker_args, nproc=nproc, timeout=timeout, env={"OMP_NUM_THREADS": "1"}).check()
        out = run.stdout
    else:
        code = f"import runpy, sys; sys.argv = [{script!r}, *{worker_args!r}]; "
        code += f"runpy.run_path({script!r}, run_name='__main__')"
        out = run_python(code, env={"OMP_NUM_THREADS": str(threads)}, timeout=timeout)
    return float(next(line.split()[1] for line in out.splitlines() if line.startswith(RESULT)))


def interleaved(rounds: int, measure_one) -> tuple[dict[str, list[float]], list[float]]:
    """({"ddp": [images/s per round], "one": [...]}, [DDP / one per round]), the order alternating by round."""
    rates: dict[str, list[float]] = {"ddp": [], "one": []}
    ratios = []
    for r in range(rounds):
        order = ["ddp", "one"] if r % 2 == 0 else ["one", "ddp"]
        got = {name: measure_one(name == "ddp") for name in order}
        for name, rate in got.items():
            rates[name].append(rate)
        ratios.append(got["ddp"] / got["one"])
    return rates, ratios


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cpu (gloo) or cuda (NCCL, one GPU each)")
    p.add_argument("--gpus", type=int, default=2, help="with --device cuda: DDP on this many GPUs (default 2)")
    p.add_argument("--rounds", type=int, help="rounds of (DDP, one process) (default: 5 on cpu, 3 on cuda)")
    p.add_argument("--steps", type=int, help="timed training steps per run (default: 20 on cpu, 200 on cuda)")
    p.add_argument("--batch", type=int, help="with --device cuda: images per step on each GPU (default 256)")
    p.add_argument("--quick", action="store_true", help="1 round of 2 steps")
    p.add_argument("--timeout", type=float, default=600, help="seconds one run may take")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    cuda = args.device == "cuda"
    if args.worker:
        worker(args.steps, args.batch, args.device)
        return 0
    rounds = args.rounds or (GPU_DEFAULTS["rounds"] if cuda else 5)
    steps = args.steps or (GPU_DEFAULTS["steps"] if cuda else 20)
    if args.quick:
        rounds, steps = 1, 2
    if cuda:
        import torch

        found = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if found < args.gpus:
            p.exit(2, f"{p.prog}: error: --device cuda --gpus {args.gpus} needs {args.gpus} CUDA GPUs; this machine "
                      f"has {found}. Without GPUs, run it with --device cpu.\n")  # fmt: skip
        batch = args.batch or GPU_DEFAULTS["batch"]

        def one_run(ddp: bool) -> float:  # N GPUs x batch against 1 GPU x batch
            return measure(ddp, steps, batch, "cuda", args.gpus, 1, args.timeout)
    else:
        threads = 2  # the same total threads as 2 processes x 1 thread

        def one_run(ddp: bool) -> float:  # 2 processes x 32 against 1 process x 64
            return measure(ddp, steps, 32 if ddp else 64, "cpu", 2, threads, args.timeout)

    rates, ratios = interleaved(rounds, one_run)
    ddp, one, ratio = statistics.median(rates["ddp"]), statistics.median(rates["one"]), statistics.median(ratios)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    if cuda:
        goal = GOAL_PER_GPU * args.gpus
        print(f"Tudui, batch {batch} per GPU, {steps} steps per run, {rounds} round(s); load average at the end "
              f"{load:.2f}")  # fmt: skip
        print(f"{args.gpus} GPUs, one process each (DDP, NCCL): {ddp:9.0f} images/s")
        print(f"1 GPU, one process:                   {one:9.0f} images/s")
        verdict = "OK" if ratio >= goal else f"BELOW {goal:.2f}x"
        print(f"{args.gpus} GPUs / 1 GPU: {ratio:.2f}x (median of the ratios within each round; goal >= {goal:.2f}x: "
              f"{verdict})")  # fmt: skip
        return 0
    print(f"Tudui, effective batch 64, {steps} steps per run, {rounds} round(s); load average at the end {load:.2f}")
    print(f"2 DDP processes x 1 thread (gloo): {ddp:7.0f} images/s")
    print(f"1 process x {threads} threads:          {one:7.0f} images/s")
    print(f"DDP / one process: {ratio:.2f}x (median of the ratios within each round)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
