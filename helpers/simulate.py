"""Pretend to be another machine (no GPU, several GPUs, a Mac), for tests and exercise checks.

Only these queries are faked: ``torch.cuda`` is_available, device_count, current_device,
get_device_name, get_device_properties; ``torch.backends.mps.is_available``; ``torch.version.cuda``;
``torch.accelerator`` current_accelerator, is_available, device_count. No tensor can really be put
on a simulated GPU.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from types import SimpleNamespace
from unittest import mock

import torch

from helpers.config import DEVICE_ENV


@contextlib.contextmanager
def simulated_machine(
    cuda: int = 0, mps: bool = False, cuda_build: bool = True, gpu_name: str = "Simulated GPU", memory_gib: int = 16
) -> Iterator[None]:
    """Within the block, torch reports ``cuda`` CUDA GPUs and MPS as given; COURSE_DEVICE is unset."""

    def properties(device=None):
        index = device.index if isinstance(device, torch.device) else int(device or 0)
        if not 0 <= index < cuda:
            raise RuntimeError("Invalid device id")  # what torch raises for a missing index
        return SimpleNamespace(
            name=f"{gpu_name} {index}", total_memory=memory_gib * 2**30, major=8, minor=9, multi_processor_count=108
        )

    def accelerator(check_available: bool = False):
        if cuda:
            return torch.device("cuda")
        if mps:
            return torch.device("mps")
        return torch.device("cuda") if cuda_build and not check_available else None

    patches = [
        mock.patch.object(torch.cuda, "is_available", lambda: cuda > 0),
        mock.patch.object(torch.cuda, "device_count", lambda: cuda),
        mock.patch.object(torch.cuda, "current_device", lambda: 0),
        mock.patch.object(torch.cuda, "get_device_properties", properties),
        mock.patch.object(torch.cuda, "get_device_name", lambda device=None: properties(device).name),
        mock.patch.object(torch.backends.mps, "is_available", lambda: mps),
        mock.patch.object(torch.version, "cuda", "12.6" if cuda_build else None),
        mock.patch.object(torch.accelerator, "current_accelerator", accelerator),
        mock.patch.object(torch.accelerator, "is_available", lambda: bool(cuda or mps)),
        mock.patch.object(torch.accelerator, "device_count", lambda: cuda or int(mps)),
        mock.patch.dict("os.environ", {}),
    ]
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        os.environ.pop(DEVICE_ENV, None)
        yield
