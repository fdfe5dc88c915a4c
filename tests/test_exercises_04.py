"""The checks of notebook 04 accept right answers and explain typical wrong ones."""

from copy import deepcopy

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
        (StandardizeMovesInput, "no .cpu() or .to() inside forward"),
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
        (predict_forgets_assignment, "keep the tensor the move returns"),
        (predict_input_only, "the model was not moved"),
        (predict_in_training_mode, "training mode"),
        (predict_with_grad, "no_grad"),
        (predict_fetches_to_cpu, "Return the model's output as it is"),
    ],
)
def test_predict_rejects(fn, fragment):
    feedback = check.predict(fn)
    assert not feedback and fragment in feedback.message


def test_predict_accepts_the_solution():
    assert check.predict(predict_right)


# The test bank: more right answers in different styles, and wrong ones with their hints.
class StandardizeBufferClass(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.mean = nn.Buffer(mean.clone())  # nn.Buffer (torch >= 2.5) registers a buffer by assignment
        self.std = nn.Buffer(std.clone())

    def forward(self, x):
        return torch.div(torch.sub(x, self.mean), self.std)


class StandardizeInverse(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.register_buffer("shift", mean.reshape(1, -1))
        self.register_buffer("inv_std", 1.0 / std, persistent=True)

    def forward(self, x):
        return (x - self.shift) * self.inv_std


class StandardizeSubmodule(nn.Module):
    class Stats(nn.Module):
        def __init__(self, mean, std):
            super().__init__()
            self.register_buffer("mean", torch.as_tensor(mean, dtype=torch.float32))
            self.register_buffer("std", torch.as_tensor(std, dtype=torch.float32))

    def __init__(self, mean, std):
        super().__init__()
        self.stats = self.Stats(mean, std)

    def forward(self, x):
        return (x - self.stats.mean) / self.stats.std


@pytest.mark.parametrize("cls", [StandardizeBufferClass, StandardizeInverse, StandardizeSubmodule])
def test_standardize_accepts_more(cls):
    assert check.standardize(cls)


class StandardizeFrozenParameters(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.mean = nn.Parameter(mean, requires_grad=False)
        self.std = nn.Parameter(std, requires_grad=False)

    def forward(self, x):
        return (x - self.mean) / self.std


class StandardizeHalfParameter(StandardizeRight):
    def __init__(self, mean, std):
        nn.Module.__init__(self)
        self.register_buffer("mean", mean)
        self.std = nn.Parameter(std)


class StandardizeInAList(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        self.stats = [mean, std]

    def forward(self, x):
        return (x - self.stats[0].to(x.device)) / self.stats[1].to(x.device)


class StandardizeStdNotSaved(StandardizeRight):
    def __init__(self, mean, std):
        nn.Module.__init__(self)
        self.register_buffer("mean", mean)
        self.register_buffer("std", std, persistent=False)


@pytest.mark.parametrize(
    "cls, fragment",
    [
        (StandardizeFrozenParameters, "with requires_grad=False: not trained today"),
        (StandardizeHalfParameter, "std is an nn.Parameter: model.parameters() hands them to the optimizer"),
        (StandardizeInAList, "module.buffers() lists nothing"),
        (StandardizeStdNotSaved, "Buffer(s) std are missing from state_dict()"),
    ],
)
def test_standardize_rejects_more(cls, fragment):
    feedback = check.standardize(cls)
    assert not feedback and fragment in feedback.message


def test_frozen_parameters_are_not_said_to_be_trained():
    feedback = check.standardize(StandardizeFrozenParameters)
    assert "would train" not in feedback.message and "training would change" not in feedback.message


def predict_restores_mode(model, x, device):
    was_training = model.training
    model.to(device).eval()
    with torch.no_grad():
        out = model(x.to(device))
    model.train(was_training)  # the caller gets its model back as it was
    return out


def predict_on_a_copy(model, x, device):
    copy = deepcopy(model).to(device).eval()
    with torch.inference_mode():
        return copy(x.to(device))


@torch.no_grad()
def predict_decorated(model, x, device):
    model.train(False)
    return model.to(device)(x.to(device, non_blocking=True))


def predict_grad_disabled(model, x, device):
    x = x.to(device)
    model = model.to(device)
    model.eval()
    with torch.set_grad_enabled(False):
        return model(x)


def predict_moves_model_back(model, x, device):
    model.to(device).eval()
    with torch.no_grad():
        out = model(x.to(device))
    model.to("cpu")
    return out


@pytest.mark.parametrize(
    "fn", [predict_restores_mode, predict_on_a_copy, predict_decorated, predict_grad_disabled, predict_moves_model_back]
)
def test_predict_accepts_more(fn):
    assert check.predict(fn)


def predict_detach(model, x, device):
    model.to(device).eval()
    return model(x.to(device)).detach()


def predict_top_level_flag(model, x, device):
    model.to(device)
    model.training = False  # the Dropout inside keeps training=True
    with torch.no_grad():
        return model(x.to(device))


def predict_freezes_parameters(model, x, device):
    model.to(device).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model(x.to(device))


def predict_softmax(model, x, device):
    return predict_right(model, x, device).softmax(dim=1)


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (predict_detach, ".detach() afterwards drops the graph, but it was built"),
        (predict_top_level_flag, "Dropout zeroed random activations"),
        (predict_freezes_parameters, "changed the model's requires_grad flags"),
        (predict_softmax, "differs from the model's own output in eval mode"),
        (lambda model, x, device: predict_right(model, x, device).tolist(), "not list"),
    ],
)
def test_predict_rejects_more(fn, fragment):
    feedback = check.predict(fn)
    assert not feedback and fragment in feedback.message
