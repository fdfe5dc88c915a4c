"""The checks of notebook 02 accept right answers and explain typical wrong ones."""

import functools
import math
import warnings

import numpy as np
import pytest
import torch

from helpers.exercises import ex02_cpu as check


def unwritten(*args):
    raise NotImplementedError


@pytest.mark.parametrize(
    "fn",
    [
        lambda t: t.detach().cpu().numpy(),
        lambda t: t.cpu().detach().numpy(),
        lambda t: t.detach().to("cpu").numpy(),
        lambda t: t.detach().to(torch.device("cpu")).numpy(),
        lambda t: t.numpy(force=True),
    ],
)
def test_to_numpy_accepts(fn):
    assert check.to_numpy(fn)


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (unwritten, "Not written yet"),
        (lambda t: t.numpy(), "requires grad" if not torch.cuda.is_available() else "can't convert cuda:0"),
        (lambda t: t.cpu().numpy(), "requires grad"),
        (lambda t: t.detach().numpy(), "TypeError: can't convert cuda:0"),
        (lambda t: t.detach().cpu(), "not a NumPy array"),
        (lambda t: t.detach().cpu().tolist(), "not list"),
        (lambda t: t.detach().cpu().double().numpy(), "expected float32"),
    ],
)
def test_to_numpy_rejects(fn, fragment):
    if torch.cuda.is_available() and "cuda:0" in fragment:
        fragment = "can't convert cuda:0"  # on a GPU the learner's code really raises
    feedback = check.to_numpy(fn)
    assert not feedback and fragment in feedback.message


def sum_on_device(losses):
    total = torch.zeros((), device=losses[0].device)
    for loss in losses:
        total = total + loss.detach()
    return total.item()


def sum_in_place(losses):
    total = torch.zeros((), device=losses[0].device)
    for loss in losses:
        total += loss.detach()
    return total.item()


def sum_without_grad(losses):
    with torch.no_grad():
        return sum(losses).item()


def sum_keeps_graph(losses):
    total = torch.zeros((), device=losses[0].device)
    for loss in losses:
        total += loss  # forgot .detach()
    return total.item()


def sum_item_every_step(losses):
    total = 0.0
    for loss in losses:
        total += loss.item()
    return total


def sum_returns_tensor(losses):
    total = 0
    for loss in losses:
        total += loss.detach()
    return total


def sum_prints_every_step(losses):
    total = torch.zeros((), device=losses[0].device)
    for step, loss in enumerate(losses):
        total = total + loss.detach()
        print(f"step {step}: {loss:.3f}")
    return total.item()


@pytest.mark.parametrize(
    "fn",
    [
        sum_on_device,
        sum_in_place,
        sum_without_grad,
        lambda losses: torch.stack(losses).detach().sum().item(),
        lambda losses: sum(loss.detach() for loss in losses).item(),
        lambda losses: torch.stack(losses).detach().sum().cpu().item(),  # one copy, then a host read
        lambda losses: float(torch.stack(losses).detach().sum()),
    ],
)
def test_sum_losses_accepts(fn):
    assert check.sum_losses(fn)


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (unwritten, "Not written yet"),
        (sum_item_every_step, "20 x .item()"),
        (sum_prints_every_step, "20 x .__format__()"),
        (sum_returns_tensor, "not a Python float"),
        (lambda losses: sum(loss.detach().cpu() for loss in losses).item(), "20 x .cpu()"),
        (lambda losses: losses[-1].item(), "the total is"),
        (lambda losses: int(sum(losses).item()), "not int"),
        (lambda losses: torch.tensor(losses).sum().item(), "torch.tensor(losses) reads the 20 loss tensors"),
        (lambda losses: torch.as_tensor(losses).sum().item(), "one copy to the host, and one wait, per loss"),
        (lambda losses: sum(losses).item(), "tracked by autograd"),
        (lambda losses: torch.stack(losses).sum().item(), "tracked by autograd"),
        (lambda losses: sum(losses).detach().item(), "tracked by autograd"),
        (sum_keeps_graph, "tracked by autograd"),
    ],
)
def test_sum_losses_rejects(fn, fragment, capsys):
    feedback = check.sum_losses(fn)
    assert not feedback and fragment in feedback.message


def test_sum_losses_explains_the_warning_of_torch_tensor_without_passing_it_on(recwarn):
    feedback = check.sum_losses(lambda losses: torch.tensor(losses).sum().item())
    assert not feedback
    assert not [w for w in recwarn if "requires_grad=True to a scalar" in str(w.message)]


def test_sum_losses_passes_other_warnings_on():
    def warns(losses):
        warnings.warn("from the learner", UserWarning, stacklevel=1)
        return sum_on_device(losses)

    with pytest.warns(UserWarning, match="from the learner"):
        assert check.sum_losses(warns)


