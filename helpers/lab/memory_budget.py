"""Memory a GPU would count, counted on any device: live tensor bytes, and a simulated GPU that runs out.

:class:`LiveBytes` counts, op by op, the bytes of the tensors created inside the block that are still
alive (``now``) and the most that were alive at once (``peak``): what ``torch.cuda.memory_allocated()``
and ``max_memory_allocated()`` report on a GPU, less the allocator's rounding, for the tensors made in the
block. Tensors that existed before the block (a model's parameters, a batch) are not counted.

:class:`SimulatedGpuMemory` is a :class:`LiveBytes` with a capacity: the op whose result would take the
live bytes over it raises the error that device's allocator raises, worded as it words it: CUDA's
``torch.OutOfMemoryError``, or the plain ``RuntimeError`` of MPS (an Apple GPU) or of the CPU allocator.
Tests use it to run out of memory deterministically on a CPU.
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from helpers.lesson.memory import format_bytes


def _storages(tree) -> dict[int, int]:
    return {
        t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
        for t in tree_flatten(tree)[0]
        if isinstance(t, torch.Tensor) and t.device.type != "meta"
    }


class LiveBytes(TorchDispatchMode):
    """Within the block: ``now`` and ``peak`` bytes of the live tensors created there (see the module doc)."""

    def __init__(self, in_use: int = 0) -> None:
        super().__init__()
        self.in_use = in_use  # bytes counted as taken before the block (e.g. the model)
        self.now = in_use
        self.peak = in_use
        self._refs: dict[int, int] = {}  # storage -> number of live tensors using it
        self._size: dict[int, int] = {}

    def _release(self, key: int) -> None:
        self._refs[key] -= 1
        if self._refs[key] == 0:
            del self._refs[key]
            self.now -= self._size.pop(key)

    def _admit(self, nbytes: int) -> None:
        """Called before new bytes are counted; a budget raises here."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = _storages((args, kwargs))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or t.device.type == "meta":
                continue
            key = t.untyped_storage().data_ptr()
            if key not in self._refs:
                if key in inputs:
                    continue  # a view of (or in-place into) a tensor made before the block
                nbytes = t.untyped_storage().nbytes()
                self._admit(nbytes)
                self._refs[key], self._size[key] = 0, nbytes
                self.now += nbytes
                self.peak = max(self.peak, self.now)
            self._refs[key] += 1
            weakref.finalize(t, self._release, key)
        return out


BACKENDS = ("cuda", "mps", "cpu")


def _default_backend() -> str:
    """The GPU this machine has (a simulated Mac included): MPS on a Mac, CUDA everywhere else."""
    return "mps" if torch.backends.mps.is_available() and not torch.cuda.is_available() else "cuda"


class SimulatedGpuMemory(LiveBytes):
    """A device of ``capacity`` bytes, ``in_use`` of them already taken: going over raises that device's own
    out-of-memory error. ``backend``: ``"cuda"`` (the default: ``torch.OutOfMemoryError``), ``"mps"`` or
    ``"cpu"`` (a plain ``RuntimeError`` worded as that allocator words it), or ``"auto"``: this machine's GPU,
    MPS on a Mac (a simulated one too), CUDA elsewhere."""

    def __init__(self, capacity: int, in_use: int = 0, backend: str = "cuda") -> None:
        super().__init__(in_use)
        self.capacity = capacity
        self.backend = _default_backend() if backend == "auto" else backend
        if self.backend not in BACKENDS:
            raise ValueError(f"backend={backend!r}: use one of {', '.join(BACKENDS)} or auto")

    def _admit(self, nbytes: int) -> None:
        if self.now + nbytes > self.capacity:
            raise self.error(nbytes)

    def error(self, nbytes: int) -> RuntimeError:
        """The error this device raises for a request of ``nbytes`` that does not fit (worded as torch words it)."""
        free = max(0, self.capacity - self.now)
        if self.backend == "mps":  # aten/src/ATen/mps/MPSAllocator.mm
            return RuntimeError(
                f"MPS backend out of memory (simulated; MPS allocated: {format_bytes(self.now)}, other allocations: "
                f"0 bytes, max allowed: {format_bytes(self.capacity)}). Tried to allocate {format_bytes(nbytes)} on "
                "private pool. Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit for memory "
                "allocations (may cause system failure)."
            )
        if self.backend == "cpu":  # c10/core/impl/alloc_cpu.cpp
            return RuntimeError(
                "[enforce fail at alloc_cpu.cpp] err == 0. DefaultCPUAllocator: can't allocate memory: you tried "
                f"to allocate {nbytes} bytes. Error code 12 (Cannot allocate memory) (simulated)"
            )
        return torch.OutOfMemoryError(
            f"CUDA out of memory (simulated). Tried to allocate {format_bytes(nbytes)}. GPU 0 has a total "
            f"capacity of {format_bytes(self.capacity)} of which {format_bytes(free)} is free. Of the "
            f"allocated memory {format_bytes(self.now)} is allocated by PyTorch, and 0 bytes is reserved by "
            "PyTorch but unallocated."
        )
