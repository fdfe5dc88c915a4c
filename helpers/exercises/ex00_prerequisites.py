"""Checks for notebook 00's exercises. Each runs the learner's code on this machine and on
simulated ones (no GPU, two GPUs, an Apple Mac), because a laptop alone cannot catch every bug."""

from __future__ import annotations

import numpy as np
import torch

from helpers.exercises import call_learner, exercise_check, failed, passed
from helpers.simulate import DRIVER_TOO_OLD, simulated_machine

INVENTORY_MACHINES = [
    ("a machine with no GPU", dict(cuda=0)),
    ("a machine with one GPU", dict(cuda=1, memory_gib=[15.8])),
    ("a machine with two different GPUs", dict(cuda=2, memory_gib=[23.6, 10.7])),
    (
        "a machine whose NVIDIA driver is too old for this PyTorch (NVML counts 2 GPUs, CUDA cannot start)",
        dict(cuda=2, memory_gib=[23.6, 10.7], cuda_init_error=DRIVER_TOO_OLD),
    ),
]
"""Where gpu_inventory runs: its GPUs are called ``Sim 0``, ``Sim 1`` and differ in memory, so a
hard-coded size or the first GPU's size for every GPU shows."""

GUARD_HINT = (
    "torch.cuda.device_count() counts GPUs through NVML, also GPUs CUDA cannot use (a driver too old, a "
    "broken setup): return [] unless torch.cuda.is_available()."
)


def _expected_inventory(machine: dict) -> list[tuple[int, str, float]]:
    if machine.get("cuda_init_error"):
        return []
    return [(i, f"Sim {i}", gib) for i, gib in enumerate(machine.get("memory_gib", []))]


def _memory_hint(got: float, want: float) -> str:
    """What a wrong memory figure most likely is."""
    size = want * 2**30  # bytes
    for value, hint in (
        (size, "total_memory is in bytes: divide by 2**30 (1024**3) for GiB."),
        (size / 1e9, "That is GB (10**9 bytes); a GiB is 2**30 bytes: divide by 2**30."),
        (size / 2**20, "That is MiB: divide the bytes by 2**30 (1024**3) for GiB."),
    ):
        if abs(got - value) <= 0.051 * max(1.0, value / want):
            return hint
    return "Read each GPU's own total_memory, get_device_properties(i).total_memory, and divide by 2**30."


@exercise_check
def gpu_inventory(fn) -> object:
    """``fn()`` lists every visible CUDA GPU as ``(index, name, memory_gib)``; ``[]`` without one."""
    for label, machine in INVENTORY_MACHINES:
        expected = _expected_inventory(machine)
        with simulated_machine(gpu_name="Sim", **machine):
            if machine.get("cuda_init_error"):
                hint = GUARD_HINT
            elif not machine["cuda"]:
                hint = "Without a GPU, return [] before asking for a name: get_device_name(0) raises."
            else:
                hint = ""
            result, problem = call_learner(fn, when=f"On {label}", hint=hint)
        if problem is not None:
            return problem
        if result is None:
            return failed(f"On {label} your function returned None.", "End it with `return gpus`.")
        if not isinstance(result, (list, tuple)):
            return failed(
                f"Return a list, not {type(result).__name__}.", "Build `gpus = []` and append a tuple per GPU."
            )
        if len(result) != len(expected):
            if machine.get("cuda_init_error"):
                hint = GUARD_HINT
            elif not expected:
                hint = "Without a GPU, return [] before asking for any device's name: get_device_name(0) raises there."
            else:
                hint = "Loop over range(torch.cuda.device_count()), not over a fixed index."
            return failed(f"On {label} your list has {len(result)} entries instead of {len(expected)}.", hint)
        for got, want in zip(result, expected, strict=True):
            if not isinstance(got, (tuple, list)) or len(got) != 3:
                shape = f"a {len(got)}-item {type(got).__name__}" if isinstance(got, (tuple, list)) else repr(got)
                return failed(
                    f"On {label} an entry is {shape}: {got!r}.",
                    "Each entry is a 3-tuple (index, name, memory_gib), e.g. (0, 'Sim 0', 23.6).",
                )
            index, name, memory = got
            if (index, name) != want[:2]:
                return failed(
                    f"On {label}, GPU {want[0]}'s entry starts {(index, name)!r}, expected {want[:2]!r}.",
                    "Each entry is (index, name, memory_gib), the name from torch.cuda.get_device_name(i).",
                )
            if isinstance(memory, bool) or not isinstance(memory, (int, float)):
                return failed(
                    f"GPU {want[0]}'s memory is {type(memory).__name__} {memory!r}, not a number of GiB.",
                    "round(props.total_memory / 2**30, 1) is a float.",
                )
            if abs(memory - want[2]) > 0.051:
                return failed(
                    f"On {label}, GPU {want[0]} has {want[2]} GiB; your entry says {memory}.",
                    _memory_hint(float(memory), want[2]),
                )
    return passed("Right on machines with no GPU, one GPU and two GPUs.")


