"""Pretend to be another machine (no GPU, several GPUs, a Mac, a GPU CUDA cannot use), for tests and checks.

Only these queries are faked: ``torch.cuda`` is_available, device_count, init, current_device,
get_device_name, get_device_properties, mem_get_info, get_arch_list when given (and is_initialized
when CUDA cannot start); ``torch.backends.mps`` is_available and is_built (True on a simulated Mac);
``torch.mps`` is_available / device_count (where they exist); ``torch.version.cuda`` and ``hip``; ``torch.accelerator``
current_accelerator, is_available, device_count; and, for ``other_accelerator``, that backend's
is_available / device_count. No tensor can really be put on a simulated GPU.

With ``cuda_init_error`` CUDA cannot start, as on a machine whose driver is too old: whatever would
initialise CUDA raises ``RuntimeError(cuda_init_error)``, moving a tensor to ``cuda`` included."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from types import SimpleNamespace
from unittest import mock

import torch
from torch.overrides import TorchFunctionMode

from helpers.course.config import DEVICE_ENV

# What torch raises when CUDA cannot start (c10/cuda/CUDAFunctions.cpp and torch.cuda), word for word.
NO_DRIVER = (
    "Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver "
    "from http://www.nvidia.com/Download/index.aspx"
)
DRIVER_TOO_OLD = (
    "The NVIDIA driver on your system is too old (found version 11040). Please update your GPU driver by "
    "downloading and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx "
    "Alternatively, go to: https://pytorch.org to install a PyTorch version that has been compiled with your "
    "version of the CUDA driver."
)
UNKNOWN_ERROR = (
    "CUDA unknown error - this may be due to an incorrectly set up environment, e.g. changing env variable "
    "CUDA_VISIBLE_DEVICES after program start. Setting the available devices to be zero."
)
INIT_FAILED = "CUDA driver initialization failed, you might not have a CUDA gpu."
NO_GPUS = "No CUDA GPUs are available"
NOT_COMPILED = "Torch not compiled with CUDA enabled"  # an AssertionError in torch.cuda, on a CPU-only build


def _index(device) -> int:
    """The GPU index ``device`` names, as torch.cuda's own ``_get_device_index(device, optional=True)``."""
    if device is None:
        return 0  # the current device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "cuda":
            raise ValueError(f"Expected a cuda device, but got: {device}")
        return 0 if device.index is None else device.index
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    raise ValueError(f"Expected a torch.device with a specified index or an integer, but got:{device}")


class _CudaUnusable(TorchFunctionMode):
    """Any tensor that lands on ``cuda`` raises: on a machine whose CUDA is already initialised, moving a
    tensor there no longer asks ``torch.cuda._lazy_init``, so the patch alone would not catch it."""

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if isinstance(result, torch.Tensor) and result.device.type == "cuda":
            raise RuntimeError(self.message)
        return result


class CudaLabelledTensor(torch.Tensor):
    """A CPU tensor that says it is on a CUDA GPU: code that asks a tensor (or a model's parameters, made of these
    with ``as_subclass``) for its device sees ``cuda:0``, inside :func:`simulated_machine` too (notebook 06's
    mixed-precision check: does autocast follow the data?). Its operators still run on the CPU."""

    @property
    def device(self):
        return torch.device("cuda", 0)


