"""Train the Tudui CIFAR-10 classifier outside Jupyter: ``python -m helpers train-tudui --help``.

The same loop as notebook 05 (helpers.lesson.training), for the full run: real CIFAR-10 when it can be
downloaded (else the synthetic fallback, and it says so), progress bars, a checkpoint after every
epoch, and resuming from it on whatever device the command now runs on.

Under ``torchrun --nproc_per_node=N -m helpers train-tudui`` (WORLD_SIZE > 1) the same command
trains with DDP: one process per GPU (cuda:LOCAL_RANK, NCCL; gloo on Windows) or CPU processes (gloo), each
on its share of the data (DistributedSampler, set_epoch) and of the test set (the results are added up over
the ranks); rank 0 alone prints and writes the checkpoint, without DDP's ``module.`` prefix, so it
resumes in one process and the other way round. A process that fails ends the job: torchrun stops
the others and exits non-zero.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time

from helpers.course.i18n import tr, tr_lazy

EPOCHS_FULL = 10
EPOCHS_QUICK = 2
# How long a collective (a barrier, the gradients' all-reduce) waits for a process that is still running but
# late: the longest such wait is the other processes at a barrier while rank 0 downloads CIFAR-10. A process
# that dies does not make the others wait this long: torchrun stops them within seconds and exits non-zero.
COLLECTIVE_TIMEOUT = datetime.timedelta(minutes=30)

EPILOG = tr_lazy("""\
examples:
  python -m helpers train-tudui                      # 10 epochs on the best device, resumable
  python -m helpers train-tudui --device cpu --epochs 20
  python -m helpers train-tudui --device cuda:1 --preload
  python -m helpers train-tudui --quick              # seconds, synthetic data (what the tests run)
  torchrun --standalone --nproc_per_node=2 -m helpers train-tudui   # DDP: one process per GPU (or CPU, gloo)

