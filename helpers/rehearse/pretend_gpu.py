"""A pretend GPU (or Mac) on a CPU-only machine: tensors "on the device" are real CPU tensors with a tag.

:class:`PretendDevices` is a ``TorchFunctionMode``. A tensor moved to ``cuda:0`` (``.to``, ``.cuda()``, a factory
with ``device=``, a legacy ``torch.cuda.FloatTensor``, an op on tagged inputs) is a CPU tensor whose ``id`` is in
``tags`` (with a weakref: tensors compare elementwise, so a ``WeakSet`` cannot hold them). The mode answers
``.device``, ``.is_cuda``, ``.is_mps``, ``.get_device()`` and ``.grad`` for them, so the script sees a GPU, while
every number is the CPU's own: a rehearsed script prints what the same script prints on the CPU.

What the device refuses is reported, once per kind and line, through ``report(kind, message)`` (the message is
the real device's wording), and the run goes on with the CPU data: an op that mixes tagged and untagged tensors
(0-dim CPU tensors are allowed, as on CUDA, except in ``cat``/``stack``), ``.numpy()`` of a device tensor, an index
past the machine's GPUs, a device the machine lacks, float64 on a Mac (moved there, made there by a factory, or
the result of an op there), a CPU generator for a device factory, a custom ``backward`` whose gradient is on
another device than its input, a DataLoader worker forked after the GPU was used, ``torch.cuda.synchronize()``,
``torch.mps.synchronize()`` or ``pin_memory()`` where that device is missing, cuBLAS under
``torch.use_deterministic_algorithms(True)`` without ``CUBLAS_WORKSPACE_CONFIG``, an operator MPS has no kernel
for in this torch (``mps_ops``). What a GPU would wait for is
counted in ``events``: each sync (``.item()``, a Python ``if`` on a device tensor, printing one, a blocking
``.cpu()``, ``.tolist()``, a boolean mask) and each copy to the device with its bytes, from pinned or pageable
memory, and whether the CPU waits for it; the bytes held per device, with their peak, answer
``torch.cuda.memory_allocated(device)`` and ``max_memory_allocated``.

Modelled rather than passed to a driver: autocast on the device (the CPU's autocast in float16, or the bfloat16
asked for: the dtypes a GPU gives, from the CPU's list of ops to cast, which is close to CUDA's), streams and events
(the work is done when queued; an event times the CPU), generators made for the device, ``torch.mps`` memory on a
Mac, NCCL (rehearsed with gloo, and said so), ``torch.compile`` (run eagerly, and said so; CUDA graphs, mode
``reduce-overhead`` or ``max-autotune`` on a GPU, make the verdict "could not tell"), a ``Parameter`` made from a
device tensor (it keeps the device), the threads the script starts (each enters the mode: a mode is per thread),
``torch.func`` transforms (their wrappers carry no tag; the tensors inside them do).
``torch.multiprocessing.spawn`` starts real processes, outside the pretend machine, and says so (and says when it
starts none: ``nprocs=torch.cuda.device_count()`` without a GPU). A failure the rehearsal cannot explain is checked
against a plain CPU run (``script_run``).

Why a function mode, not the dispatcher. A rehearsal promises the CPU's real numbers (a script's prints and its
control flow depend on them) and the script's own view of its devices. Three dispatcher-level designs were weighed:

- fake tensors (``FakeTensorMode`` with a device) compute no numbers: a script that prints a loss or stops on one
  cannot run on them;
- a wrapper subclass that reports ``cuda`` below the dispatcher makes C++ pick CUDA kernels (a convolution aborts
  the process on a machine without CUDA);
- a ``TorchDispatchMode`` sees every aten op, autograd's and composite ones included, but not what a script asks
  in Python (``.device``, ``.is_cuda``, ``.numpy()``, ``.to()``'s arguments), which must still be answered above
  the dispatcher. Both layers would cost more than the rehearsal's budget on small ops: on a three-layer MLP with
  Adam (``python benchmarks/bench_mode_cost.py``), a dispatch mode that only runs each op cost as much as this whole
  mode (2.4x the plain step each), and both together 3.5x.

So the mode stays above the dispatcher, and what it cannot see there is closed where PyTorch exposes it: the
autograd engine's gradients (``.grad`` is tagged when read; a custom ``Function``'s backward is checked against its
inputs' devices), ``Parameter`` construction, threads, ``torch.func`` wrappers, compiled graphs. Not seen: what C++
does inside one op (a kernel's own error appears as the CPU's, or not at all).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch.overrides import TorchFunctionMode

from helpers.course.i18n import tr, tr_lazy
from helpers.lab import simulate
from helpers.lab.sync_recorder import BOOLEAN_MASK, CPU_INDICES
from helpers.rehearse import mps_ops

CPU = torch.device("cpu")
MPS_FLOAT64 = (
    "Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support float64. "
    "Please use float32 instead."
)
_GET = {
    torch.Tensor.device.__get__: "device",
    torch.Tensor.is_cuda.__get__: "is_cuda",
    torch.Tensor.is_mps.__get__: "is_mps",
    torch.Tensor.grad.__get__: "grad",
}
_SET_DATA = torch.Tensor.data.__set__
_PASS = {torch._has_compatible_shallow_copy_type, torch.Tensor.copy_, torch.Tensor.__setitem__, torch._C._nn._parse_to}
_SYNCS = {
    "item": ".item()",
    "tolist": ".tolist()",
    "__bool__": tr_lazy("if / while / bool() on a tensor"),
    "__repr__": tr_lazy("print / repr of a tensor"),
    "__format__": tr_lazy("f-string or format() of a tensor"),
    "__str__": tr_lazy("print of a tensor"),
    "nonzero": "nonzero()",
    "__int__": tr_lazy("int() of a tensor"),
    "__float__": tr_lazy("float() of a tensor"),
}
_WEIGHTED = {
    "linear",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "embedding",
    "batch_norm",
    "layer_norm",
    "group_norm",
    "lstm",
    "gru",
    "rnn_tanh",
    "rnn_relu",
}
_LEGACY_TYPES = {
    "FloatTensor": torch.float32,
    "DoubleTensor": torch.float64,
    "HalfTensor": torch.float16,
    "BFloat16Tensor": torch.bfloat16,
    "LongTensor": torch.int64,
    "IntTensor": torch.int32,
    "ShortTensor": torch.int16,
    "CharTensor": torch.int8,
    "ByteTensor": torch.uint8,
    "BoolTensor": torch.bool,
}


@dataclass(frozen=True)
class Machine:
    """The machine a rehearsal pretends to be: ``gpu`` (one CUDA GPU), ``gpus:N``, ``mac`` or ``laptop``."""

    name: str
    cuda: int = 0
    mps: bool = False

    @classmethod
    def parse(cls, text: str) -> Machine:
        text = text.strip().lower()
        if text in ("gpu", "cuda"):
            return cls("gpu", cuda=1)
        if text.startswith("gpus:") and text[5:].isdigit() and int(text[5:]) >= 1:
            return cls(text, cuda=int(text[5:]))
        if text in ("mac", "mps"):
            return cls("mac", mps=True)
        if text in ("laptop", "cpu"):
            return cls("laptop")
        raise ValueError(f"--as {text!r}: choose gpu, gpus:N (N >= 1), mac or laptop")

    def refuses(self, device: torch.device) -> str | None:
        """The real error of moving a tensor to ``device`` here, or None when the machine has it."""
        if device.type == "cuda":
            if self.mps:
                return simulate.NOT_COMPILED  # a Mac's wheel has no CUDA
            if not self.cuda:
                return simulate.NO_DRIVER
            if (device.index or 0) >= self.cuda:
                return "CUDA error: invalid device ordinal"
        elif device.type == "mps" and not self.mps:
            return "The MPS backend is supported on MacOS 14.0+. Current OS version can be queried using `sw_vers`"
        elif device.type not in ("cpu", "cuda", "mps", "meta"):
            return f"{device.type} is not available on this machine"
        return None

    def pretend(self):
        """torch's queries answer as this machine would (helpers.lab.simulate)."""
        return simulate.simulated_machine(cuda=self.cuda, mps=self.mps, gpu_name="Pretend GPU")


