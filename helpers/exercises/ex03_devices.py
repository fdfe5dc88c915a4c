"""Checks for notebook 03's exercises (``torch.device`` objects).

``choose_device`` is checked on simulated machines (no GPU, two GPUs), so its feedback is the same
on every machine. ``weighted_score`` also runs towards ``OTHER_DEVICE`` (meta): on a CPU-only
machine a tensor created on the CPU is already "on the right device", which hides the bug.
"""

from __future__ import annotations

import torch

from helpers.devices import DeviceError, pick_device
from helpers.exercises import OTHER_DEVICE, call_learner, exercise_check, failed, passed, shown
from helpers.simulate import DRIVER_TOO_OLD, simulated_machine

SECTION_OBJECT = "1. A device is a small object: a type and an index"
SECTION_PICKER = "6. Device-agnostic code, then the course's picker"
SECTION_LIKE = "5. new_* and *_like keep the device and the dtype"
SECTION_MIXED = '8. Common error: "Expected all tensors to be on the same device"'

NORMALISE_HINT = (
    "Clean the text before anything reads it (the spaces, the case, the word 'gpu': the exercise lists them), "
    "then let pick_device() do the rest: it also checks that the device is there."
)
NORMALISE_MORE = (
    "Python's str methods do the cleaning: split() with no argument splits at any whitespace, and join() "
    "glues the pieces back; lower(); startswith() and slicing (or replace()) for 'gpu'. A worked case: "
    "' CUDA: 0 ' becomes 'cuda:0', and pick_device turns that into torch.device('cuda', 0), or raises "
    "DeviceError on a machine without that GPU. Section 2 shows which spellings torch.device refuses."
)


BROKEN = "a machine whose NVIDIA driver is too old for this PyTorch (NVML counts 2 GPUs, CUDA cannot start)"
BROKEN_SPEC = {"cuda": 2, "cuda_init_error": DRIVER_TOO_OLD}
BROKEN_HINT = (
    "torch.cuda.device_count() counts GPUs CUDA cannot use (here the driver is too old); "
    "torch.cuda.is_available() is False there. pick_device() asks the right question: hand the cleaned text to it."
)
MISSING = [
    ("a machine with no GPU", {"cuda": 0}, "cuda:0"),
    (BROKEN, BROKEN_SPEC, "cuda"),
    ("two CUDA GPUs", {"cuda": 2}, "cuda:2"),
]
"""(machine, simulated_machine arguments, text) where the GPU asked for is not there: DeviceError expected."""


def _chosen(fn, text: str, machine: str):
    """Run ``fn(text)``; return (device, None) or (None, failed feedback)."""
    result, problem = call_learner(
        fn, text, when=f"On {machine}, with text={text!r}", hint=NORMALISE_HINT, more=NORMALISE_MORE, see=SECTION_PICKER
    )
    if problem is not None:
        return None, problem
    if not isinstance(result, torch.device):
        return None, failed(
            f"On {machine}, with text={text!r} you returned {type(result).__name__} {result!r}, not a torch.device.",
            "Return the torch.device that pick_device() gives you; code then compares it with tensor.device.",
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
        ("two CUDA GPUs", {"cuda": 2}, "CUDA:0", torch.device("cuda", 0)),
        ("two CUDA GPUs", {"cuda": 2}, "cuda: 1", torch.device("cuda", 1)),
        ("two CUDA GPUs", {"cuda": 2}, " cuda ", torch.device("cuda", 0)),
        ("two CUDA GPUs", {"cuda": 2}, "gpu", torch.device("cuda", 0)),
        ("two CUDA GPUs", {"cuda": 2}, "auto", torch.device("cuda", 0)),
        ("two CUDA GPUs", {"cuda": 2}, "", torch.device("cuda", 0)),
        ("a machine with no GPU", {"cuda": 0}, " CPU ", torch.device("cpu")),
        ("a machine with no GPU", {"cuda": 0}, "auto", torch.device("cpu")),
        (BROKEN, BROKEN_SPEC, "auto", torch.device("cpu")),
    ]
    for machine, spec, text, expected in cases:
        with simulated_machine(**spec):
            result, problem = _chosen(fn, text, machine)
        if problem is not None:
            return problem
        if result != expected:
            if _ignores_text(fn):
                return failed(
                    f"On {machine}, text={text!r} should give {expected}, you returned {result}. Your function "
                    "ignores the user's text: 'cpu' and 'cuda:1' give the same device.",
                    "The article's one-liner decides the device by itself. Start from the text instead: "
                    + NORMALISE_HINT,
                    more=NORMALISE_MORE,
                    see=SECTION_PICKER,
                )
            see, more = SECTION_PICKER, NORMALISE_MORE
            if result.type == expected.type and result.index is None:
                see = SECTION_OBJECT
                hint = (
                    "torch.device('cuda') has no index and != torch.device('cuda:0'); pick_device() "
                    "returns the indexed device, so `tensor.device == device` holds."
                )
            elif spec.get("cuda_init_error") and result.type == "cuda":
                hint = BROKEN_HINT
            elif text in ("", "auto"):
                hint = "'auto' and an empty text mean the best device present, which pick_device() finds for you."
            else:
                hint = NORMALISE_HINT
            return failed(
                f"On {machine}, text={text!r} should give {expected}, you returned {result}.", hint, more=more, see=see
            )
    for machine, spec, text in MISSING:
        with simulated_machine(**spec):
            try:
                result = fn(text)
            except DeviceError:
                result = None
            except Exception as err:  # the learner's error is the feedback
                return failed(
                    f"On {machine}, text={text!r} raised {type(err).__name__}: {err}",
                    "Let pick_device() raise its DeviceError: its message names the devices that are available.",
                    see=SECTION_PICKER,
                )
        if result is not None:
            return failed(
                f"On {machine}, text={text!r} returned {result}: the user asked for a GPU that is not there.",
                BROKEN_HINT
                if spec.get("cuda_init_error")
                else "Never switch devices silently: let pick_device() raise its DeviceError, which says what is "
                "available.",
                see=SECTION_PICKER,
            )
    return passed(
        "Forgiving about spaces, case and 'gpu'; 'auto' picks the best device; a missing GPU is an error, not a "
        "silent switch to the CPU."
    )


