"""The checks of notebook 00 accept right answers and explain the typical wrong ones."""

import torch

from helpers.exercises import ex00_prerequisites as check


def inventory(i_range=None, scale=2**30, guard=True):
    def fn():
        if not guard:
            torch.cuda.get_device_name(0)
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
        return inventory(i_range=[0])() if torch.cuda.is_available() else []

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
