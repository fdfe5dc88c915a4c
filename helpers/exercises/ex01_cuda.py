"""Checks for notebook 01's exercises (CPU to GPU with ``.cuda()``).

Each check runs the learner's function towards the course device and towards ``OTHER_DEVICE``
(meta): on a CPU-only machine ``t.to("cpu")`` returns ``t`` itself, so only a device that is never
the CPU exposes a forgotten assignment there.
"""

from __future__ import annotations

import torch

from helpers.devices import pick_device
from helpers.exercises import OTHER_DEVICE, call_learner, exercise_check, failed, passed

NO_GPU_HINT = (
    "If the message is about CUDA or an NVIDIA driver, you called .cuda(), which needs a usable GPU: "
    "write t.to(device), which goes wherever `device` says, on every machine."
)
DATA_HINT = (
    "Assigning t.data swaps the memory under the tensor you were given, so the caller's tensor moves too "
    "(nn.Module.to does that to parameters, a tensor needs no such trick), and PyTorch refuses it between "
    "some devices. Leave t alone and return the new tensor: return t.to(device)."
)
FACTORY_HINT = (
    "torch.Tensor (capital T) only builds CPU tensors and .cuda() needs a GPU: write "
    "torch.tensor(values, dtype=torch.float32, device=device)."
)


def _targets() -> list[torch.device]:
    """The course device, then a device that is never the CPU."""
    return [pick_device(), OTHER_DEVICE]


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal values; a meta tensor has none, so there only shape and dtype count."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return "meta" in (a.device.type, b.device.type) or torch.equal(a.cpu(), b.cpu())


class _AssignedData:
    """What ``_refusing_set_data`` returns when PyTorch refused ``t.data = ...``."""

    def __init__(self, error: RuntimeError) -> None:
        self.error = error


def _refusing_set_data(fn):
    """``fn``, but PyTorch's refusal of ``t.data = <tensor elsewhere>`` comes back as a value to explain."""

    def run(*args):
        try:
            return fn(*args)
        except RuntimeError as err:
            if "set_data" not in str(err):
                raise
            return _AssignedData(err)

    return run


@exercise_check
def move_to(fn) -> object:
    """``fn(t, device)`` returns ``t`` moved to ``device``; ``t`` itself stays where it was."""
    for device in _targets():
        t = torch.tensor([1.0, 2.0, 3.0])
        result, problem = call_learner(
            _refusing_set_data(fn), t, device, when=f"Moving a tensor to {device}", hint=NO_GPU_HINT
        )
        if problem is not None:
            return problem
        if isinstance(result, _AssignedData):
            return failed(
                f"Moving a tensor to {device}, your code assigned t.data and PyTorch refused: {result.error}",
                DATA_HINT,
            )
        if result is None:
            return failed("Your function returned None.", "End it with `return ...` and the moved tensor.")
        if not isinstance(result, torch.Tensor):
            return failed(f"Return a tensor, not {type(result).__name__}.", "return t.to(device)")
        if result.device != device:
            if result is t:
                return failed(
                    f"Asked for {device}, you returned the original tensor, still on {t.device}.",
                    "t.to(device) and t.cuda() do not move t: they return a new tensor. "
                    "Keep it: `t = t.to(device)`, or simply `return t.to(device)`.",
                )
            if result.device.type == "cuda":
                return failed(
                    f"Asked for {device}, your tensor went to {result.device}.",
                    ".cuda() always goes to a GPU; t.to(device) goes where `device` says.",
                )
            return failed(f"Asked for {device}, your tensor is on {result.device}.", "return t.to(device)")
        if t.device.type != "cpu":
            return failed(
                "The original tensor left the CPU: your code assigned t.data, which moves t itself.",
                DATA_HINT,
            )
        if not torch.equal(t, torch.tensor([1.0, 2.0, 3.0])):
            return failed(
                f"The original tensor's values changed to {t.tolist()}: your code wrote into t.",
                "Leave t as it is and return a moved tensor: return t.to(device).",
            )
        if not _same_values(result, torch.tensor([1.0, 2.0, 3.0], device=device)):
            return failed(
                f"The moved tensor differs from the original: {result.dtype}, shape {tuple(result.shape)}.",
                "Only the device should change: t.to(device), no dtype or reshaping.",
            )
    return passed(
        "Your function returns the tensor on the device asked for (the course device and meta); "
        "the original stays on the CPU."
    )


@exercise_check
def float_tensor_on(fn) -> object:
    """``fn(values, device)`` builds a float32 tensor on ``device`` from a Python list."""
    for device in _targets():
        for values in ([1, 2, 3], [0.5, -1.5]):
            result, problem = call_learner(
                fn, list(values), device, when=f"With values={values} on {device}", hint=FACTORY_HINT
            )
            if problem is not None:
                return problem
            if not isinstance(result, torch.Tensor):
                return failed(f"Return a tensor, not {type(result).__name__}.", "torch.tensor(values, ...)")
            if result.device != device:
                return failed(
                    f"Asked for {device}, your tensor is on {result.device}.",
                    "Pass device=device to torch.tensor: it then copies the list's values to the device, in the "
                    "same call.",
                )
            if result.dtype != torch.float32:
                hint = {
                    torch.int64: "torch.tensor infers int64 from Python ints: pass dtype=torch.float32.",
                    torch.float64: "float64 takes twice the memory, is slow on most GPUs and absent on Apple MPS: "
                    "pass dtype=torch.float32.",
                }.get(result.dtype, "Pass dtype=torch.float32.")
                return failed(f"With values={values} your tensor's dtype is {result.dtype}, not torch.float32.", hint)
            expected = torch.tensor(values, dtype=torch.float32, device=device)
            if not _same_values(result, expected):
                return failed(
                    f"With values={values} your tensor has shape {tuple(result.shape)} or other values.",
                    "Build it from the list itself: torch.tensor(values, ...). torch.Tensor(3) would be 3 "
                    "uninitialised numbers.",
                )
    return passed("float32, on the device asked for, with the list's values (ints included).")