@dataclass
class Event:
    """What a GPU would pay for, at the learner's line: a sync, or a copy to the device."""

    what: str  # a _SYNCS label, or "copy"
    where: tuple[str, int]
    step: int
    nbytes: int = 0
    pinned: bool = False  # a copy from pinned memory
    blocking: bool = True  # without non_blocking=True: the CPU waits for it (always, from pageable memory)
    outside: bool = True  # met outside a DataLoader loop's batch (before the first, after a loop ended)


@dataclass
class Ledger:
    """Tags (which CPU tensors are "on the device") and what the run met."""

    machine: Machine
    report: Callable[[str, str, str], None]  # (kind, message, detail): a problem, at the caller's line
    where: Callable[[], tuple[str, int]]  # the learner's file and line
    tags: dict[int, tuple[weakref.ref, torch.device]] = field(default_factory=dict)
    pinned: dict[int, weakref.ref] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    step: int = 0  # DataLoader batches so far, all loops together
    in_batch: bool = False  # between a loop's batch and the next (False before the first and after a loop)
    loader_used: bool = False
    default_device: torch.device | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    notes: list[str] = field(default_factory=list)  # what the run did not model as the machine would
    gaps: list[str] = field(default_factory=list)  # what it met and cannot model: the verdict is "could not tell"
    generators: dict[int, tuple[torch.Generator, torch.device]] = field(default_factory=dict)  # few: kept alive
    pid: int = field(default_factory=os.getpid)  # a DataLoader worker forked from this process has another
    cuda_used: bool = False  # the pretend GPU was used: a forked worker cannot use it again
    held: dict[torch.device, dict[int, int]] = field(default_factory=dict)  # device: {storage: bytes}
    peaks: dict[torch.device, int] = field(default_factory=dict)
    users: dict[tuple[torch.device, int], int] = field(default_factory=dict)  # tensors per storage
    totals: dict[torch.device, int] = field(default_factory=dict)  # bytes held now, per device

    def generator_device(self, generator) -> torch.device:
        entry = self.generators.get(id(generator))
        return entry[1] if entry is not None and entry[0] is generator else generator.device

    def device_of(self, t: torch.Tensor) -> torch.device:
        entry = self.tags.get(id(t))
        return entry[1] if entry is not None and entry[0]() is t else t.device

    def tag(self, t: torch.Tensor, device: torch.device) -> torch.Tensor:
        if device.type == "cpu":
            self.untag(t)
            return t
        key = id(t)
        entry = self.tags.get(key)
        if entry is not None and entry[0]() is t and entry[1] == device:
            return t
        if entry is not None and entry[0]() is t:
            self.untag(t)
        storage = _storage(t)
        self.tags[key] = (weakref.ref(t, lambda _, key=key, storage=storage: self._gone(key, device, storage)), device)
        self.cuda_used |= device.type == "cuda"
        if storage is not None:
            self._hold(device, storage, +1)
        return t

    def untag(self, t: torch.Tensor) -> None:
        entry = self.tags.get(id(t))
        if entry is not None and entry[0]() is t:
            del self.tags[id(t)]
            if (storage := _storage(t)) is not None:
                self._hold(entry[1], storage, -1)

    def _gone(self, key: int, device: torch.device, storage) -> None:
        self.tags.pop(key, None)
        if storage is not None:
            self._hold(device, storage, -1)

    def _hold(self, device: torch.device, storage: tuple[int, int], count: int) -> None:
        """Each storage on the device once (views share it), with the peak since the last reset, per device."""
        held = self.held.setdefault(device, {})
        key = (device, storage[0])
        users = self.users.get(key, 0) + count
        if users <= 0:
            self.users.pop(key, None)
            self.totals[device] = self.totals.get(device, 0) - held.pop(storage[0], 0)
        else:
            self.users[key] = users
            if storage[0] not in held:
                held[storage[0]] = storage[1]
                self.totals[device] = total = self.totals.get(device, 0) + storage[1]
                self.peaks[device] = max(self.peaks.get(device, 0), total)

    def allocated(self, device=None, peak: bool = False) -> int:
        """Bytes held on ``device`` (each storage once), as torch.cuda.memory_allocated counts; or its peak."""
        device = self.stat_device(device)
        return self.peaks.get(device, 0) if peak else self.totals.get(device, 0)

    def reset_peak(self, device=None) -> None:
        device = self.stat_device(device)
        self.peaks[device] = self.allocated(device)

    def stat_device(self, device) -> torch.device:
        """The device a torch.cuda / torch.mps statistic asks about (None: the current one, index 0)."""
        if device is None:
            return torch.device("mps", 0) if self.machine.mps else torch.device("cuda", 0)
        if isinstance(device, int):
            return torch.device("cuda", device)
        return _device(device)

    def mark_pinned(self, t: torch.Tensor) -> torch.Tensor:
        key = id(t)
        with self.lock:
            self.pinned[key] = weakref.ref(t, lambda _, key=key: self.pinned.pop(key, None))
        return t

    def is_pinned(self, t: torch.Tensor) -> bool:
        ref = self.pinned.get(id(t))
        return ref is not None and ref() is t

    def note(self, what: str, nbytes: int = 0, pinned: bool = False, blocking: bool = True) -> None:
        self.events.append(Event(what, self.where(), self.step, nbytes, pinned, blocking, not self.in_batch))

    def on_device(self) -> list[torch.Tensor]:
        return [t for ref, _ in list(self.tags.values()) if (t := ref()) is not None]


