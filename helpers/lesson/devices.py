"""Pick the device the course runs on; turn a wrong device string into a message that says what to write.

``pick_device()`` is d2l's ``try_gpu`` done for today's hardware: the best device present (CUDA,
then Apple MPS, then the CPU), unless ``COURSE_DEVICE`` or an explicit request names one. A request
for a device that is not there is an error, never a silent swap to another device.
"""

from __future__ import annotations

import os
import re

import torch

from helpers.course.config import DEVICE_ENV
from helpers.course.i18n import tr

_DEVICE_RE = re.compile(r"^(cpu|cuda|mps)(?::(\d+))?$")


class DeviceError(ValueError):
    """A device request that cannot be honoured. The message says what to do instead."""


def cuda_count() -> int:
    """Number of CUDA GPUs this process can use (0 on a CPU-only build or without a GPU)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def mps_available() -> bool:
    """True on Apple silicon with a PyTorch build that supports MPS."""
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def available_devices() -> list[str]:
    """Names of the devices this process can use, best first, the CPU always last."""
    names = [f"cuda:{i}" for i in range(cuda_count())]
    if mps_available():
        names.append("mps:0")
    return names + ["cpu"]


def best_device() -> torch.device:
    """The best device present: the current CUDA GPU, else MPS, else the CPU."""
    if cuda_count():
        return torch.device("cuda", torch.cuda.current_device())
    if mps_available():
        return torch.device("mps", 0)
    return torch.device("cpu")


def suggest(text: str) -> str | None:
    """The valid spelling a mistyped device string most likely meant, or None."""
    guess = re.sub(r"\s+", "", text).lower()
    guess = re.sub(r"^gpu", "cuda", guess)
    guess = re.sub(r"^(cuda|mps|cpu)(\d+)$", r"\1:\2", guess)
    return guess if guess != text and _DEVICE_RE.match(guess) else None


def parse_device(request: str | torch.device) -> torch.device:
    """Check the spelling of a device request (not whether the device is present)."""
    if isinstance(request, torch.device):
        return request
    if not isinstance(request, str):
        raise DeviceError(
            tr("A device is a string such as 'cuda:0' or 'cpu', not {type_name}.", type_name=type(request).__name__)
        )
    if _DEVICE_RE.match(request):
        return torch.device(request)
    hint = suggest(request)
    fields = dict(request=repr(request), hint=repr(hint))
    if hint and request.strip().lower().startswith("gpu"):
        message = tr(
            "{request} is not a device name PyTorch accepts. Write {hint} instead (PyTorch calls NVIDIA GPUs 'cuda').",
            **fields,
        )
    elif hint:
        message = tr("{request} is not a device name PyTorch accepts. Write {hint} instead.", **fields)
    else:
        message = tr(
            "{request} is not a device name PyTorch accepts. Device names are lower case with no spaces: "
            "'cpu', 'cuda', 'cuda:0', 'cuda:1', 'mps'.",
            request=repr(request),
        )
    raise DeviceError(message)


def _absent(device: torch.device) -> str | None:
    """Why ``device`` cannot be used here, or None when it can."""
    fields = dict(device=device, have=", ".join(available_devices()))
    if device.type == "cuda":
        count = cuda_count()
        if count == 0 and torch.version.cuda is None:
            return tr("{device} was asked for, but this PyTorch is a CPU-only build. Available here: {have}.", **fields)
        if count == 0:
            return tr(
                "{device} was asked for, but PyTorch sees no CUDA GPU (no NVIDIA driver, no GPU, or "
                "CUDA_VISIBLE_DEVICES hides them). Available here: {have}.",
                **fields,
            )
        if device.index is not None and device.index >= count:
            if count == 1:
                return tr(
                    "{device} was asked for, but this machine has {count} CUDA GPU, numbered from 0. "
                    "Available here: {have}.",
                    count=count,
                    **fields,
                )
            return tr(
                "{device} was asked for, but this machine has {count} CUDA GPUs, numbered from 0. "
                "Available here: {have}.",
                count=count,
                **fields,
            )
    elif device.type == "mps":
        if not mps_available() or (device.index or 0) > 0:
            return tr("{device} was asked for, but Apple MPS is not available here. Available here: {have}.", **fields)
    return None


def _indexed(device: torch.device) -> torch.device:
    """'cuda' -> 'cuda:<current>', 'mps' -> 'mps:0', so that ``tensor.device == device`` holds."""
    if device.index is None and device.type == "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    if device.index is None and device.type == "mps":
        return torch.device("mps", 0)
    return device


def pick_device(request: str | torch.device | None = None) -> torch.device:
    """The device to run on.

    ``request`` is ``None`` (use ``COURSE_DEVICE``, else the best device), ``"auto"`` (the best
    device), or a device such as ``"cpu"``, ``"cuda:1"``, ``"mps"``. Raises :class:`DeviceError`,
    naming what is available, when the request is misspelt or the device is not present.
    """
    source = tr("Requested device")
    if request is None:
        request = os.environ.get(DEVICE_ENV, "").strip() or "auto"
        source = f"{DEVICE_ENV}={os.environ.get(DEVICE_ENV)!r}" if os.environ.get(DEVICE_ENV) else source
    if request == "auto":
        return best_device()
    try:
        device = parse_device(request)
    except DeviceError as err:
        raise DeviceError(tr("{source}: {error}", source=source, error=err)) from None
    problem = _absent(device)
    if problem:
        if source.startswith(DEVICE_ENV):
            fix = tr("unset {variable} or set it to 'auto' or 'cpu'", variable=DEVICE_ENV)
        else:
            fix = tr("pick one of those")
        raise DeviceError(
            tr(
                "{source}: {problem} To fix: {fix}; `python -m helpers doctor` explains what it finds.",
                source=source,
                problem=problem,
                fix=fix,
            )
        )
    return _indexed(device)


def all_gpus() -> list[torch.device]:
    """Every usable GPU, or ``[cpu]`` when there is none.

    Unlike d2l's ``try_all_gpus`` (which returns ``[]`` without a GPU), code can always loop over
    the result. When ``COURSE_DEVICE`` forces one device, the list holds that device alone.
    """
    forced = os.environ.get(DEVICE_ENV, "").strip()
    if forced and forced != "auto":
        return [pick_device()]
    gpus = [torch.device("cuda", i) for i in range(cuda_count())]
    if not gpus and mps_available():
        gpus = [torch.device("mps", 0)]
    return gpus or [torch.device("cpu")]


def describe(device: torch.device) -> str:
    """One line about a device: its name and memory for a CUDA GPU."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        memory = props.total_memory / 2**30
        return tr(
            "{device} ({name}, {memory:.1f} GiB, compute capability {major}.{minor})",
            device=device,
            name=props.name,
            memory=memory,
            major=props.major,
            minor=props.minor,
        )
    if device.type == "mps":
        return tr("{device} (Apple GPU through Metal)", device=device)
    return f"{device}"


def to_device(tensor: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """``tensor.to(device)``, with ``non_blocking=True`` only where that is both safe and useful: a copy to a CUDA GPU
    from pinned memory. Every loop of the course copies its batches with it.

    - CUDA, from pinned memory: the copy is queued and the CPU goes on; later work on the same stream waits for
      it, so the GPU never reads the copy too early (the pinned source must not be rewritten until it is done).
    - CUDA, from pageable memory: ``non_blocking`` has no effect (PyTorch's docs), so the copy is plain.
    - MPS: a non-blocking copy comes with no guarantee without a synchronisation (open PyTorch issues report one
      that read its source after it was freed): blocking.
    - the CPU, or a tensor already on ``device``: nothing is copied, ``tensor`` itself comes back.
    """
    device = torch.device(device)
    return tensor.to(device, non_blocking=device.type == "cuda" and tensor.is_pinned())
