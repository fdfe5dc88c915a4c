"""What a training step keeps in memory: estimated before running, measured while running, on any device.

A training step holds the **parameters**, their **gradients**, the **optimizer state** (none for plain
SGD, one copy of the parameters for SGD with momentum, two for Adam), the **activations** that autograd
saves for the backward pass, and the **batch** itself.

- :func:`estimate_training_memory` counts them without allocating anything: parameter sizes from their
  shapes and dtypes, activations from a forward pass on the ``meta`` device (shapes only, no data)
  under :func:`torch.autograd.graph.saved_tensors_hooks`.
- :func:`measure_training_memory` runs one real training step and sums the storages that exist:
  parameters, ``.grad``, ``optimizer.state``, and what autograd saved (seen by the same hooks).
- :func:`is_out_of_memory` tells an out-of-memory error from any other, on every device: CUDA raises
  ``torch.OutOfMemoryError``; the CPU allocator and MPS raise a plain ``RuntimeError`` worded their own way.
- :func:`largest_batch_that_fits` halves the batch size after each out-of-memory error.
- :func:`read_oom_message` splits a CUDA out-of-memory message into its numbers.

Sizes are counted per storage: two tensors that share memory (a view, the output of ``ReLU`` that the
next layer also saves) count once.
"""

from __future__ import annotations

import gc
import re
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields

import torch
from torch import nn
from torch.func import functional_call

from helpers.course.i18n import columns, tr, tr_lazy

OPTIMIZER_COPIES = {"sgd": 0, "sgd_momentum": 1, "adam": 2, "adamw": 2}
"""How many tensors the size of the parameters an optimizer keeps (per trainable parameter)."""

MiB = 2**20
GiB = 2**30


def storage_key(t: torch.Tensor) -> int:
    """One number per storage (views of one tensor share it), on every device, ``meta`` included."""
    return t.untyped_storage()._cdata


def storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind ``tensors`` (each shared storage counted once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        seen[storage_key(t)] = t.untyped_storage().nbytes()
    return sum(seen.values())


def format_bytes(n: float) -> str:
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} bytes"  # as CUDA and MPS word sizes under 1 KiB


ROW_LABELS = {
    "parameters": tr_lazy("parameters"),
    "gradients": tr_lazy("gradients"),
    "optimizer_state": tr_lazy("optimizer state"),
    "activations": tr_lazy("activations"),
    "batch": tr_lazy("batch"),
    "total": tr_lazy("total"),
}
COLUMN_NAMES = (tr_lazy("estimate"), tr_lazy("measured"), tr_lazy("real step"))  # the tables' column headings


def _right(text: str, width: int) -> str:
    return " " * max(0, width - columns(text)) + text


@dataclass(frozen=True)
class TrainingMemory:
    """Bytes a training step keeps, by kind."""

    parameters: int
    gradients: int
    optimizer_state: int
    activations: int
    batch: int

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer_state + self.activations + self.batch

    def table(self, other: TrainingMemory | None = None, names: tuple[str, str] = ("estimate", "measured")) -> str:
        """An aligned table in MiB; with ``other``, two columns side by side. Labels in the course's language."""
        names = tuple(tr(n) if n else n for n in names)
        head = " " * 16 + _right(names[0], 12) + (_right(names[1], 12) if other else "")
        rows = [head]
        for f in [*(f.name for f in fields(self)), "total"]:
            label = tr(ROW_LABELS[f])
            row = f"{label}{' ' * max(1, 16 - columns(label))}{getattr(self, f) / MiB:>8.2f} MiB"
            if other is not None:
                row += f"{getattr(other, f) / MiB:>8.2f} MiB"
            rows.append(row)
        return "\n".join(rows)


class SavedTensors:
    """Within the block, record every tensor autograd saves for the backward pass.

    ``bytes``: the distinct storages saved, leaving out ``exclude`` (e.g. the parameters, which a
    layer saves too but which are counted as parameters). ``alive_bytes()``: how many of those bytes
    are still held by something (a graph, a list, a variable) now.
    """

    def __init__(self, exclude: Iterable[torch.Tensor] = ()) -> None:
        self._exclude = {storage_key(t) for t in exclude}
        self._sizes: dict[int, int] = {}
        self._alive: dict[int, list] = {}
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        # A detached alias (same storage, no grad_fn): packing `t` itself would tie an operation's saved output
        # to its own graph node in a reference cycle that Python cannot collect, and keep it alive for ever.
        packed = t.detach()
        key = storage_key(t)
        if key not in self._exclude:
            self._sizes[key] = t.untyped_storage().nbytes()
            self._alive.setdefault(key, []).append(weakref.ref(packed))
        return packed

    @property
    def bytes(self) -> int:
        return sum(self._sizes.values())

    def alive_bytes(self) -> int:
        return sum(size for key, size in self._sizes.items() if any(r() is not None for r in self._alive[key]))

    def __enter__(self) -> SavedTensors:
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)


