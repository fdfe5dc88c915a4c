"""The speed ladder of notebook 06, measured on one device: how much faster is each rung than the article's loop?

Rungs (each adds one change to the one before): the article's DataLoader loop (a blocking imgs.to(device)
and loss.item() every step); no hidden syncs (the loss read once; on CUDA, pinned batches copied with
non_blocking=True); data kept on the device; batch 256; channels_last; mixed precision (bfloat16 where the
device runs it natively, else float16 with a GradScaler); compile.
Runs alternate (forward, then reversed order) so a busy machine slows every rung alike; each rate is
a median, each ratio the median of the ratios measured within one round. Every rung trains the same
number of steps from the same weights (with Adam, so that a short run learns), and its test accuracy is
shown beside its speed.

    python benchmarks/bench_ladder.py --device cpu           # table printed, CSV in runs/bench_ladder_cpu.csv
    python benchmarks/bench_ladder.py --device cuda --repeats 9
    python benchmarks/bench_ladder.py --quick                # small synthetic data, compile skipped (tests)
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import torch

from helpers.lesson.data import load_cifar10
from helpers.lesson.devices import DeviceError, pick_device
from helpers.lesson.speed import run_ladder

QUICK_SKIP = {"compile": "--quick (a first compilation takes tens of seconds on a CPU)"}


def write_csv(path: Path, result, meta: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[*meta, "rung", "images_per_s", "ratio", "accuracy", "verdict", "note"])
        writer.writeheader()
        for row in result.rows():
            writer.writerow({**meta, **row})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default=None, help="auto, cpu, cuda[:N], mps (default: COURSE_DEVICE or auto)")
    p.add_argument("--steps", type=int, default=None, help="training steps per timed run (default: 20; 2 with --quick)")
    p.add_argument("--repeats", type=int, default=None, help="timed rounds (default: 7; 1 with --quick)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's choice)")
    p.add_argument("--no-compile", action="store_true", help="skip the compile rung")
    p.add_argument("--quick", action="store_true", help="small synthetic data, few steps, no compile (for tests)")
    p.add_argument("--csv", default=None, help="where to save the table (default: runs/bench_ladder_<device>.csv)")
    p.add_argument("--data-dir", default="data", help="where CIFAR-10 is (or is downloaded to)")
    args = p.parse_args(argv)
    try:
        device = pick_device(args.device)
    except DeviceError as err:
        p.exit(2, f"{p.prog}: error: {err}\n")
    if args.threads:
        torch.set_num_threads(args.threads)
    steps = args.steps or (2 if args.quick else 20)
    repeats = args.repeats or (1 if args.quick else 7)
    skip = dict(QUICK_SKIP) if args.quick else {}
    if args.no_compile:
        skip["compile"] = "--no-compile"

    data = load_cifar10(args.data_dir, quick=args.quick)
    print(f"data: {data.name}")
    print(f"device: {device}, torch {torch.__version__}, {torch.get_num_threads()} CPU threads, "
          f"{steps} steps per run, {repeats} rounds after one warm-up run")  # fmt: skip
    result = run_ladder(data, device, steps, repeats, skip=skip)
    print()
    print(result.table())
    print(f"\naccuracy: test set, after {result.steps} steps of each rung (same initial weights)")
    if "compile" in result.first_call_seconds:
        print(f"compile: first run (with compilation) took {result.first_call_seconds['compile']:.1f} s")
    best = max(result.ratios, key=result.ratios.get)
    print(f"best rung: {best}, {result.ratios[best]:.2f}x the article's loop")
    if result.verdict(best) not in ("faster", "baseline"):
        print(f"  ({best} is not distinguishable from the article's loop here: its rounds fall on both sides "
              "of 1.0x, or there are fewer than 3 rounds)")  # fmt: skip

    path = Path(args.csv or f"runs/bench_ladder_{device.type}.csv")
    meta = {"device": str(device), "torch": torch.__version__, "threads": torch.get_num_threads(), "data": data.name}
    write_csv(path, result, meta)
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
