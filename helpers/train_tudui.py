"""Train the Tudui CIFAR-10 classifier outside Jupyter: ``python -m helpers.train_tudui --help``.

The same loop as notebook 05 (helpers.training), for the full run: real CIFAR-10 when it can be
downloaded (else the synthetic fallback, and it says so), progress bars, a checkpoint after every
epoch, and resuming from it on whatever device the command now runs on.
"""

from __future__ import annotations

import argparse
import sys
import time

EPOCHS_FULL = 10
EPOCHS_QUICK = 2

EPILOG = """\
examples:
  python -m helpers.train_tudui                      # 10 epochs on the best device, resumable
  python -m helpers.train_tudui --device cpu --epochs 20
  python -m helpers.train_tudui --device cuda:1 --preload
  python -m helpers.train_tudui --quick              # seconds, synthetic data (what the tests run)

Run the same command again to resume: --epochs is the total to reach, so an interrupted run
(Ctrl-C) carries on from its last completed epoch, on whatever device it now runs on, with the
data order it would have had. Resuming needs the same data (quick or full), --lr, --momentum and
--batch-size as the checkpoint; the command refuses a mismatch (use --no-resume to start afresh).
Without internet, CIFAR-10 cannot be downloaded: the command trains on a synthetic CIFAR-shaped
dataset instead and labels every result with it.
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m helpers.train_tudui",
        description="Train the Tudui CNN (from the original course) on CIFAR-10, on any device, resumably.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--device",
        default=None,
        help="auto, cpu, cuda, cuda:N or mps (default: COURSE_DEVICE if set, else auto = best available)",
    )
    p.add_argument(
        "--epochs",
        type=int,
        default=None,
        help=f"total epochs to reach, counting resumed ones (default: {EPOCHS_FULL}; {EPOCHS_QUICK} with --quick)",
    )
    p.add_argument("--batch-size", type=int, default=64, help="images per batch (default: 64, as the original)")
    p.add_argument("--lr", type=float, default=1e-2, help="SGD learning rate (default: 0.01, as the original)")
    p.add_argument("--momentum", type=float, default=0.0, help="SGD momentum (default: 0, as the original)")
    p.add_argument("--data-dir", default="data", help="where CIFAR-10 is downloaded (default: data/)")
    p.add_argument(
        "--checkpoint",
        default="checkpoints/tudui.pt",
        help="checkpoint file, written after every epoch and resumed from (default: checkpoints/tudui.pt)",
    )
    p.add_argument("--no-resume", action="store_true", help="start afresh even if the checkpoint exists")
    p.add_argument(
        "--preload",
        action="store_true",
        help="keep the whole dataset as one tensor on the device (faster) instead of a DataLoader",
    )
    p.add_argument("--log-dir", default="runs/tudui", help="TensorBoard folder, used when tensorboard is installed")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--quick", action="store_true", help="quick mode: small synthetic data, few epochs (for tests)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)

    import torch
    from torch import nn
    from torch.utils.data import DataLoader

    from helpers import checkpoints
    from helpers.config import quick_mode
    from helpers.data import as_tensors, load_cifar10
    from helpers.devices import DeviceError, pick_device
    from helpers.models import Tudui
    from helpers.training import History, TensorBatches, fit, tensorboard_writer

    try:
        device = pick_device(args.device)
    except DeviceError as err:
        parser.exit(2, f"{parser.prog}: error: {err}\n")

    quick = args.quick or quick_mode()
    epochs = args.epochs if args.epochs is not None else (EPOCHS_QUICK if quick else EPOCHS_FULL)
    if epochs < 1 or args.batch_size < 1:
        parser.error("--epochs and --batch-size must be at least 1")

    torch.manual_seed(args.seed)
    try:
        data = load_cifar10(args.data_dir, quick=quick)
    except KeyboardInterrupt:
        print("\ninterrupted while getting CIFAR-10: the partial download was removed; run again.", file=sys.stderr)
        return 130
    print(f"data: {data.description}")
    print(f"device: {device}")

    gen = torch.Generator().manual_seed(args.seed)
    if args.preload:
        train_loader = TensorBatches(*as_tensors(data.train, device), args.batch_size, shuffle=True, generator=gen)
        test_loader = TensorBatches(*as_tensors(data.test, device), args.batch_size)
    else:
        train_loader = DataLoader(data.train, batch_size=args.batch_size, shuffle=True)
        test_loader = DataLoader(data.test, batch_size=args.batch_size)

    model = Tudui().to(device)
    loss_fn = nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)

    settings = {
        "data_name": data.name,
        "data_sizes": [len(data.train), len(data.test)],
        "lr": args.lr,
        "momentum": args.momentum,
        "batch_size": args.batch_size,
    }
    history = History(data_name=data.name)
    done = 0
    if args.checkpoint and not args.no_resume:
        from pathlib import Path

        if Path(args.checkpoint).exists():
            state = checkpoints.load(args.checkpoint)
            mismatch = _mismatch(state, settings)
            if mismatch:
                parser.exit(
                    2,
                    f"{parser.prog}: error: {args.checkpoint} cannot be resumed by this run: {mismatch}. "
                    "Run with the checkpoint's settings, or use --no-resume or another --checkpoint.\n",
                )
            state = checkpoints.resume_training(args.checkpoint, model, optimizer, device)
            if state.get("rng") is not None:  # the data order the uninterrupted run would have had
                torch.set_rng_state(state["rng"])
                gen.set_state(state["generator"])
            history = History.from_dict(state["history"])
            done = state["epoch"]
            print(f"resumed from {args.checkpoint}: epoch {done} done ({history.summary()})")

    remaining = epochs - done
    if remaining <= 0:
        print(f"nothing to do: {done} of {epochs} epochs already done ({args.checkpoint}); raise --epochs to go on")
        return 0

    writer = tensorboard_writer(args.log_dir)
    if writer is not None:
        print(f"TensorBoard logs in {args.log_dir}/: open them with  tensorboard --logdir {args.log_dir}")

    saved = {"epoch": done}

    def report(epoch: int, hist: History) -> None:
        if args.checkpoint:
            checkpoints.save_training(args.checkpoint, model, optimizer, epoch, hist, **settings,
                                      rng=torch.get_rng_state(), generator=gen.get_state())  # fmt: skip
            saved["epoch"] = epoch
        from tqdm.auto import tqdm

        tqdm.write(hist.summary() + (f" (saved {args.checkpoint})" if args.checkpoint else ""))

    start = time.perf_counter()
    try:
        history = fit(
            model,
            train_loader,
            test_loader,
            loss_fn,
            optimizer,
            device,
            remaining,
            history=history,
            progress=not args.no_progress,
            writer=writer,
            on_epoch_end=report,
        )
    except KeyboardInterrupt:
        last = saved["epoch"]
        kept = f"{args.checkpoint} (epoch {last}) is intact" if args.checkpoint and last else "nothing was saved"
        print(f"\ninterrupted: {kept}; run the same command to resume.", file=sys.stderr)
        return 130
    finally:
        if writer is not None:
            writer.close()
    print(f"done in {time.perf_counter() - start:.1f} s: {history.summary()}")
    if not data.is_cifar10:
        print("These are results on synthetic data, not CIFAR-10 results.")
    return 0


def _mismatch(state: dict, settings: dict) -> str:
    """What differs between a checkpoint's settings and this run's ("" when it can resume)."""
    names = {"data_name": "data", "data_sizes": "data size (train, test)", "lr": "--lr", "momentum": "--momentum",
             "batch_size": "--batch-size"}  # fmt: skip
    diffs = []
    for key, name in names.items():
        saved, now = state.get(key), settings[key]
        if key == "data_sizes" and saved is not None:
            saved = list(saved)
        if saved is not None and saved != now:
            hint = " (--quick or COURSE_QUICK=1 uses small synthetic data)" if key == "data_sizes" else ""
            diffs.append(f"{name} was {saved}, now {now}{hint}")
        elif saved is None and key == "data_name":
            diffs.append("it has no record of its data")
    return "; ".join(diffs)


if __name__ == "__main__":
    sys.exit(main())
