"""The checks of notebook 08 accept right answers and explain typical wrong ones."""

import os

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present
from torch.utils.data import DataLoader, DistributedSampler, Subset

from helpers.exercises import ex08_distributed as check
from helpers.lesson.models import Tudui


def unwritten(*args):
    raise NotImplementedError


# ---------------------------------------------------------------- (1) the device of one rank
def device_plain(env):
    local_rank = int(env["LOCAL_RANK"])
    if torch.cuda.is_available():
        if local_rank >= torch.cuda.device_count():
            raise RuntimeError(f"LOCAL_RANK {local_rank} but only {torch.cuda.device_count()} GPUs")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        return device, "nccl"
    return torch.device("cpu"), "gloo"


def device_os_environ(env):
    local_rank = int(os.environ["LOCAL_RANK"])  # torchrun's variables are in the environment too
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus == 0:
        return "cpu", "gloo"
    assert local_rank < gpus, "more processes than GPUs"
    torch.cuda.set_device(local_rank)
    return f"cuda:{local_rank}", "nccl"


def device_accelerator(env):
    local_rank = int(env.get("LOCAL_RANK", 0))
    if not torch.cuda.is_available():
        return torch.device("cpu"), "gloo"
    count = torch.cuda.device_count()
    if local_rank not in range(count):
        raise ValueError(f"no GPU {local_rank} on this machine ({count} GPUs)")
    torch.cuda.set_device(f"cuda:{local_rank}")
    return torch.device(f"cuda:{local_rank}"), "NCCL"


def device_backend_table(env):
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "gloo":
        return torch.device("cpu"), backend
    lr = int(env["LOCAL_RANK"])
    if lr + 1 > torch.cuda.device_count():
        raise SystemExit("one process per GPU, please")
    dev = torch.device("cuda", index=lr)
    torch.cuda.set_device(dev.index)
    return (dev, backend)


def device_list(env):
    gpus = [torch.device("cuda", i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    if not gpus:
        return [torch.device("cpu"), "gloo"]
    device = gpus[int(env["LOCAL_RANK"])]  # IndexError when there are more processes than GPUs
    torch.cuda.set_device(device)
    return [device, "nccl"]


def device_torch_accelerator(env):
    local_rank = int(env["LOCAL_RANK"])
    accelerator = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    if accelerator is None or accelerator.type != "cuda":  # no GPU, or a Mac's MPS: the CPU and gloo
        return torch.device("cpu"), "gloo"
    if local_rank >= torch.accelerator.device_count():
        raise RuntimeError(f"LOCAL_RANK {local_rank}, {torch.accelerator.device_count()} GPUs")
    torch.accelerator.set_device_index(local_rank)
    return torch.device(accelerator.type, local_rank), dist.get_default_backend_for_device(accelerator)


def device_bare_cuda_after_set_device(env):
    if not torch.cuda.is_available():
        return torch.device("cpu"), "gloo"
    local_rank = int(env["LOCAL_RANK"])
    if local_rank >= torch.cuda.device_count():
        raise RuntimeError("more processes than GPUs")
    torch.cuda.set_device(local_rank)
    return torch.device("cuda"), "nccl"  # the current GPU, set on the line above


def device_asks_for_nccl(env):
    """Asks this PyTorch for NCCL (Windows has none): the simulated GPU machines are Linux ones, with NCCL."""
    if not torch.cuda.is_available():
        return torch.device("cpu"), "gloo"
    local_rank = int(env["LOCAL_RANK"])
    if local_rank >= torch.cuda.device_count():
        raise RuntimeError("more processes than GPUs")
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank), "nccl" if dist.is_nccl_available() else "gloo"


@pytest.mark.parametrize(
    "fn",
    [
        device_plain,
        device_os_environ,
        device_accelerator,
        device_backend_table,
        device_list,
        device_torch_accelerator,
        device_bare_cuda_after_set_device,
        device_asks_for_nccl,
    ],
)
def test_rank_device_accepts(fn, capsys):
    assert check.rank_device(fn), capsys.readouterr().out


def device_from_rank(env):
    if torch.cuda.is_available():
        device = torch.device("cuda", int(env["RANK"]))
        if device.index >= torch.cuda.device_count():
            raise RuntimeError("too many")
        torch.cuda.set_device(device)
        return device, "nccl"
    return torch.device("cpu"), "gloo"


def device_nccl_always(env):
    if torch.cuda.is_available():
        return device_plain(env)
    return torch.device("cpu"), "nccl"


def device_bare_cuda(env):
    if torch.cuda.is_available():
        return torch.device("cuda"), "nccl"
    return torch.device("cpu"), "gloo"


def device_no_set_device(env):
    if torch.cuda.is_available():
        local_rank = int(env["LOCAL_RANK"])
        if local_rank >= torch.cuda.device_count():
            raise RuntimeError("too many")
        return torch.device("cuda", local_rank), "nccl"
    return torch.device("cpu"), "gloo"


def device_wraps_around(env):
    if torch.cuda.is_available():
        local_rank = int(env["LOCAL_RANK"]) % torch.cuda.device_count()
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank), "nccl"
    return torch.device("cpu"), "gloo"


