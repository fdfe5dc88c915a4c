"""The checks of notebook 03 accept right answers and explain typical wrong ones."""

import pytest
import torch

from helpers.devices import pick_device
from helpers.exercises import ex03_devices as check


def unwritten(*args):
    raise NotImplementedError


def choose_right(text):
    text = "".join(text.split()).lower()
    if text in ("", "auto"):
        return pick_device("auto")
    if text.startswith("gpu"):
        text = "cuda" + text[3:]
    return pick_device(text)


def choose_raw(text):
    return torch.device(text)  # 'CUDA:0' and 'cuda: 1' are invalid device strings


def choose_returns_string(text):
    return str(choose_right(text))


def choose_without_index(text):
    device = choose_right(text)
    return torch.device(device.type) if device.type == "cuda" else device


def choose_ignores_auto(text):
    text = "".join(text.split()).lower().replace("gpu", "cuda")
    return pick_device(text or "cpu") if text != "auto" else torch.device("cpu")


def choose_falls_back_silently(text):
    try:
        return choose_right(text)
    except ValueError:
        return torch.device("cpu")


def choose_with_plain_error(text):
    device = choose_right(text)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("no")
    return device


def choose_checks_availability_itself(text):
    text = "".join(text.split()).lower()
    if text.startswith("gpu"):
        text = "cuda" + text[3:]
    if text == "cuda:0" and not torch.cuda.is_available():
        raise RuntimeError("CUDA is not available")
    return choose_right(text)


def choose_like_the_article(text):
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")  # the text is never read


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (unwritten, "Not written yet"),
        (choose_like_the_article, "ignores the user's text"),
        (choose_raw, "raised RuntimeError"),
        (choose_returns_string, "not a torch.device"),
        (choose_without_index, "has no index"),
        (choose_ignores_auto, "best device present"),
        (choose_falls_back_silently, "not there"),
        (choose_checks_availability_itself, "DeviceError"),
    ],
)
def test_choose_device_rejects(fn, fragment):
    feedback = check.choose_device(fn)
    assert not feedback and fragment in feedback.message


def test_choose_device_accepts_the_solution():
    assert check.choose_device(choose_right)


def score_right(x):
    w = torch.tensor([0.2, 0.3, 0.5], device=x.device, dtype=x.dtype)
    return (x * w).sum(-1)


def score_new_tensor(x):
    return (x * x.new_tensor([0.2, 0.3, 0.5])).sum(-1)


def score_weights_on_cpu(x):
    w = torch.tensor([0.2, 0.3, 0.5])
    return (x * w).sum(-1)


def score_forgets_assignment(x):
    w = torch.tensor([0.2, 0.3, 0.5], dtype=x.dtype)
    w.to(x.device)  # the moved copy is thrown away
    return (x * w).sum(-1)


def score_float32_weights(x):
    w = torch.tensor([0.2, 0.3, 0.5], device=x.device)
    return (x * w).sum(-1)


def score_casts_x(x):
    w = torch.tensor([0.2, 0.3, 0.5], device=x.device)
    return (x.float() * w).sum(-1)


def score_moves_x_to_cpu(x):
    return (x.to("cpu") * torch.tensor([0.2, 0.3, 0.5], dtype=x.dtype)).sum(-1)


def score_wrong_axis(x):
    return (x * x.new_tensor([0.2, 0.3, 0.5])).sum()


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (unwritten, "Not written yet"),
        (score_weights_on_cpu, "device= lives on the CPU"),
        (score_forgets_assignment, "w = w.to(x.device)"),
        (score_float32_weights, "Give the weights x's dtype"),
        (score_casts_x, "Do not cast x" if pick_device().type != "mps" else "do not cast x"),
        (score_moves_x_to_cpu, "moved a tensor off the device"),
        (score_wrong_axis, "shape"),
    ],
)
def test_weighted_score_rejects(fn, fragment):
    feedback = check.weighted_score(fn)
    assert not feedback and fragment in feedback.message


@pytest.mark.parametrize("fn", [score_right, score_new_tensor])
def test_weighted_score_accepts(fn):
    assert check.weighted_score(fn)