def _storage(t: torch.Tensor) -> tuple[int, int] | None:
    try:
        storage = t.untyped_storage()
        return storage.data_ptr(), storage.nbytes()
    except (RuntimeError, NotImplementedError):
        return None


def _tensors(obj) -> Iterator[torch.Tensor]:
    """The tensors in an op's arguments or result, or a loaded checkpoint: tuples, lists and dicts, as deep as they go
    (pytree's ``tree_leaves`` costs several times more on every op, and these hold no other containers)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, tuple | list):
        for item in obj:
            if isinstance(item, torch.Tensor):
                yield item
            elif isinstance(item, tuple | list | dict):
                yield from _tensors(item)
    elif isinstance(obj, dict):
        yield from _tensors(tuple(obj.values()))


_functorch_wrapped = torch._C._functorch.is_functorch_wrapped_tensor


def _boolean_mask(args) -> bool:
    index = args[1] if len(args) > 1 else None
    parts = index if isinstance(index, tuple | list) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in parts)


def _forked_worker(ledger: Ledger, device: torch.device) -> None:
    """A DataLoader worker forked after the script used the GPU cannot use it, as CUDA refuses."""
    if device.type == "cuda" and ledger.cuda_used and os.getpid() != ledger.pid and ledger.machine.cuda:
        raise RuntimeError(FORKED_CUDA)


FORKED_CUDA = (
    "Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use the "
    "'spawn' start method"
)


def _device(value, default_index: int = 0) -> torch.device:
    device = torch.device(value) if not isinstance(value, int) else torch.device("cuda", value)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", default_index)
    if device.type == "mps" and device.index is None:
        device = torch.device("mps", 0)
    return device


class PretendDevices(TorchFunctionMode):
    """The mode: see the module's docstring."""

    def __init__(self, ledger: Ledger) -> None:
        super().__init__()
        self.ledger = ledger

    # -- moving -----------------------------------------------------------------------------------------------
    def _arrive(self, t: torch.Tensor, device: torch.device, dtype=None, non_blocking=False, copy=False, **extra):
        """``t`` moved to ``device`` (and ``dtype``): a tagged copy, or ``t`` itself when nothing changes."""
        led = self.ledger
        here = led.device_of(t)
        _forked_worker(led, device)
        refused = led.machine.refuses(device) if device.type != "cpu" else None
        if refused is not None:
            kind = "device-index" if "ordinal" in refused else "no-gpu"
            led.report(kind, refused, str(device))
            device = CPU if kind == "no-gpu" else torch.device(device.type, 0)
        if device.type == "mps" and (dtype or t.dtype) == torch.float64:
            led.report("mps-float64", MPS_FLOAT64, "")
        if here == device and (dtype is None or dtype == t.dtype) and not copy:
            return t
        if here.type == "cpu" and device.type != "cpu":
            pinned = led.is_pinned(t)
            led.note("copy", t.numel() * t.element_size(), pinned, not (pinned and non_blocking))
        elif here.type != "cpu" and device.type == "cpu" and not non_blocking:
            led.note(".cpu()")  # a device-to-host copy with non_blocking=True does not wait
        moved = t.to(dtype=dtype or t.dtype, copy=True, **extra)
        return led.tag(moved, device)

    def _to(self, t, args, kwargs):
        if args and isinstance(args[0], torch.Tensor):
            other = args[0]
            kwargs = {**kwargs, "non_blocking": args[1] if len(args) > 1 else kwargs.get("non_blocking", False)}
            return self._arrive(
                t, self.ledger.device_of(other), other.dtype, kwargs["non_blocking"], kwargs.get("copy", False)
            )
        kwargs = dict(kwargs)
        copy = kwargs.pop("copy", False)  # .to(..., copy=True) (autocast, GradScaler): _parse_to does not take it
        if len(args) >= 4 and isinstance(args[-1], bool) and not isinstance(args[0], torch.dtype | None):
            copy, args = args[-1], args[:-1]  # .to(device, dtype, non_blocking, copy)
        device, dtype, non_blocking, memory_format = torch._C._nn._parse_to(*args, **kwargs)
        extra = {"memory_format": memory_format} if memory_format is not None else {}
        target = _device(device) if device is not None else self.ledger.device_of(t)
        return self._arrive(t, target, dtype, non_blocking, copy, **extra)

    # -- the mode ---------------------------------------------------------------------------------------------
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        led = self.ledger
        getter = _GET.get(func) if not isinstance(func, type) else None
        if getter is not None:
            value = func(*args)
            t = args[0]
            if getter == "grad":
                return led.tag(value, led.device_of(t)) if value is not None else None
            device = led.device_of(t)
            return device if getter == "device" else device.type == getter[3:]
        if func == _SET_DATA:
            t, new = args
            func(t, new)
            led.tag(t, led.device_of(new))
            return None
        name = getattr(func, "__name__", "")
        if name in _METHODS:  # the few names handled below: most ops skip these tests
            if name == "to" and args and isinstance(args[0], torch.Tensor):
                return self._to(args[0], args[1:], kwargs)
            if name == "cuda" and args and isinstance(args[0], torch.Tensor):
                index = args[1] if len(args) > 1 else kwargs.get("device")
                return self._arrive(
                    args[0], _device(index if index is not None else "cuda"), None, kwargs.get("non_blocking", False)
                )
            if name == "cpu" and args and isinstance(args[0], torch.Tensor):
                return self._arrive(args[0], CPU)
            if name == "type" and len(args) > 1 and isinstance(args[1], LegacyType):
                return self._arrive(args[0], _device("cuda"), args[1].dtype)
            if name == "pin_memory" and args and isinstance(args[0], torch.Tensor):
                if not (led.machine.cuda or led.machine.mps):  # nothing to pin for: the real call raises
                    led.report("no-gpu", simulate.NO_DRIVER, "pin_memory")
                    return args[0]
                return led.mark_pinned(args[0].clone())
            if name == "is_pinned" and args and isinstance(args[0], torch.Tensor):
                return led.is_pinned(args[0])
            if name == "get_device" and args and isinstance(args[0], torch.Tensor):
                device = led.device_of(args[0])
                return -1 if device.type == "cpu" else device.index
        if func in _PASS:
            return func(*args, **kwargs)
        forced = name == "numpy" and kwargs.get("force", False)  # .numpy(force=True) copies to the host itself
        if forced and args and led.device_of(args[0]).type != "cpu":
            led.note(".numpy(force=True)")
            return func(*args, **kwargs)
        if name in ("numpy", "__array__") and args and led.device_of(args[0]).type != "cpu":
            device = led.device_of(args[0])
            led.report(
                "numpy-of-device-tensor",
                f"can't convert {device} device type tensor to numpy. Use "
                "Tensor.cpu() to copy the tensor to host memory first.",
                "",
            )
        if name in _SYNCS and args and isinstance(args[0], torch.Tensor) and led.device_of(args[0]).type != "cpu":
            led.note(_SYNCS[name])
        elif name in ("__getitem__", "masked_select") and led.device_of(args[0]).type != "cpu" and _boolean_mask(args):
            led.note(BOOLEAN_MASK if name == "__getitem__" else "masked_select()")  # the result's size: a sync
        target = kwargs.get("device")
        if target is not None or (led.default_device is not None and name in _FACTORIES):
            device = _device(target) if target is not None else led.default_device
            _forked_worker(led, device)
            generator = kwargs.get("generator")
            if generator is not None and led.generator_device(generator).type != device.type and device.type != "cpu":
                led.report(
                    "generator-device",
                    f"Expected a '{device.type}' device type for generator but found '{generator.device.type}'",
                    name,
                )
            if device.type != "cpu":
                refused = led.machine.refuses(device)
                if refused is not None:
                    kind = "no-gpu" if "ordinal" not in refused else "device-index"
                    led.report(kind, refused, str(device))
                    device = CPU if kind == "no-gpu" else torch.device(device.type, 0)
            kwargs = {**kwargs, "device": CPU} if target is not None else kwargs
            result = func(*args, **kwargs)
            if device.type != "cpu" and name in ("tensor", "as_tensor") and isinstance(result, torch.Tensor):
                led.note("copy", result.numel() * result.element_size())  # built on the host, then copied
            if device.type == "mps" and any(t.dtype == torch.float64 for t in _tensors(result)):
                led.report("mps-float64", MPS_FLOAT64, name)
            for t in _tensors(result):
                led.tag(t, device)
            return result
        device = self._common_device(name, args, kwargs)
        result = func(*args, **kwargs)
        if device is not None and device.type == "cuda" and name in _CUBLAS and _cublas_refuses():
            led.report("cublas-deterministic", CUBLAS_DETERMINISTIC, name)
        elif device is not None and device.type == "mps" and name in mps_ops.missing():
            if os.environ.get("PYTORCH_ENABLE_MPS_FALLBACK") != "1":  # otherwise it runs on the CPU, slower
                led.report("mps-missing-op", mps_ops.MESSAGE.format(name=name), name)
        if device is not None:
            for t in _tensors(result):
                if t.device.type == "cpu":
                    if device.type == "mps" and t.dtype == torch.float64:
                        led.report("mps-float64", MPS_FLOAT64, name)
                    led.tag(t, device)
        return result

    def _common_device(self, name: str, args, kwargs) -> torch.device | None:
        """The device of an op's tensors (None: the CPU); reports a mix as the GPU would refuse it."""
        led = self.ledger
        found: dict[torch.device, torch.Tensor] = {}
        if not led.tags:
            return None
        for t in _tensors((args, kwargs) if kwargs else args):
            if _functorch_wrapped(t):  # a torch.func transform's wrapper of a tensor: its device is the tensor's
                continue
            device = led.device_of(t)
            if not (device.type == "cpu" and t.dim() == 0) or name in _JOINS:  # 0-dim CPU: a number
                found.setdefault(device, t)
        if len(found) <= 1:
            device = next(iter(found), CPU)
            return None if device.type == "cpu" else device
        if name == "__getitem__" and led.device_of(args[0]).type != "cpu":
            led.note(CPU_INDICES)  # a GPU copies the indices over first, blocking
            return led.device_of(args[0])
        devices = sorted(found, key=lambda d: d.type == "cpu")
        first, second = devices[0], devices[1]
        kind = "weights-input-devices" if name in _WEIGHTED else "mixed-devices"
        led.report(
            kind,
            f"Expected all tensors to be on the same device, but found at least two devices, {first} and {second}!",
            name,
        )
        return first if first.type != "cpu" else second