def device_accelerator_not_made_current(env):
    accelerator = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    if accelerator is None or accelerator.type != "cuda":
        return torch.device("cpu"), "gloo"
    local_rank = int(env["LOCAL_RANK"])
    if local_rank >= torch.accelerator.device_count():
        raise RuntimeError("too many")
    return torch.device("cuda", local_rank), "nccl"  # right device, but GPU 0 stays current


def device_mps(env):
    if torch.backends.mps.is_available():
        return torch.device("mps"), "gloo"
    return device_plain(env)


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (unwritten, "Not written yet"),
        (device_from_rank, "RANK counts processes over all machines"),
        (device_nccl_always, "NCCL needs CUDA GPUs"),
        (device_bare_cuda, "without an index"),
        (device_no_set_device, "torch.cuda.set_device"),
        (device_accelerator_not_made_current, "did not make cuda:2 the current GPU"),
        (device_wraps_around, "instead of stopping with an error"),
        (device_mps, "no backend for MPS"),
    ],
)
def test_rank_device_rejects(fn, fragment, capsys):
    feedback = check.rank_device(fn)
    assert not feedback and fragment in feedback.message, feedback.message


def test_rank_device_leaves_the_machine_as_it_was():
    nccl = dist.is_nccl_available
    check.rank_device(device_plain)
    assert "LOCAL_RANK" not in os.environ and torch.cuda.set_device.__module__.startswith("torch")
    assert dist.is_nccl_available is nccl  # the simulated machines' answer is gone too


# ---------------------------------------------------------------- (2) epochs on every rank
def _step(model, optimizer, x, y):
    loss = nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def starter_epochs(model, dataset, rank, world_size, epochs, save):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True)
    loader = DataLoader(dataset, batch_size=4, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        for x, y in loader:
            _step(model, optimizer, x, y)
        save(model.state_dict(), epoch)


def epochs_fixed(model, dataset, rank, world_size, epochs, save):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True)
    loader = DataLoader(dataset, batch_size=4, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            _step(model, optimizer, x, y)
        if rank == 0:
            save(model.state_dict(), epoch)


def epochs_new_sampler_each_epoch(model, dataset, rank, world_size, epochs, save):
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(epochs):
        sampler = DistributedSampler(dataset, world_size, rank, seed=epoch)  # a new seed each epoch: new order
        for x, y in DataLoader(dataset, batch_size=4, sampler=sampler):
            _step(model, optimizer, x, y)
        if not rank:
            save({k: v.clone() for k, v in model.state_dict().items()}, epoch + 1)


def epochs_by_hand(model, dataset, rank, world_size, epochs, save):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for epoch in range(epochs):
        order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(100 + epoch))
        mine = order[rank::world_size].tolist()
        for start in range(0, len(mine), 4):
            xs, ys = zip(*(dataset[i] for i in mine[start : start + 4]), strict=True)
            _step(model, optimizer, torch.stack(xs), torch.stack(ys))
        if rank == 0:
            save(model.state_dict())


