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

from helpers.checkpoints import tag_as_saved_on
from helpers.exercises import NOT_WRITTEN, call_learner, exercise_check, failed, passed
from helpers.models import Tudui
from helpers.simulate import simulated_machine

# ------------------------------------------------------------------ (1) the device of one rank

SECTION_DDP = "2. DDP, started by torchrun"
SECTION_SAMPLER = "The data each process reads: DistributedSampler and set_epoch"
SECTION_CHECKPOINTS = "Logging and checkpoints: rank 0, a barrier, map_location"
SECTION_WRAPPER = "1. Why not nn.DataParallel"

DEVICE_HINT = (
    "One process per GPU: LOCAL_RANK (a string in env) says which GPU of this machine is this process's; "
    "make that GPU the current one and use NCCL. Without a CUDA GPU: the CPU and gloo."
)
DEVICE_MORE = (
    "The table of torchrun's variables in section 2 shows what RANK and LOCAL_RANK count. Read up on "
    "torch.cuda.set_device (or torch.accelerator.set_device_index) and on torch.cuda.device_count: a process "
    "whose LOCAL_RANK has no GPU of its own should stop with an error rather than share one."
)

# (what the machine is, simulated_machine arguments, torchrun's environment, expected device or None for an error)
MACHINES = [
    ("a CPU-only laptop, rank 1 of 2", dict(cuda=0), dict(RANK=1, LOCAL_RANK=1, WORLD_SIZE=2), "cpu"),
    ("a Mac with MPS, rank 0 of 2", dict(cuda=0, mps=True), dict(RANK=0, LOCAL_RANK=0, WORLD_SIZE=2), "cpu"),
    ("one 8-GPU machine, rank 0 of 8", dict(cuda=8), dict(RANK=0, LOCAL_RANK=0, WORLD_SIZE=8), "cuda:0"),
    ("the second node of 2 x 4 GPUs, rank 6 of 8", dict(cuda=4),
     dict(RANK=6, LOCAL_RANK=2, WORLD_SIZE=8, LOCAL_WORLD_SIZE=4, GROUP_RANK=1), "cuda:2"),
    ("a 2-GPU machine running 4 processes, rank 3", dict(cuda=2), dict(RANK=3, LOCAL_RANK=3, WORLD_SIZE=4), None),
]  # fmt: skip


def _index(device) -> int | None:
    if isinstance(device, int):
        return device
    device = torch.device(device)
    return 0 if device.index is None and device.type == "cuda" else device.index