CHOICE_MACHINES = [
    (dict(cuda=2), {"cuda"}, "two CUDA GPUs"),
    (dict(cuda=0, mps=True, cuda_build=False), {"mps"}, "an Apple Mac (MPS only)"),
    (dict(cuda=0), {"cpu"}, "a CPU-only laptop"),
    (dict(cuda=1, mps=True), {"cuda"}, "CUDA and MPS both (CUDA wins)"),
    (
        dict(cuda=2, cuda_init_error=DRIVER_TOO_OLD),
        {"cpu"},
        "a machine whose NVIDIA driver is too old for this PyTorch (NVML counts 2 GPUs, CUDA cannot start)",
    ),
    (dict(other_accelerator="xpu", cuda_build=False), {"cpu", "xpu"}, "a machine with an Intel GPU (XPU) only"),
    (
        dict(cuda=0, mps=False, mps_built=True, cuda_build=False),
        {"cpu"},
        "a Mac whose PyTorch has MPS but whose macOS cannot run it (before 12.3)",
    ),
]
"""(machine, device types accepted, label). On an XPU machine the CPU is the exercise's answer; the XPU
is what ``torch.accelerator`` picks, which is right there too."""


@exercise_check
def choose_device(fn) -> object:
    """``fn()`` returns a torch.device: CUDA if available, else MPS, else CPU."""
    for machine, accepted, label in CHOICE_MACHINES:
        with simulated_machine(**machine):
            result, problem = call_learner(fn, when=f"On {label}")
        if problem is not None:
            return problem
        if isinstance(result, str):
            return failed(f"You returned the string {result!r}.", "Wrap it: torch.device(...).")
        if not isinstance(result, torch.device):
            return failed(f"Return a torch.device, not {type(result).__name__}.")
        if result.type not in accepted:
            want = sorted(accepted)[0]
            if machine.get("mps_built") and result.type == "mps":
                hint = (
                    "torch.backends.mps.is_built() says this PyTorch was built with MPS, not that this Mac can run "
                    "it: ask torch.backends.mps.is_available()."
                )
            elif machine.get("cuda_init_error") and result.type == "cuda":
                hint = (
                    "torch.cuda.device_count() counts GPUs CUDA cannot use (here the driver is too old): ask "
                    "torch.cuda.is_available(), which is False when CUDA cannot start."
                )
            else:
                hint = {
                    "mps": "Check torch.backends.mps.is_available() after CUDA.",
                    "cpu": "Fall back to torch.device('cpu') when nothing else is there.",
                    "cuda": "Ask torch.cuda.is_available() first.",
                }[want]
            return failed(f"On {label} you chose {result.type}, expected {want}.", hint)
    return passed(f"Picks CUDA, then MPS, then the CPU, on all {len(CHOICE_MACHINES)} simulated machines.")


CVD_SCENARIOS = {
    "a": "os.environ['CUDA_VISIBLE_DEVICES'] = '1' in the first cell, before import torch",
    "b": "the same line after import torch, before any torch.cuda call",
    "c": "the same line after torch.cuda.is_available() has run, in the same kernel",
    "d": "CUDA_VISIBLE_DEVICES=1 jupyter lab, in the terminal that starts Jupyter",
}
_CVD_ANSWERS = {"a": True, "b": True, "c": False, "d": True}
_CVD_WHY = {
    "a": "Nothing has initialised CUDA yet, so the setting is read when it does.",
    "b": "import torch does not initialise CUDA; is_available() or the first .cuda() does.",
    "c": "is_available() has already initialised CUDA in this process: the change is silently ignored "
    "(restart the kernel).",
    "d": "The kernel inherits the variable from the process that starts it.",
}


@exercise_check
def visible_devices_quiz(answers: dict) -> object:
    """``answers`` maps each scenario letter to True (takes effect) or False."""
    if not isinstance(answers, dict):
        return failed(f"Give a dict with the keys {sorted(CVD_SCENARIOS)}, each True or False.")
    answers = {str(k).strip().strip("()").lower(): v for k, v in answers.items()}
    if set(answers) != set(CVD_SCENARIOS):
        return failed(f"Give a dict with the keys {sorted(CVD_SCENARIOS)}, each True or False.")
    unanswered = [k for k in sorted(answers) if not isinstance(answers[k], (bool, np.bool_))]
    if unanswered:
        return failed(f"Answer {', '.join(unanswered)} with True or False.")
    answers = {k: bool(v) for k, v in answers.items()}
    wrong = [k for k in sorted(answers) if answers[k] != _CVD_ANSWERS[k]]
    if wrong:
        return failed(
            f"Not quite: {', '.join(wrong)}.",
            " ".join(f"({k}) {_CVD_WHY[k]}" for k in wrong),
        )
    return passed("All four right: the variable counts only until CUDA initialises.")