def _weights_for(x: torch.Tensor) -> torch.Tensor:
    return torch.tensor([0.2, 0.3, 0.5], dtype=x.dtype, device=x.device)


MIXED_HINT = (
    "A tensor created without device= lives on the CPU, whatever device x is on. Create the weights where x "
    "is, in x's dtype. If your code moves the weights, keep what the move returns: it does not change w."
)
MIXED_MORE = (
    "Section 5's methods make a tensor from another one, on its device and in its dtype (the tensor's "
    "new_tensor method takes a list); a factory such as torch.tensor can also be told both, from x's "
    "attributes. Section 8 shows the error a CPU-made constant gives next to a GPU tensor."
)


@exercise_check
def weighted_score(fn) -> object:
    """``fn(x)`` is ``(x * [0.2, 0.3, 0.5]).sum(-1)`` computed on ``x``'s device, in ``x``'s dtype."""
    device = pick_device()
    cases = [
        (device, torch.float32, f"x on the course device ({device})"),
        (OTHER_DEVICE, torch.float32, f"x on {shown(OTHER_DEVICE)}"),
        (OTHER_DEVICE, torch.float16, f"x in float16 on {shown(OTHER_DEVICE)}"),
    ]
    if device.type != "mps":  # MPS has no float64
        cases.insert(1, (device, torch.float64, f"x in float64 on {device}"))
    for where, dtype, label in cases:
        x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, -1.0]], dtype=dtype, device=where)
        result, problem = call_learner(fn, x, when=f"With {label}", hint=MIXED_HINT, more=MIXED_MORE, see=SECTION_MIXED)
        if problem is not None:
            return problem
        if not isinstance(result, torch.Tensor):
            return failed(
                f"With {label}: return a tensor, not {type(result).__name__}.",
                "Return the scores as a tensor, where x is; the caller fetches them when it needs the numbers.",
                see=SECTION_LIKE,
            )
        if result.device != x.device:
            return failed(
                f"With {label}, your result is on {result.device}.",
                "Compute where x is: do not move x, create the weights on x's device.",
                more=MIXED_MORE,
                see=SECTION_LIKE,
            )
        if result.dtype != x.dtype:
            if x.dtype == torch.float64 and result.dtype == torch.float32:  # float32 weights would give float64
                hint = (
                    "Do not cast x (x.float() turns float64 into float32): compute in x's dtype and give the "
                    "weights that dtype too."
                )
            else:
                hint = "Give the weights x's dtype too (section 5's methods copy both), and do not cast x itself."
            return failed(
                f"With {label}, your result is {result.dtype}, not {x.dtype}.", hint, more=MIXED_MORE, see=SECTION_LIKE
            )
        if result.shape != (2,):
            return failed(
                f"With {label}, your result has shape {tuple(result.shape)}, not (2,).",
                "One score per row of x: add up along the last dimension.",
                see=SECTION_LIKE,
            )
        if where.type != "meta":
            expected = (x * _weights_for(x)).sum(-1)
            if not torch.allclose(result.float().cpu(), expected.float().cpu(), atol=1e-3):
                return failed(
                    f"With {label} you returned {result.tolist()}, expected {expected.tolist()}.",
                    "Each row's score is its three values times 0.2, 0.3 and 0.5, added up.",
                    see=SECTION_LIKE,
                )
    return passed("The weights are created where x lives, in x's dtype: no device or dtype mix-up anywhere.")
