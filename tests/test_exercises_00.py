"""The checks of notebook 00 accept right answers and explain the typical wrong ones."""

import numpy as np
import pytest
import torch

from helpers.exercises import Feedback, exercise_check, passed
from helpers.exercises import ex00_prerequisites as check


def inventory(i_range=None, scale=2**30, guard=True):
    def fn():
        if not guard:
            torch.cuda.get_device_name(0)
        if not torch.cuda.is_available():
            return []
        indices = range(torch.cuda.device_count()) if i_range is None else i_range
        return [
            (i, torch.cuda.get_device_name(i), torch.cuda.get_device_properties(i).total_memory / scale)
            for i in indices
        ]

    return fn


def test_inventory_right_answer(capsys):
    assert check.gpu_inventory(inventory())
    assert "[PASS]" in capsys.readouterr().out


def test_inventory_unguarded_name_call_fails_without_gpu(capsys):
    assert not check.gpu_inventory(inventory(guard=False))
    out = capsys.readouterr().out
    assert "On a machine with no GPU, your code raised RuntimeError" in out
    assert "return [] before asking for a name" in out


def test_inventory_first_gpu_only(capsys):
    def first_only():
        return inventory(i_range=[0])()

    assert not check.gpu_inventory(first_only)
    assert "range(torch.cuda.device_count())" in capsys.readouterr().out


def test_inventory_bytes_not_gib(capsys):
    assert not check.gpu_inventory(inventory(scale=1))
    assert "divide by 2**30" in capsys.readouterr().out


def test_inventory_not_written_and_none(capsys):
    def todo():
        raise NotImplementedError

    assert not check.gpu_inventory(todo)
    assert "Not written yet" in capsys.readouterr().out
    assert not check.gpu_inventory(lambda: None)
    assert "return gpus" in capsys.readouterr().out


def right_choice():
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def test_choose_device_right_answer():
    assert check.choose_device(right_choice)


def test_choose_device_string_instead_of_device(capsys):
    assert not check.choose_device(lambda: "cuda" if torch.cuda.is_available() else "cpu")
    assert "torch.device(...)" in capsys.readouterr().out