Run the same command again to resume: --epochs is the total to reach, so an interrupted run
(Ctrl-C) carries on from its last completed epoch, on whatever device it now runs on, with the
data order it would have had. Resuming needs the same data (quick or full), --lr, --momentum and
--batch-size as the checkpoint; the command refuses a mismatch (use --no-resume to start afresh).
Without internet, CIFAR-10 cannot be downloaded: the command trains on a synthetic CIFAR-shaped
dataset instead and labels every result with it.
Under torchrun, --device is auto, cuda (each process takes cuda:LOCAL_RANK) or cpu; --batch-size is
per process (the effective batch is N times it); checkpoints resume with any number of processes.
""")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m helpers train-tudui",
        description=tr("Train the Tudui CNN (from the original course) on CIFAR-10, on any device, resumably."),
        epilog=tr(EPILOG),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--device",
        default=None,
        help=tr("auto, cpu, cuda, cuda:N or mps (default: COURSE_DEVICE if set, else auto = best available)"),
    )
    p.add_argument(
        "--epochs",
        type=int,
        default=None,
        help=tr(
            "total epochs to reach, counting resumed ones (default: {full}; {quick} with --quick)",
            full=EPOCHS_FULL,
            quick=EPOCHS_QUICK,
        ),
    )
    p.add_argument("--batch-size", type=int, default=64, help=tr("images per batch (default: 64, as the original)"))
    p.add_argument("--lr", type=float, default=1e-2, help=tr("SGD learning rate (default: 0.01, as the original)"))
    p.add_argument("--momentum", type=float, default=0.0, help=tr("SGD momentum (default: 0, as the original)"))
    p.add_argument("--data-dir", default="data", help=tr("where CIFAR-10 is downloaded (default: data/)"))
    p.add_argument(
        "--checkpoint",
        default="checkpoints/tudui.pt",
        help=tr("checkpoint file, written after every epoch and resumed from (default: checkpoints/tudui.pt)"),
    )
    p.add_argument("--no-resume", action="store_true", help=tr("start afresh even if the checkpoint exists"))
    p.add_argument(
        "--preload",
        action="store_true",
        help=tr("keep the whole dataset as one tensor on the device (faster) instead of a DataLoader"),
    )
    p.add_argument("--log-dir", default="runs/tudui", help=tr("TensorBoard folder, used when tensorboard is installed"))
    p.add_argument("--no-progress", action="store_true", help=tr("no progress bars"))
    p.add_argument("--quick", action="store_true", help=tr("quick mode: small synthetic data, few epochs (for tests)"))
    p.add_argument("--seed", type=int, default=0, help=tr("random seed (default: 0)"))
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)

    from helpers.lesson.devices import DeviceError, pick_device

    world_size = int(os.environ.get("WORLD_SIZE", 1))
    if world_size > 1:  # started by torchrun with several processes: DDP
        import torch.distributed as dist

        device, backend = _rank_device(parser, args.device)
        _join_process_group(parser, backend)
        try:
            return _train(parser, args, device, dist.get_rank(), world_size)
        finally:
            dist.destroy_process_group()
    try:
        device = pick_device(args.device)
    except DeviceError as err:
        parser.exit(2, f"{parser.prog}: error: {err}\n")
    return _train(parser, args, device, 0, 1)


def _join_process_group(parser: argparse.ArgumentParser, backend: str) -> None:
    """init_process_group from the environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); exits 2 with what
    to do when MASTER_PORT is already in use.

    torchrun's own rendezvous binds the port before any process starts (torchrun then fails itself); the
    processes bind it when they are started another way, e.g. by a cluster's launcher with MASTER_PORT set.
    """
    import torch.distributed as dist

    from helpers.distributed.launch import port_in_use_advice

    try:
        dist.init_process_group(backend, timeout=COLLECTIVE_TIMEOUT)
    except dist.DistNetworkError as err:
        advice = port_in_use_advice(str(err))
        if not advice:
            raise
        where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
        message = tr("the process group cannot start at {where}: {advice}", where=where, advice=advice)
        parser.exit(2, f"{parser.prog}: error: {message}\n")


def _rank_device(parser: argparse.ArgumentParser, request: str | None):
    """This process's (device, backend) under torchrun: cuda:LOCAL_RANK or the CPU, and the process group's backend
    for it (helpers.distributed.ddp_train.rank_device); exits 2 with a message otherwise."""
    from helpers.course.config import DEVICE_ENV
    from helpers.distributed.ddp_train import RankDeviceError, rank_device

    request = request or os.environ.get(DEVICE_ENV, "").strip() or "auto"
    if request not in ("auto", "cuda", "cpu"):
        message = tr(
            "under torchrun, --device {request} cannot be used: use --device cuda "
            "(each rank takes cuda:LOCAL_RANK), --device cpu or --device auto.",
            request=request,
        )
        parser.exit(2, f"{parser.prog}: error: {message}\n")
    try:
        return rank_device(request, int(os.environ.get("LOCAL_RANK", 0)))
    except RankDeviceError as err:
        parser.exit(2, f"{parser.prog}: error: {err}\n")


def _train(parser: argparse.ArgumentParser, args: argparse.Namespace, device, rank: int, world_size: int) -> int:
    """The run, in one process (world_size 1) or in each of torchrun's processes (DDP)."""
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Subset

    from helpers.course.config import quick_mode
    from helpers.lesson import checkpoints
    from helpers.lesson.data import as_tensors, load_cifar10
    from helpers.lesson.models import Tudui
    from helpers.lesson.training import History, TensorBatches, fit, tensorboard_writer

    ddp = world_size > 1
    say = print if rank == 0 else _silent  # one line per job, not one per process

    quick = args.quick or quick_mode()
    epochs = args.epochs if args.epochs is not None else (EPOCHS_QUICK if quick else EPOCHS_FULL)
    if epochs < 1 or args.batch_size < 1:
        parser.error(tr("--epochs and --batch-size must be at least 1"))

    torch.manual_seed(args.seed)
    try:
        if ddp:  # rank 0 downloads first; the others then read its files
            import torch.distributed as dist

            if rank != 0:
                dist.barrier()
            data = load_cifar10(args.data_dir, quick=quick, **({"verbose": False} if rank else {}))
            if rank == 0:
                dist.barrier()
        else:
            data = load_cifar10(args.data_dir, quick=quick)
    except KeyboardInterrupt:
        say(tr("\ninterrupted while getting CIFAR-10: the partial download was removed; run again."), file=sys.stderr)
        return 130
    say(tr("data: {description}", description=data.description))
    if ddp:
        say(
            tr(
                "device: {type} in each of {n} processes (DDP, {backend}), batch {batch} each = effective batch "
                "{effective}",
                type=device.type,
                n=world_size,
                backend=dist.get_backend(),
                batch=args.batch_size,
                effective=world_size * args.batch_size,
            )
        )
    else:
        say(tr("device: {device}", device=device))

    gen = torch.Generator().manual_seed(args.seed)
    sampler = None
    if ddp:  # each rank its share, in an order set by the seed and the epoch (sampler.set_epoch)
        from torch.utils.data import DistributedSampler

        sampler = DistributedSampler(data.train, num_replicas=world_size, rank=rank, shuffle=True, seed=args.seed)
    # Evaluation is shared out too: rank r evaluates test images r, r + N, r + 2N, ... (what DistributedSampler
    # with shuffle=False gives, without the repeated images it pads the last batch with), and report() adds up
    # the ranks' results: the same numbers as one process evaluating the whole test set, N times sooner. (The
    # shares may differ by a batch: DDP's forward runs no collective for a model without buffers, as Tudui.)
    test_share = range(rank, len(data.test), world_size)
    if args.preload:
        images, labels = as_tensors(data.train, device)
        if ddp:
            train_loader = _SampledBatches(images, labels, args.batch_size, sampler)
        else:
            train_loader = TensorBatches(images, labels, args.batch_size, shuffle=True, generator=gen)
        images, labels = as_tensors(data.test, device)
        test_loader = TensorBatches(images[rank::world_size].contiguous(), labels[rank::world_size], args.batch_size)
    else:
        if ddp:
            train_loader = DataLoader(data.train, batch_size=args.batch_size, sampler=sampler)
        else:
            train_loader = DataLoader(data.train, batch_size=args.batch_size, shuffle=True)
        test_loader = DataLoader(Subset(data.test, test_share) if ddp else data.test, batch_size=args.batch_size)

    plain = Tudui().to(device)  # what is saved and resumed: no DDP "module." prefix in its keys
    loss_fn = nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(plain.parameters(), lr=args.lr, momentum=args.momentum)

    settings = {
        "data_name": data.english_name,
        "data_sizes": [len(data.train), len(data.test)],
        "lr": args.lr,
        "momentum": args.momentum,
        "batch_size": args.batch_size,
    }
    history = History(data_name=data.name)
    done = 0
    if args.checkpoint and not args.no_resume:
        from pathlib import Path

        if Path(args.checkpoint).exists():  # every rank reads it (map_location: onto the CPU, then its device)
            state = checkpoints.load(args.checkpoint)
            mismatch = _mismatch(state, settings)
            if mismatch:
                message = tr(
                    "{checkpoint} cannot be resumed by this run: {mismatch}. "
                    "Run with the checkpoint's settings, or use --no-resume or another --checkpoint.",
                    checkpoint=args.checkpoint,
                    mismatch=mismatch,
                )
                parser.exit(2, f"{parser.prog}: error: {message}\n")
            state = checkpoints.resume_training(args.checkpoint, plain, optimizer, device)
            if state.get("rng") is not None:  # the data order the uninterrupted run would have had
                torch.set_rng_state(state["rng"])
                gen.set_state(state["generator"])
            history = History.from_dict(state["history"])
            done = state["epoch"]
            say(
                tr(
                    "resumed from {checkpoint}: epoch {done} done ({summary})",
                    checkpoint=args.checkpoint,
                    done=done,
                    summary=history.summary(),
                )
            )

    remaining = epochs - done
    if remaining <= 0:
        say(
            tr(
                "nothing to do: {done} of {epochs} epochs already done ({checkpoint}); raise --epochs to go on",
                done=done,
                epochs=epochs,
                checkpoint=args.checkpoint,
            )
        )
        return 0

    model = plain
    if ddp:  # after resuming: DDP copies rank 0's parameters to every rank when it wraps the model
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(plain, device_ids=[device.index] if device.type == "cuda" else None)

    writer = tensorboard_writer(args.log_dir) if rank == 0 else None
    if writer is not None:
        say(tr("TensorBoard logs in {dir}/: open them with  tensorboard --logdir {dir}", dir=args.log_dir))

    saved = {"epoch": done}

    def report(epoch: int, hist: History) -> None:
        if ddp:  # each rank's results are over its share: combined, they are over all the data
            from helpers.distributed.ddp_train import mean_over_ranks

            # the sampler gives every rank as many training images: the mean of the ranks' means
            hist.train_loss[-1] = mean_over_ranks(torch.tensor(hist.train_loss[-1], device=device)).item()
            hist.test_loss[-1], hist.test_accuracy[-1] = _whole_test_set(
                hist.test_loss[-1], hist.test_accuracy[-1], len(test_share), device
            )
            if writer is not None:  # written here, once the results are over all the data
                for name, values in (("train_loss", hist.train_loss), ("test_loss", hist.test_loss),
                                     ("test_accuracy", hist.test_accuracy)):  # fmt: skip
                    writer.add_scalar(name, values[-1], epoch)
        if args.checkpoint and rank == 0:  # one writer
            checkpoints.save_training(args.checkpoint, plain, optimizer, epoch, hist, **settings,
                                      rng=torch.get_rng_state(), generator=gen.get_state())  # fmt: skip
        if args.checkpoint and ddp:
            dist.barrier()  # no rank reads the file, or exits, before it is complete
        if args.checkpoint:
            saved["epoch"] = epoch
        if rank == 0:
            from tqdm.auto import tqdm

            if args.checkpoint:
                tqdm.write(tr("{summary} (saved {checkpoint})", summary=hist.summary(), checkpoint=args.checkpoint))
            else:
                tqdm.write(hist.summary())

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
            progress=not args.no_progress and rank == 0,
            writer=None if ddp else writer,  # under DDP, report() writes the results over all ranks
            on_epoch_end=report,
            on_epoch_start=sampler.set_epoch if sampler is not None else None,
        )
    except KeyboardInterrupt:
        last = saved["epoch"]
        if args.checkpoint and last:
            kept = tr("{checkpoint} (epoch {last}) is intact", checkpoint=args.checkpoint, last=last)
        else:
            kept = tr("nothing was saved")
        say(tr("\ninterrupted: {kept}; run the same command to resume.", kept=kept), file=sys.stderr)
        return 130
    finally:
        if writer is not None:
            writer.close()
    say(tr("done in {seconds:.1f} s: {summary}", seconds=time.perf_counter() - start, summary=history.summary()))
    if not data.is_cifar10:
        say(tr("These are results on synthetic data, not CIFAR-10 results."))
    if ddp:
        dist.barrier()  # leave together: a rank that exits early can break a peer's shutdown
    return 0