@pytest.mark.parametrize(
    "fn", [lambda t: t.to("cpu", copy=True), lambda t: t.cpu().clone(), lambda t: t.detach().clone().cpu()]
)
def test_cpu_copy_accepts(fn):
    assert check.cpu_copy(fn)


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (unwritten, "Not written yet"),
        (lambda t: t.cpu(), "returned the tensor itself"),
        (lambda t: t.to("cpu"), "returned the tensor itself"),
        (lambda t: t.detach().cpu(), "returned the tensor itself (or a view of it)"),
        (lambda t: t.cpu().numpy().copy(), "not ndarray"),
        (lambda t: t.to("meta"), "your copy is on meta"),
        (lambda t: t.cpu().clone().double(), "other values, dtype or shape"),
    ],
)
def test_cpu_copy_rejects(fn, fragment):
    feedback = check.cpu_copy(fn)
    assert not feedback and fragment in feedback.message


# The test bank: more right answers in different styles, and wrong ones with their hints.
@pytest.mark.parametrize(
    "fn",
    [
        lambda t: np.array(t.tolist(), dtype=np.float32),  # tolist() copies from any device
        lambda t: np.asarray(t.detach().cpu()),
        lambda t: t.detach().cpu().numpy().copy(),
        lambda t: t.data.cpu().numpy(),
        lambda t: torch.Tensor.numpy(t.cpu().detach()),
        lambda t: torch.tensor(t.tolist()).numpy(),  # a new CPU tensor from the fetched values
    ],
)
def test_to_numpy_accepts_more(fn):
    assert check.to_numpy(fn)


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (lambda t: np.array(t.tolist()), "expected float32"),
        (lambda t: t.data.numpy(), "on a GPU .numpy() raises"),
        (lambda t: np.array(t.detach()), "on a GPU .numpy() raises"),
        (lambda t: t.detach().cpu().numpy()[:2], "expected float32 [0.5, -1.0, 2.0]"),
    ],
)
@pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")
def test_to_numpy_rejects_more(fn, fragment):
    if torch.cuda.is_available():
        fragment = {"on a GPU .numpy() raises": "can't convert"}.get(fragment, fragment)
    feedback = check.to_numpy(fn)
    assert not feedback and fragment in feedback.message


def sum_python_float_start(losses):
    total = 0.0
    for loss in losses:
        total += loss.detach()  # 0.0 + tensor is a tensor, on the device
    return float(total)


def sum_inference_mode(losses):
    with torch.inference_mode():
        return torch.stack(losses).sum().item()


@pytest.mark.parametrize(
    "fn",
    [
        lambda losses: functools.reduce(torch.add, [loss.detach() for loss in losses]).item(),
        lambda losses: torch.stack([loss.detach() for loss in losses]).sum().item(),
        lambda losses: torch.cat([loss.detach().reshape(1) for loss in losses]).sum().item(),
        lambda losses: sum(loss.data for loss in losses).item(),
        sum_python_float_start,
        sum_inference_mode,
        lambda losses: torch.stack(losses).detach().sum().tolist(),  # a 0-dim tensor's tolist() is a float
    ],
)
def test_sum_losses_accepts_more(fn):
    assert check.sum_losses(fn)


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (lambda losses: math.fsum(loss.item() for loss in losses), "20 x .item()"),
        (lambda losses: sum(loss.detach().tolist() for loss in losses), "20 x .tolist()"),
        (lambda losses: torch.stack(losses).detach().sum().cpu(), "you returned a tensor (cpu)"),
        (lambda losses: sum(loss.detach() for loss in losses[1:]).item(), "the total is"),
    ],
)
def test_sum_losses_rejects_more(fn, fragment):
    feedback = check.sum_losses(fn)
    assert not feedback and fragment in feedback.message


def copy_into_empty(t):
    out = torch.empty_like(t, device="cpu")
    out.copy_(t)
    return out


@pytest.mark.parametrize(
    "fn",
    [
        copy_into_empty,
        lambda t: t.clone().to("cpu"),
        lambda t: torch.tensor(t.tolist()),
        lambda t: t.detach().to("cpu", copy=True),
        lambda t: t.cpu().detach().clone(),
        lambda t: torch.from_numpy(t.cpu().numpy().copy()),
    ],
)
def test_cpu_copy_accepts_more(fn):
    assert check.cpu_copy(fn)


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (lambda t: t.cpu()[:], "returned the tensor itself (or a view of it)"),
        (lambda t: torch.from_numpy(t.cpu().numpy()), "returned the tensor itself (or a view of it)"),
        (lambda t: t.cpu().tolist(), "not list"),
        (lambda t: torch.zeros(3), "other values"),
    ],
)
def test_cpu_copy_rejects_more(fn, fragment):
    feedback = check.cpu_copy(fn)
    assert not feedback and fragment in feedback.message
