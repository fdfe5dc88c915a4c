"""Checks for notebook 03's exercises (``torch.device`` objects).

``choose_device`` is checked on simulated machines (no GPU, two GPUs), so its feedback is the same
on every machine. ``weighted_score`` also runs towards ``OTHER_DEVICE`` (meta): on a CPU-only
machine a tensor created on the CPU is already "on the right device", which hides the bug.
"""

from __future__ import annotations

import torch

from helpers.course.i18n import tr, tr_lazy
from helpers.exercises import OTHER_DEVICE, call_learner, exercise_check, failed, passed, shown
from helpers.lab.simulate import DRIVER_TOO_OLD, simulated_machine
from helpers.lesson.devices import DeviceError, pick_device

SECTION_OBJECT = "1. A device is a small object: a type and an index"
SECTION_PICKER = "6. Device-agnostic code, then the course's picker"
SECTION_LIKE = "5. `new_*` and `*_like` keep the device and the dtype"
SECTION_MIXED = '8. Common error: "Expected all tensors to be on the same device"'

NORMALISE_HINT = tr_lazy(
    "Clean the text before anything reads it (the spaces, the case, the word 'gpu': the exercise lists them), "
    "then let pick_device() do the rest: it also checks that the device is there."
)
NORMALISE_MORE = tr_lazy(
    "Python's str methods do the cleaning: split() with no argument splits at any whitespace, and join() "
    "glues the pieces back; lower(); startswith() and slicing (or replace()) for 'gpu'. A worked case: "
    "' CUDA: 0 ' becomes 'cuda:0', and pick_device turns that into torch.device('cuda', 0), or raises "
    "DeviceError on a machine without that GPU. Section 2 shows which spellings torch.device refuses."
)


BROKEN = tr_lazy("a machine whose NVIDIA driver is too old for this PyTorch (NVML counts 2 GPUs, CUDA cannot start)")
BROKEN_SPEC = {"cuda": 2, "cuda_init_error": DRIVER_TOO_OLD}
BROKEN_HINT = tr_lazy(
    "torch.cuda.device_count() counts GPUs CUDA cannot use (here the driver is too old); "
    "torch.cuda.is_available() is False there. pick_device() asks the right question: hand the cleaned text to it."
)
NO_GPU = tr_lazy("a machine with no GPU")
TWO_GPUS = tr_lazy("two CUDA GPUs")
MISSING = [
    (NO_GPU, {"cuda": 0}, "cuda:0"),
    (BROKEN, BROKEN_SPEC, "cuda"),
    (TWO_GPUS, {"cuda": 2}, "cuda:2"),
]
"""(machine, simulated_machine arguments, text) where the GPU asked for is not there: DeviceError expected."""


def _chosen(fn, text: str, machine: str):
    """Run ``fn(text)``; return (device, None) or (None, failed feedback)."""
    result, problem = call_learner(
        fn,
        text,
        when=tr("On {machine}, with text={text}", machine=tr(machine), text=repr(text)),
        hint=tr(NORMALISE_HINT),
        more=tr(NORMALISE_MORE),
        see=SECTION_PICKER,
    )
    if problem is not None:
        return None, problem
    if not isinstance(result, torch.device):
        return None, failed(
            tr(
                "On {machine}, with text={text} you returned {type_name} {value}, not a torch.device.",
                machine=tr(machine),
                text=repr(text),
                type_name=type(result).__name__,
                value=repr(result),
            ),
            tr("Return the torch.device that pick_device() gives you; code then compares it with tensor.device."),
            see=SECTION_OBJECT,
        )
    return result, None


def _ignores_text(fn) -> bool:
    """True when ``fn`` gives the same answer for 'cpu' and 'cuda:1' on a machine with two GPUs."""
    with simulated_machine(cuda=2):
        try:
            return fn("cpu") == fn("cuda:1")
        except Exception:  # an error is a reaction to the text
            return False


