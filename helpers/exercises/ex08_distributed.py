"""Checks for notebook 08's exercises (many processes: DDP, torchrun).

- ``rank_device`` runs the learner's function on simulated machines (a CPU laptop, a Mac, one node of
  a 2 x 4-GPU cluster, a machine with fewer GPUs than processes) with torchrun's environment, and
  judges the device and backend it returns and the GPU it makes current (``torch.cuda.set_device``
  and ``torch.accelerator.set_device_index`` are recorded, not called), as a GPU machine would observe
  them: a bare ``"cuda"`` means the current GPU.
- ``train_epochs`` runs the learner's loop as rank 0 and rank 1 of a 2-process job, each in a real
  one-process gloo group (so a ``dist.barrier()`` works) with ``dist.get_rank()`` answering for that
  rank, and judges which samples each rank read in each epoch (a new order every epoch) and who saved.
- ``load_ddp_checkpoint`` writes the file a DDP job's rank 0 writes on a GPU (``module.`` keys, tensors
  tagged ``cuda:0``) and loads it with the learner's function on a simulated CPU-only machine; a key
  renamed wrongly is named with what it became.
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import tempfile
import time
from pathlib import Path
from unittest import mock

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import Dataset

from helpers.course.i18n import tr, tr_lazy
from helpers.exercises import NOT_WRITTEN, call_learner, exercise_check, failed, passed
from helpers.lab.simulate import simulated_machine
from helpers.lesson.checkpoints import tag_as_saved_on
from helpers.lesson.models import Tudui

# ------------------------------------------------------------------ (1) the device of one rank

SECTION_DDP = "2. DDP, started by torchrun"
SECTION_SAMPLER = "The data each process reads: DistributedSampler and set_epoch"
SECTION_CHECKPOINTS = "Logging and checkpoints: rank 0, a barrier, map_location"
SECTION_WRAPPER = "1. Why not nn.DataParallel"

DEVICE_HINT = tr_lazy(
    "One process per GPU: LOCAL_RANK (a string in env) says which GPU of this machine is this process's; "
    "make that GPU the current one and use NCCL. Without a CUDA GPU: the CPU and gloo."
)
DEVICE_MORE = tr_lazy(
    "The table of torchrun's variables in section 2 shows what RANK and LOCAL_RANK count. Read up on "
    "torch.cuda.set_device (or torch.accelerator.set_device_index) and on torch.cuda.device_count: a process "
    "whose LOCAL_RANK has no GPU of its own should stop with an error rather than share one."
)

# (what the machine is, simulated_machine arguments, torchrun's environment, expected device or None for an error)
MACHINES = [
    (tr_lazy("a CPU-only laptop, rank 1 of 2"), dict(cuda=0), dict(RANK=1, LOCAL_RANK=1, WORLD_SIZE=2), "cpu"),
    (tr_lazy("a Mac with MPS, rank 0 of 2"), dict(cuda=0, mps=True), dict(RANK=0, LOCAL_RANK=0, WORLD_SIZE=2),
     "cpu"),
    (tr_lazy("one 8-GPU machine, rank 0 of 8"), dict(cuda=8), dict(RANK=0, LOCAL_RANK=0, WORLD_SIZE=8), "cuda:0"),
    (tr_lazy("the second node of 2 x 4 GPUs, rank 6 of 8"), dict(cuda=4),
     dict(RANK=6, LOCAL_RANK=2, WORLD_SIZE=8, LOCAL_WORLD_SIZE=4, GROUP_RANK=1), "cuda:2"),
    (tr_lazy("a 2-GPU machine running 4 processes, rank 3"), dict(cuda=2),
     dict(RANK=3, LOCAL_RANK=3, WORLD_SIZE=4), None),
]  # fmt: skip


def _index(device) -> int | None:
    if isinstance(device, int):
        return device
    device = torch.device(device)
    return 0 if device.index is None and device.type == "cuda" else device.index


@contextlib.contextmanager
def _torchrun_env(machine: dict, env: dict):
    """A simulated machine, torchrun's variables in os.environ, and the current GPU recorded.

    The machines with GPUs are Linux ones, whose PyTorch has NCCL; the others' has none
    (``torch.distributed.is_nccl_available`` answers so, whatever this machine's PyTorch has).

    ``torch.cuda.set_device`` and ``torch.accelerator.set_device_index`` (two routes to the same current
    device) are recorded, not called; ``torch.cuda.current_device`` and
    ``torch.accelerator.current_device_index`` then answer with the recorded GPU, as on a real machine.
    """
    calls: list[int | None] = []

    def current() -> int:
        return calls[-1] if calls and calls[-1] is not None else 0

    def record(d) -> None:
        calls.append(_index(d))

    setters = [(torch.cuda, "set_device")]
    getters = [(torch.cuda, "current_device")]
    for name in ("set_device_index", "set_device_idx"):  # torch.accelerator, torch 2.6 and newer
        if hasattr(torch.accelerator, name):
            setters.append((torch.accelerator, name))
    for name in ("current_device_index", "current_device_idx"):
        if hasattr(torch.accelerator, name):
            getters.append((torch.accelerator, name))
    with simulated_machine(**machine), contextlib.ExitStack() as stack:
        os.environ.update({k: str(v) for k, v in env.items()})
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
        for module, name in setters:
            stack.enter_context(mock.patch.object(module, name, record))
        stack.enter_context(mock.patch.object(dist, "is_nccl_available", lambda: bool(machine.get("cuda"))))
        if machine.get("cuda"):  # with GPUs, the current one is the one set; without, torch's own answer stays
            for module, name in getters:
                stack.enter_context(mock.patch.object(module, name, current))
        yield calls


def _no_exit(fn):
    """``fn`` with a ``SystemExit`` (what a script raises to stop) turned into an error a check can report."""

    def run(*args):
        try:
            return fn(*args)
        except SystemExit as err:
            raise RuntimeError(f"SystemExit({err})") from None

    return run


@exercise_check
def rank_device(fn) -> object:
    """``fn(env)``: (device, backend) for the process torchrun started with environment ``env`` (a dict)."""
    for machine_words, machine, env, expected in MACHINES:
        what = tr(machine_words)
        strings = {k: str(v) for k, v in env.items()}
        with _torchrun_env(machine, env) as current:
            if expected is None:
                try:
                    answer = fn(dict(strings))
                except NotImplementedError as err:
                    if not str(err):
                        return failed(NOT_WRITTEN)
                    answer = None
                except (Exception, SystemExit):  # any error is right here: no GPU of its own for this process
                    continue
                return failed(
                    tr(
                        "On {what}, your function returned {answer!r} instead of stopping with an error: "
                        "processes 2 and 3 of this machine would share a GPU (or use one that does not exist).",
                        what=what,
                        answer=answer,
                    ),
                    tr(
                        "compare this process's LOCAL_RANK with the number of GPUs the machine has, and raise an "
                        "error (e.g. RuntimeError) that names both when there is no GPU left for it."
                    ),
                    more=tr(
                        "Wrapping around (a modulo) or clamping the index puts two processes on one GPU: NCCL "
                        "then fails or hangs, and each process has half the memory it expects."
                    ),
                    see=SECTION_DDP,
                )
            try:
                answer = _no_exit(fn)(dict(strings))
            except Exception as err:
                if isinstance(err, NotImplementedError) and not str(err):
                    return failed(NOT_WRITTEN)
                fields = dict(what=what, error_type=type(err).__name__, error=str(err).strip()[:200])
                if env["RANK"] != env["LOCAL_RANK"]:
                    message = tr(
                        "On {what}, your code raised {error_type}: {error}. This process has "
                        "LOCAL_RANK={local_rank}, and this machine has GPU {local_rank}: RANK counts processes over "
                        "all machines; GPUs are numbered per machine.",
                        local_rank=env["LOCAL_RANK"],
                        **fields,
                    )
                else:
                    message = tr("On {what}, your code raised {error_type}: {error}", **fields)
                return failed(message, tr(DEVICE_HINT), more=tr(DEVICE_MORE), see=SECTION_DDP)
        if not isinstance(answer, tuple | list) or len(answer) != 2:
            return failed(
                tr(
                    "On {what}, your function returned {answer!r}; the exercise asks for a pair (device, backend).",
                    what=what,
                    answer=answer,
                ),
                tr("Return two things: a torch.device (or its name) and the backend's name as a string."),
                see=SECTION_DDP,
            )
        device, backend = torch.device(answer[0]), str(answer[1]).lower()
        if expected == "cpu":
            if device.type == "mps":
                return failed(
                    tr(
                        "On {what}, you chose {device}: torch.distributed has no backend for MPS tensors.",
                        what=what,
                        device=device,
                    ),
                    tr("On a machine without CUDA GPUs, train on the CPU with gloo."),
                    see=SECTION_DDP,
                )
            if device != torch.device("cpu"):
                return failed(
                    tr("On {what}, you chose {device}, which is not there.", what=what, device=device),
                    tr(DEVICE_HINT),
                    more=tr(DEVICE_MORE),
                    see=SECTION_DDP,
                )
            if backend != "gloo":
                return failed(
                    tr(
                        "On {what}, you chose the backend {backend!r}: NCCL needs CUDA GPUs.",
                        what=what,
                        backend=backend,
                    ),
                    tr("The CPU's backend is 'gloo'."),
                    see=SECTION_DDP,
                )
            if current:
                return failed(
                    tr("On {what}, your function made a GPU current (set_device): there is no GPU.", what=what),
                    tr("Make a GPU current only on the branch that found CUDA GPUs."),
                    see=SECTION_DDP,
                )
            continue
        if device.type == "cuda" and device.index is None:
            if not current or current[-1] is None:
                return failed(
                    tr(
                        "On {what}, you chose {device!r} without an index and made no GPU current: every "
                        "process of the machine would use GPU 0.",
                        what=what,
                        device=str(device),
                    ),
                    tr(
                        "Give the device the index of this process's GPU (its LOCAL_RANK), or make that GPU current "
                        "first: a bare 'cuda' means the current GPU, which is GPU 0 until a process sets another."
                    ),
                    more=tr(DEVICE_MORE),
                    see=SECTION_DDP,
                )
            device = torch.device("cuda", current[-1])  # where a bare "cuda" puts tensors: the current GPU
        if str(device) != expected:
            uses_rank = device == torch.device("cuda", env["RANK"])
            fields = dict(what=what, local_rank=env["LOCAL_RANK"], device=device, expected=expected)
            if uses_rank:
                message = tr(
                    "On {what} (LOCAL_RANK={local_rank}), you chose {device}, expected {expected}. RANK counts "
                    "processes over all machines; GPUs are numbered per machine.",
                    **fields,
                )
            else:
                message = tr("On {what} (LOCAL_RANK={local_rank}), you chose {device}, expected {expected}.", **fields)
            return failed(
                message,
                tr("Use LOCAL_RANK for the GPU index, RANK only to decide who logs and saves."),
                more=tr(DEVICE_MORE),
                see=SECTION_DDP,
            )
        if backend != "nccl":
            return failed(
                tr("On {what}, you chose the backend {backend!r} for GPUs.", what=what, backend=backend),
                tr("NCCL is the backend for CUDA GPUs (gloo would copy through the CPU)."),
                see=SECTION_DDP,
            )
        made_current = current[-1] if current and current[-1] is not None else 0  # GPU 0 unless one is set
        if made_current != device.index:
            if current:
                message = tr(
                    "On {what}, your function did not make {device} the current GPU (it made GPU {gpu} current).",
                    what=what,
                    device=device,
                    gpu=current[-1],
                )
            else:
                message = tr(
                    "On {what}, your function did not make {device} the current GPU (GPU 0 stays current).",
                    what=what,
                    device=device,
                )
            return failed(
                message,
                tr(
                    "Make this process's GPU the current one (torch.cuda.set_device, or "
                    "torch.accelerator.set_device_index): NCCL and any bare 'cuda' then mean this process's GPU, "
                    "not GPU 0 for every process."
                ),
                more=tr(DEVICE_MORE),
                see=SECTION_DDP,
            )
    return passed(
        tr(
            "One process per GPU, picked by LOCAL_RANK and made current; gloo on the CPU; an error when there are "
            "more processes than GPUs (checked on {count} simulated machines).",
            count=len(MACHINES),
        )
    )


# ------------------------------------------------------------------ (2) an epoch loop for every rank


class _Recorded(Dataset):
    """32 samples of 4 features and 2 classes; remembers which indices were read, in order."""

    def __init__(self) -> None:
        gen = torch.Generator().manual_seed(0)
        self.x = torch.randn(32, 4, generator=gen)
        self.y = (self.x[:, 0] > 0).long()
        self.read: list[int] = []

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i):
        self.read.append(int(i))
        return self.x[i], self.y[i]


@contextlib.contextmanager
def _as_rank(rank: int, world_size: int):
    """Run as ``rank`` of ``world_size``: a real one-process gloo group, so that ``dist.barrier()`` and the
    other collectives a rank calls work, with ``dist.get_rank()`` and ``dist.get_world_size()`` (for the
    default group, as ``DistributedSampler`` without arguments asks them) answering for the rank simulated.
    A group that is already there (the learner's own) is used and left as it was."""
    created = not dist.is_initialized()
    if created:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        real_rank, real_size = dist.get_rank, dist.get_world_size
        with (
            mock.patch.object(dist, "get_rank", lambda group=None: rank if group is None else real_rank(group)),
            mock.patch.object(
                dist, "get_world_size", lambda group=None: world_size if group is None else real_size(group)
            ),
        ):
            yield
    finally:
        if created and dist.is_initialized():
            _let_gloo_finish()
            dist.destroy_process_group()


def _let_gloo_finish() -> None:
    """Give gloo's worker thread the moment it needs to release the last collective before the group goes.

    torch 2.7 can deadlock when a group is destroyed while its worker thread still holds a finished
    collective (a barrier, say) whose release needs the GIL that the destroying thread holds; sleeping
    releases the GIL.
    """
    time.sleep(0.2)


EPOCH_HINT = tr_lazy(
    "Each rank reads its own part of the data (a DistributedSampler told this rank and the world size, given "
    "to the DataLoader), in a new order every epoch, and one rank writes the checkpoint."
)
EPOCH_MORE = tr_lazy(
    "DistributedSampler shuffles with seed + epoch, and its epoch is whatever set_epoch() set last: read "
    "how the demo cell's orders differ with and without it. Only one process needs to write a file that "
    "every process holds the same parameters for."
)
ORDER_MORE = tr_lazy(
    "The demo in that section prints each rank's order per epoch with and without set_epoch(): the order "
    "an epoch reads is fixed when its loop over the loader starts. Which value must the sampler know "
    "before epoch e's loop, so that no two epochs share it?"
)


@exercise_check
def train_epochs(fn) -> object:
    """``fn(model, dataset, rank, world_size, epochs, save)``: this rank's epochs; rank 0 saves after each."""
    epochs, world_size = 3, 2
    runs = {}
    for rank in range(world_size):
        torch.manual_seed(0)
        model = nn.Linear(4, 2)
        before = copy.deepcopy(model)
        dataset = _Recorded()
        saved: list[tuple[dict, object]] = []

        def save(state_dict, epoch=None, saved=saved):
            saved.append(({k: v.detach().clone() for k, v in state_dict.items()}, epoch))

        with _as_rank(rank, world_size):
            _, problem = call_learner(fn, model, dataset, rank, world_size, epochs, save,
                                      when=tr("As rank {rank} of {world_size}", rank=rank, world_size=world_size),
                                      hint=tr(EPOCH_HINT), more=tr(EPOCH_MORE), see=SECTION_SAMPLER)  # fmt: skip
        if problem is not None:
            return problem
        runs[rank] = (model, before, dataset.read, saved)

    share = len(_Recorded()) // world_size
    for rank, (_, _, read, _) in runs.items():
        if len(read) == epochs * len(_Recorded()):
            return failed(
                tr(
                    "Rank {rank} read the whole dataset in every epoch: without a DistributedSampler every process "
                    "does the same work, and the job is no faster than one process.",
                    rank=rank,
                ),
                tr(EPOCH_HINT),
                more=tr(EPOCH_MORE),
                see=SECTION_SAMPLER,
            )
        if len(read) != epochs * share:
            return failed(
                tr(
                    "Rank {rank} read {read} samples in {epochs} epochs; its share is {share} per epoch "
                    "({samples} samples, {world_size} ranks).",
                    rank=rank,
                    read=len(read),
                    epochs=epochs,
                    share=share,
                    samples=len(_Recorded()),
                    world_size=world_size,
                ),
                tr(EPOCH_HINT),
                more=tr(EPOCH_MORE),
                see=SECTION_SAMPLER,
            )
    per_epoch = {r: [runs[r][2][e * share : (e + 1) * share] for e in range(epochs)] for r in runs}
    for e in range(epochs):
        a, b = set(per_epoch[0][e]), set(per_epoch[1][e])
        if a & b:
            return failed(
                tr(
                    "In epoch {epoch}, ranks 0 and 1 both read samples {samples}...: each rank must read "
                    "its own part of the data, or the job does the same work twice.",
                    epoch=e + 1,
                    samples=sorted(a & b)[:6],
                ),
                tr(EPOCH_HINT),
                more=tr(EPOCH_MORE),
                see=SECTION_SAMPLER,
            )
    for rank in runs:
        orders = [tuple(per_epoch[rank][e]) for e in range(epochs)]
        if len(set(orders)) == 1:
            return failed(
                tr(
                    "Rank {rank} read its samples in the same order in all {epochs} epochs ({order}...): "
                    "DistributedSampler shuffles with seed + epoch, where epoch is the value set_epoch() last gave "
                    "it (0 if never called): here it was the same in every epoch.",
                    rank=rank,
                    epochs=epochs,
                    order=list(orders[0][:6]),
                ),
                tr(
                    "Tell the sampler which epoch it is, at the start of every epoch and on every rank: a different "
                    "number each epoch."
                ),
                more=tr(ORDER_MORE),
                see=SECTION_SAMPLER,
            )
        repeats = [(a, b) for a in range(epochs) for b in range(a + 1, epochs) if orders[a] == orders[b]]
        if repeats:
            a, b = repeats[0]
            return failed(
                tr(
                    "Rank {rank} read epochs {a} and {b} (of {epochs}) in the same order "
                    "({order}...): each epoch should bring a new order. An epoch reads the order of the "
                    "last set_epoch() before its loop; a set_epoch() call after the loop, for instance, sets the "
                    "next epoch's order, and the first two epochs both shuffle with epoch 0.",
                    rank=rank,
                    a=a + 1,
                    b=b + 1,
                    epochs=epochs,
                    order=list(orders[a][:6]),
                ),
                tr("The sampler must know the current epoch before that epoch's loop over the loader starts."),
                more=tr(ORDER_MORE),
                see=SECTION_SAMPLER,
            )
    if runs[1][3]:
        return failed(
            tr(
                "Rank 1 saved a checkpoint too ({times} time(s)): with N processes, N copies of the same "
                "file are written, to the same path at the same moment (a torn file), or N files.",
                times=len(runs[1][3]),
            ),
            tr(
                "The parameters are identical on every rank, so one rank's copy is enough: let only one of them "
                "call save."
            ),
            more=tr(
                "The rank a process gets is an argument of train_epochs; rank 0 exists in every job, whatever its size."
            ),
            see=SECTION_CHECKPOINTS,
        )
    model, before, _, saved = runs[0]
    if len(saved) != epochs:
        return failed(
            tr("Rank 0 saved {times} time(s) in {epochs} epochs.", times=len(saved), epochs=epochs),
            tr("Save once after every epoch."),
            see=SECTION_CHECKPOINTS,
        )
    if all(torch.equal(p, q) for p, q in zip(model.parameters(), before.parameters(), strict=True)):
        return failed(
            tr("As rank 0, the model's parameters did not change during training."),
            tr(
                "Every batch needs the whole step: clear the old gradients, compute new ones from the loss, then "
                "let the optimizer update the parameters."
            ),
        )
    last, _ = saved[-1]
    if set(last) != set(model.state_dict()) or not all(torch.equal(last[k], v) for k, v in model.state_dict().items()):
        return failed(
            tr("As rank 0, the last checkpoint is not the trained model's state_dict."),
            tr("Save the model's state_dict after the epoch's training, as the exercise states."),
            see=SECTION_CHECKPOINTS,
        )
    return passed(
        tr(
            "Each rank read its own half of the data, in a new order every epoch, and only rank 0 saved "
            "(checked as rank 0 and rank 1 of 2)."
        )
    )


# ------------------------------------------------------------------ (3) a DDP checkpoint on a CPU-only machine

LOAD_HINT = tr_lazy(
    "Three steps: read the file onto the CPU, rename its keys to a plain Tudui's, load them into a new Tudui "
    "and return that model."
)
PREFIX_MORE = tr_lazy(
    "The wrapper keeps your model as .module, so each saved key is 'module.' + the plain key. Read up on "
    "torch.nn.modules.utils (a helper that strips such a prefix in place) or build a new dict whose keys "
    "lose exactly those 7 characters; keep load_state_dict strict, so that any key that still does not fit "
    "is named."
)


def _quoted_keys(text: str, label: str) -> list[str]:
    """The keys load_state_dict names after ``label`` ("Unexpected key(s)" or "Missing key(s)")."""
    found = re.search(re.escape(label) + r" in state_dict: ([^\n]*)", text)
    return re.findall(r'"([^"]+)"', found.group(1)) if found else []


def _renamed_key(text: str, saved_keys: list[str]) -> tuple[str, str, str] | None:
    """(saved key, what the learner's code made of it, what Tudui expects) from load_state_dict's error.

    Only for keys that lost more or less than the ``module.`` prefix; a key that still starts with
    ``module.`` has its own feedback.
    """
    for became in _quoted_keys(text, "Unexpected key(s)"):
        if became.startswith("module."):
            continue
        for saved in saved_keys:
            expected = saved.removeprefix("module.")
            if became != expected and (saved.endswith(became) or became.endswith(expected)):
                return saved, became, expected
    return None


@exercise_check
def load_ddp_checkpoint(fn) -> object:
    """``fn(path)``: a plain Tudui on the CPU with the weights that DDP's rank 0 saved on a GPU at ``path``."""
    torch.manual_seed(1)
    trained = Tudui()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "tudui_ddp.pt"
        saved_keys = [f"module.{k}" for k in trained.state_dict()]
        with tag_as_saved_on("cuda:0"):  # the file a GPU machine writes
            torch.save({f"module.{k}": v for k, v in trained.state_dict().items()}, path)
        with simulated_machine(cuda=0):  # a laptop without a GPU
            try:
                model, error = fn(str(path)), None
            except Exception as err:  # the learner's bug is the feedback
                model, error = None, err
    if error is not None:
        text = str(error)
        if isinstance(error, NotImplementedError) and not text:
            return failed(NOT_WRITTEN)
        if "deserialize object on a CUDA device" in text:
            return failed(
                tr(
                    "torch.load tried to put the tensors back on cuda:0, where they were saved; this machine has no "
                    "GPU."
                ),
                tr(
                    "torch.load takes a map_location: tell it where this machine wants the tensors (it has a CPU only)."
                ),
                more=tr("map_location accepts a device, a string, a dict from saved to wanted device, or a function."),
                see=SECTION_CHECKPOINTS,
            )
        if "module." in text and ("Unexpected key" in text or "Missing key" in text):
            return failed(
                tr("The keys in the file start with 'module.' (DDP's wrapper); a plain Tudui's keys do not."),
                tr("Remove the 'module.' prefix from every key before load_state_dict, and nothing more."),
                more=tr(PREFIX_MORE),
                see=SECTION_WRAPPER,
            )
        renamed = _renamed_key(text, saved_keys)
        if renamed is not None:
            saved, became, expected = renamed
            lstrip = saved.lstrip("module.") == became
            message = tr(
                "Your code turned the saved key {saved!r} into {became!r}; a plain Tudui expects {expected!r}.",
                saved=saved,
                became=became,
                expected=expected,
            )
            if lstrip:
                message += tr(
                    " str.lstrip('module.') removes every leading character that is in 'module.' (m, o, d, u, l, "
                    "e and the dot), so it also ate the 'model.' that follows: it does not remove a prefix."
                )
            return failed(
                message,
                tr(
                    "Remove exactly the 'module.' prefix and nothing more (str has a method for a prefix; slicing by "
                    "its length works too)."
                ),
                more=tr(PREFIX_MORE),
                see=SECTION_WRAPPER,
            )
        first = text.strip().splitlines()[0] if text.strip() else ""
        return failed(
            tr(
                "On a machine without a GPU, your code raised {error_type}: {error}",
                error_type=type(error).__name__,
                error=first,
            ),
            tr(LOAD_HINT),
            see=SECTION_CHECKPOINTS,
        )
    if isinstance(model, dict):
        return failed(
            tr("You returned the state_dict (a dict of tensors); the exercise asks for the model with those weights."),
            tr("Build a plain Tudui, load the renamed state into it, and return the model."),
            see=SECTION_WRAPPER,
        )
    if not isinstance(model, nn.Module) or isinstance(model, nn.parallel.DistributedDataParallel | nn.DataParallel):
        return failed(
            tr("Return a plain nn.Module (a Tudui), not {kind}.", kind=type(model).__name__),
            tr(LOAD_HINT),
            see=SECTION_WRAPPER,
        )
    state = model.state_dict()
    if set(state) != set(trained.state_dict()):
        return failed(
            tr("Your model's keys are {keys}..., not a plain Tudui's.", keys=sorted(state)[:2]),
            tr(LOAD_HINT),
            more=tr(PREFIX_MORE),
            see=SECTION_WRAPPER,
        )
    devices = {str(v.device) for v in state.values()}
    if devices != {"cpu"}:
        return failed(
            tr("Your model's tensors are on {devices}, not the CPU.", devices=", ".join(sorted(devices))),
            tr(LOAD_HINT),
            see=SECTION_CHECKPOINTS,
        )
    if not all(torch.equal(state[k], v) for k, v in trained.state_dict().items()):
        return failed(
            tr(
                "Your model does not hold the saved weights (loading with strict=False skips every key that does "
                "not match, silently)."
            ),
            tr(
                "Strip the 'module.' prefix and load with the default strict=True, which names any key that does "
                "not fit."
            ),
            more=tr(PREFIX_MORE),
            see=SECTION_WRAPPER,
        )
    return passed(tr("A plain Tudui on the CPU, with the weights DDP saved on a GPU (checked on a simulated laptop)."))


# The exercises as the could-not-be-checked hint states them (each check's docstring: helpers.exercises.statement).
STATEMENTS = (
    tr_lazy("`fn(env)`: (device, backend) for the process torchrun started with environment `env` (a dict)."),
    tr_lazy("`fn(model, dataset, rank, world_size, epochs, save)`: this rank's epochs; rank 0 saves after each."),
    tr_lazy("`fn(path)`: a plain Tudui on the CPU with the weights that DDP's rank 0 saved on a GPU at `path`."),
)
