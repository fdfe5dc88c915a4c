"""Count the host synchronisations a piece of code would make on a GPU, on any device (the CPU included).

On a GPU, some calls make the CPU wait until the GPU has finished everything queued so far: the
CPU needs a value that only the GPU has. A loop that does one per step cannot run ahead of the GPU.
On the CPU the same calls cost nothing, so a CPU cannot show the stall; this recorder shows the calls.

``record_syncs()`` sees two kinds of call while it is active:

- operators whose result the host must read (seen by a ``TorchDispatchMode``): ``aten._local_scalar_dense``
  (``.item()``, ``float(t)``, ``int(t)``, ``bool(t)``, ``if t:``, ``f"{t:.2f}"``), ``nonzero`` (also
  ``torch.where(cond)`` with one argument), boolean-mask indexing, ``masked_select``, ``unique``,
  ``repeat_interleave`` without ``output_size``;
- tensor methods that hand data to the host: ``.cpu()``, ``.numpy()``, ``.tolist()``, ``repr``/``print``
  of a tensor (wherever it is), and ``.to("cpu")`` of a tensor that is not on the CPU.

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

_SYNC_OPS = {
    "aten._local_scalar_dense": ".item() / float() / int() / bool() / `if` on a tensor",
    "aten.nonzero": "nonzero() or torch.where(condition)",
    "aten.masked_select": "masked_select()",
    "aten._unique2": "unique()",
    "aten.unique_dim": "unique()",
    "aten.unique_consecutive": "unique_consecutive()",
    "aten.repeat_interleave": "repeat_interleave() without output_size",
}
_METHODS = {
    "cpu": ".cpu()",
    "numpy": ".numpy()",
    "tolist": ".tolist()",
    "__repr__": "print() or repr() of a tensor",
}
_state = threading.local()


def _inside() -> bool:
    return getattr(_state, "depth", 0) > 0


@dataclass
class SyncLog:
    """What was recorded: one entry per synchronising call, in order (a readable name for each)."""

    events: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.events)

    def counts(self) -> Counter:
        return Counter(self.events)

    def __str__(self) -> str:
        if not self.events:
            return "no host synchronisation"
        return ", ".join(f"{n} x {name}" for name, n in self.counts().most_common())


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
                self.log.events.append("boolean-mask indexing x[mask]")
        return func(*args, **kwargs)


def _counting(log: SyncLog, original, label: str, when=None):
    def wrapper(self, *args, **kwargs):
        record = not _inside() and (when is None or when(self, *args, **kwargs))
        if record:
            log.events.append(label)
        _state.depth = getattr(_state, "depth", 0) + 1
        try:
            return original(self, *args, **kwargs)
        finally:
            _state.depth -= 1

    return wrapper


def _to_cpu(tensor, *args, **kwargs) -> bool:
    if tensor.device.type == "cpu":  # .to(device) in a loop run on the CPU: on a GPU it is not a fetch
        return False
    try:
        device = torch._C._nn._parse_to(*args, **kwargs)[0]
    except Exception:
        return False
    return device is not None and device.type == "cpu"


@contextlib.contextmanager
def record_syncs() -> Iterator[SyncLog]:
    """``with record_syncs() as log: ...``: ``len(log)`` host synchronisations a GPU would make."""
    log = SyncLog()
    originals = {name: getattr(torch.Tensor, name) for name in (*_METHODS, "to")}
    try:
        for name, label in _METHODS.items():
            setattr(torch.Tensor, name, _counting(log, originals[name], label))
        torch.Tensor.to = _counting(log, originals["to"], '.to("cpu")', when=_to_cpu)
        with _OpRecorder(log):
            yield log
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)
