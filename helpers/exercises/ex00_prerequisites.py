"""Checks for notebook 00's exercises. Each runs the learner's code on this machine and on
simulated ones (no GPU, two GPUs, an Apple Mac), because a laptop alone cannot catch every bug."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from helpers.course.i18n import tr, tr_lazy
from helpers.exercises import call_learner, exercise_check, failed, passed
from helpers.lab.simulate import DRIVER_TOO_OLD, simulated_machine

BROKEN = tr_lazy("a machine whose NVIDIA driver is too old for this PyTorch (NVML counts 2 GPUs, CUDA cannot start)")
INVENTORY_MACHINES = [
    (tr_lazy("a machine with no GPU"), dict(cuda=0)),
    (tr_lazy("a machine with one GPU"), dict(cuda=1, memory_gib=[15.8])),
    (tr_lazy("a machine with two different GPUs"), dict(cuda=2, memory_gib=[23.6, 10.7])),
    (BROKEN, dict(cuda=2, memory_gib=[23.6, 10.7], cuda_init_error=DRIVER_TOO_OLD)),
]
"""Where gpu_inventory runs: its GPUs are called ``Sim 0``, ``Sim 1`` and differ in memory, so a
hard-coded size or the first GPU's size for every GPU shows."""

GUARD_HINT = tr_lazy(
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
        (size, tr("total_memory is in bytes: divide by 2**30 (1024**3) for GiB.")),
        (size / 1e9, tr("That is GB (10**9 bytes); a GiB is 2**30 bytes: divide by 2**30.")),
        (size / 2**20, tr("That is MiB: divide the bytes by 2**30 (1024**3) for GiB.")),
    ):
        if abs(got - value) <= 0.051 * max(1.0, value / want):
            return hint
    return tr("Read each GPU's own total_memory, get_device_properties(i).total_memory, and divide by 2**30.")


@exercise_check
def gpu_inventory(fn) -> object:
    """``fn()`` lists every visible CUDA GPU as ``(index, name, memory_gib)``; ``[]`` without one."""
    for label, machine in INVENTORY_MACHINES:
        expected = _expected_inventory(machine)
        on = dict(machine=tr(label))
        with simulated_machine(gpu_name="Sim", **machine):
            if machine.get("cuda_init_error"):
                hint = tr(GUARD_HINT)
            elif not machine["cuda"]:
                hint = tr("Without a GPU, return [] before asking for a name: get_device_name(0) raises.")
            else:
                hint = ""
            result, problem = call_learner(fn, when=tr("On {machine}", **on), hint=hint)
        if problem is not None:
            return problem
        if result is None:
            return failed(tr("On {machine} your function returned None.", **on), tr("End it with `return gpus`."))
        if not isinstance(result, (list, tuple)):
            return failed(
                tr("Return a list, not {type_name}.", type_name=type(result).__name__),
                tr("Build `gpus = []` and append a tuple per GPU."),
            )
        if len(result) != len(expected):
            if machine.get("cuda_init_error"):
                hint = tr(GUARD_HINT)
            elif not expected:
                hint = tr(
                    "Without a GPU, return [] before asking for any device's name: get_device_name(0) raises there."
                )
            else:
                hint = tr("Loop over range(torch.cuda.device_count()), not over a fixed index.")
            return failed(
                tr(
                    "On {machine} your list has {count} entries instead of {expected}.",
                    count=len(result),
                    expected=len(expected),
                    **on,
                ),
                hint,
            )
        for got, want in zip(result, expected, strict=True):
            if not isinstance(got, (tuple, list)) or len(got) != 3:
                if isinstance(got, (tuple, list)):
                    shape = tr("a {count}-item {type_name}", count=len(got), type_name=type(got).__name__)
                else:
                    shape = repr(got)
                return failed(
                    tr("On {machine} an entry is {shape}: {entry}.", shape=shape, entry=repr(got), **on),
                    tr("Each entry is a 3-tuple (index, name, memory_gib), e.g. (0, 'Sim 0', 23.6)."),
                )
            index, name, memory = got
            if (index, name) != want[:2]:
                return failed(
                    tr(
                        "On {machine}, GPU {index}'s entry starts {start}, expected {expected}.",
                        index=want[0],
                        start=repr((index, name)),
                        expected=repr(want[:2]),
                        **on,
                    ),
                    tr("Each entry is (index, name, memory_gib), the name from torch.cuda.get_device_name(i)."),
                )
            if isinstance(memory, bool) or not isinstance(memory, (int, float)):
                return failed(
                    tr(
                        "GPU {index}'s memory is {type_name} {value}, not a number of GiB.",
                        index=want[0],
                        type_name=type(memory).__name__,
                        value=repr(memory),
                    ),
                    tr("round(props.total_memory / 2**30, 1) is a float."),
                )
            if abs(memory - want[2]) > 0.051:
                return failed(
                    tr(
                        "On {machine}, GPU {index} has {want} GiB; your entry says {got}.",
                        index=want[0],
                        want=want[2],
                        got=memory,
                        **on,
                    ),
                    _memory_hint(float(memory), want[2]),
                )
    return passed(tr("Right on machines with no GPU, one GPU and two GPUs."))


