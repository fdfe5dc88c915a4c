"""The checks of notebook 03 accept right answers and explain typical wrong ones."""

import re

import pytest
import torch

from helpers.exercises import ex03_devices as check
from helpers.lesson.devices import DeviceError, pick_device


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
        (score_forgets_assignment, "keep what the move returns"),
        (score_float32_weights, "Give the weights x's dtype"),
        (score_casts_x, "Do not cast x" if pick_device().type != "mps" else "do not cast x"),
        (score_moves_x_to_cpu, "your result is on cpu"),
        (score_wrong_axis, "shape"),
    ],
)
def test_weighted_score_rejects(fn, fragment):
    feedback = check.weighted_score(fn)
    assert not feedback and fragment in feedback.message


@pytest.mark.parametrize("fn", [score_right, score_new_tensor])
def test_weighted_score_accepts(fn):
    assert check.weighted_score(fn)


# The test bank: more right answers in different styles, and wrong ones with their hints.
def choose_regex(text):
    text = re.sub(r"\s+", "", text).lower()
    text = re.sub(r"^gpu", "cuda", text)
    return pick_device(text or "auto")


def choose_one_line(text):
    return pick_device("".join(text.split()).lower().replace("gpu", "cuda") or "auto")


def choose_own_availability(text):
    text = "".join(text.split()).lower()
    text = "cuda" + text[3:] if text.startswith("gpu") else text
    if text in ("", "auto"):
        return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(text)
    if device.type == "cuda":
        index = device.index or 0
        if not torch.cuda.is_available() or index >= torch.cuda.device_count():
            raise DeviceError(f"{text} is not available here")
        return torch.device("cuda", index)
    return device


def choose_with_suggest(text):
    from helpers.lesson.devices import suggest

    if text.strip().lower() in ("", "auto"):
        return pick_device("auto")
    return pick_device(suggest(text) or text)


def choose_mapping(text):
    aliases = {"": "auto", "gpu": "cuda"}
    text = "".join(text.split()).lower()
    text = aliases.get(text, text)
    if text.startswith("gpu:"):
        text = text.replace("gpu", "cuda", 1)
    return pick_device(text)


@pytest.mark.parametrize(
    "fn", [choose_regex, choose_one_line, choose_own_availability, choose_with_suggest, choose_mapping]
)
def test_choose_device_accepts_more(fn):
    assert check.choose_device(fn)


def choose_counts_gpus(text):
    text = "".join(text.split()).lower().replace("gpu", "cuda")
    if text in ("", "auto"):
        return torch.device("cuda", 0) if torch.cuda.device_count() else torch.device("cpu")
    return pick_device(text)


def choose_raises_value_error(text):
    device = choose_right(text) if text != "cuda:0" or torch.cuda.is_available() else None
    if device is None:
        raise ValueError("no such GPU")
    return device


def choose_lowercase_only(text):
    return pick_device(text.lower() or "auto")


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (choose_counts_gpus, "device_count() counts GPUs CUDA cannot use"),
        (choose_raises_value_error, "Let pick_device() raise its DeviceError"),
        (choose_lowercase_only, "the spaces, the case"),
    ],
)
def test_choose_device_rejects_more(fn, fragment):
    feedback = check.choose_device(fn)
    assert not feedback and fragment in feedback.message


def score_columns(x):
    return x[:, 0] * 0.2 + x[:, 1] * 0.3 + x[:, 2] * 0.5  # Python numbers keep x's device and dtype


@pytest.mark.parametrize(
    "fn",
    [
        score_columns,
        lambda x: x @ x.new_tensor([0.2, 0.3, 0.5]),
        lambda x: torch.einsum("ij,j->i", x, x.new_tensor([0.2, 0.3, 0.5])),
        lambda x: (x * torch.tensor([0.2, 0.3, 0.5]).to(x)).sum(dim=1),
        lambda x: (x * torch.tensor([0.2, 0.3, 0.5], device=x.device)).sum(-1).to(x.dtype),
        lambda x: torch.mv(x, torch.as_tensor([0.2, 0.3, 0.5], dtype=x.dtype, device=x.device)),
    ],
)
def test_weighted_score_accepts_more(fn):
    assert check.weighted_score(fn)


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (lambda x: x.sum(-1), "expected"),
        (lambda x: (x * x.new_tensor([0.2, 0.3, 0.5])).sum(0), "shape (3,)"),
        (lambda x: (x * x.new_tensor([0.2, 0.3, 0.5])).sum(-1).tolist(), "return a tensor, not list"),
        (lambda x: (x * x.new_tensor([0.2, 0.3, 0.5])).sum(-1).cpu(), "your result is on cpu"),
    ],
)
def test_weighted_score_rejects_more(fn, fragment):
    feedback = check.weighted_score(fn)
    assert not feedback and fragment in feedback.message