@exercise_check
def choose_device(fn) -> object:
    """``fn(text)`` turns a user's device text into a ``torch.device`` that is really there."""
    cases = [
        (TWO_GPUS, {"cuda": 2}, "CUDA:0", torch.device("cuda", 0)),
        (TWO_GPUS, {"cuda": 2}, "cuda: 1", torch.device("cuda", 1)),
        (TWO_GPUS, {"cuda": 2}, " cuda ", torch.device("cuda", 0)),
        (TWO_GPUS, {"cuda": 2}, "gpu", torch.device("cuda", 0)),
        (TWO_GPUS, {"cuda": 2}, "auto", torch.device("cuda", 0)),
        (TWO_GPUS, {"cuda": 2}, "", torch.device("cuda", 0)),
        (NO_GPU, {"cuda": 0}, " CPU ", torch.device("cpu")),
        (NO_GPU, {"cuda": 0}, "auto", torch.device("cpu")),
        (BROKEN, BROKEN_SPEC, "auto", torch.device("cpu")),
    ]
    for machine, spec, text, expected in cases:
        with simulated_machine(**spec):
            result, problem = _chosen(fn, text, machine)
        if problem is not None:
            return problem
        case = dict(machine=tr(machine), text=repr(text), expected=expected, got=result)
        if result != expected:
            if _ignores_text(fn):
                return failed(
                    tr(
                        "On {machine}, text={text} should give {expected}, you returned {got}. Your function "
                        "ignores the user's text: 'cpu' and 'cuda:1' give the same device.",
                        **case,
                    ),
                    tr(
                        "The article's one-liner decides the device by itself. Start from the text instead: {hint}",
                        hint=tr(NORMALISE_HINT),
                    ),
                    more=tr(NORMALISE_MORE),
                    see=SECTION_PICKER,
                )
            see, more = SECTION_PICKER, tr(NORMALISE_MORE)
            if result.type == expected.type and result.index is None:
                see = SECTION_OBJECT
                hint = tr(
                    "torch.device('cuda') has no index and != torch.device('cuda:0'); pick_device() "
                    "returns the indexed device, so `tensor.device == device` holds."
                )
            elif spec.get("cuda_init_error") and result.type == "cuda":
                hint = tr(BROKEN_HINT)
            elif text in ("", "auto"):
                hint = tr("'auto' and an empty text mean the best device present, which pick_device() finds for you.")
            else:
                hint = tr(NORMALISE_HINT)
            return failed(
                tr("On {machine}, text={text} should give {expected}, you returned {got}.", **case),
                hint,
                more=more,
                see=see,
            )
    for machine, spec, text in MISSING:
        with simulated_machine(**spec):
            try:
                result = fn(text)
            except DeviceError:
                result = None
            except Exception as err:  # the learner's error is the feedback
                return failed(
                    tr(
                        "On {machine}, text={text} raised {error_type}: {error}",
                        machine=tr(machine),
                        text=repr(text),
                        error_type=type(err).__name__,
                        error=err,
                    ),
                    tr("Let pick_device() raise its DeviceError: its message names the devices that are available."),
                    see=SECTION_PICKER,
                )
        if result is not None:
            return failed(
                tr(
                    "On {machine}, text={text} returned {got}: the user asked for a GPU that is not there.",
                    machine=tr(machine),
                    text=repr(text),
                    got=result,
                ),
                tr(BROKEN_HINT)
                if spec.get("cuda_init_error")
                else tr(
                    "Never switch devices silently: let pick_device() raise its DeviceError, which says what is "
                    "available."
                ),
                see=SECTION_PICKER,
            )
    return passed(
        tr(
            "Forgiving about spaces, case and 'gpu'; 'auto' picks the best device; a missing GPU is an error, not a "
            "silent switch to the CPU."
        )
    )


def _weights_for(x: torch.Tensor) -> torch.Tensor:
    return torch.tensor([0.2, 0.3, 0.5], dtype=x.dtype, device=x.device)


