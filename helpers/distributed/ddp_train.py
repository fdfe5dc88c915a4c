"""Data-parallel training with DDP, one process per device, started by torchrun (notebook 08).

    torchrun --standalone --nproc_per_node=2 -m helpers ddp-train --device cpu   # 2 CPU processes, gloo
    torchrun --standalone --nproc_per_node=4 -m helpers ddp-train                # 4 GPUs, NCCL (Windows: gloo)
    python -m helpers ddp-train --batch-size 64                                  # one process, no DDP

torchrun starts N copies of this script and tells each where it stands through the environment:
RANK (0..N-1 over all machines), LOCAL_RANK (0.. on this machine: which GPU) and WORLD_SIZE (N).
Every copy builds the same model; DDP averages the gradients over all copies inside ``backward()``,
so every copy takes the same optimizer step and the parameters stay identical. Each copy reads a
different part of the data (``DistributedSampler``). Tudui on synthetic CIFAR-shaped data.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, record_function, schedule
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from helpers.lesson.checkpoints import save
from helpers.lesson.data import SyntheticCIFAR, as_tensors
from helpers.lesson.models import Tudui


class RankDeviceError(ValueError):
    """This process cannot have the device it asks for (e.g. more processes than GPUs)."""


def backend_for(device: torch.device) -> str:
    """The process group's backend for tensors on ``device``: NCCL for CUDA GPUs where this PyTorch has it, else gloo.

    PyTorch for Windows (and for macOS, and CPU-only builds) has no NCCL, whatever GPUs the machine has: there
    gloo carries the CUDA tensors too (its all-reduce and broadcast, what DDP needs, take them), slower.
    """
    return "nccl" if device.type == "cuda" and dist.is_nccl_available() else "gloo"


def rank_device(device: str = "auto", local_rank: int = 0) -> tuple[torch.device, str]:
    """(device, backend) for the process with this LOCAL_RANK: cuda:LOCAL_RANK and NCCL (gloo where this PyTorch
    has no NCCL: Windows), or the CPU and gloo.

    ``device`` is ``"auto"`` (a GPU when there is one), ``"cuda"`` or ``"cpu"``. Raises
    :class:`RankDeviceError` when there is no GPU for this LOCAL_RANK.
    """
    if device == "cuda" or (device == "auto" and torch.cuda.is_available()):
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if local_rank >= gpus:
            raise RankDeviceError(
                f"LOCAL_RANK={local_rank}, but this machine has {gpus} GPU(s): start at most one process per GPU "
                f"(torchrun --nproc_per_node={max(gpus, 1)}), or train on the CPU with --device cpu."
            )
        dev = torch.device("cuda", local_rank)  # LOCAL_RANK, not RANK: GPUs are numbered per machine
        torch.cuda.set_device(dev)  # so that NCCL and a bare "cuda" mean this process's GPU
        return dev, backend_for(dev)
    return torch.device("cpu"), backend_for(torch.device("cpu"))


def setup(device: str = "auto", timeout_s: float = 120) -> tuple[int, int, torch.device]:
    """(rank, world size, device) from torchrun's environment; joins the process group when there are several."""
    rank = int(os.environ.get("RANK", 0))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    try:
        dev, backend = rank_device(device, local_rank)
    except RankDeviceError as err:
        raise SystemExit(str(err)) from None
    if world_size > 1:  # RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT are read from the environment
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
    return rank, world_size, dev


def log(message: str) -> None:
    """Print on rank 0 only: one line per job, not one per process."""
    if not dist.is_initialized() or dist.get_rank() == 0:
        print(message, flush=True)


def make_loader(samples: int, batch_size: int, rank: int, world_size: int, seed: int):
    """This rank's share of the data, ``batch_size`` images per step, and the sampler that shares it out."""
    images, labels = as_tensors(SyntheticCIFAR(samples, seed=seed))
    dataset = TensorDataset(images, labels)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler), sampler


def mean_over_ranks(values: torch.Tensor) -> torch.Tensor:
    """The mean of ``values`` over all processes (gloo has no AVG: sum, then divide)."""
    if dist.is_initialized():
        values = values.clone()
        dist.all_reduce(values)  # SUM by default
        values /= dist.get_world_size()
    return values


def fingerprint(model: nn.Module) -> str:
    """A short hash of every parameter's bytes: equal on two ranks only if the parameters are identical."""
    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:12]


