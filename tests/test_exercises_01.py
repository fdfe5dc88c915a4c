"""The checks of notebook 01 accept right answers and explain typical wrong ones."""

import numpy as np
import pytest
import torch

from helpers.exercises import ex01_cuda as check
from helpers.lab.simulate import simulated_machine


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
    assert not feedback and "raised" in feedback.message and "the `device` you were given" in feedback.message


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
        (lambda values, device: torch.tensor(values, dtype=torch.float32), "torch.tensor can take the device too"),
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


# The test bank: more right answers in different styles, and wrong ones with their hints.
def move_clone_then_move(t, device):
    return t.clone().to(device)


def move_with_cuda_where_asked(t, device):
    return t.cuda() if torch.device(device).type == "cuda" else t.to(device)


def move_into_new_tensor(t, device):
    moved = torch.empty_like(t, device=device)
    moved.copy_(t)
    return moved


@pytest.mark.parametrize(
    "fn",
    [
        move_right,
        lambda t, device: t.to(device=device),
        lambda t, device: t.to(device, copy=True),
        lambda t, device: torch.as_tensor(t, device=device),
        lambda t, device: t.detach().to(torch.device(device)),
        move_clone_then_move,
        move_with_cuda_where_asked,
        move_into_new_tensor,
    ],
)
def test_move_to_accepts(fn):
    assert check.move_to(fn)


def move_writes_into_t(t, device):
    t.mul_(2)
    return (t / 2).to(device)


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (move_writes_into_t, "your code wrote into t"),
        (lambda t, device: t.to(device).tolist(), "return a tensor, not list"),
        (lambda t, device: t.to(device)[:2], "shape (2,)"),
        (lambda t, device: t.clone(), "your tensor is on cpu"),
        (lambda t, device: t.to("cpu"), "you returned the original tensor"),
        (move_with_cuda, ".cuda()"),  # raises without a GPU; goes to the GPU, not to meta, with one
    ],
)
def test_move_to_rejects_more(fn, fragment):
    feedback = check.move_to(fn)
    assert not feedback and fragment in feedback.message


@pytest.mark.parametrize(
    "fn",
    [
        lambda values, device: torch.as_tensor(values, dtype=torch.float, device=device),
        lambda values, device: torch.tensor(values, device=device).float(),
        lambda values, device: torch.tensor(values).to(device, torch.float32),
        lambda values, device: torch.from_numpy(np.array(values, dtype=np.float32)).to(device),
        lambda values, device: torch.FloatTensor(values).to(device),
        lambda values, device: torch.tensor([float(v) for v in values], device=device),
    ],
)
def test_float_tensor_on_accepts_more(fn):
    assert check.float_tensor_on(fn)


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (lambda values, device: torch.tensor(values, device=device).half(), "Ask for torch.float32 explicitly"),
        (lambda values, device: torch.tensor(values, dtype=torch.float32, device=device).tolist(), "not list"),
        (lambda values, device: torch.tensor(values[::-1], dtype=torch.float32, device=device), "other values"),
    ],
)
def test_float_tensor_on_rejects_more(fn, fragment):
    feedback = check.float_tensor_on(fn)
    assert not feedback and fragment in feedback.message


def test_meta_fetches_work_as_they_do_from_a_gpu():
    """Inside a check, copying a meta tensor's values works (zeros), as from a GPU; mixing devices still fails."""
    from helpers.exercises import MetaFetchesLikeAGpu

    loss = torch.ones((), device="meta", requires_grad=True)
    with MetaFetchesLikeAGpu():
        assert loss.item() == 0.0 and float(loss) == 0.0 and f"{loss:.3f}" == "0.000" and not bool(loss)
        assert torch.ones(2, 3, device="meta").tolist() == [[0.0] * 3] * 2
        assert loss.cpu().device.type == "cpu" and loss.to("cpu").requires_grad
        with pytest.raises(TypeError, match="numpy"):
            loss.detach().numpy()  # as on a GPU: .numpy() needs a CPU tensor
        with pytest.raises(RuntimeError, match="3 elements"):
            torch.ones(3, device="meta").item()
        with pytest.raises(RuntimeError):
            torch.ones(2, device="meta") + torch.ones(2)
    with pytest.raises(RuntimeError, match="meta"):
        loss.item()  # outside a check, meta is meta
