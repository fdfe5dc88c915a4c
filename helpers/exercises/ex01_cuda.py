"""Checks for notebook 01's exercises (CPU to GPU with ``.cuda()``).

Each check runs the learner's function towards the course device and towards ``OTHER_DEVICE``
(meta): on a CPU-only machine ``t.to("cpu")`` returns ``t`` itself, so only a device that is never
the CPU exposes a forgotten assignment there.
"""

from __future__ import annotations

import torch

from helpers.course.i18n import tr, tr_lazy
from helpers.exercises import OTHER_DEVICE, call_learner, exercise_check, failed, passed, shown
from helpers.lesson.devices import pick_device

SECTION_NEW = "2. A new tensor; the original stays where it was"
SECTION_THROWN_AWAY = "Common error: calling `.cuda()` or `.to()` and throwing the result away"
SECTION_FACTORY = "5. `torch.Tensor([1, 2])` or `torch.tensor([1, 2])`?"
SECTION_NO_GPU = "6. No usable GPU: what `.cuda()` answers"

NO_GPU_HINT = tr_lazy(
    "If the message is about CUDA or an NVIDIA driver, your code asked for a GPU by name (.cuda()), and "
    "this machine has no usable one: go to the `device` you were given instead."
)
NO_GPU_MORE = tr_lazy(
    ".cuda() always means a CUDA GPU. The function receives `device` so that one line runs on a CPU, a GPU "
    "or meta: use the move that takes a device as its argument (section 2 moves x with it), and return "
    "what it gives back."
)
DATA_HINT = tr_lazy(
    "Assigning t.data swaps the memory under the tensor you were given, so the caller's tensor moves too, "
    "and PyTorch refuses it between some devices. Leave t alone and return a new tensor."
)
DATA_MORE = tr_lazy(
    "nn.Module.to() swaps its parameters' data like that; a tensor's moves need no such trick: they return a "
    "new tensor and leave the original where it was (section 2: after y = x.cuda(), x is still on the CPU). "
    "Return that new tensor."
)
THROWN_AWAY_MORE = tr_lazy(
    "Compare y = x.cuda() in section 2: x is still on the CPU afterwards, y is on the GPU. Here the move "
    "must go to `device` (the method that takes a device as its argument), and its result is what you "
    "return. On a CPU-only machine a move to 'cpu' hands back t itself, which hides the bug: that is why "
    "the check also asks for meta."
)
FACTORY_HINT = tr_lazy(
    "torch.Tensor (capital T) only builds CPU tensors and .cuda() needs a GPU: build the tensor with "
    "torch.tensor, which can create it on `device` in the same call."
)
FACTORY_MORE = tr_lazy(
    "torch.tensor takes the data first, then keyword arguments: one for the dtype, one for the device "
    "(section 5 lists what each factory infers). One call then builds the values straight on the device, "
    "with no CPU copy in between."
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
        to = dict(device=shown(device))
        result, problem = call_learner(
            _refusing_set_data(fn),
            t,
            device,
            when=tr("Moving a tensor to {device}", **to),
            hint=tr(NO_GPU_HINT),
            more=tr(NO_GPU_MORE),
            see=SECTION_NO_GPU,
        )
        if problem is not None:
            return problem
        if isinstance(result, _AssignedData):
            return failed(
                tr(
                    "Moving a tensor to {device}, your code assigned t.data and PyTorch refused: {error}",
                    error=result.error,
                    **to,
                ),
                tr(DATA_HINT),
                more=tr(DATA_MORE),
                see=SECTION_NEW,
            )
        if result is None:
            return failed(
                tr("Moving a tensor to {device}, your function returned None.", **to),
                tr("The caller needs the moved tensor: end your function with a `return` of it."),
                more=tr(THROWN_AWAY_MORE),
                see=SECTION_THROWN_AWAY,
            )
        if not isinstance(result, torch.Tensor):
            return failed(
                tr(
                    "Moving a tensor to {device}: return a tensor, not {type_name}.",
                    type_name=type(result).__name__,
                    **to,
                ),
                tr("Return the moved tensor itself, not its values in another form."),
                see=SECTION_NEW,
            )
        if result.device != device:
            if result is t:
                return failed(
                    tr(
                        "Asked for {device}, you returned the original tensor, still on {original}.",
                        original=t.device,
                        **to,
                    ),
                    tr(
                        "A move does not change the tensor it is called on: it returns a new one, which your code "
                        "did not keep."
                    ),
                    more=tr(THROWN_AWAY_MORE),
                    see=SECTION_THROWN_AWAY,
                )
            if result.device.type == "cuda":
                return failed(
                    tr("Asked for {device}, your tensor went to {got}.", got=result.device, **to),
                    tr(".cuda() always goes to a GPU; go where the `device` argument says."),
                    more=tr(NO_GPU_MORE),
                    see=SECTION_NO_GPU,
                )
            return failed(
                tr("Asked for {device}, your tensor is on {got}.", got=result.device, **to),
                tr("Move it to the `device` your function was given, not to one your code chose."),
                more=tr(THROWN_AWAY_MORE),
                see=SECTION_NEW,
            )
        if t.device.type != "cpu":
            return failed(
                tr(
                    "Moving a tensor to {device}, the original tensor left the CPU: your code assigned t.data, "
                    "which moves t itself.",
                    **to,
                ),
                tr(DATA_HINT),
                more=tr(DATA_MORE),
                see=SECTION_NEW,
            )
        if not torch.equal(t, torch.tensor([1.0, 2.0, 3.0])):
            return failed(
                tr(
                    "Moving a tensor to {device}, the original tensor's values changed to {values}: your code "
                    "wrote into t.",
                    values=t.tolist(),
                    **to,
                ),
                tr("Leave t as it is and return a moved copy; in-place methods (ending in _) change t for the caller."),
                see=SECTION_NEW,
            )
        if not _same_values(result, torch.tensor([1.0, 2.0, 3.0], device=device)):
            return failed(
                tr(
                    "Moving a tensor to {device}, the moved tensor differs from the original: {dtype}, shape {shape}.",
                    dtype=result.dtype,
                    shape=tuple(result.shape),
                    **to,
                ),
                tr("Only the device should change: no new dtype, no slicing or reshaping."),
                see=SECTION_NEW,
            )
    return passed(
        tr(
            "Your function returns the tensor on the device asked for (the course device and meta); "
            "the original stays on the CPU."
        )
    )


@exercise_check
def float_tensor_on(fn) -> object:
    """``fn(values, device)`` builds a float32 tensor on ``device`` from a Python list."""
    for device in _targets():
        for values in ([1, 2, 3], [0.5, -1.5]):
            when = tr("With values={values} on {device}", values=values, device=shown(device))
            result, problem = call_learner(
                fn, list(values), device, when=when, hint=tr(FACTORY_HINT), more=tr(FACTORY_MORE), see=SECTION_FACTORY
            )
            if problem is not None:
                return problem
            if not isinstance(result, torch.Tensor):
                return failed(
                    tr("{when}: return a tensor, not {type_name}.", when=when, type_name=type(result).__name__),
                    tr("Build a tensor from the list and return the tensor itself."),
                    see=SECTION_FACTORY,
                )
            if result.device != device:
                return failed(
                    tr("{when}: your tensor is on {got}.", when=when, got=result.device),
                    tr(
                        "torch.tensor can take the device too: it then copies the list's values there in the same call."
                    ),
                    more=tr(FACTORY_MORE),
                    see=SECTION_FACTORY,
                )
            if result.dtype != torch.float32:
                if result.dtype == torch.int64:
                    hint = tr("torch.tensor infers int64 from Python ints: ask for torch.float32 explicitly.")
                elif result.dtype == torch.float64:
                    hint = tr(
                        "float64 takes twice the memory, is slow on most GPUs and absent on Apple MPS: "
                        "ask for torch.float32 explicitly."
                    )
                else:
                    hint = tr("Ask for torch.float32 explicitly, in the call that builds the tensor.")
                return failed(
                    tr("{when}: your tensor's dtype is {dtype}, not torch.float32.", when=when, dtype=result.dtype),
                    hint,
                    more=tr(FACTORY_MORE),
                    see=SECTION_FACTORY,
                )
            expected = torch.tensor(values, dtype=torch.float32, device=device)
            if not _same_values(result, expected):
                return failed(
                    tr("{when}: your tensor has shape {shape} or other values.", when=when, shape=tuple(result.shape)),
                    tr("Build it from the list itself; torch.Tensor(3) would be 3 uninitialised numbers."),
                    more=tr(FACTORY_MORE),
                    see=SECTION_FACTORY,
                )
    return passed(tr("float32, on the device asked for, with the list's values (ints included)."))


# The exercises as the could-not-be-checked hint states them (each check's docstring: helpers.exercises.statement).
STATEMENTS = (
    tr_lazy("`fn(t, device)` returns `t` moved to `device`; `t` itself stays where it was."),
    tr_lazy("`fn(values, device)` builds a float32 tensor on `device` from a Python list."),
)