def step_profiler(folder: str, rank: int, device: torch.device):
    """torch.profiler over this rank's steps 2 to 4 (step 1: warm-up), the trace written to FOLDER/rank<N>.json as
    the recording ends; nothing without FOLDER."""
    if not folder:
        return contextlib.nullcontext()
    path = Path(folder) / f"rank{rank}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    return profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=3, repeat=1),
                   on_trace_ready=lambda prof: prof.export_chrome_trace(str(path)))  # fmt: skip


def train(args: argparse.Namespace) -> dict:
    rank, world_size, device = setup(args.device, args.timeout)
    torch.manual_seed(args.seed)  # the same initial weights in every process (DDP also copies rank 0's)
    plain = Tudui().to(device)
    model = DDP(plain) if world_size > 1 else plain  # DDP(plain, device_ids=[device.index]) on a GPU also works
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    loader, sampler = make_loader(args.samples, args.batch_size, rank, world_size, args.seed)

    start = 0
    if args.resume and Path(args.checkpoint).exists():  # every rank reads it, onto its own device
        state = torch.load(args.checkpoint, map_location=device, weights_only=True)
        plain.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"]
    log(f"{world_size} process(es) x batch {args.batch_size} = effective batch {world_size * args.batch_size}, "
        f"lr {args.lr}, on {device.type}")  # fmt: skip

    losses = []
    with step_profiler(args.profile, rank, device) as prof:  # nothing without --profile
        for epoch in range(start, args.epochs):
            if not args.no_set_epoch:
                sampler.set_epoch(epoch)  # a new shuffle every epoch, the same one on every rank
            step_losses = []
            for imgs, targets in loader:
                with record_function("training step"):
                    imgs, targets = imgs.to(device), targets.to(device)
                    loss = loss_fn(model(imgs), targets)
                    optimizer.zero_grad()
                    loss.backward()  # DDP: the gradients are averaged over all processes here
                    optimizer.step()
                    step_losses.append(loss.detach())
                if prof is not None:
                    prof.step()
            epoch_losses = mean_over_ranks(torch.stack(step_losses)).tolist()
            losses += epoch_losses
            log(f"epoch {epoch + 1}: mean loss {sum(epoch_losses) / len(epoch_losses):.4f}")
            if args.checkpoint:
                if rank == 0:  # one writer; plain.state_dict() has no "module." prefix
                    save({"model": plain.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch + 1},
                         args.checkpoint)  # fmt: skip
                if world_size > 1:
                    dist.barrier()  # no rank reads the file, or exits, before it is complete

    prints = [fingerprint(plain)] * world_size
    if world_size > 1:
        dist.all_gather_object(prints, fingerprint(plain))
    log(f"parameters identical on all {world_size} process(es): {len(set(prints)) == 1}")
    result = {"world_size": world_size, "losses": losses, "fingerprints": prints}
    if args.result and rank == 0:
        Path(args.result).parent.mkdir(parents=True, exist_ok=True)
        Path(args.result).write_text(json.dumps(result))
    if world_size > 1:
        dist.barrier()  # leave together: a rank that exits early can break a peer's shutdown
        dist.destroy_process_group()
    return {**result, "state_dict": plain.state_dict()}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="torchrun --standalone --nproc_per_node=N -m helpers ddp-train",
        description="Train Tudui with DDP on N processes (or one, without torchrun).",
    )
    p.add_argument(
        "--device",
        choices=["auto", "cpu"],
        default="auto",
        help="auto: cuda:LOCAL_RANK when there are GPUs (NCCL, or gloo without it), else the CPU (gloo)",
    )
    p.add_argument("--batch-size", type=int, default=32, help="images per step in each process (default 32)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--samples", type=int, default=512, help="training images (synthetic, CIFAR-shaped)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint", default="", help="written by rank 0 after every epoch")
    p.add_argument("--resume", action="store_true", help="start from --checkpoint if it exists")
    p.add_argument("--result", default="", help="JSON file with the losses and parameter fingerprints (rank 0)")
    p.add_argument("--no-set-epoch", action="store_true", help="the bug: the same data order every epoch")
    p.add_argument("--timeout", type=float, default=120, help="seconds a collective may wait before failing")
    p.add_argument("--profile", default="", metavar="DIR", help="profile steps 2-4 of each rank: DIR/rank<N>.json")
    return p


def main(argv: list[str] | None = None) -> dict:
    return train(build_parser().parse_args(argv))


if __name__ == "__main__":
    main()
