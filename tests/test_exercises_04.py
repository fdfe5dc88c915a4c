"""The checks of notebook 04 accept right answers and explain typical wrong ones."""

import pytest
import torch
from torch import nn

from helpers.exercises import ex04_modules as check


class Unwritten(nn.Module):
    def __init__(self, mean, std):
        raise NotImplementedError


class StandardizeRight(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)

    def forward(self, x):
        return (x - self.mean) / self.std


class StandardizePlainAttributes(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.mean = mean  # a plain tensor attribute: .to() does not move it
        self.std = std

    def forward(self, x):
        return (x - self.mean) / self.std


class StandardizeParameters(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.mean = nn.Parameter(mean)
        self.std = nn.Parameter(std)

    def forward(self, x):
        return (x - self.mean) / self.std


class StandardizeOneBuffer(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.register_buffer("mean", mean)
        self.std = std

    def forward(self, x):
        return (x - self.mean) / self.std


class StandardizeNotPersistent(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.register_buffer("mean", mean, persistent=False)  # moves, but is not saved
        self.register_buffer("std", std, persistent=False)

    def forward(self, x):
        return (x - self.mean) / self.std


class StandardizeStacked(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.register_buffer("stats", torch.stack([mean, std]))  # one buffer holding both

    def forward(self, x):
        return (x - self.stats[0]) / self.stats[1]


class StandardizeNoTensors(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.stats = (mean.tolist(), std.tolist())  # Python numbers: nothing to move or save

    def forward(self, x):
        return (x - x.new_tensor(self.stats[0])) / x.new_tensor(self.stats[1])


class StandardizeFetchesOutput(StandardizeRight):
    def forward(self, x):
        return super().forward(x).cpu()


class StandardizeWrongFormula(StandardizeRight):
    def forward(self, x):
        return (x - self.mean) * self.std


class StandardizeMovesInput(StandardizeRight):
    def forward(self, x):
        return (x.cpu() - self.mean.cpu()) / self.std.cpu()


@pytest.mark.parametrize(
    "cls, fragment",
    [
        (Unwritten, "Not written yet"),
        (StandardizePlainAttributes, "self.mean, self.std are plain tensor attributes"),
        (StandardizeParameters, "nn.Parameter"),
        (StandardizeOneBuffer, "self.std is a plain tensor attribute, not a buffer"),
        (StandardizeNoTensors, "not buffers"),
        (StandardizeNotPersistent, "missing from state_dict()"),
        (StandardizeWrongFormula, "expected"),
        (StandardizeMovesInput, "moved a tensor off the device"),
        (StandardizeFetchesOutput, "no .cpu() or .to() inside forward"),
    ],
)
def test_standardize_rejects(cls, fragment):
    feedback = check.standardize(cls)
    assert not feedback and fragment in feedback.message


@pytest.mark.parametrize("cls", [StandardizeRight, StandardizeStacked])
def test_standardize_accepts_buffers(cls):
    assert check.standardize(cls)


def test_standardize_hint_fits_a_fetched_output():
    feedback = check.standardize(StandardizeFetchesOutput)
    assert "register_buffer" not in feedback.message


def unwritten(model, x, device):
    raise NotImplementedError


def predict_right(model, x, device):
    model.to(device)
    model.eval()
    x = x.to(device)
    with torch.no_grad():
        return model(x)


def predict_model_only(model, x, device):
    model.to(device).eval()
    with torch.no_grad():
        return model(x)


def predict_forgets_assignment(model, x, device):
    model.to(device).eval()
    x.to(device)  # the moved copy is thrown away
    with torch.no_grad():
        return model(x)


def predict_input_only(model, x, device):
    model.eval()
    with torch.no_grad():
        return model(x.to(device))


def predict_in_training_mode(model, x, device):
    model.to(device)
    with torch.no_grad():
        return model(x.to(device))


def predict_with_grad(model, x, device):
    model.to(device).eval()
    return model(x.to(device))


def predict_fetches_to_cpu(model, x, device):
    return predict_right(model, x, device).cpu()


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (unwritten, "Not written yet"),
        (predict_model_only, "the input is not"),
        (predict_forgets_assignment, "x.to(device) returns it"),
        (predict_input_only, "the model was not moved"),
        (predict_in_training_mode, "training mode"),
        (predict_with_grad, "no_grad"),
        (predict_fetches_to_cpu, "Return model(x) as it is"),
    ],
)
def test_predict_rejects(fn, fragment):
    feedback = check.predict(fn)
    assert not feedback and fragment in feedback.message


def test_predict_accepts_the_solution():
    assert check.predict(predict_right)
