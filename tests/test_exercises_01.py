"""The checks of notebook 01 accept right answers and explain typical wrong ones."""

import pytest
import torch

from helpers.exercises import ex01_cuda as check
from helpers.simulate import simulated_machine


def unwritten(*args):
    raise NotImplementedError


def move_right(t, device):
    return t.to(device)


def move_forgets_assignment(t, device):
    t.to(device)  # the result is thrown away
    return t


def move_with_cuda(t, device):
    return t.cuda()


def move_changes_dtype(t, device):
    return t.to(device, torch.float64)


def move_returns_nothing(t, device):
    t = t.to(device)


def move_assigns_data(t, device):
    t.data = t.data.to(device)  # moves t itself (where PyTorch allows it)
    return t


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (unwritten, "Not written yet"),
        (move_forgets_assignment, "you returned the original tensor"),
        (move_returns_nothing, "returned None"),
        (move_changes_dtype, "differs from the original"),
        (move_assigns_data, "assigned t.data"),
    ],
)
def test_move_to_rejects(fn, fragment):
    feedback = check.move_to(fn)
    assert not feedback and fragment in feedback.message


def test_move_to_does_not_blame_cuda_for_assigning_data():
    feedback = check.move_to(move_assigns_data)
    assert "Leave t alone" in feedback.message and ".cuda()" not in feedback.message


def test_move_to_accepts_to_device():
    assert check.move_to(move_right)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a usable GPU")
def test_move_to_explains_cuda_without_gpu():
    feedback = check.move_to(move_with_cuda)
    assert not feedback and "raised" in feedback.message and "t.to(device)" in feedback.message


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_move_to_explains_cuda_going_to_a_gpu():
    feedback = check.move_to(lambda t, device: t.cuda())
    assert not feedback and ".cuda() always goes to a GPU" in feedback.message


def float_right(values, device):
    return torch.tensor(values, dtype=torch.float32, device=device)


def float_legacy_then_move(values, device):
    return torch.Tensor(values).to(device)


@pytest.mark.parametrize("fn", [float_right, float_legacy_then_move])
def test_float_tensor_on_accepts(fn):
    assert check.float_tensor_on(fn)


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (unwritten, "Not written yet"),
        (lambda values, device: torch.tensor(values, device=device), "torch.int64"),
        (lambda values, device: torch.tensor(values, dtype=torch.float64, device=device), "twice the memory"),
        (lambda values, device: torch.tensor(values, dtype=torch.float32), "Pass device=device"),
        (lambda values, device: torch.Tensor(values, device=device), "capital T"),
        (lambda values, device: torch.zeros(len(values) + 1, device=device), "shape"),
    ],
)
def test_float_tensor_on_rejects(fn, fragment):
    feedback = check.float_tensor_on(fn)
    assert not feedback and fragment in feedback.message


def test_checks_run_towards_the_course_device_on_a_simulated_gpu_free_machine():
    with simulated_machine(cuda=0):
        assert check.move_to(move_right)
        assert not check.move_to(move_forgets_assignment)
