"""DDP on the CPU: 2 processes with 1 thread each against 1 process with 2 threads, the same work (notebook 08).

Both train Tudui on the same images with the same effective batch (2 x 32 against 1 x 64), so both do
the same arithmetic; DDP adds the gradient all-reduce between its two processes (gloo, over loopback).
The time measured is the training steps only, after one warm-up step: not starting the processes.
Runs alternate (DDP, one process, one process, DDP, ...); the ratio is the median of the ratios
measured within each round, so a busy machine slows both alike.

    python benchmarks/bench_ddp.py                 # 5 rounds of 20 steps
    python benchmarks/bench_ddp.py --rounds 9 --steps 40
    python benchmarks/bench_ddp.py --quick         # 1 round of 2 steps (the tests)

On GPUs the same comparison is one GPU against N (torchrun --nproc_per_node=N), which this script
does not run.
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


def worker(steps: int, batch: int) -> None:
    """Train ``steps`` steps (after a warm-up step) and print images/s on rank 0. Runs under torchrun or alone."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    from helpers.data import SyntheticCIFAR, as_tensors
    from helpers.models import Tudui

    world_size = int(os.environ.get("WORLD_SIZE", 1))
    rank = int(os.environ.get("RANK", 0))
    if world_size > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = Tudui()
    model = DDP(model) if world_size > 1 else model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    images, labels = as_tensors(SyntheticCIFAR(batch * world_size * 4, seed=0))
    images, labels = images[rank::world_size], labels[rank::world_size]

    def step(i: int) -> None:
        at = (i % 4) * batch
        loss = loss_fn(model(images[at : at + batch]), labels[at : at + batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    step(0)  # warm-up
    if world_size > 1:
        dist.barrier()
    start = time.perf_counter()
    for i in range(steps):
        step(i + 1)
    if world_size > 1:
        dist.barrier()
    seconds = time.perf_counter() - start
    if rank == 0:
        print(f"{RESULT} {steps * batch * world_size / seconds:.1f}", flush=True)
    if world_size > 1:
        dist.destroy_process_group()


def measure(ddp: bool, steps: int, threads: int, timeout: float) -> float:
    from helpers.child import run_python
    from helpers.launch import torchrun

    script = str(Path(__file__).resolve())
    if ddp:
        run = torchrun(script, "--worker", "--steps", str(steps), "--batch", "32", nproc=2, timeout=timeout,
                       env={"OMP_NUM_THREADS": "1"}).check()  # fmt: skip
        out = run.stdout
    else:
        code = f"import runpy, sys; sys.argv = [{script!r}, '--worker', '--steps', '{steps}', '--batch', '64']; "
        code += f"runpy.run_path({script!r}, run_name='__main__')"
        out = run_python(code, env={"OMP_NUM_THREADS": str(threads)}, timeout=timeout)
    return float(next(line.split()[1] for line in out.splitlines() if line.startswith(RESULT)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=20, help="timed training steps per run")
    p.add_argument("--quick", action="store_true", help="1 round of 2 steps")
    p.add_argument("--timeout", type=float, default=600, help="seconds one run may take")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, default=64, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args.steps, args.batch)
        return 0
    rounds, steps = (1, 2) if args.quick else (args.rounds, args.steps)
    threads = 2  # the same total threads as 2 processes x 1 thread
    rates: dict[str, list[float]] = {"ddp": [], "one": []}
    ratios = []
    for r in range(rounds):
        order = ["ddp", "one"] if r % 2 == 0 else ["one", "ddp"]
        got = {name: measure(name == "ddp", steps, threads, args.timeout) for name in order}
        for name, rate in got.items():
            rates[name].append(rate)
        ratios.append(got["ddp"] / got["one"])
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"Tudui, effective batch 64, {steps} steps per run, {rounds} round(s); load average at the end {load:.2f}")
    print(f"2 DDP processes x 1 thread (gloo): {statistics.median(rates['ddp']):7.0f} images/s")
    print(f"1 process x {threads} threads:          {statistics.median(rates['one']):7.0f} images/s")
    print(f"DDP / one process: {statistics.median(ratios):.2f}x (median of the ratios within each round)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
