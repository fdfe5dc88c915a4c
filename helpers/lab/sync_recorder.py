"""Count the host synchronisations a piece of code would make on a GPU, on any device (the CPU included).

On a GPU, some calls make the CPU wait until the GPU has finished everything queued so far: the
CPU needs a value that only the GPU has. A loop that does one per step cannot run ahead of the GPU.
On the CPU the same calls cost nothing, so a CPU cannot show the stall; this recorder shows the calls.

``record_syncs()`` sees three kinds of call while it is active:

- operators whose result the host must read (seen by a ``TorchDispatchMode``): ``aten._local_scalar_dense``
  (``.item()``, ``float(t)``, ``int(t)``, ``bool(t)``, ``if t:``, ``f"{t:.2f}"``), ``nonzero`` (also
  ``torch.where(cond)`` with one argument), boolean-mask indexing, ``masked_select``, ``unique``,
  ``repeat_interleave`` without ``output_size``;
- tensor methods that hand data to the host: ``.cpu()``, ``.numpy()``, ``.tolist()``, ``repr``/``print``
  of a tensor (wherever it is), and ``.to("cpu")`` of a tensor that is not on the CPU;
- blocking copies from the host to a device (the CPU waits until the copy, and everything queued before it,
  is done): ``.to(device)``, ``.cuda()`` or ``copy_`` of a CPU tensor without ``non_blocking=True``, the same
  with ``non_blocking=True`` from pageable (not pinned) memory (on CUDA the argument then has no effect, as
  PyTorch's docs say; logged apart, as ``PAGEABLE_COPY``), ``torch.tensor(..., device=...)`` /
  ``torch.as_tensor(..., device=...)``, and a device tensor indexed with CPU indices (``x[cpu_idx]``,
  ``x[cpu_idx] = v``: the indices are copied over first).

``log.mixed`` lists what is not a synchronisation but an error on a CUDA GPU: ``index_select``, ``gather``,
``take`` and the like with CPU indices into device data (they require one device; ``meta`` lets them run).

The third kind needs a device that is not the CPU to be seen at all: on a CPU-only machine, put the
"device" data on ``meta`` (a device without data, that is never the CPU) to count them.
Where everything runs on the CPU the recorder cannot tell a tensor that would be on the GPU from one
that stays on the CPU anyway: a ``DataLoader``'s sampler reading its random order (``.tolist()``) is
counted too. Give the code under test its data as tensors, as the exercise checks do.

It counts what a GPU would wait for, whatever the device the code runs on now. On a CUDA machine,
``torch.cuda.set_sync_debug_mode("warn")`` is PyTorch's own detector of the same thing.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from helpers.course.i18n import tr, tr_lazy

_SYNC_OPS = {
    "aten._local_scalar_dense": tr_lazy(".item() / float() / int() / bool() / `if` on a tensor"),
    "aten.nonzero": tr_lazy("nonzero() or torch.where(condition)"),
    "aten.masked_select": "masked_select()",
    "aten._unique2": "unique()",
    "aten.unique_dim": "unique()",
    "aten.unique_consecutive": "unique_consecutive()",
    "aten.repeat_interleave": tr_lazy("repeat_interleave() without output_size"),
}
_METHODS = {
    "cpu": ".cpu()",
    "numpy": ".numpy()",
    "tolist": ".tolist()",
    "__repr__": tr_lazy("print() or repr() of a tensor"),
}
BLOCKING_COPY = tr_lazy("blocking copy to the device (.to(device), .cuda() or copy_ without non_blocking=True)")
PAGEABLE_COPY = tr_lazy(
    "non_blocking=True copy to the device from pageable memory (the argument has no effect: a blocking copy)"
)
NEW_ON_DEVICE = tr_lazy("torch.tensor(..., device=...) (built on the host, then a blocking copy)")
CPU_INDICES = tr_lazy("a device tensor indexed with CPU indices (the indices are copied over, blocking)")
BOOLEAN_MASK = tr_lazy("boolean-mask indexing x[mask]")
# advanced indexing copies CPU indices to the data's device first; these others refuse them on a CUDA GPU
_INDEXING = {"aten.index", "aten.index_put", "aten.index_put_", "aten._index_put_impl_"}
_SAME_DEVICE = {"aten.index_select", "aten.index_add", "aten.index_add_", "aten.index_copy", "aten.index_copy_",
                "aten.take", "aten.gather"}  # fmt: skip
_state = threading.local()


def _inside() -> bool:
    return getattr(_state, "depth", 0) > 0


def _on_host(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "cpu"


def _on_device(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type != "cpu"


def _host_indices(key: str, args, kinds=_INDEXING) -> bool:
    """A device tensor indexed with CPU index tensors (0-dim ones are read as numbers, already counted)."""
    if key not in kinds or not args or not _on_device(args[0]):
        return False
    found = []
    for arg in args[1:]:
        found += [i for i in arg if _on_host(i)] if isinstance(arg, list | tuple) else [arg] if _on_host(arg) else []
    return any(i.dim() > 0 and i.dtype != torch.bool for i in found)


def _pinned(t: torch.Tensor) -> bool:
    try:
        return t.is_pinned()
    except RuntimeError:  # no accelerator to ask: nothing can be pinned
        return False


def _host_to_device_copy(key: str, args, kwargs) -> str | None:
    """A copy from host memory to a device that the CPU waits for: BLOCKING_COPY, PAGEABLE_COPY, or None."""
    if key == "aten._to_copy":
        device = kwargs.get("device")
        source, non_blocking = (args[0] if args else None), kwargs.get("non_blocking", False)
        if device is None or torch.device(device).type == "cpu":
            return None
    elif key == "aten.copy_":
        if len(args) < 2 or not _on_device(args[0]):
            return None
        source, non_blocking = args[1], args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
    else:
        return None
    if not _on_host(source):
        return None
    if not non_blocking:
        return BLOCKING_COPY
    return None if _pinned(source) else PAGEABLE_COPY


@dataclass
class SyncLog:
    """What was recorded: one entry per synchronising call, in order (a readable name for each).

    ``events`` holds the English names above (compare them with ``BLOCKING_COPY``...); ``str(log)`` shows them
    in the course's language, as ``mixed`` holds its entries.
    """

    events: list[str] = field(default_factory=list)
    mixed: list[str] = field(default_factory=list)  # not syncs: operators a CUDA GPU refuses with CPU indices

    def __len__(self) -> int:
        return len(self.events)

    def counts(self) -> Counter:
        return Counter(self.events)

    def __str__(self) -> str:
        if not self.events:
            return tr("no host synchronisation")
        entries = [tr("{n} x {name}", n=n, name=tr(name)) for name, n in self.counts().most_common()]
        bill = entries[0]
        for entry in entries[1:]:  # entries hold commas of their own: Chinese parts them with ；
            bill = tr("{bill}, {entry}", bill=bill, entry=entry)
        return bill


class _OpRecorder(TorchDispatchMode):
    def __init__(self, log: SyncLog):
        super().__init__()
        self.log = log

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not _inside():
            name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)
            key = f"aten.{name}"
            if key in _SYNC_OPS and not (key == "aten.repeat_interleave" and kwargs.get("output_size") is not None):
                self.log.events.append(_SYNC_OPS[key])
            elif key == "aten.index" and any(
                isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] if len(args) > 1 else [])
            ):
                self.log.events.append(BOOLEAN_MASK)
            elif _host_indices(key, args):
                self.log.events.append(CPU_INDICES)
            elif _host_indices(key, args, _SAME_DEVICE):
                self.log.mixed.append(tr("{name}() with CPU indices into device data", name=name))
            elif copy := _host_to_device_copy(key, args, kwargs):
                self.log.events.append(copy)
        return func(*args, **kwargs)


def _counting(log: SyncLog, original, label: str, when=None):
    def wrapper(self, *args, **kwargs):
        record = not _inside() and (when is None or when(self, *args, **kwargs))
        if record:
            log.events.append(label)
        elif when is not None:  # e.g. .to(device): not a fetch, but the operators it runs are seen as usual
            return original(self, *args, **kwargs)
        with _nested():
            return original(self, *args, **kwargs)

    return wrapper


@contextlib.contextmanager
def _nested() -> Iterator[None]:
    """Calls made inside a recorded call (its own operators) are not recorded again."""
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        yield
    finally:
        _state.depth -= 1


def _to_cpu(tensor, *args, **kwargs) -> bool:
    if tensor.device.type == "cpu":  # .to(device) in a loop run on the CPU: on a GPU it is not a fetch
        return False
    try:
        device = torch._C._nn._parse_to(*args, **kwargs)[0]
    except Exception:
        return False
    return device is not None and device.type == "cpu"


def _building(log: SyncLog, original):
    """torch.tensor / torch.as_tensor: with a device that is not the CPU, the data is copied there, blocking."""

    def wrapper(data, *args, **kwargs):
        device = kwargs.get("device")
        if not _inside() and device is not None and torch.device(device).type != "cpu":
            if not (isinstance(data, torch.Tensor) and data.device == torch.device(device)):
                log.events.append(NEW_ON_DEVICE)
        with _nested():
            return original(data, *args, **kwargs)

    return wrapper


@contextlib.contextmanager
def record_syncs() -> Iterator[SyncLog]:
    """``with record_syncs() as log: ...``: ``len(log)`` host synchronisations a GPU would make."""
    log = SyncLog()
    originals = {name: getattr(torch.Tensor, name) for name in (*_METHODS, "to")}
    builders = {name: getattr(torch, name) for name in ("tensor", "as_tensor")}
    try:
        for name, label in _METHODS.items():
            setattr(torch.Tensor, name, _counting(log, originals[name], label))
        torch.Tensor.to = _counting(log, originals["to"], '.to("cpu")', when=_to_cpu)
        for name, original in builders.items():
            setattr(torch, name, _building(log, original))
        with _OpRecorder(log):
            yield log
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)
        for name, original in builders.items():
            setattr(torch, name, original)