@contextlib.contextmanager
def simulated_machine(
    cuda: int = 0,
    mps: bool = False,
    cuda_build: bool = True,
    gpu_name: str = "Simulated GPU",
    memory_gib: float | Sequence[float] = 16,
    *,
    nvml_gpus: int | None = None,
    cuda_init_error: str | None = None,
    other_accelerator: str | None = None,
    capability: tuple[int, int] = (8, 9),
    arch_list: Sequence[str] | None = None,
    rocm: str | None = None,
    mps_built: bool | None = None,
) -> Iterator[None]:
    """Within the block, torch reports ``cuda`` CUDA GPUs and MPS as given; COURSE_DEVICE is unset.

    ``memory_gib``: each GPU's memory, one number for all or one per GPU. ``nvml_gpus``: what
    ``torch.cuda.device_count()`` reports (it counts through NVML, also GPUs CUDA cannot use); by
    default ``cuda``. ``cuda_init_error``: CUDA cannot start (e.g. :data:`DRIVER_TOO_OLD`):
    ``is_available()`` is False, ``device_count()`` still ``nvml_gpus``, and anything that initialises
    CUDA raises ``RuntimeError(cuda_init_error)``. ``other_accelerator`` (e.g. ``"xpu"``): one device of
    that type is the current accelerator; CUDA and MPS report none. ``capability``: every GPU's compute
    capability. ``arch_list``: what ``torch.cuda.get_arch_list()`` answers (by default this build's own).
    ``mps_built``: what ``torch.backends.mps.is_built()`` answers (a Mac's wheel has MPS: by default True
    where ``mps``, else this build's own); ``mps_built=True, mps=False`` is a Mac whose MPS cannot run
    (macOS before 12.3). ``rocm`` (e.g. ``"6.4"``): a ROCm build, ``torch.version.hip`` set and
    ``torch.version.cuda`` None, its AMD GPUs served through ``torch.cuda`` as PyTorch does.
    """
    if other_accelerator is not None and (cuda or mps):
        raise ValueError("other_accelerator simulates a machine whose only accelerator is that one: cuda=0, mps=False")
    memory = list(memory_gib) if isinstance(memory_gib, Sequence) else [memory_gib] * cuda
    if len(memory) != cuda:
        raise ValueError(f"memory_gib lists {len(memory)} sizes for {cuda} GPUs")
    usable = 0 if cuda_init_error is not None else cuda
    counted = cuda if nvml_gpus is None else nvml_gpus
    if not cuda_build:
        usable = counted = 0
    if rocm is not None and not cuda_build:
        raise ValueError("rocm simulates a GPU build: cuda_build=True")

    def cannot_start() -> None:
        """What torch.cuda._lazy_init raises here, if CUDA cannot start."""
        if not cuda_build:
            raise AssertionError(NOT_COMPILED)
        if cuda_init_error is not None:
            raise RuntimeError(cuda_init_error)
        if not usable:
            raise RuntimeError(NO_DRIVER if not counted else NO_GPUS)

    def properties(device=None):
        cannot_start()
        index = _index(device)
        if not 0 <= index < usable:
            raise AssertionError("Invalid device id")  # what torch raises for a missing index
        extra = {"gcnArchName": "gfx942:sramecc+:xnack-"} if rocm is not None else {}  # an MI300's
        return SimpleNamespace(
            name=f"{gpu_name} {index}",
            total_memory=int(memory[index] * 2**30),
            major=capability[0],
            minor=capability[1],
            multi_processor_count=108,
            **extra,
        )

    def current_device() -> int:
        cannot_start()
        return 0

    def init() -> None:
        if not usable:
            cannot_start()

    def mem_get_info(device=None) -> tuple[int, int]:
        total = properties(device).total_memory
        return total - 2**28, total  # (free, total) in bytes: 256 MiB in use

    def accelerator(check_available: bool = False):
        if other_accelerator is not None:
            return torch.device(other_accelerator)
        if usable:
            return torch.device("cuda")
        if mps:
            return torch.device("mps")
        return torch.device("cuda") if cuda_build and not check_available else None

    real_mps_built = torch.backends.mps.is_built
    patches = [
        mock.patch.object(torch.cuda, "is_available", lambda: usable > 0),
        mock.patch.object(torch.cuda, "device_count", lambda: counted),
        mock.patch.object(torch.cuda, "current_device", current_device),
        mock.patch.object(torch.cuda, "init", init),
        mock.patch.object(torch.cuda, "mem_get_info", mem_get_info),
        mock.patch.object(torch.cuda, "get_device_properties", properties),
        mock.patch.object(torch.cuda, "get_device_name", lambda device=None: properties(device).name),
        mock.patch.object(torch.backends.mps, "is_available", lambda: mps),
        mock.patch.object(
            torch.backends.mps, "is_built", lambda: mps_built if mps_built is not None else mps or real_mps_built()
        ),
        mock.patch.object(torch.version, "cuda", "12.6" if cuda_build and rocm is None else None),
        mock.patch.object(torch.version, "hip", rocm, create=True),
        mock.patch.object(torch.accelerator, "current_accelerator", accelerator),
        mock.patch.object(torch.accelerator, "is_available", lambda: bool(usable or mps or other_accelerator)),
        mock.patch.object(torch.accelerator, "device_count", lambda: usable or int(mps or bool(other_accelerator))),
        mock.patch.dict("os.environ", {}),
    ]
    if arch_list is not None:
        patches.append(mock.patch.object(torch.cuda, "get_arch_list", lambda: list(arch_list)))
    if cuda_init_error is not None:
        patches += [
            mock.patch.object(torch.cuda, "_lazy_init", cannot_start),  # also what .to("cuda") asks first
            mock.patch.object(torch.cuda, "is_initialized", lambda: False),
        ]
    mps_module = getattr(torch, "mps", None)
    for name, value in (("is_available", lambda: mps), ("device_count", lambda: int(mps))):
        if hasattr(mps_module, name):
            patches.append(mock.patch.object(mps_module, name, value))
    if other_accelerator is not None:
        backend = getattr(torch, other_accelerator, None)
        for name, value in (("is_available", lambda: True), ("device_count", lambda: 1)):
            if hasattr(backend, name):
                patches.append(mock.patch.object(backend, name, value))
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        if cuda_init_error is not None:
            stack.enter_context(_CudaUnusable(cuda_init_error))
        os.environ.pop(DEVICE_ENV, None)
        yield