def epochs_subset(model, dataset, rank, world_size, epochs, save):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=42)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        loader = DataLoader(Subset(dataset, list(sampler)), batch_size=4, shuffle=False)
        for x, y in loader:
            _step(model, optimizer, x, y)
        if rank != 0:
            continue
        save(model.state_dict(), epoch=epoch)


def epochs_drop_last(model, dataset, rank, world_size, epochs, save):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, drop_last=True)
    loader = DataLoader(dataset, batch_size=8, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.train()
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            _step(model, optimizer, x, y)
        if rank == 0:
            save(model.state_dict(), epoch)


def epochs_barrier_after_save(model, dataset, rank, world_size, epochs, save):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True)
    loader = DataLoader(dataset, batch_size=4, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            _step(model, optimizer, x, y)
        if rank == 0:
            save(model.state_dict(), epoch)
        dist.barrier()  # unguarded, on every rank: what a real job does after the rank-0 save


def epochs_from_the_process_group(model, dataset, rank, world_size, epochs, save):
    sampler = DistributedSampler(dataset)  # num_replicas and rank from the process group
    loader = DataLoader(dataset, batch_size=4, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            _step(model, optimizer, x, y)
        if dist.get_rank() == 0:
            save(model.state_dict(), epoch)


def epochs_set_next_epoch_at_the_end(model, dataset, rank, world_size, epochs, save):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True)
    loader = DataLoader(dataset, batch_size=4, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        for x, y in loader:
            _step(model, optimizer, x, y)
        if rank == 0:
            save(model.state_dict(), epoch)
        sampler.set_epoch(epoch + 1)  # the next epoch's order, set before its loop


@pytest.mark.parametrize(
    "fn",
    [
        epochs_fixed,
        epochs_new_sampler_each_epoch,
        epochs_by_hand,
        epochs_subset,
        epochs_drop_last,
        epochs_barrier_after_save,
        epochs_from_the_process_group,
        epochs_set_next_epoch_at_the_end,
    ],
)
def test_train_epochs_accepts(fn, capsys):
    assert check.train_epochs(fn), capsys.readouterr().out
    assert not dist.is_initialized()  # the check's one-process group is gone again


def test_train_epochs_keeps_a_process_group_already_there():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        assert check.train_epochs(epochs_barrier_after_save)
        assert dist.is_initialized() and dist.get_rank() == 0 and dist.get_world_size() == 1
    finally:
        check._let_gloo_finish()
        dist.destroy_process_group()


def epochs_saves_everywhere(model, dataset, rank, world_size, epochs, save):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True)
    loader = DataLoader(dataset, batch_size=4, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            _step(model, optimizer, x, y)
        save(model.state_dict(), epoch)


def epochs_no_sampler(model, dataset, rank, world_size, epochs, save):
    loader = DataLoader(dataset, batch_size=4, shuffle=True)  # every rank reads everything
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        for x, y in loader:
            _step(model, optimizer, x, y)
        if rank == 0:
            save(model.state_dict(), epoch)


def epochs_seed_per_rank(model, dataset, rank, world_size, epochs, save):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=rank)
    loader = DataLoader(dataset, batch_size=4, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            _step(model, optimizer, x, y)
        if rank == 0:
            save(model.state_dict(), epoch)


def epochs_set_epoch_zero(model, dataset, rank, world_size, epochs, save):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True)
    loader = DataLoader(dataset, batch_size=4, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        sampler.set_epoch(0)
        for x, y in loader:
            _step(model, optimizer, x, y)
        if rank == 0:
            save(model.state_dict(), epoch)


def epochs_set_epoch_at_the_end(model, dataset, rank, world_size, epochs, save):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True)
    loader = DataLoader(dataset, batch_size=4, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        for x, y in loader:
            _step(model, optimizer, x, y)
        if rank == 0:
            save(model.state_dict(), epoch)
        sampler.set_epoch(epoch)  # too late: epochs 1 and 2 both read epoch 0's order


def epochs_saves_once(model, dataset, rank, world_size, epochs, save):
    epochs_fixed(model, dataset, rank, world_size, epochs, lambda *a, **k: None)
    if rank == 0:
        save(model.state_dict(), epochs)


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (starter_epochs, "in the same order in all 3 epochs"),
        (epochs_set_epoch_zero, "here it was the same in every epoch"),
        (epochs_set_epoch_at_the_end, "read epochs 1 and 2 (of 3) in the same order"),
        (epochs_saves_everywhere, "Rank 1 saved a checkpoint too"),
        (epochs_no_sampler, "read the whole dataset in every epoch"),
        (epochs_seed_per_rank, "ranks 0 and 1 both read samples"),
        (epochs_saves_once, "Rank 0 saved 1 time(s) in 3 epochs"),
        (unwritten, "Not written yet"),
    ],
)
def test_train_epochs_rejects(fn, fragment, capsys):
    feedback = check.train_epochs(fn)
    assert not feedback and fragment in feedback.message, feedback.message