def test_choose_device_forgets_mps(capsys):
    assert not check.choose_device(lambda: torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    out = capsys.readouterr().out
    assert "Apple Mac (MPS only) you chose cpu" in out
    assert "torch.backends.mps.is_available()" in out


def test_choose_device_prefers_mps_over_cuda(capsys):
    def mps_first():
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")

    assert not check.choose_device(mps_first)
    assert "CUDA and MPS both" in capsys.readouterr().out


def test_quiz(capsys):
    assert check.visible_devices_quiz({"a": True, "b": True, "c": False, "d": True})
    assert not check.visible_devices_quiz({"a": True, "b": False, "c": True, "d": True})
    out = capsys.readouterr().out
    assert "Not quite: b, c" in out and "restart the kernel" in out
    assert not check.visible_devices_quiz({"a": None, "b": True, "c": False, "d": True})
    assert not check.visible_devices_quiz({"a": True})


def test_choose_device_with_torch_accelerator_passes():
    assert check.choose_device(
        lambda: torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu")
    )


# The test bank: right answers in different styles, each must pass; wrong ones, each with its hint.
def inventory_props_loop():
    gpus = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            gpus.append((i, props.name, round(props.total_memory / 2**30, 1)))
    return gpus


def inventory_comprehension():
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return [
        (i, torch.cuda.get_device_name(i), round(torch.cuda.get_device_properties(i).total_memory / 1024**3, 1))
        for i in range(count)
    ]


def inventory_try_except():
    try:
        torch.cuda.init()
    except (RuntimeError, AssertionError):  # no usable CUDA: nothing to list
        return []
    return [
        (i, torch.cuda.get_device_name(f"cuda:{i}"), torch.cuda.get_device_properties(f"cuda:{i}").total_memory / 2**30)
        for i in range(torch.cuda.device_count())
    ]


def inventory_devices():
    if not torch.cuda.is_available():
        return []
    devices = [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    return [(d.index, torch.cuda.get_device_name(d), round(torch.cuda.get_device_properties(d).total_memory / 2**30, 1))
            for d in devices]  # fmt: skip


def inventory_accelerator_count():
    if not torch.cuda.is_available():
        return []
    out = []
    for i in range(torch.accelerator.device_count()):
        props = torch.cuda.get_device_properties(i)
        out.append([i, props.name, float(f"{props.total_memory / 2**30:.1f}")])  # lists are fine too
    return out


def inventory_mem_get_info():
    if not torch.cuda.is_available():
        return []
    return [(i, torch.cuda.get_device_name(i), round(torch.cuda.mem_get_info(i)[1] / 2**30, 1))
            for i in range(torch.cuda.device_count())]  # fmt: skip


@pytest.mark.parametrize(
    "fn",
    [
        inventory(),
        inventory_props_loop,
        inventory_comprehension,
        inventory_try_except,
        inventory_devices,
        inventory_accelerator_count,
        inventory_mem_get_info,
    ],
)
def test_inventory_accepts(fn, capsys):
    assert check.gpu_inventory(fn)
    assert "[PASS]" in capsys.readouterr().out


def inventory_unguarded():
    return [(i, torch.cuda.get_device_name(i), round(torch.cuda.get_device_properties(i).total_memory / 2**30, 1))
            for i in range(torch.cuda.device_count())]  # fmt: skip


def inventory_hard_coded_24():
    if not torch.cuda.is_available():
        return []
    return [(i, torch.cuda.get_device_name(i), 24.0) for i in range(torch.cuda.device_count())]


def inventory_first_gpus_memory():
    if not torch.cuda.is_available():
        return []
    memory = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    return [(i, torch.cuda.get_device_name(i), memory) for i in range(torch.cuda.device_count())]


def inventory_pairs():
    if not torch.cuda.is_available():
        return []
    return [(i, torch.cuda.get_device_name(i)) for i in range(torch.cuda.device_count())]


def inventory_gigabytes():
    if not torch.cuda.is_available():
        return []
    return [(i, torch.cuda.get_device_name(i), round(torch.cuda.get_device_properties(i).total_memory / 1e9, 1))
            for i in range(torch.cuda.device_count())]  # fmt: skip


def inventory_names_only():
    if not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]


def inventory_dict():
    return {"gpus": []}


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (inventory_unguarded, "return [] unless torch.cuda.is_available()"),
        (inventory_hard_coded_24, "Read each GPU's own total_memory"),
        (inventory_first_gpus_memory, "GPU 1 has 10.7 GiB; your entry says 23.6"),
        (inventory_pairs, "an entry is a 2-item tuple"),
        (inventory_gigabytes, "a GiB is 2**30 bytes"),
        (inventory_names_only, "Each entry is a 3-tuple (index, name, memory_gib)"),
        (inventory_dict, "Return a list, not dict"),
    ],
)
def test_inventory_rejects(fn, fragment):
    feedback = check.gpu_inventory(fn)
    assert not feedback and fragment in feedback.message


def choice_chain():
    if torch.cuda.is_available():
        return torch.device("cuda", 0)
    elif torch.backends.mps.is_available():
        return torch.device("mps")
    else:
        return torch.device("cpu")


def choice_mps_module():
    mps = getattr(torch, "mps", None)
    if torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("mps" if mps is not None and mps.is_available() else "cpu")


def choice_conditional_expression():
    name = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    return torch.device(name)


def choice_course_helper():
    from helpers.lesson.devices import pick_device

    return pick_device("auto")


def choice_checks_in_a_loop():
    for name, available in (("cuda", torch.cuda.is_available), ("mps", torch.backends.mps.is_available)):
        if available():
            return torch.device(name)
    return torch.device("cpu")


def choice_mps_built_and_available():
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_built() and torch.backends.mps.is_available():  # a Mac's build, and macOS 12.3+
        return torch.device("mps")
    return torch.device("cpu")


@pytest.mark.parametrize(
    "fn",
    [
        right_choice,
        choice_chain,
        choice_mps_built_and_available,
        choice_mps_module,
        choice_conditional_expression,
        choice_course_helper,
        choice_checks_in_a_loop,
        lambda: torch.accelerator.current_accelerator(check_available=True) or torch.device("cpu"),
    ],
)
def test_choose_device_accepts(fn, capsys):
    assert check.choose_device(fn)
    assert "on all 7 simulated machines" in capsys.readouterr().out


def choice_counts_gpus():
    if torch.cuda.device_count() > 0:
        return torch.device("cuda")
    return torch.device("mps" if torch.backends.mps.is_available() else "cpu")


def choice_mps_built_only():
    if torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("mps" if torch.backends.mps.is_built() else "cpu")