_CUBLAS = {"linear", "matmul", "__matmul__", "mm", "addmm", "bmm", "baddbmm", "addbmm", "mv", "addmv", "einsum"}
CUBLAS_DETERMINISTIC = (
    "Deterministic behavior was enabled with either `torch.use_deterministic_algorithms(True)` or "
    "`at::Context::setDeterministicAlgorithms(true)`, but this operation is not deterministic because it uses CuBLAS "
    "and you have CUDA >= 10.2. To enable deterministic behavior in this case, you must set an environment variable "
    "before running your PyTorch application: CUBLAS_WORKSPACE_CONFIG=:4096:8 or CUBLAS_WORKSPACE_CONFIG=:16:8."
)


def _cublas_refuses() -> bool:
    """cuBLAS under torch.use_deterministic_algorithms(True) needs a fixed workspace, set before the script starts."""
    workspace = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    return torch.are_deterministic_algorithms_enabled() and workspace not in (":4096:8", ":16:8")


_METHODS = {"to", "cuda", "cpu", "type", "pin_memory", "is_pinned", "get_device"}
_JOINS = {"cat", "concat", "concatenate", "stack", "hstack", "vstack", "dstack", "column_stack", "row_stack"}
_FACTORIES = {
    "zeros",
    "ones",
    "empty",
    "full",
    "rand",
    "randn",
    "randint",
    "randperm",
    "arange",
    "linspace",
    "logspace",
    "eye",
    "tensor",
    "as_tensor",
    "empty_strided",
    "normal",
    "tril_indices",
    "triu_indices",
}


