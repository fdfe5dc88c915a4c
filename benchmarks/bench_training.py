"""How fast is the course's training loop? Two comparisons, in one run, on the same data and device.

(a) images/s of the course's loop (``helpers.lesson.training.train_one_epoch``, progress bar and loss
    bookkeeping included) against a minimal hand-written loop. The course's loop must keep at
    least 0.95 of the bare loop's throughput.
(b) images/s of the same training loop fed by a DataLoader over per-image transforms (``ToTensor``,
    as in the original course) against the dataset kept as one tensor on the device and sliced into
    batches.

Runs alternate (A, B, B, A, ...) so that a busy machine slows both alike; each rate is a median, each
ratio the median of the pairwise ratios.

    python benchmarks/bench_training.py                 # best device, synthetic data unless CIFAR-10 downloads
    python benchmarks/bench_training.py --device cpu --threads 1 --images 1024 --repeats 21
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, Subset

from helpers.lab.alternate import alternated
from helpers.lesson.data import as_tensors, load_cifar10
from helpers.lesson.devices import DeviceError, pick_device
from helpers.lesson.models import Tudui
from helpers.lesson.training import TensorBatches, train_one_epoch

MIN_COURSE_RATIO = 0.95


def bare_loop(model, batches, loss_fn, optimizer):
    """The least a training epoch can do."""
    for imgs, targets in batches:
        loss = loss_fn(model(imgs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def interleaved(runs: dict, n_images: int, device, repeats: int) -> tuple[dict[str, float], float]:
    """Median images/s of each of two runs, alternating between them, and the median of the pairwise ratios.

    Each pair runs back to back, so a ratio compares the two under the same machine load; the median
    of the ratios is robust to a busy machine. One untimed warm-up each.
    """
    (name_a, _), (name_b, _) = runs.items()
    result = alternated(runs, n_images, device, repeats, baseline=name_b)
    return result.rates, result.ratios[name_a]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default=None, help="auto, cpu, cuda[:N], mps (default: COURSE_DEVICE or auto)")
    p.add_argument("--images", type=int, default=512, help="training images per timed run (default: 512)")
    p.add_argument("--batch-size", type=int, default=64, help="batch size (default: 64, as the original)")
    p.add_argument("--repeats", type=int, default=None, help="timed runs per variant (default: 15; 3 with --quick)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's choice)")
    p.add_argument("--quick", action="store_true", help="small synthetic data, 512 images, 3 repeats (for tests)")
    p.add_argument("--data-dir", default="data", help="where CIFAR-10 is (or is downloaded to)")
    args = p.parse_args(argv)
    try:
        device = pick_device(args.device)
    except DeviceError as err:
        p.exit(2, f"{p.prog}: error: {err}\n")
    repeats = args.repeats or (3 if args.quick else 15)
    if args.threads:
        torch.set_num_threads(args.threads)

    data = load_cifar10(args.data_dir, quick=args.quick)
    n = min(512 if args.quick else args.images, len(data.train))
    images, labels = as_tensors(data.train, device)
    images, labels = images[:n], labels[:n]
    on_device = TensorBatches(images, labels, args.batch_size)
    loader = DataLoader(Subset(data.train, range(n)), batch_size=args.batch_size)

    torch.manual_seed(0)
    model = Tudui().to(device)
    loss_fn = nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

    print(f"data: {data.name}, {n} training images, batch size {args.batch_size}")
    print(
        f"device: {device}, torch {torch.__version__}, {torch.get_num_threads()} CPU threads, {repeats} timed runs each"
    )

    # (a) the course's loop against a bare loop, both over the on-device tensor
    a, ratio_a = interleaved(
        {
            "course loop": lambda: train_one_epoch(model, on_device, loss_fn, optimizer, device, progress=True),
            "bare loop": lambda: bare_loop(model, on_device, loss_fn, optimizer),
        },
        n,
        device,
        repeats,
    )

    # (b) where the batches come from, same (course) loop
    b, ratio_b = interleaved(
        {
            "tensor on device": lambda: train_one_epoch(model, on_device, loss_fn, optimizer, device),
            "DataLoader + ToTensor": lambda: train_one_epoch(model, loader, loss_fn, optimizer, device),
        },
        n,
        device,
        repeats,
    )

    print()
    print(f"{'variant':<26}{'images/s':>12}")
    for name, rate in {**a, **b}.items():
        print(f"{name:<26}{rate:>12.0f}")
    print()
    verdict = "OK" if ratio_a >= MIN_COURSE_RATIO else f"BELOW {MIN_COURSE_RATIO}"
    print(f"(a) course loop / bare loop:             {ratio_a:.3f}  ({verdict})")
    print(f"(b) tensor on device / DataLoader:       {ratio_b:.2f}x")
    return 0 if ratio_a >= MIN_COURSE_RATIO or args.quick else 1


if __name__ == "__main__":
    sys.exit(main())