def choice_accelerator_unchecked():
    return torch.accelerator.current_accelerator() or torch.device("cpu")


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (choice_counts_gpus, "device_count() counts GPUs CUDA cannot use"),
        (choice_mps_built_only, "is_built() says this PyTorch was built with MPS, not that this Mac can run it"),
        (choice_accelerator_unchecked, "On a CPU-only laptop you chose cuda, expected cpu"),
        (lambda: torch.device("cpu"), "On two CUDA GPUs you chose cpu"),
        (lambda: "cpu", "Wrap it: torch.device(...)"),
        (lambda: None, "Return a torch.device, not NoneType"),
    ],
)
def test_choose_device_rejects(fn, fragment):
    feedback = check.choose_device(fn)
    assert not feedback and fragment in feedback.message


@pytest.mark.parametrize(
    "answers",
    [
        {"a": True, "b": True, "c": False, "d": True},
        {"d": True, "c": False, "b": True, "a": True},
        dict(a=True, b=True, c=False, d=True),
        {letter: letter != "c" for letter in "abcd"},
        {"A": True, "B": True, "C": False, "D": True},
        {"(a)": np.True_, "(b)": np.True_, "(c)": np.False_, "(d)": np.True_},
    ],
)
def test_quiz_accepts(answers):
    assert check.visible_devices_quiz(answers)


@pytest.mark.parametrize(
    "answers, fragment",
    [
        ({"a": None, "b": None, "c": None, "d": None}, "Answer a, b, c, d with True or False."),
        ({"a": True, "b": True, "c": True, "d": True}, "(c) is_available() has already initialised CUDA"),
        ({"a": True, "b": False, "c": False, "d": True}, "(b) import torch does not initialise CUDA"),
        ({"a": False, "b": True, "c": False, "d": False}, "(d) The kernel inherits the variable"),
        ({"a": True, "b": True, "c": False}, "Give a dict with the keys"),
        ([True, True, False, True], "Give a dict with the keys"),
        ({"a": 1, "b": 1, "c": 0, "d": 1}, "Answer a, b, c, d with True or False."),
    ],
)
def test_quiz_rejects(answers, fragment):
    feedback = check.visible_devices_quiz(answers)
    assert not feedback and fragment in feedback.message


# Every check, fed garbage, answers [TRY AGAIN] and never raises.
def _all_checks() -> list:
    """Every function decorated with @exercise_check in helpers/exercises/exNN_*.py."""
    import importlib
    import pkgutil

    import helpers.exercises as package

    checks = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"helpers.exercises.{info.name}")
        for name, value in sorted(vars(module).items()):
            if getattr(value, "is_exercise_check", False) and value.__module__ == module.__name__:
                checks.append(pytest.param(value, id=f"{info.name}.{name}"))
    return checks


def _raises_value_error(*args, **kwargs):
    raise ValueError("a learner's bug")


GARBAGE = {
    "not callable": 42,
    "returns None": lambda *args, **kwargs: None,
    "wrong shape": lambda *args, **kwargs: (1, 2),
    "raises ValueError": _raises_value_error,
}


def test_every_check_of_notebooks_00_to_05_is_found():
    found = {param.id for param in _all_checks()}
    for module, names in {
        "ex00_prerequisites": ["gpu_inventory", "choose_device", "visible_devices_quiz"],
        "ex01_cuda": ["move_to", "float_tensor_on"],
        "ex02_cpu": ["to_numpy", "sum_losses", "cpu_copy"],
        "ex03_devices": ["choose_device", "weighted_score"],
        "ex04_modules": ["standardize", "predict"],
        "ex05_training": ["method1_loop", "weighted_loss", "tudui_relu"],
    }.items():
        for name in names:
            assert f"{module}.{name}" in found, f"{module}.{name} is not decorated with @exercise_check"


@pytest.mark.parametrize("garbage", GARBAGE.values(), ids=GARBAGE.keys())
@pytest.mark.parametrize("check_fn", _all_checks())
def test_every_check_turns_garbage_into_feedback(check_fn, garbage, capsys):
    feedback = check_fn(garbage)
    assert isinstance(feedback, Feedback) and not feedback
    out = capsys.readouterr().out
    assert out.startswith("[TRY AGAIN] ") and feedback.message in out


def test_exercise_check_reports_an_error_inside_the_check(capsys):
    @exercise_check
    def inspects_pairs(fn):
        """``fn()`` returns (index, name, memory) triples."""
        index, name, memory = fn()[0]
        return passed("fine")

    feedback = inspects_pairs(lambda: [(0, "Sim 0")])
    assert not feedback
    assert "could not be checked: ValueError: not enough values to unpack" in feedback.message
    assert "The exercise: `fn()` returns (index, name, memory) triples." in feedback.message
    assert not inspects_pairs(3) and "Pass your function (or class) itself, not a int" in capsys.readouterr().out
    assert inspects_pairs(lambda: [(0, "Sim 0", 1.0)])