CHOICE_MACHINES = [
    (dict(cuda=2), {"cuda"}, tr_lazy("two CUDA GPUs")),
    (dict(cuda=0, mps=True, cuda_build=False), {"mps"}, tr_lazy("an Apple Mac (MPS only)")),
    (dict(cuda=0), {"cpu"}, tr_lazy("a CPU-only laptop")),
    (dict(cuda=1, mps=True), {"cuda"}, tr_lazy("CUDA and MPS both (CUDA wins)")),
    (dict(cuda=2, cuda_init_error=DRIVER_TOO_OLD), {"cpu"}, BROKEN),
    (
        dict(other_accelerator="xpu", cuda_build=False),
        {"cpu", "xpu"},
        tr_lazy("a machine with an Intel GPU (XPU) only"),
    ),
    (
        dict(cuda=0, mps=False, mps_built=True, cuda_build=False),
        {"cpu"},
        tr_lazy("a Mac whose PyTorch has MPS but whose macOS cannot run it (before 12.3)"),
    ),
]
"""(machine, device types accepted, label). On an XPU machine the CPU is the exercise's answer; the XPU
is what ``torch.accelerator`` picks, which is right there too."""


@exercise_check
def choose_device(fn) -> object:
    """``fn()`` returns a torch.device: CUDA if available, else MPS, else CPU."""
    for machine, accepted, label in CHOICE_MACHINES:
        with simulated_machine(**machine):
            result, problem = call_learner(fn, when=tr("On {machine}", machine=tr(label)))
        if problem is not None:
            return problem
        if isinstance(result, str):
            return failed(tr("You returned the string {value}.", value=repr(result)), tr("Wrap it: torch.device(...)."))
        if not isinstance(result, torch.device):
            return failed(tr("Return a torch.device, not {type_name}.", type_name=type(result).__name__))
        if result.type not in accepted:
            want = sorted(accepted)[0]
            if machine.get("mps_built") and result.type == "mps":
                hint = tr(
                    "torch.backends.mps.is_built() says this PyTorch was built with MPS, not that this Mac can run "
                    "it: ask torch.backends.mps.is_available()."
                )
            elif machine.get("cuda_init_error") and result.type == "cuda":
                hint = tr(
                    "torch.cuda.device_count() counts GPUs CUDA cannot use (here the driver is too old): ask "
                    "torch.cuda.is_available(), which is False when CUDA cannot start."
                )
            else:
                hint = {
                    "mps": tr("Check torch.backends.mps.is_available() after CUDA."),
                    "cpu": tr("Fall back to torch.device('cpu') when nothing else is there."),
                    "cuda": tr("Ask torch.cuda.is_available() first."),
                }[want]
            return failed(
                tr(
                    "On {machine} you chose {chosen}, expected {want}.",
                    machine=tr(label),
                    chosen=result.type,
                    want=want,
                ),
                hint,
            )
    return passed(
        tr(
            "Picks CUDA, then MPS, then the CPU, on all {count} simulated machines.",
            count=len(CHOICE_MACHINES),
        )
    )


class _Translated(Mapping):
    """A table of messages whose values read in the course's language (``tr``) wherever they are looked up."""

    def __init__(self, table: dict[str, str]) -> None:
        self._table = table

    def __getitem__(self, key: str) -> str:
        return tr(self._table[key])

    def __iter__(self):
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)

    def __repr__(self) -> str:
        return repr(dict(self))


CVD_SCENARIOS = _Translated(
    {
        "a": tr_lazy("os.environ['CUDA_VISIBLE_DEVICES'] = '1' in the first cell, before import torch"),
        "b": tr_lazy("the same line after import torch, before any torch.cuda call"),
        "c": tr_lazy("the same line after torch.cuda.is_available() has run, in the same kernel"),
        "d": tr_lazy("CUDA_VISIBLE_DEVICES=1 jupyter lab, in the terminal that starts Jupyter"),
    }
)
"""The quiz's scenarios (the notebook prints them), in the course's language."""
_CVD_ANSWERS = {"a": True, "b": True, "c": False, "d": True}
_CVD_WHY = _Translated(
    {
        "a": tr_lazy("Nothing has initialised CUDA yet, so the setting is read when it does."),
        "b": tr_lazy("import torch does not initialise CUDA; is_available() or the first .cuda() does."),
        "c": tr_lazy(
            "is_available() has already initialised CUDA in this process: the change is silently ignored "
            "(restart the kernel)."
        ),
        "d": tr_lazy("The kernel inherits the variable from the process that starts it."),
    }
)


@exercise_check
def visible_devices_quiz(answers: dict) -> object:
    """``answers`` maps each scenario letter to True (takes effect) or False."""
    give_a_dict = tr("Give a dict with the keys {keys}, each True or False.", keys=sorted(CVD_SCENARIOS))
    if not isinstance(answers, dict):
        return failed(give_a_dict)
    answers = {str(k).strip().strip("()").lower(): v for k, v in answers.items()}
    if set(answers) != set(CVD_SCENARIOS):
        return failed(give_a_dict)
    unanswered = [k for k in sorted(answers) if not isinstance(answers[k], (bool, np.bool_))]
    if unanswered:
        return failed(tr("Answer {letters} with True or False.", letters=tr(", ").join(unanswered)))
    answers = {k: bool(v) for k, v in answers.items()}
    wrong = [k for k in sorted(answers) if answers[k] != _CVD_ANSWERS[k]]
    if wrong:
        return failed(
            tr("Not quite: {letters}.", letters=", ".join(wrong)),
            " ".join(f"({k}) {_CVD_WHY[k]}" for k in wrong),
        )
    return passed(tr("All four right: the variable counts only until CUDA initialises."))


# The exercises as the could-not-be-checked hint states them (each check's docstring: helpers.exercises.statement).
STATEMENTS = (
    tr_lazy("`fn()` lists every visible CUDA GPU as `(index, name, memory_gib)`; `[]` without one."),
    tr_lazy("`fn()` returns a torch.device: CUDA if available, else MPS, else CPU."),
    tr_lazy("`answers` maps each scenario letter to True (takes effect) or False."),
)
