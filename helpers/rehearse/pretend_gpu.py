"""A pretend GPU (or Mac) on a CPU-only machine: tensors "on the device" are real CPU tensors with a tag.

:class:`PretendDevices` is a ``TorchFunctionMode``. A tensor moved to ``cuda:0`` (``.to``, ``.cuda()``, a factory
with ``device=``, a legacy ``torch.cuda.FloatTensor``, an op on tagged inputs) is a CPU tensor whose ``id`` is in
``tags`` (with a weakref: tensors compare elementwise, so a ``WeakSet`` cannot hold them). The mode answers
``.device``, ``.is_cuda``, ``.is_mps``, ``.get_device()`` and ``.grad`` for them, so the script sees a GPU, while
every number is the CPU's own: a rehearsed script prints what the same script prints on the CPU.

What the device refuses is reported, once per kind and line, through ``report(kind, message)`` (the message is
the real device's wording), and the run goes on with the CPU data: an op that mixes tagged and untagged tensors
(0-dim CPU tensors are allowed, as on CUDA), ``.numpy()`` of a device tensor, an index past the machine's GPUs,
a device the machine lacks, float64 on a Mac. What a GPU would wait for is counted in ``events``: each sync
(``.item()``, a Python ``if`` on a device tensor, printing one, ``.cpu()``, ``.tolist()``) and each copy to the
device with its bytes, from pinned or pageable memory.

Not seen: autograd's own ops (they run on CPU data, and ``.grad`` is tagged when read) and what C++ does
inside an op. A wrapper subclass that reports ``cuda`` below the dispatcher was rejected: C++ then picks CUDA
kernels (a convolution aborts the process).
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from helpers.course.i18n import tr_lazy
from helpers.lab import simulate
from helpers.lab.sync_recorder import CPU_INDICES

CPU = torch.device("cpu")
_GET = {
    torch.Tensor.device.__get__: "device",
    torch.Tensor.is_cuda.__get__: "is_cuda",
    torch.Tensor.is_mps.__get__: "is_mps",
    torch.Tensor.grad.__get__: "grad",
}
_SET_DATA = torch.Tensor.data.__set__
_PASS = {torch._has_compatible_shallow_copy_type, torch.Tensor.copy_, torch.Tensor.__setitem__}
_SYNCS = {
    "item": ".item()",
    "tolist": ".tolist()",
    "__bool__": tr_lazy("if / while / bool() on a tensor"),
    "__repr__": tr_lazy("print / repr of a tensor"),
    "__format__": tr_lazy("f-string of a tensor"),
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
    pinned: bool = False


@dataclass
class Ledger:
    """Tags (which CPU tensors are "on the device") and what the run met."""

    machine: Machine
    report: Callable[[str, str, str], None]  # (kind, message, detail): a problem, at the caller's line
    where: Callable[[], tuple[str, int]]  # the learner's file and line
    tags: dict[int, tuple[weakref.ref, torch.device]] = field(default_factory=dict)
    pinned: dict[int, weakref.ref] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    step: int = 0
    default_device: torch.device | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def device_of(self, t: torch.Tensor) -> torch.device:
        entry = self.tags.get(id(t))
        return entry[1] if entry is not None and entry[0]() is t else t.device

    def tag(self, t: torch.Tensor, device: torch.device) -> torch.Tensor:
        if device.type == "cpu":
            self.untag(t)
            return t
        key = id(t)
        self.tags[key] = (weakref.ref(t, lambda _, key=key: self.tags.pop(key, None)), device)
        return t

    def untag(self, t: torch.Tensor) -> None:
        entry = self.tags.get(id(t))
        if entry is not None and entry[0]() is t:
            del self.tags[id(t)]

    def mark_pinned(self, t: torch.Tensor) -> torch.Tensor:
        key = id(t)
        with self.lock:
            self.pinned[key] = weakref.ref(t, lambda _, key=key: self.pinned.pop(key, None))
        return t

    def is_pinned(self, t: torch.Tensor) -> bool:
        ref = self.pinned.get(id(t))
        return ref is not None and ref() is t

    def note(self, what: str, nbytes: int = 0, pinned: bool = False) -> None:
        self.events.append(Event(what, self.where(), self.step, nbytes, pinned))

    def on_device(self) -> list[torch.Tensor]:
        return [t for ref, _ in list(self.tags.values()) if (t := ref()) is not None]

    def allocated(self) -> int:
        """Bytes held by tensors on the device (each storage once), as torch.cuda.memory_allocated counts."""
        storages = {}
        for t in self.on_device():
            with contextlib.suppress(RuntimeError):
                storage = t.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
        return sum(storages.values())


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
        refused = led.machine.refuses(device) if device.type != "cpu" else None
        if refused is not None:
            kind = "device-index" if "ordinal" in refused else "no-gpu"
            led.report(kind, refused, str(device))
            device = CPU if kind == "no-gpu" else torch.device(device.type, 0)
        if device.type == "mps" and (dtype or t.dtype) == torch.float64:
            led.report(
                "mps-float64",
                "Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't "
                "support float64. Please use float32 instead.",
                "",
            )
        if here == device and (dtype is None or dtype == t.dtype) and not copy:
            return t
        if here.type == "cpu" and device.type != "cpu":
            led.note("copy", t.numel() * t.element_size(), led.is_pinned(t) and non_blocking)
        elif here.type != "cpu" and device.type == "cpu":
            led.note(".cpu()")
        moved = t.to(dtype=dtype or t.dtype, copy=True, **extra)
        return led.tag(moved, device)

    def _to(self, t, args, kwargs):
        if args and isinstance(args[0], torch.Tensor):
            other = args[0]
            kwargs = {**kwargs, "non_blocking": args[1] if len(args) > 1 else kwargs.get("non_blocking", False)}
            return self._arrive(
                t, self.ledger.device_of(other), other.dtype, kwargs["non_blocking"], kwargs.get("copy", False)
            )
        device, dtype, non_blocking, memory_format = torch._C._nn._parse_to(*args, **kwargs)
        extra = {"memory_format": memory_format} if memory_format is not None else {}
        target = _device(device) if device is not None else self.ledger.device_of(t)
        return self._arrive(t, target, dtype, non_blocking, kwargs.get("copy", False), **extra)

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
        target = kwargs.get("device")
        if target is not None or (led.default_device is not None and name in _FACTORIES):
            device = _device(target) if target is not None else led.default_device
            if device.type != "cpu":
                refused = led.machine.refuses(device)
                if refused is not None:
                    kind = "no-gpu" if "ordinal" not in refused else "device-index"
                    led.report(kind, refused, str(device))
                    device = CPU if kind == "no-gpu" else torch.device(device.type, 0)
            kwargs = {**kwargs, "device": CPU} if target is not None else kwargs
            if device.type != "cpu" and name in ("tensor", "as_tensor"):
                led.note("copy", 0)
            result = func(*args, **kwargs)
            for t in tree_leaves(result):
                if isinstance(t, torch.Tensor):
                    led.tag(t, device)
            return result
        device = self._common_device(name, args, kwargs)
        result = func(*args, **kwargs)
        if device is not None:
            for t in tree_leaves(result):
                if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                    led.tag(t, device)
        return result

    def _common_device(self, name: str, args, kwargs) -> torch.device | None:
        """The device of an op's tensors (None: the CPU); reports a mix as the GPU would refuse it."""
        led = self.ledger
        found: dict[torch.device, torch.Tensor] = {}
        for t in tree_leaves((args, kwargs)):
            if isinstance(t, torch.Tensor):
                device = led.device_of(t)
                if not (device.type == "cpu" and t.dim() == 0):  # a GPU kernel takes a 0-dim CPU tensor as a number
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


