"""Fully sharded data parallel (FSDP2, ``fully_shard``), started by torchrun (notebook 08).

    torchrun --standalone --nproc_per_node=2 -m helpers fsdp-train --device cpu   # 2 CPU processes, gloo
    torchrun --standalone --nproc_per_node=4 -m helpers fsdp-train                # 4 GPUs, NCCL

DDP keeps a whole copy of the model (and of the optimizer's state) in every process. FSDP keeps
1/N of each parameter in each of the N processes: before a layer runs, its full weights are
gathered (all-gather); after backward, the gradients are averaged and each process keeps the shard
it owns (reduce-scatter), and the optimizer updates that shard only. Same data, same arithmetic as
DDP, so the same losses; less memory per process, more communication. Same training data and
options as ``helpers.distributed.ddp_train``.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard  # torch >= 2.6 (before: ..._composable.fsdp)
from torch.distributed.tensor import DTensor  # torch >= 2.5 (before: torch.distributed._tensor)

from helpers.distributed.ddp_train import backend_for, build_parser, log, make_loader, mean_over_ranks, setup
from helpers.lesson.models import Tudui


def gloo_average_sums() -> bool:
    """Does gloo's reduce-scatter return the sum when asked for the average (ReduceOp.AVG)?

    It does in torch 2.7 and 2.8; torch 2.9 and newer average. FSDP2 asks for the average of the
    gradients; a sum makes every step world_size times too large.
    """
    world_size = dist.get_world_size()
    out = torch.empty(1)
    with warnings.catch_warnings():  # newer torch: reduce_scatter_tensor is deprecated (FSDP still uses it)
        warnings.simplefilter("ignore", FutureWarning)
        dist.reduce_scatter_tensor(out, torch.ones(world_size), op=dist.ReduceOp.AVG)
    return world_size > 1 and out.item() != 1.0


def average_on_old_gloo(model: nn.Module, world_size: int) -> bool:
    """torch < 2.9 only (2.7, 2.8): where gloo summed the gradients FSDP asked it to average, divide them after.

    Returns whether it was needed. On NCCL and on current torch it does nothing.
    """
    if not gloo_average_sums():
        return False
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_all_reduce_hook(lambda grad: grad.div_(world_size))
    return True


def local_sizes(tensors: dict) -> dict:
    """{name: values this rank holds} for DTensors (``.to_local()``: this rank's shard); None for a plain tensor."""
    return {name: t.to_local().numel() if isinstance(t, DTensor) else None for name, t in tensors.items()}


def say(line: str) -> None:
    """Print one line in one write: the ranks share torchrun's output, and unbuffered prints would interleave."""
    print(line + "\n", end="", flush=True)


def train(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    rank, world_size, device = setup(args.device, args.timeout)
    if world_size == 1:
        dist.init_process_group(backend_for(device), rank=0, world_size=1, store=dist.HashStore())
    mesh = init_device_mesh(device.type, (world_size,))
    torch.manual_seed(args.seed)  # the same initial weights as ddp_train's
    model = Tudui().to(device)
    for layer in model.model:
        if any(True for _ in layer.parameters()):
            fully_shard(layer, mesh=mesh)  # each layer's parameters are gathered just before it runs
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)  # built after sharding: it updates the shards
    if device.type == "cpu":
        average_on_old_gloo(model, world_size)  # torch < 2.9 only: gloo summed where FSDP asked for the mean
    loss_fn = nn.CrossEntropyLoss()
    loader, sampler = make_loader(args.samples, args.batch_size, rank, world_size, args.seed)

    shards = local_sizes(dict(model.named_parameters()))  # DTensor -> this rank's shard
    full = {name: p.numel() for name, p in model.named_parameters()}  # the whole parameter's size
    say(f"[rank {rank}] holds {sum(shards.values()):,} of {sum(full.values()):,} parameter values")

    losses = []
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        step_losses = []
        for imgs, targets in loader:
            loss = loss_fn(model(imgs.to(device)), targets.to(device))
            optimizer.zero_grad()
            loss.backward()  # gradients reduce-scattered: each rank gets the mean gradient of its shard
            optimizer.step()
            step_losses.append(loss.detach())
        epoch_losses = mean_over_ranks(torch.stack(step_losses)).tolist()
        losses += epoch_losses
        log(f"epoch {epoch + 1}: mean loss {sum(epoch_losses) / len(epoch_losses):.4f}")

    # After the last backward(), the gradients are sharded like the parameters they belong to.
    grads = local_sizes({name: p.grad for name, p in model.named_parameters()})
    # SGD without momentum keeps no state; Adam keeps two values per parameter value. One Adam step on
    # the same model shows where an optimizer's state lives: sharded too (run after the losses are taken).
    adam = torch.optim.Adam(model.parameters())
    adam.step()
    names = {p: name for name, p in model.named_parameters()}
    state = {f"{names[p]}.{key}": value for p, st in adam.state.items() for key, value in st.items() if key != "step"}
    states = local_sizes(state)
    say(f"[rank {rank}] holds {sum(grads.values()):,} gradient values and {sum(states.values()):,} of Adam's state "
        "(2 per parameter value)")  # fmt: skip
    mine = {"params": shards, "grads": grads, "adam": states}
    per_rank = [mine] * world_size
    dist.all_gather_object(per_rank, mine)
    result = {
        "world_size": world_size,
        "losses": losses,
        "shards": [r["params"] for r in per_rank],
        "grad_shards": [r["grads"] for r in per_rank],
        "adam_shards": [r["adam"] for r in per_rank],
        "full": full,
    }
    if args.result and rank == 0:
        Path(args.result).parent.mkdir(parents=True, exist_ok=True)
        Path(args.result).write_text(json.dumps(result))
    dist.barrier()  # leave together: a rank that exits early can break a peer's shutdown
    dist.destroy_process_group()
    return result


if __name__ == "__main__":
    train()