def _default_loss(output: torch.Tensor, targets: torch.Tensor | None) -> torch.Tensor:
    if targets is None:
        return output.float().sum()
    return nn.functional.cross_entropy(output, targets)


def _copies(optimizer: str) -> int:
    try:
        return OPTIMIZER_COPIES[optimizer]
    except KeyError:
        raise ValueError(f"optimizer={optimizer!r}: use one of {', '.join(OPTIMIZER_COPIES)}") from None


def estimate_training_memory(
    model: nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor | None = None,
    loss_fn: Callable | None = None,
    optimizer: str = "adam",
) -> TrainingMemory:
    """What one training step of ``model`` on ``inputs`` keeps, without allocating it.

    The model may live anywhere (``meta`` too); it is not changed. Activations come from a forward
    pass on ``meta``; ``loss_fn(output, targets)`` defaults to cross-entropy (or ``output.sum()``
    without targets). ``optimizer``: ``sgd``, ``sgd_momentum``, ``adam`` or ``adamw``.
    """
    copies = _copies(optimizer)
    named = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    on_meta = {
        name: torch.empty_like(t, device="meta").requires_grad_(t.requires_grad and t.is_floating_point())
        for name, t in named.items()
    }
    batch = [t for t in (inputs, targets) if t is not None]
    meta_inputs = torch.empty_like(inputs, device="meta")
    meta_targets = None if targets is None else torch.empty_like(targets, device="meta")
    meta_batch = [t for t in (meta_inputs, meta_targets) if t is not None]
    with SavedTensors(exclude=[*on_meta.values(), *meta_batch]) as saved:
        output = functional_call(model, on_meta, (meta_inputs,))
        (loss_fn or _default_loss)(output, meta_targets)
    trainable = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return TrainingMemory(
        parameters=sum(t.numel() * t.element_size() for t in named.values()),
        gradients=trainable,
        optimizer_state=copies * trainable,
        activations=saved.bytes,
        batch=sum(t.numel() * t.element_size() for t in batch),
    )


def make_optimizer(model: nn.Module, optimizer: str, lr: float = 1e-3) -> torch.optim.Optimizer:
    """The optimizer ``optimizer`` names (see :data:`OPTIMIZER_COPIES`)."""
    _copies(optimizer)
    params = model.parameters()
    if optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if optimizer == "sgd_momentum":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    return (torch.optim.Adam if optimizer == "adam" else torch.optim.AdamW)(params, lr=lr)