def _whole_test_set(loss: float, accuracy: float, count: int, device) -> tuple[float, float]:
    """(mean loss, accuracy) over the whole test set, from each rank's over its ``count`` test images."""
    import torch
    import torch.distributed as dist

    sums = torch.tensor([loss * count, round(accuracy * count), count], dtype=torch.float64, device=device)
    dist.all_reduce(sums)  # summed loss, correct predictions, images: over all ranks
    total = max(sums[2].item(), 1)
    return sums[0].item() / total, sums[1].item() / total


def _silent(*values, **kwargs) -> None:
    """print on the ranks other than 0."""


class _SampledBatches:
    """--preload under torchrun: this rank's share of tensors kept on the device, in the sampler's order."""

    def __init__(self, images, labels, batch_size: int, sampler):
        self.images, self.labels, self.batch_size, self.sampler = images, labels, batch_size, sampler

    def __len__(self) -> int:
        return (len(self.sampler) + self.batch_size - 1) // self.batch_size

    def __iter__(self):
        import torch

        order = torch.tensor(list(self.sampler), device=self.labels.device)
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            yield self.images[idx], self.labels[idx]


def _mismatch(state: dict, settings: dict) -> str:
    """What differs between a checkpoint's settings and this run's ("" when it can resume)."""
    names = {"data_name": tr("data"), "data_sizes": tr("data size (train, test)"), "lr": "--lr",
             "momentum": "--momentum", "batch_size": "--batch-size"}  # fmt: skip
    diffs = []
    for key, name in names.items():
        saved, now = state.get(key), settings[key]
        if key == "data_sizes" and saved is not None:
            saved = list(saved)
        if saved is not None and saved != now:
            hint = tr(" (--quick or COURSE_QUICK=1 uses small synthetic data)") if key == "data_sizes" else ""
            diffs.append(tr("{name} was {saved}, now {now}{hint}", name=name, saved=saved, now=now, hint=hint))
        elif saved is None and key == "data_name":
            diffs.append(tr("it has no record of its data"))
    return tr("; ").join(diffs)


if __name__ == "__main__":
    sys.exit(main())