# ---------------------------------------------------------------- (3) a DDP checkpoint on the CPU
def load_consume(path):
    state = torch.load(path, map_location="cpu")
    consume_prefix_in_state_dict_if_present(state, "module.")
    model = Tudui()
    model.load_state_dict(state)
    return model


def load_removeprefix(path):
    state = torch.load(path, map_location=torch.device("cpu"), weights_only=True)
    model = Tudui()
    model.load_state_dict({k.removeprefix("module."): v for k, v in state.items()})
    return model


def load_lambda_location(path):
    state = torch.load(path, map_location=lambda storage, location: storage)
    return _into_tudui({k[len("module.") :]: v for k, v in state.items()})


def _into_tudui(state):
    model = Tudui()
    model.load_state_dict(state, strict=True)
    return model.eval()


def load_through_a_wrapper(path):
    wrapper = nn.Module()
    wrapper.module = Tudui()  # the same keys as DDP's: module.<name>
    wrapper.load_state_dict(torch.load(path, map_location="cpu", mmap=True))
    return wrapper.module


def load_dict_map_location(path):
    state = torch.load(path, map_location={"cuda:0": "cpu"})
    model = Tudui().to("cpu")
    model.load_state_dict({k.replace("module.", "", 1): v for k, v in state.items()})
    return model


@pytest.mark.parametrize(
    "fn", [load_consume, load_removeprefix, load_lambda_location, load_through_a_wrapper, load_dict_map_location]
)
def test_load_ddp_checkpoint_accepts(fn, capsys):
    assert check.load_ddp_checkpoint(fn), capsys.readouterr().out


def load_no_map_location(path):
    state = torch.load(path)
    consume_prefix_in_state_dict_if_present(state, "module.")
    model = Tudui()
    model.load_state_dict(state)
    return model


def load_keeps_prefix(path):
    model = Tudui()
    model.load_state_dict(torch.load(path, map_location="cpu"))
    return model


def load_not_strict(path):
    model = Tudui()
    model.load_state_dict(torch.load(path, map_location="cpu"), strict=False)
    return model


def load_lstrip(path):
    state = torch.load(path, map_location="cpu")
    model = Tudui()
    model.load_state_dict({k.lstrip("module."): v for k, v in state.items()})  # strips characters, not a prefix
    return model


def load_returns_state(path):
    state = torch.load(path, map_location="cpu")
    consume_prefix_in_state_dict_if_present(state, "module.")
    return state


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (unwritten, "Not written yet"),
        (load_no_map_location, "tried to put the tensors back on cuda:0"),
        (load_keeps_prefix, "start with 'module.'"),
        (load_not_strict, "strict=False"),
        (load_returns_state, "You returned the state_dict"),
        (load_lstrip, "turned the saved key 'module.model.0.weight' into '0.weight'"),
    ],
)
def test_load_ddp_checkpoint_rejects(fn, fragment, capsys):
    feedback = check.load_ddp_checkpoint(fn)
    assert not feedback and fragment in feedback.message, feedback.message