MIXED_HINT = tr_lazy(
    "A tensor created without device= lives on the CPU, whatever device x is on. Create the weights where x "
    "is, in x's dtype. If your code moves the weights, keep what the move returns: it does not change w."
)
MIXED_MORE = tr_lazy(
    "Section 5's methods make a tensor from another one, on its device and in its dtype (the tensor's "
    "new_tensor method takes a list); a factory such as torch.tensor can also be told both, from x's "
    "attributes. Section 8 shows the error a CPU-made constant gives next to a GPU tensor."
)


@exercise_check
def weighted_score(fn) -> object:
    """``fn(x)`` is ``(x * [0.2, 0.3, 0.5]).sum(-1)`` computed on ``x``'s device, in ``x``'s dtype."""
    device = pick_device()
    cases = [
        (device, torch.float32, tr("x on the course device ({device})", device=device)),
        (OTHER_DEVICE, torch.float32, tr("x on {device}", device=shown(OTHER_DEVICE))),
        (OTHER_DEVICE, torch.float16, tr("x in {dtype} on {device}", dtype="float16", device=shown(OTHER_DEVICE))),
    ]
    if device.type != "mps":  # MPS has no float64
        cases.insert(1, (device, torch.float64, tr("x in {dtype} on {device}", dtype="float64", device=device)))
    for where, dtype, label in cases:
        x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, -1.0]], dtype=dtype, device=where)
        result, problem = call_learner(
            fn,
            x,
            when=tr("With {label}", label=label),
            hint=tr(MIXED_HINT),
            more=tr(MIXED_MORE),
            see=SECTION_MIXED,
        )
        if problem is not None:
            return problem
        if not isinstance(result, torch.Tensor):
            return failed(
                tr("With {label}: return a tensor, not {type_name}.", label=label, type_name=type(result).__name__),
                tr("Return the scores as a tensor, where x is; the caller fetches them when it needs the numbers."),
                see=SECTION_LIKE,
            )
        if result.device != x.device:
            return failed(
                tr("With {label}, your result is on {device}.", label=label, device=result.device),
                tr("Compute where x is: do not move x, create the weights on x's device."),
                more=tr(MIXED_MORE),
                see=SECTION_LIKE,
            )
        if result.dtype != x.dtype:
            if x.dtype == torch.float64 and result.dtype == torch.float32:  # float32 weights would give float64
                hint = tr(
                    "Do not cast x (x.float() turns float64 into float32): compute in x's dtype and give the "
                    "weights that dtype too."
                )
            else:
                hint = tr("Give the weights x's dtype too (section 5's methods copy both), and do not cast x itself.")
            return failed(
                tr("With {label}, your result is {got}, not {want}.", label=label, got=result.dtype, want=x.dtype),
                hint,
                more=tr(MIXED_MORE),
                see=SECTION_LIKE,
            )
        if result.shape != (2,):
            return failed(
                tr("With {label}, your result has shape {shape}, not (2,).", label=label, shape=tuple(result.shape)),
                tr("One score per row of x: add up along the last dimension."),
                see=SECTION_LIKE,
            )
        if where.type != "meta":
            expected = (x * _weights_for(x)).sum(-1)
            if not torch.allclose(result.float().cpu(), expected.float().cpu(), atol=1e-3):
                return failed(
                    tr(
                        "With {label} you returned {got}, expected {expected}.",
                        label=label,
                        got=result.tolist(),
                        expected=expected.tolist(),
                    ),
                    tr("Each row's score is its three values times 0.2, 0.3 and 0.5, added up."),
                    see=SECTION_LIKE,
                )
    return passed(tr("The weights are created where x lives, in x's dtype: no device or dtype mix-up anywhere."))


# The exercises as the could-not-be-checked hint states them (each check's docstring: helpers.exercises.statement).
STATEMENTS = (
    tr_lazy("`fn(text)` turns a user's device text into a `torch.device` that is really there."),
    tr_lazy("`fn(x)` is `(x * [0.2, 0.3, 0.5]).sum(-1)` computed on `x`'s device, in `x`'s dtype."),
)