class LegacyType(type):
    """``torch.cuda.FloatTensor`` and its kind on the pretend GPU, classes of this metaclass: a call makes a tagged
    tensor, ``isinstance(x, torch.cuda.FloatTensor)`` asks the tag and the dtype."""

    def __new__(mcs, name: str, dtype: torch.dtype, ledger: Ledger):
        cls = super().__new__(mcs, name, (), {"dtype": dtype, "ledger": ledger})
        cls.__qualname__ = name
        return cls

    def __init__(cls, name, dtype, ledger) -> None:
        super().__init__(name, (), {})

    def __call__(cls, *args):
        return getattr(torch, cls.__name__)(*args).to("cuda")  # through the mode: a tagged copy

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, torch.Tensor) and obj.dtype == cls.dtype and cls.ledger.device_of(obj).type == "cuda"

    def __repr__(cls) -> str:
        return f"<class 'torch.cuda.{cls.__name__}'>"


@contextlib.contextmanager
def pretend(ledger: Ledger) -> Iterator[PretendDevices]:
    """Within the block, this thread's torch runs as on ``ledger.machine``."""
    from unittest import mock

    import torch._dynamo  # noqa: F401  (an optimizer imports it; it reads torch's queries as it loads: the real ones)

    mode = PretendDevices(ledger)
    machine = ledger.machine

    def set_default(device):
        ledger.default_device = None if device is None else _device(device)
        if ledger.default_device is not None and ledger.default_device.type == "cpu":
            ledger.default_device = None

    def set_default_tensor_type(kind):
        if isinstance(kind, LegacyType):
            set_default("cuda")
            torch.set_default_dtype(kind.dtype)
        else:
            real_set_default_tensor_type(kind)

    def synchronize(device=None):
        if not machine.cuda:  # torch.cuda.synchronize() on a Mac or a laptop: the real error
            ledger.report("no-gpu", simulate.NOT_COMPILED if machine.mps else simulate.NO_DRIVER, "synchronize")
            return
        ledger.note("torch.cuda.synchronize()")

    def mps_synchronize():
        if not machine.mps:  # torch.mps.synchronize() where there is no MPS: the real error
            ledger.report("no-gpu", "Cannot execute deviceSynchronize() without MPS backend.", "torch.mps.synchronize")
            return
        ledger.note("torch.mps.synchronize()")

    def compile_eagerly(model=None, **options):
        """torch.compile: the rehearsal runs the model eagerly (a compiled graph is not rehearsed), and says so;
        CUDA graphs (mode reduce-overhead or max-autotune on a GPU) change what the script may do with the outputs,
        so a rehearsal that meets them cannot tell."""
        note = tr("torch.compile: rehearsed eagerly (the compiled graph itself is not rehearsed)")
        if note not in ledger.notes:
            ledger.notes.append(note)
        if machine.cuda and options.get("mode") in ("reduce-overhead", "max-autotune"):
            ledger.gaps.append(
                tr(
                    "torch.compile(mode={mode!r}) records CUDA graphs on a GPU, which the rehearsal does not: an "
                    "output kept from one call is overwritten by the next (clone it, or call "
                    "torch.compiler.cudagraph_mark_step_begin() before each call)",
                    mode=options["mode"],
                )
            )
        if isinstance(model, torch.nn.Module):  # what torch.compile returns: _orig_mod, and its state_dict's keys
            from torch._dynamo.eval_frame import OptimizedModule

            return OptimizedModule(model, lambda fn: fn)
        return model if model is not None else (lambda fn: fn)

    def init_process_group(backend=None, *args, **kwargs):
        """NCCL needs a CUDA GPU: a pretend GPU rehearses it with gloo (one process, the same collectives)."""
        if backend is not None and "nccl" in str(backend):
            if not machine.cuda:
                ledger.report(
                    "no-gpu",
                    "Distributed package doesn't have NCCL built in"
                    if machine.mps
                    else "ProcessGroupNCCL is only supported with GPUs, no GPUs found!",
                    "init_process_group",
                )
            note = tr("NCCL: rehearsed with gloo (collectives on the CPU)")
            if note not in ledger.notes:
                ledger.notes.append(note)
            backend = "gloo"
        return real_init_process_group(backend, *args, **kwargs)

    real_backward = torch.autograd.function.BackwardCFunction.apply
    real_function_apply = next(k.__dict__["apply"] for k in torch.autograd.Function.__mro__ if "apply" in k.__dict__)

    inputs_of: dict[int, list] = {}  # a custom Function's node: the devices of its inputs

    def function_apply(cls, *args, **kwargs):
        out = real_function_apply.__get__(None, cls)(*args, **kwargs)
        node = next((t.grad_fn for t in _tensors(out) if t.grad_fn), None)
        if node is not None:
            inputs_of[id(node)] = [ledger.device_of(a) if isinstance(a, torch.Tensor) else None for a in args]
        return out

    def backward(ctx, *grads):
        """A custom Function's backward: each gradient on the device of its input, as the autograd engine checks."""
        out = real_backward(ctx, *grads)
        devices = inputs_of.get(id(ctx), [])
        for i, g in enumerate(out if isinstance(out, tuple) else (out,)):
            want = devices[i] if i < len(devices) else None
            if isinstance(g, torch.Tensor) and want is not None and g.dim() and ledger.device_of(g) != want:
                ledger.report(
                    "mixed-devices",
                    f"Function {type(ctx).__name__} returned an invalid gradient at index {i} - expected "
                    f"device {want} but got {ledger.device_of(g)}",
                    "backward",
                )
        return out

    real_new = torch.nn.Parameter.__new__

    def new_parameter(cls, data=None, requires_grad=True):  # a Parameter is a new tensor: it keeps the device
        out = real_new(cls, data, requires_grad)
        if isinstance(data, torch.Tensor):
            ledger.tag(out, ledger.device_of(data))
        return out

    def set_device(device):
        refused = machine.refuses(_device(device))
        if refused is not None:
            ledger.report("device-index" if "ordinal" in refused else "no-gpu", refused, str(device))

    def counted_start(real):
        """torch.multiprocessing.spawn / start_processes: nprocs=0 (torch.cuda.device_count() here) starts no
        process, and the processes it does start are real ones, outside the pretend machine; both are said."""

        def start(fn, args=(), nprocs=1, *rest, **kwargs):
            if isinstance(nprocs, int) and nprocs < 1:
                ledger.report("spawn-per-gpu", "", f"nprocs={nprocs}")
                note = tr(
                    "torch.multiprocessing started no process (nprocs={n}): the function it was given never ran",
                    n=nprocs,
                )
            else:
                note = tr(
                    "torch.multiprocessing started {n} real process(es): they ran outside the rehearsal, as on this "
                    "machine, not on the pretend one",
                    n=nprocs,
                )
            if note not in ledger.notes:
                ledger.notes.append(note)
            return real(fn, args, nprocs, *rest, **kwargs)

        return start

    def pin(data, device=None):  # the DataLoader's pin_memory=True, also in its pinning thread
        return torch.utils._pytree.tree_map_only(torch.Tensor, lambda t: ledger.mark_pinned(t.clone()), data)

    real_run = threading.Thread.run

    def run_pretending(self):  # a thread the script starts runs on the pretend machine too (a mode is per thread)
        with PretendDevices(ledger):
            real_run(self)

    real_autocast_init = torch.amp.autocast_mode.autocast.__init__

    def autocast_init(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        """autocast on the pretend device: the CPU's autocast in the device's lower precision (float16 unless the
        script says bfloat16), so a rehearsed script sees the dtypes a GPU gives it."""
        if (device_type == "cuda" and machine.cuda) or (device_type == "mps" and machine.mps):
            device_type, dtype = "cpu", dtype or torch.float16
        real_autocast_init(self, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    real_set_default_tensor_type = torch.set_default_tensor_type
    real_init_process_group = torch.distributed.init_process_group if torch.distributed.is_available() else None
    real_load = torch.load
    real_save = torch.save
    patches = [
        mock.patch.object(torch, "set_default_device", set_default),
        mock.patch.object(torch, "set_default_tensor_type", set_default_tensor_type),
        mock.patch.object(torch.cuda, "synchronize", synchronize),
        mock.patch.object(torch.cuda, "set_device", set_device),
        mock.patch.object(torch.cuda, "_lazy_init", lambda: None),
        mock.patch.object(torch.cuda, "is_initialized", lambda: bool(machine.cuda)),
        mock.patch.object(torch.cuda, "empty_cache", lambda: None),
        mock.patch.object(torch.cuda, "manual_seed", lambda seed: None),
        mock.patch.object(torch.cuda, "manual_seed_all", lambda seed: None),
        mock.patch.object(torch.cuda, "memory_allocated", lambda device=None: ledger.allocated(device)),
        mock.patch.object(torch.cuda, "memory_reserved", lambda device=None: ledger.allocated(device)),
        mock.patch.object(torch.cuda, "max_memory_allocated", lambda device=None: ledger.allocated(device, peak=True)),
        mock.patch.object(torch.cuda, "max_memory_reserved", lambda device=None: ledger.allocated(device, peak=True)),
        mock.patch.object(torch.cuda, "reset_peak_memory_stats", ledger.reset_peak),
        mock.patch.object(torch.cuda, "reset_max_memory_allocated", ledger.reset_peak),
        mock.patch.object(torch.amp.autocast_mode.autocast, "__init__", autocast_init),
        mock.patch.object(threading.Thread, "run", run_pretending),
        mock.patch.object(torch, "Generator", _generator_type(ledger)),
        mock.patch.object(torch, "compile", compile_eagerly),
        mock.patch.object(torch.nn.Module, "compile", lambda self, *a, **k: compile_eagerly(None, **k) and None),
        mock.patch.object(torch.nn.Parameter, "__new__", staticmethod(new_parameter)),
        mock.patch.object(torch.autograd.function.BackwardCFunction, "apply", backward),
        mock.patch.object(torch.autograd.Function, "apply", classmethod(function_apply)),
        mock.patch.object(torch.utils.data._utils.pin_memory, "pin_memory", pin),
        mock.patch.object(torch.multiprocessing, "spawn", counted_start(torch.multiprocessing.spawn)),
        mock.patch.object(
            torch.multiprocessing, "start_processes", counted_start(torch.multiprocessing.start_processes)
        ),
        mock.patch.object(torch, "load", _loader(ledger, real_load)),
        mock.patch.object(torch, "save", _saver(ledger, real_save)),
        mock.patch.object(torch.nn.DataParallel, "forward", _one_replica),
        mock.patch.object(torch.autograd, "Variable", _variable(ledger, torch.autograd.Variable)),
        # an RNN's weights on the pretend GPU are CPU data: no cuDNN flattening (it would ask the real driver)
        mock.patch.object(torch.backends.cudnn, "is_acceptable", lambda tensor: False),
    ]
    stream = _PretendStream()
    if real_init_process_group is not None:
        patches.append(mock.patch.object(torch.distributed, "init_process_group", init_process_group))
    if machine.cuda:
        patches += [
            mock.patch.object(torch.cuda, "current_stream", lambda device=None: stream),
            mock.patch.object(torch.cuda, "default_stream", lambda device=None: stream),
            mock.patch.object(torch.cuda, "current_device", lambda: 0),
            mock.patch.object(torch.cuda, "Stream", _PretendStream),
            mock.patch.object(torch.cuda, "Event", _PretendEvent),
            mock.patch.object(torch.cuda, "stream", lambda stream=None: contextlib.nullcontext()),
        ]
    if machine.mps and hasattr(torch, "mps"):
        patches += [
            mock.patch.object(torch.mps, name, lambda: ledger.allocated(), create=True)
            for name in ("current_allocated_memory", "driver_allocated_memory")
        ]
        patches.append(mock.patch.object(torch.mps, "empty_cache", lambda: None, create=True))
    if hasattr(torch, "accelerator") and (
        machine.cuda or machine.mps
    ):  # what torch itself asks (Adam's step asks current_stream().is_capturing())
        for name, value in (
            ("set_device_index", lambda index: None),
            ("current_device_index", lambda: 0),
            ("current_stream", lambda device=None: stream),
            ("synchronize", synchronize),
        ):
            if hasattr(torch.accelerator, name):
                patches.append(mock.patch.object(torch.accelerator, name, value))
    if hasattr(torch, "mps"):
        patches.append(mock.patch.object(torch.mps, "synchronize", mps_synchronize))
    for check in ("_accelerator_graph_capture_health_check", "_cuda_graph_capture_health_check"):
        if hasattr(torch.optim.Optimizer, check):  # Adam's step asks the real GPU's stream whether it captures a graph
            patches.append(mock.patch.object(torch.optim.Optimizer, check, lambda self: None))
    patches += [
        mock.patch.object(torch.cuda, name, LegacyType(name, dtype, ledger), create=True)
        for name, dtype in _LEGACY_TYPES.items()
    ]
    with contextlib.ExitStack() as stack:
        stack.enter_context(machine.pretend())
        for patch in patches:
            stack.enter_context(patch)
        stack.enter_context(mode)
        yield mode


def _generator_type(ledger: Ledger):
    """``torch.Generator(device=...)`` on the pretend machine: a CPU generator that remembers its device (a device
    the machine lacks is refused as the real call refuses it); ``isinstance`` still answers for real generators."""
    real = torch.Generator

    class Meta(type):
        def __instancecheck__(cls, obj) -> bool:
            return isinstance(obj, real)

        def __call__(cls, device="cpu"):
            where = _device(device)
            if where.type != "cpu":
                refused = ledger.machine.refuses(where)
                if refused is not None:
                    ledger.report("device-index" if "ordinal" in refused else "no-gpu", refused, "torch.Generator")
                    where = CPU
            generator = real()
            ledger.generators[id(generator)] = (generator, where)  # a Generator takes no weak reference (torch 2.7)
            return generator

    return Meta("Generator", (), {})


def _variable(ledger: Ledger, real):
    """``Variable(t)`` (the legacy wrapper, still in old scripts) makes a new tensor outside the torch function
    mode: it keeps ``t``'s pretend device."""

    class Meta(type):
        def __instancecheck__(cls, obj):
            return isinstance(obj, real)

    class Variable(metaclass=Meta):
        def __new__(cls, data=None, *args, **kwargs):
            out = real(data, *args, **kwargs) if data is not None else real(*args, **kwargs)
            if isinstance(data, torch.Tensor):
                ledger.tag(out, ledger.device_of(data))
            return out

    return Variable


class _PretendStream:
    """A stream of the pretend device: never capturing a graph; the work is already done (CPU data)."""

    def __init__(self, *args, **kwargs) -> None:
        self.device = torch.device("cuda", 0)

    def is_capturing(self) -> bool:
        return False

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def wait_stream(self, other) -> None:
        pass

    def wait_event(self, event) -> None:
        pass

    def record_event(self, event=None):
        event = event or _PretendEvent()
        event.record()
        return event

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


class _PretendEvent:
    """A CUDA event on the pretend GPU: it records the CPU's clock; elapsed_time is in ms, as on CUDA."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self.at: float | None = None

    def record(self, stream=None) -> None:
        self.at = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def wait(self, stream=None) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: _PretendEvent) -> float:
        if self.at is None or end.at is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end.at - self.at) * 1000


def _one_replica(self, *inputs, **kwargs):
    """DataParallel on the pretend GPU: the same numbers as one replica (each GPU's share, then gathered)."""
    if not self.device_ids:
        return self.module(*inputs, **kwargs)
    for t in list(self.module.parameters()) + list(self.module.buffers()):
        if t.device != self.src_device_obj:
            raise RuntimeError(
                f"module must have its parameters and buffers on device {self.src_device_obj} (device_ids[0]) "
                f"but found one of them on device: {t.device}"
            )
    inputs, kwargs = torch.utils._pytree.tree_map_only(
        torch.Tensor, lambda x: x.to(self.src_device_obj), (inputs, kwargs)
    )
    return self.module(*inputs, **kwargs)


def _saver(ledger: Ledger, real_save):
    """torch.save writes device tensors with their device (``cuda:0``) as a GPU machine's file would."""

    def save(obj, f, *args, **kwargs):
        devices = {t.untyped_storage().data_ptr(): d for t in ledger.on_device() if (d := ledger.device_of(t))}
        real_tag = torch.serialization.location_tag

        def location_tag(storage):
            device = devices.get(storage.data_ptr()) if storage.device.type == "cpu" else None
            return str(device) if device is not None else real_tag(storage)

        with _patched(torch.serialization, "location_tag", location_tag):
            return real_save(obj, f, *args, **kwargs)

    return save


def _loader(ledger: Ledger, real_load):
    """torch.load restores each tensor where it was saved, and refuses a device the machine lacks, as torch does."""

    def load(f, map_location=None, *args, **kwargs):
        saved: dict[int, str] = {}

        def to_cpu(storage, location):
            saved[storage.data_ptr()] = location
            return storage

        if map_location is not None and not callable(map_location) and not isinstance(map_location, dict):
            target = _device(map_location)
            obj = real_load(f, *args, map_location="cpu", **kwargs)
            if target.type != "cpu" and ledger.machine.refuses(target):  # map_location="cuda" on a laptop
                what = "a CUDA device" if target.type == "cuda" else str(target)
                ledger.report(
                    "load-missing-device",
                    f"Attempting to deserialize object on {what} but torch.cuda.is_available() is False. If you "
                    "are running on a CPU-only machine, please use torch.load with map_location=torch.device('cpu') "
                    "to map your storages to the CPU.",
                    str(target),
                )
                target = CPU
            return _tag_tree(ledger, obj, lambda t: target)
        if map_location is not None:
            return real_load(f, map_location, *args, **kwargs)
        obj = real_load(f, *args, map_location=to_cpu, **kwargs)
        missing = {loc for loc in saved.values() if loc != "cpu" and ledger.machine.refuses(_device(loc))}
        if missing:
            where = sorted(missing)[0]
            what = "a CUDA device" if where.startswith("cuda") else where
            ledger.report(
                "load-missing-device",
                f"Attempting to deserialize object on {what} but "
                "torch.cuda.is_available() is False. If you are running on a CPU-only machine, please use "
                "torch.load with map_location=torch.device('cpu') to map your storages to the CPU.",
                where,
            )

        def place(t):
            loc = saved.get(t.untyped_storage().data_ptr(), "cpu")
            return CPU if loc == "cpu" or loc in missing else _device(loc)

        return _tag_tree(ledger, obj, place)

    return load


def _tag_tree(ledger: Ledger, obj, place):
    tensors = list(_tensors(obj))
    if isinstance(obj, torch.nn.Module):
        tensors += list(obj.parameters()) + list(obj.buffers())
    for t in tensors:
        ledger.tag(t, place(t))
    return obj


@contextlib.contextmanager
def _patched(owner, name, value):
    real = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, real)