@contextlib.contextmanager
def _torchrun_env(machine: dict, env: dict):
    """A simulated machine, torchrun's variables in os.environ, and the current GPU recorded.

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
    for what, machine, env, expected in MACHINES:
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
                    f"On {what}, your function returned {answer!r} instead of stopping with an error: "
                    "processes 2 and 3 of this machine would share a GPU (or use one that does not exist).",
                    "compare this process's LOCAL_RANK with the number of GPUs the machine has, and raise an error "
                    "(e.g. RuntimeError) that names both when there is no GPU left for it.",
                    more="Wrapping around (a modulo) or clamping the index puts two processes on one GPU: NCCL "
                    "then fails or hangs, and each process has half the memory it expects.",
                    see=SECTION_DDP,
                )
            try:
                answer = _no_exit(fn)(dict(strings))
            except Exception as err:
                if isinstance(err, NotImplementedError) and not str(err):
                    return failed(NOT_WRITTEN)
                rank_instead = env["RANK"] != env["LOCAL_RANK"]
                return failed(
                    f"On {what}, your code raised {type(err).__name__}: {str(err).strip()[:200]}"
                    + (
                        f". This process has LOCAL_RANK={env['LOCAL_RANK']}, and this machine has GPU "
                        f"{env['LOCAL_RANK']}: RANK counts processes over all machines; GPUs are numbered per machine."
                        if rank_instead
                        else ""
                    ),
                    DEVICE_HINT,
                    more=DEVICE_MORE,
                    see=SECTION_DDP,
                )
        if not isinstance(answer, tuple | list) or len(answer) != 2:
            return failed(
                f"On {what}, your function returned {answer!r}; the exercise asks for a pair (device, backend).",
                "Return two things: a torch.device (or its name) and the backend's name as a string.",
                see=SECTION_DDP,
            )
        device, backend = torch.device(answer[0]), str(answer[1]).lower()
        if expected == "cpu":
            if device.type == "mps":
                return failed(
                    f"On {what}, you chose {device}: torch.distributed has no backend for MPS tensors.",
                    "On a machine without CUDA GPUs, train on the CPU with gloo.",
                    see=SECTION_DDP,
                )
            if device != torch.device("cpu"):
                return failed(f"On {what}, you chose {device}, which is not there.", DEVICE_HINT, more=DEVICE_MORE,
                              see=SECTION_DDP)  # fmt: skip
            if backend != "gloo":
                return failed(f"On {what}, you chose the backend {backend!r}: NCCL needs CUDA GPUs.",
                              "The CPU's backend is 'gloo'.", see=SECTION_DDP)  # fmt: skip
            if current:
                return failed(
                    f"On {what}, your function made a GPU current (set_device): there is no GPU.",
                    "Make a GPU current only on the branch that found CUDA GPUs.",
                    see=SECTION_DDP,
                )
            continue
        if device.type == "cuda" and device.index is None:
            if not current or current[-1] is None:
                return failed(
                    f"On {what}, you chose {str(device)!r} without an index and made no GPU current: every "
                    "process of the machine would use GPU 0.",
                    "Give the device the index of this process's GPU (its LOCAL_RANK), or make that GPU current "
                    "first: a bare 'cuda' means the current GPU, which is GPU 0 until a process sets another.",
                    more=DEVICE_MORE,
                    see=SECTION_DDP,
                )
            device = torch.device("cuda", current[-1])  # where a bare "cuda" puts tensors: the current GPU
        if str(device) != expected:
            uses_rank = device == torch.device("cuda", env["RANK"])
            return failed(
                f"On {what} (LOCAL_RANK={env['LOCAL_RANK']}), you chose {device}, expected {expected}."
                + (" RANK counts processes over all machines; GPUs are numbered per machine." if uses_rank else ""),
                "Use LOCAL_RANK for the GPU index, RANK only to decide who logs and saves.",
                more=DEVICE_MORE,
                see=SECTION_DDP,
            )
        if backend != "nccl":
            return failed(
                f"On {what}, you chose the backend {backend!r} for GPUs.",
                "NCCL is the backend for CUDA GPUs (gloo would copy through the CPU).",
                see=SECTION_DDP,
            )
        made_current = current[-1] if current and current[-1] is not None else 0  # GPU 0 unless one is set
        if made_current != device.index:
            return failed(
                f"On {what}, your function did not make {device} the current GPU ("
                + (f"it made GPU {current[-1]} current" if current else "GPU 0 stays current")
                + ").",
                "Make this process's GPU the current one (torch.cuda.set_device, or "
                "torch.accelerator.set_device_index): NCCL and any bare 'cuda' then mean this process's GPU, not "
                "GPU 0 for every process.",
                more=DEVICE_MORE,
                see=SECTION_DDP,
            )
    return passed(
        "One process per GPU, picked by LOCAL_RANK and made current; gloo on the CPU; an error when there are "
        "more processes than GPUs (checked on 5 simulated machines)."
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


EPOCH_HINT = (
    "Each rank reads its own part of the data (a DistributedSampler told this rank and the world size, given "
    "to the DataLoader), in a new order every epoch, and one rank writes the checkpoint."
)
EPOCH_MORE = (
    "DistributedSampler shuffles with seed + epoch, and its epoch is whatever set_epoch() set last: read "
    "how the demo cell's orders differ with and without it. Only one process needs to write a file that "
    "every process holds the same parameters for."
)
ORDER_MORE = (
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
                                      when=f"As rank {rank} of {world_size}", hint=EPOCH_HINT, more=EPOCH_MORE,
                                      see=SECTION_SAMPLER)  # fmt: skip
        if problem is not None:
            return problem
        runs[rank] = (model, before, dataset.read, saved)

    share = len(_Recorded()) // world_size
    for rank, (_, _, read, _) in runs.items():
        if len(read) == epochs * len(_Recorded()):
            return failed(
                f"Rank {rank} read the whole dataset in every epoch: without a DistributedSampler every process "
                "does the same work, and the job is no faster than one process.",
                EPOCH_HINT,
                more=EPOCH_MORE,
                see=SECTION_SAMPLER,
            )
        if len(read) != epochs * share:
            return failed(
                f"Rank {rank} read {len(read)} samples in {epochs} epochs; its share is {share} per epoch "
                f"({len(_Recorded())} samples, {world_size} ranks).",
                EPOCH_HINT,
                more=EPOCH_MORE,
                see=SECTION_SAMPLER,
            )
    per_epoch = {r: [runs[r][2][e * share : (e + 1) * share] for e in range(epochs)] for r in runs}
    for e in range(epochs):
        a, b = set(per_epoch[0][e]), set(per_epoch[1][e])
        if a & b:
            return failed(
                f"In epoch {e + 1}, ranks 0 and 1 both read samples {sorted(a & b)[:6]}...: each rank must read "
                "its own part of the data, or the job does the same work twice.",
                EPOCH_HINT,
                more=EPOCH_MORE,
                see=SECTION_SAMPLER,
            )
    for rank in runs:
        orders = [tuple(per_epoch[rank][e]) for e in range(epochs)]
        if len(set(orders)) == 1:
            return failed(
                f"Rank {rank} read its samples in the same order in all {epochs} epochs ({list(orders[0][:6])}...): "
                "DistributedSampler shuffles with seed + epoch, where epoch is the value set_epoch() last gave it "
                "(0 if never called): here it was the same in every epoch.",
                "Tell the sampler which epoch it is, at the start of every epoch and on every rank: a different "
                "number each epoch.",
                more=ORDER_MORE,
                see=SECTION_SAMPLER,
            )
        repeats = [(a, b) for a in range(epochs) for b in range(a + 1, epochs) if orders[a] == orders[b]]
        if repeats:
            a, b = repeats[0]
            return failed(
                f"Rank {rank} read epochs {a + 1} and {b + 1} (of {epochs}) in the same order "
                f"({list(orders[a][:6])}...): each epoch should bring a new order. An epoch reads the order of the "
                "last set_epoch() before its loop; a set_epoch() call after the loop, for instance, sets the next "
                "epoch's order, and the first two epochs both shuffle with epoch 0.",
                "The sampler must know the current epoch before that epoch's loop over the loader starts.",
                more=ORDER_MORE,
                see=SECTION_SAMPLER,
            )
    if runs[1][3]:
        return failed(
            f"Rank 1 saved a checkpoint too ({len(runs[1][3])} time(s)): with N processes, N copies of the same "
            "file are written, to the same path at the same moment (a torn file), or N files.",
            "The parameters are identical on every rank, so one rank's copy is enough: let only one of them call save.",
            more="The rank a process gets is an argument of train_epochs; rank 0 exists in every job, whatever "
            "its size.",
            see=SECTION_CHECKPOINTS,
        )
    model, before, _, saved = runs[0]
    if len(saved) != epochs:
        return failed(f"Rank 0 saved {len(saved)} time(s) in {epochs} epochs.", "Save once after every epoch.",
                      see=SECTION_CHECKPOINTS)  # fmt: skip
    if all(torch.equal(p, q) for p, q in zip(model.parameters(), before.parameters(), strict=True)):
        return failed(
            "As rank 0, the model's parameters did not change during training.",
            "Every batch needs the whole step: clear the old gradients, compute new ones from the loss, then let "
            "the optimizer update the parameters.",
        )
    last, _ = saved[-1]
    if set(last) != set(model.state_dict()) or not all(torch.equal(last[k], v) for k, v in model.state_dict().items()):
        return failed("As rank 0, the last checkpoint is not the trained model's state_dict.",
                      "Save the model's state_dict after the epoch's training, as the exercise states.",
                      see=SECTION_CHECKPOINTS)  # fmt: skip
    return passed(
        "Each rank read its own half of the data, in a new order every epoch, and only rank 0 saved "
        "(checked as rank 0 and rank 1 of 2)."
    )


# ------------------------------------------------------------------ (3) a DDP checkpoint on a CPU-only machine

LOAD_HINT = (
    "Three steps: read the file onto the CPU, rename its keys to a plain Tudui's, load them into a new Tudui "
    "and return that model."
)
PREFIX_MORE = (
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
                "torch.load tried to put the tensors back on cuda:0, where they were saved; this machine has no GPU.",
                "torch.load takes a map_location: tell it where this machine wants the tensors (it has a CPU only).",
                more="map_location accepts a device, a string, a dict from saved to wanted device, or a function.",
                see=SECTION_CHECKPOINTS,
            )
        if "module." in text and ("Unexpected key" in text or "Missing key" in text):
            return failed(
                "The keys in the file start with 'module.' (DDP's wrapper); a plain Tudui's keys do not.",
                "Remove the 'module.' prefix from every key before load_state_dict, and nothing more.",
                more=PREFIX_MORE,
                see=SECTION_WRAPPER,
            )
        renamed = _renamed_key(text, saved_keys)
        if renamed is not None:
            saved, became, expected = renamed
            lstrip = saved.lstrip("module.") == became
            return failed(
                f"Your code turned the saved key {saved!r} into {became!r}; a plain Tudui expects {expected!r}."
                + (
                    " str.lstrip('module.') removes every leading character that is in 'module.' (m, o, d, u, l, "
                    "e and the dot), so it also ate the 'model.' that follows: it does not remove a prefix."
                    if lstrip
                    else ""
                ),
                "Remove exactly the 'module.' prefix and nothing more (str has a method for a prefix; slicing by "
                "its length works too).",
                more=PREFIX_MORE,
                see=SECTION_WRAPPER,
            )
        first = text.strip().splitlines()[0] if text.strip() else ""
        return failed(f"On a machine without a GPU, your code raised {type(error).__name__}: {first}", LOAD_HINT,
                      see=SECTION_CHECKPOINTS)  # fmt: skip
    if isinstance(model, dict):
        return failed(
            "You returned the state_dict (a dict of tensors); the exercise asks for the model with those weights.",
            "Build a plain Tudui, load the renamed state into it, and return the model.",
            see=SECTION_WRAPPER,
        )
    if not isinstance(model, nn.Module) or isinstance(model, nn.parallel.DistributedDataParallel | nn.DataParallel):
        return failed(
            f"Return a plain nn.Module (a Tudui), not {type(model).__name__}.", LOAD_HINT, see=SECTION_WRAPPER
        )
    state = model.state_dict()
    if set(state) != set(trained.state_dict()):
        return failed(f"Your model's keys are {sorted(state)[:2]}..., not a plain Tudui's.", LOAD_HINT,
                      more=PREFIX_MORE, see=SECTION_WRAPPER)  # fmt: skip
    devices = {str(v.device) for v in state.values()}
    if devices != {"cpu"}:
        return failed(f"Your model's tensors are on {', '.join(sorted(devices))}, not the CPU.", LOAD_HINT,
                      see=SECTION_CHECKPOINTS)  # fmt: skip
    if not all(torch.equal(state[k], v) for k, v in trained.state_dict().items()):
        return failed(
            "Your model does not hold the saved weights (loading with strict=False skips every key that does "
            "not match, silently).",
            "Strip the 'module.' prefix and load with the default strict=True, which names any key that does not fit.",
            more=PREFIX_MORE,
            see=SECTION_WRAPPER,
        )
    return passed("A plain Tudui on the CPU, with the weights DDP saved on a GPU (checked on a simulated laptop).")