def test_lstrip_is_named_as_the_cause():
    feedback = check.load_ddp_checkpoint(load_lstrip)
    assert "expects 'model.0.weight'" in feedback.message and "str.lstrip('module.')" in feedback.message
    assert "does not remove a prefix" in feedback.message
    assert "Error(s) in loading state_dict" not in feedback.message


# ---------------------------------------------------------------- hints that teach without the answer
SOLUTION_LINES = (  # lines of the worked solutions (notebooks/solutions/08_many_devices_solutions.ipynb)
    'int(env["LOCAL_RANK"])',
    'torch.device("cuda", local_rank)',
    "torch.cuda.set_device(device)",
    'return torch.device("cpu"), "gloo"',
    "sampler.set_epoch(epoch)",
    "if rank == 0:",
    "DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True)",
    'consume_prefix_in_state_dict_if_present(state, "module.")',
    'torch.load(path, map_location="cpu"',
    "model.load_state_dict(state)",
)
WRONG = [
    (check.rank_device, fn)
    for fn in (unwritten, device_from_rank, device_nccl_always, device_bare_cuda, device_no_set_device,
               device_accelerator_not_made_current, device_wraps_around, device_mps)
] + [
    (check.train_epochs, fn)
    for fn in (unwritten, starter_epochs, epochs_set_epoch_zero, epochs_set_epoch_at_the_end, epochs_saves_everywhere,
               epochs_no_sampler, epochs_seed_per_rank, epochs_saves_once)
] + [
    (check.load_ddp_checkpoint, fn)
    for fn in (unwritten, load_no_map_location, load_keeps_prefix, load_not_strict, load_returns_state, load_lstrip)
]  # fmt: skip


def _plain(text):
    return "".join(text.split()).replace('"', "'").lower()


@pytest.mark.parametrize("level", [1, 2])
@pytest.mark.parametrize("run, fn", WRONG, ids=[f"{c.__name__}-{f.__name__}" for c, f in WRONG])
def test_feedback_names_the_fault_not_the_solution(run, fn, level, capsys):
    feedback = run(fn, hint=level)
    shown = [line for line in SOLUTION_LINES if _plain(line) in _plain(feedback.message)]
    assert not feedback and not shown, feedback.message
    if fn is not unwritten:  # what is wrong, and which section to re-read
        assert 'Where to look: "' in feedback.message, feedback.message


def test_the_second_level_goes_further():
    for run, fn in [(check.rank_device, device_from_rank), (check.train_epochs, starter_epochs),
                    (check.load_ddp_checkpoint, load_keeps_prefix)]:  # fmt: skip
        first, second = run(fn), run(fn, hint=2)
        assert "Stuck? check." in first.message and "More: " in second.message, second.message
        assert len(second.message) > len(first.message)


def test_the_solution_lines_are_the_solutions_and_the_stored_feedback_prints_none():
    import json
    from pathlib import Path

    notebooks = Path(__file__).resolve().parents[1] / "notebooks"
    cells = json.loads((notebooks / "solutions" / "08_many_devices_solutions.ipynb").read_text())["cells"]
    solved = _plain("".join("".join(c["source"]) for c in cells if c["cell_type"] == "code"))
    assert all(_plain(line) in solved for line in SOLUTION_LINES), [
        line for line in SOLUTION_LINES if _plain(line) not in solved
    ]
    cells = json.loads((notebooks / "08_many_devices.ipynb").read_text())["cells"]
    stored = "".join(
        "".join(o.get("text", "")) for c in cells if "check." in "".join(c["source"]) for o in c.get("outputs", [])
    )
    assert stored.count("[TRY AGAIN]") == 3
    assert not [line for line in SOLUTION_LINES if _plain(line) in _plain(stored)]