class LegacyType:
    """``torch.cuda.FloatTensor`` and its kind on the pretend GPU: a call makes a tagged tensor."""

    def __init__(self, name: str, dtype: torch.dtype) -> None:
        self.__name__ = self.__qualname__ = name
        self.dtype = dtype

    def __call__(self, *args):
        return getattr(torch, self.__name__)(*args).to("cuda")  # through the mode: a tagged copy

    def __repr__(self) -> str:
        return f"<class 'torch.cuda.{self.__name__}'>"


@contextlib.contextmanager
def pretend(ledger: Ledger) -> Iterator[PretendDevices]:
    """Within the block, this thread's torch runs as on ``ledger.machine``."""
    from unittest import mock

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
        ledger.note("torch.cuda.synchronize()")

    def set_device(device):
        refused = machine.refuses(_device(device))
        if refused is not None:
            ledger.report("device-index" if "ordinal" in refused else "no-gpu", refused, str(device))

    def pin(data, device=None):  # the DataLoader's pin_memory=True, also in its pinning thread
        return torch.utils._pytree.tree_map_only(torch.Tensor, lambda t: ledger.mark_pinned(t.clone()), data)

    real_set_default_tensor_type = torch.set_default_tensor_type
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
        mock.patch.object(torch.cuda, "memory_allocated", lambda device=None: ledger.allocated()),
        mock.patch.object(torch.cuda, "memory_reserved", lambda device=None: ledger.allocated()),
        mock.patch.object(torch.cuda, "max_memory_allocated", lambda device=None: ledger.allocated()),
        mock.patch.object(torch.cuda, "reset_peak_memory_stats", lambda device=None: None),
        mock.patch.object(torch.utils.data._utils.pin_memory, "pin_memory", pin),
        mock.patch.object(torch, "load", _loader(ledger, real_load)),
        mock.patch.object(torch, "save", _saver(ledger, real_save)),
        mock.patch.object(torch.nn.DataParallel, "forward", _one_replica),
        mock.patch.object(torch.autograd, "Variable", _variable(ledger, torch.autograd.Variable)),
        # an RNN's weights on the pretend GPU are CPU data: no cuDNN flattening (it would ask the real driver)
        mock.patch.object(torch.backends.cudnn, "is_acceptable", lambda tensor: False),
    ]
    stream = _PretendStream()
    if machine.cuda:
        patches += [
            mock.patch.object(torch.cuda, "current_stream", lambda device=None: stream),
            mock.patch.object(torch.cuda, "current_device", lambda: 0),
        ]
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
        patches.append(mock.patch.object(torch.mps, "synchronize", synchronize))
    for check in ("_accelerator_graph_capture_health_check", "_cuda_graph_capture_health_check"):
        if hasattr(torch.optim.Optimizer, check):  # Adam's step asks the real GPU's stream whether it captures a graph
            patches.append(mock.patch.object(torch.optim.Optimizer, check, lambda self: None))
    patches += [
        mock.patch.object(torch.cuda, name, LegacyType(name, dtype), create=True)
        for name, dtype in _LEGACY_TYPES.items()
    ]
    with contextlib.ExitStack() as stack:
        stack.enter_context(machine.pretend())
        for patch in patches:
            stack.enter_context(patch)
        stack.enter_context(mode)
        yield mode


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
    """The current stream of the pretend device: never capturing a graph; waiting on it is a sync."""

    def is_capturing(self) -> bool:
        return False

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True


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
    tensors = [t for t in tree_leaves(obj) if isinstance(t, torch.Tensor)]
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
