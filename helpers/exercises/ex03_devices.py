"""Checks for notebook 03's exercises (``torch.device`` objects).

``choose_device`` is checked on simulated machines (no GPU, two GPUs), so its feedback is the same
on every machine. ``weighted_score`` also runs towards ``OTHER_DEVICE`` (meta): on a CPU-only
machine a tensor created on the CPU is already "on the right device", which hides the bug.
"""

from __future__ import annotations

import torch

from helpers.devices import DeviceError, pick_device
from helpers.exercises import OTHER_DEVICE, call_learner, exercise_check, failed, passed
from helpers.simulate import DRIVER_TOO_OLD, simulated_machine

NORMALISE_HINT = (
    "Clean the text before anything reads it: drop every space (''.join(text.split())), lower-case it, "
    "turn a leading 'gpu' into 'cuda', then give it to pick_device(), which also checks the device is there."
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
    result, problem = call_learner(fn, text, when=f"On {machine}, with text={text!r}", hint=NORMALISE_HINT)
    if problem is not None:
        return None, problem
    if not isinstance(result, torch.device):
        return None, failed(
            f"With text={text!r} you returned {type(result).__name__} {result!r}, not a torch.device.",
            "Return the torch.device that pick_device() gives you; code then compares it with tensor.device.",
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
                )
            if result.type == expected.type and result.index is None:
                hint = (
                    "torch.device('cuda') has no index and != torch.device('cuda:0'); pick_device('cuda') "
                    "returns the indexed device, so `tensor.device == device` holds."
                )
            elif spec.get("cuda_init_error") and result.type == "cuda":
                hint = BROKEN_HINT
            elif text in ("", "auto"):
                hint = "'auto' and an empty text mean: the best device present, i.e. pick_device('auto')."
            else:
                hint = NORMALISE_HINT
            return failed(f"On {machine}, text={text!r} should give {expected}, you returned {result}.", hint)
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
                )
        if result is not None:
            return failed(
                f"On {machine}, text={text!r} returned {result}: the user asked for a GPU that is not there.",
                BROKEN_HINT
                if spec.get("cuda_init_error")
                else "Never switch devices silently: let pick_device() raise its DeviceError, which says what is "
                "available.",
            )
    return passed(
        "Forgiving about spaces, case and 'gpu'; 'auto' picks the best device; a missing GPU is an error, not a "
        "silent switch to the CPU."
    )


def _weights_for(x: torch.Tensor) -> torch.Tensor:
    return torch.tensor([0.2, 0.3, 0.5], dtype=x.dtype, device=x.device)


MIXED_HINT = (
    "A tensor created without device= lives on the CPU, whatever device x is on. Create the weights where x is: "
    "torch.tensor([0.2, 0.3, 0.5], device=x.device, dtype=x.dtype) or x.new_tensor([0.2, 0.3, 0.5]). "
    "If you wrote w.to(x.device), keep its result: w = w.to(x.device)."
)


@exercise_check
def weighted_score(fn) -> object:
    """``fn(x)`` is ``(x * [0.2, 0.3, 0.5]).sum(-1)`` computed on ``x``'s device, in ``x``'s dtype."""
    device = pick_device()
    cases = [
        (device, torch.float32, f"x on the course device ({device})"),
        (OTHER_DEVICE, torch.float32, "x on a device that is not the CPU (meta)"),
        (OTHER_DEVICE, torch.float16, "x in float16 on meta"),
    ]
    if device.type != "mps":  # MPS has no float64
        cases.insert(1, (device, torch.float64, f"x in float64 on {device}"))
    for where, dtype, label in cases:
        x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, -1.0]], dtype=dtype, device=where)
        result, problem = call_learner(fn, x, when=f"With {label}", hint=MIXED_HINT)
        if problem is not None:
            return problem
        if not isinstance(result, torch.Tensor):
            return failed(f"Return a tensor, not {type(result).__name__}.", "return (x * w).sum(-1)")
        if result.device != x.device:
            return failed(
                f"With {label}, your result is on {result.device}.",
                "Compute where x is: do not move x, create the weights on x.device.",
            )
        if result.dtype != x.dtype:
            if x.dtype == torch.float64 and result.dtype == torch.float32:  # float32 weights would give float64
                hint = (
                    "Do not cast x (x.float() turns float64 into float32): compute in x's dtype and give the "
                    "weights that dtype: dtype=x.dtype, or x.new_tensor([...])."
                )
            else:
                hint = (
                    "Give the weights x's dtype too: dtype=x.dtype, or x.new_tensor([...]), which copies both "
                    "(and do not cast x itself)."
                )
            return failed(f"With {label}, your result is {result.dtype}, not {x.dtype}.", hint)
        if result.shape != (2,):
            return failed(f"With {label}, your result has shape {tuple(result.shape)}, not (2,).", "Sum over -1.")
        if where.type != "meta":
            expected = (x * _weights_for(x)).sum(-1)
            if not torch.allclose(result.float().cpu(), expected.float().cpu(), atol=1e-3):
                return failed(
                    f"With {label} you returned {result.tolist()}, expected {expected.tolist()}.",
                    "(x * w).sum(-1) with w = [0.2, 0.3, 0.5].",
                )
    return passed("The weights are created where x lives, in x's dtype: no device or dtype mix-up anywhere.")