def measure_training_memory(
    model: nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor | None = None,
    loss_fn: Callable | None = None,
    optimizer: torch.optim.Optimizer | str = "adam",
) -> TrainingMemory:
    """Run one real training step and sum what exists: parameters and buffers, ``.grad``, the optimizer's
    state, what autograd saved during the forward pass (hooks), and the batch. Trains ``model`` one step."""
    if isinstance(optimizer, str):
        optimizer = make_optimizer(model, optimizer)
    batch = [t for t in (inputs, targets) if t is not None]
    tensors = [*model.parameters(), *model.buffers()]
    loss_fn = loss_fn or _default_loss
    optimizer.zero_grad(set_to_none=True)
    with SavedTensors(exclude=[*tensors, *batch]) as saved:
        loss = loss_fn(model(inputs), targets)
    loss.backward()
    optimizer.step()
    state = [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    state = [v for v in state if v.dim() > 0]  # Adam's `step` counter is a 4-byte scalar: not a copy
    return TrainingMemory(
        parameters=storage_bytes(tensors),
        gradients=storage_bytes(p.grad for p in model.parameters() if p.grad is not None),
        optimizer_state=storage_bytes(state),
        activations=saved.bytes,
        batch=storage_bytes(batch),
    )


def free_cached_memory() -> None:
    """After an out-of-memory error: drop unreachable objects, and on a GPU (CUDA or MPS) hand cached blocks back."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    elif torch.backends.mps.is_built() and torch.backends.mps.is_available():
        torch.mps.empty_cache()


OOM_WORDINGS = (
    "DefaultCPUAllocator: can't allocate memory",  # the CPU on Linux and macOS (posix_memalign failed)
    "DefaultCPUAllocator: not enough memory",  # the CPU on Windows
    "MPS backend out of memory",  # an Apple GPU
)
"""How the out-of-memory errors that are a plain ``RuntimeError`` begin (torch's c10 and MPS allocators)."""


def is_out_of_memory(err: BaseException) -> bool:
    """True for an out-of-memory error on any device, False for every other error (a shape error included).

    CUDA (and XPU) raise ``torch.OutOfMemoryError``; the CPU allocator and MPS a plain ``RuntimeError``
    whose message says so (:data:`OOM_WORDINGS`)."""
    if isinstance(err, torch.OutOfMemoryError):
        return True
    return isinstance(err, RuntimeError) and any(wording in str(err) for wording in OOM_WORDINGS)


def largest_batch_that_fits(try_batch: Callable[[int], object], start: int, minimum: int = 1) -> int:
    """The largest of ``start``, ``start // 2``, ... (down to ``minimum``) for which ``try_batch(size)``
    does not run out of memory (:func:`is_out_of_memory`, on any device). Other errors are not caught. If
    even ``minimum`` does not fit, the last out-of-memory error is raised again.
    """
    size = start
    while True:
        try:
            try_batch(size)
            return size
        except RuntimeError as err:  # torch.OutOfMemoryError is a RuntimeError too
            if not is_out_of_memory(err) or size <= minimum:
                raise
        # outside the `except` block: the error's traceback (and the tensors its frames hold) is gone
        free_cached_memory()
        size = max(minimum, size // 2)


class FieldName(str):
    """A key that compares and hashes as its English (``"free on the GPU" in fields``) and shows in the course's
    language where it is formatted (``f"{name:<26}"``, padded by display width)."""

    __slots__ = ()

    def __format__(self, spec: str) -> str:
        text = tr(str(self))
        aligned = re.fullmatch(r"([<>^]?)(\d+)", spec)
        if not aligned:
            return format(text, spec)
        fill = max(0, int(aligned.group(2)) - columns(text))
        side = aligned.group(1) or "<"
        if side == ">":
            return " " * fill + text
        if side == "^":
            return " " * (fill // 2) + text + " " * (fill - fill // 2)
        return text + " " * fill


_SIZE = r"([\d.]+ (?:[KMG]i)?B|0 bytes)"
OOM_FIELDS = {
    FieldName(tr_lazy("tried to allocate")): rf"Tried to allocate {_SIZE}",
    FieldName(tr_lazy("total capacity")): rf"total capacity of {_SIZE}",
    FieldName(tr_lazy("free on the GPU")): rf"of which {_SIZE} is free",
    FieldName(tr_lazy("this process uses")): rf"this process has {_SIZE} memory in use",
    FieldName(tr_lazy("allocated by PyTorch")): rf"{_SIZE} is allocated by PyTorch",
    FieldName(tr_lazy("reserved but unallocated")): rf"{_SIZE} is reserved by PyTorch but unallocated",
}
"""The numbers a CUDA out-of-memory message gives, and how each is worded (PyTorch 2.x)."""

EXAMPLE_OOM = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 14.75 GiB of which "
    "1.06 GiB is free. Including non-PyTorch memory, this process has 13.69 GiB memory in use. Of the "
    "allocated memory 12.51 GiB is allocated by PyTorch, and 1.05 GiB is reserved by PyTorch but unallocated. "
    "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
    "to avoid fragmentation.  See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
"""A message as PyTorch 2.x words it on a "16 GB" GPU, which reports 14.75 GiB (Colab's T4; the other numbers
are an example, not measured here)."""


def read_oom_message(message: str) -> dict[str, str]:
    """``{field: "2.00 GiB", ...}`` for each number of :data:`OOM_FIELDS` that ``message`` states."""
    found = {}
    for name, pattern in OOM_FIELDS.items():
        match = re.search(pattern, message)
        if match:
            found[name] = match.group(1)
    return found


def parse_size(text: str) -> int:
    """``"2.00 GiB"`` -> bytes."""
    if text == "0 bytes":
        return 0
    number, unit = text.split()
    return int(float(number) * {"B": 1, "KiB": 2**10, "MiB": MiB, "GiB": GiB}[unit])
