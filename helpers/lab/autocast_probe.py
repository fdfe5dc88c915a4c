"""Which device types ``torch.autocast`` is on for, also for a model and tensors that report ``cuda`` on a machine
without a CUDA GPU (notebook 06's mixed-precision check: does a step take its autocast device type from its data?).

``autocast_types()`` reads it now (call it from a forward hook). ``as_cuda_labelled(model)`` turns a CPU model's
parameters into :class:`~helpers.lab.simulate.CudaLabelledTensor` (``.device`` says ``cuda:0``, the data stays on
the CPU); ``first_forward_autocast(run, layer)`` runs ``run()`` on a simulated machine with one CUDA GPU, stops it
when ``layer`` first runs forward and returns the device types autocast was on for at that moment.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Callable

import torch
from torch import nn

from helpers.lab.simulate import CudaLabelledTensor, simulated_machine

DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu")


def autocast_types() -> list[str]:
    """The device types torch.autocast is on for right now."""
    return [t for t in DEVICE_TYPES if torch.is_autocast_enabled(t)]


def as_cuda_labelled(model: nn.Module) -> nn.Module:
    """``model`` (on the CPU) with each parameter replaced by one that reports ``cuda:0``; build its optimizer after."""
    for module in model.modules():
        for name, p in list(module._parameters.items()):
            if p is not None:
                module._parameters[name] = nn.Parameter(p.detach().clone().as_subclass(CudaLabelledTensor))
    return model


class _ForwardSeen(Exception):
    pass


def first_forward_autocast(run: Callable[[], object], layer: nn.Module) -> list[str] | None:
    """``run()`` on a simulated machine with one CUDA GPU, its printing and warnings hidden, stopped when ``layer``
    first runs forward: the device types autocast was on for then, or None if ``run`` never got that far."""
    seen: list[list[str]] = []

    def look(module, inputs, output):
        seen.append(autocast_types())
        raise _ForwardSeen

    handle = layer.register_forward_hook(look)
    try:
        with simulated_machine(cuda=1), warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            run()
    except _ForwardSeen:
        return seen[0] if seen else None
    except Exception:  # the code under test failed before its forward pass: no verdict
        return None
    finally:
        handle.remove()
    return None
