"""Checks for notebook 00's exercises. Each runs the learner's code on this machine and on
simulated ones (no GPU, two GPUs, an Apple Mac), because a laptop alone cannot catch every bug."""

from __future__ import annotations

import torch

from helpers.exercises import call_learner, exercise_check, failed, passed
from helpers.simulate import simulated_machine


@exercise_check
def gpu_inventory(fn) -> object:
    """``fn()`` lists every visible CUDA GPU as ``(index, name, memory_gib)``; ``[]`` without one."""
    machines = [(0, "no GPU"), (1, "one GPU"), (2, "two GPUs")]
    for count, label in machines:
        with simulated_machine(cuda=count, gpu_name="Sim", memory_gib=24):
            hint = "Without a GPU, return [] before asking for a name: get_device_name(0) raises." if not count else ""
            result, problem = call_learner(fn, when=f"On a machine with {label}", hint=hint)
            if problem is not None:
                return problem
            expected = [(i, f"Sim {i}", 24.0) for i in range(count)]
        if result is None:
            return failed(f"On a machine with {label} your function returned None.", "End it with `return gpus`.")
        if not isinstance(result, list):
            return failed(
                f"Return a list, not {type(result).__name__}.", "Build `gpus = []` and append a tuple per GPU."
            )
        if len(result) != count:
            hint = (
                "Without a GPU, return [] before asking for any device's name: get_device_name(0) raises there."
                if count == 0
                else "Loop over range(torch.cuda.device_count()), not over a fixed index."
            )
            return failed(f"On a machine with {label} your list has {len(result)} entries instead of {count}.", hint)
        for got, want in zip(result, expected, strict=True):
            if tuple(got)[:2] != want[:2]:
                return failed(f"Expected {want[:2]} first, got {tuple(got)[:2]}.", "Each entry is (index, name, GiB).")
            if round(float(tuple(got)[2]), 1) != want[2]:
                return failed(
                    f"A 24 GiB GPU came out as {tuple(got)[2]} GiB.",
                    "total_memory is in bytes: divide by 2**30 (1024**3) for GiB.",
                )
    return passed("Right on machines with no GPU, one GPU and two GPUs.")


@exercise_check
def choose_device(fn) -> object:
    """``fn()`` returns a torch.device: CUDA if available, else MPS, else CPU."""
    cases = [
        (dict(cuda=2), torch.device("cuda"), "two CUDA GPUs"),
        (dict(cuda=0, mps=True, cuda_build=False), torch.device("mps"), "an Apple Mac (MPS only)"),
        (dict(cuda=0), torch.device("cpu"), "a CPU-only laptop"),
        (dict(cuda=1, mps=True), torch.device("cuda"), "CUDA and MPS both (CUDA wins)"),
    ]
    for machine, want, label in cases:
        with simulated_machine(**machine):
            result, problem = call_learner(fn, when=f"On {label}")
        if problem is not None:
            return problem
        if isinstance(result, str):
            return failed(f"You returned the string {result!r}.", "Wrap it: torch.device(...).")
        if not isinstance(result, torch.device):
            return failed(f"Return a torch.device, not {type(result).__name__}.")
        if result.type != want.type:
            hint = {
                "mps": "Check torch.backends.mps.is_available() after CUDA.",
                "cpu": "Fall back to torch.device('cpu') when nothing else is there.",
                "cuda": "Ask torch.cuda.is_available() first.",
            }[want.type]
            return failed(f"On {label} you chose {result.type}, expected {want.type}.", hint)
    return passed("Picks CUDA, then MPS, then the CPU, on all four simulated machines.")


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
    if not isinstance(answers, dict) or set(answers) != set(CVD_SCENARIOS):
        return failed(f"Give a dict with the keys {sorted(CVD_SCENARIOS)}, each True or False.")
    unanswered = [k for k, v in answers.items() if not isinstance(v, bool)]
    if unanswered:
        return failed(f"Answer {', '.join(unanswered)} with True or False.")
    wrong = [k for k in sorted(answers) if answers[k] != _CVD_ANSWERS[k]]
    if wrong:
        return failed(
            f"Not quite: {', '.join(wrong)}.",
            " ".join(f"({k}) {_CVD_WHY[k]}" for k in wrong),
        )
    return passed("All four right: the variable counts only until CUDA initialises.")
