"""Checks for notebook 05's exercises (training Tudui on any device).

Each check runs the learner's code on the course device and towards ``OTHER_DEVICE`` (meta): on a
CPU-only machine a loop that still decides its device with ``torch.cuda.is_available()``, an input
left behind, or a layer created inside ``forward`` all run by luck; on meta they fail. Copying a
value to the host (``loss.item()``, ``print(loss)``) works towards meta as it does from a GPU
(see :class:`helpers.exercises.MetaFetchesLikeAGpu`): the numbers are judged on the course device.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from helpers.devices import pick_device
from helpers.exercises import (
    OTHER_DEVICE,
    call_learner,
    device_names,
    exercise_check,
    failed,
    module_devices,
    passed,
    shown,
)
from helpers.models import Tudui, count_parameters


def _batches(n_batches: int = 2, batch_size: int = 8):
    gen = torch.Generator().manual_seed(0)
    return [
        (torch.rand(batch_size, 3, 32, 32, generator=gen), torch.randint(0, 10, (batch_size,), generator=gen))
        for _ in range(n_batches)
    ]


SECTION_MODEL = "1. The model: Tudui (搭建神经网络)"
SECTION_MUST_MOVE = "3. What must move (要修改的几个地方)"
SECTION_METHOD1 = "4. Method 1: .to(device) (方法一)"

METHOD1_HINT = (
    "Method 1 sends everything on the article's list (section 3) to the `device` argument with .to(), and "
    "keeps what each move returns; no torch.cuda.is_available(), no .cuda()."
)
METHOD1_MORE = (
    "Section 4's loop is the pattern: one device, and each site of the list (the model, the loss, and in every "
    "batch the inputs and the labels) gets its move. A module moves in place; a tensor's move returns a new "
    "tensor, which the loop must keep and use. Compare it with section 5's loop line by line: each "
    "`if torch.cuda.is_available(): ... .cuda()` becomes one move to `device`."
)


@exercise_check
def method1_loop(fn) -> object:
    """``fn(model, loss_fn, optimizer, train_dataloader, device)``: an epoch on ``device``, returns the last loss."""
    meta_error = None
    for device in (OTHER_DEVICE, pick_device()):  # meta first: the same feedback on every machine
        torch.manual_seed(0)
        model = Tudui()
        before = copy.deepcopy(model)
        loss_fn = nn.CrossEntropyLoss()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        loader = _batches()
        loss, error = _quietly(fn, model, loss_fn, optimizer, loader, device)
        where = module_devices(model)
        if error is not None:
            if isinstance(error, NotImplementedError) and not str(error):  # the starter: "Not written yet"
                return call_learner(fn, model, loss_fn, optimizer, _batches(), device, hint=METHOD1_HINT)[1]
            if where != {device}:
                return failed(
                    f"Asked to train on {shown(device)}, the model stayed on {device_names(where)}: "
                    "it was not moved to `device`.",
                    METHOD1_HINT,
                    more=METHOD1_MORE,
                    see=SECTION_METHOD1,
                )
            left = _left_behind(fn, device)
            if left:
                return failed(
                    f"Training on {shown(device)}: the model is there, but the {' and the '.join(left)} of each "
                    "batch stayed where the DataLoader made them. A tensor's .to() returns a moved copy, which your "
                    "loop must keep and use.",
                    METHOD1_HINT,
                    more=METHOD1_MORE,
                    see=SECTION_MUST_MOVE,
                )
            if device == OTHER_DEVICE:  # e.g. .item() on meta: the course device's checks say more
                meta_error = error
                continue
            return failed(
                f"Training on {shown(device)}, your code raised {type(error).__name__}: {error}",
                METHOD1_HINT,
                more=METHOD1_MORE,
                see=SECTION_METHOD1,
            )
        if where != {device}:
            if _unchanged(model, before):
                return failed(
                    f"Asked to train on {shown(device)}, your function left the model on {device_names(where)} and "
                    "did not train it.",
                    METHOD1_HINT,
                    more=METHOD1_MORE,
                    see=SECTION_METHOD1,
                )
            return failed(
                f"Asked to train on {shown(device)}, your model's parameters are on {device_names(where)}. A "
                "method-2 loop decides the device itself (torch.cuda.is_available() and .cuda()) and ignores `device`.",
                METHOD1_HINT,
                more=METHOD1_MORE,
                see=SECTION_METHOD1,
            )
        if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
            return failed(
                f"Training on {shown(device)}: return the last batch's loss (a 0-dim tensor), not "
                f"{type(loss).__name__}.",
                "Return the loop's loss tensor itself, as the starter did; the caller fetches it when it needs it.",
                see=SECTION_METHOD1,
            )
        if loss.device != device:
            return failed(
                f"Training on {shown(device)}: the returned loss is on {loss.device}, not {device}.",
                METHOD1_HINT,
                more=METHOD1_MORE,
                see=SECTION_METHOD1,
            )
        if device.type != "meta":
            if _unchanged(model, before):
                return failed(
                    f"Training on {device}: the parameters did not change: the loop computed the loss but never "
                    "updated the model.",
                    "Keep the starter's three steps (clear the gradients, backward, step) in every batch.",
                    see=SECTION_METHOD1,
                )
            if not torch.isfinite(loss):
                return failed(
                    f"Training on {device}: the loss is {loss.item()}.",
                    "Use the optimizer and learning rate you were given.",
                    see=SECTION_METHOD1,
                )
    if meta_error is not None:
        model = Tudui()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        return call_learner(fn, model, nn.CrossEntropyLoss(), optimizer, _batches(), OTHER_DEVICE,
                            when=f"Training on {shown(OTHER_DEVICE)}", hint=METHOD1_HINT, more=METHOD1_MORE,
                            see=SECTION_METHOD1)[1]  # fmt: skip
    return passed(
        "Method 1: one `device` decides where everything runs (the check ran it on the course device and on meta)."
    )


def _unchanged(model: nn.Module, before: nn.Module) -> bool:
    """Are the parameters as they were (compared on the CPU; nothing to compare on meta, so False there)?"""
    pairs = list(zip(model.parameters(), before.parameters(), strict=True))
    if any(p.is_meta or q.is_meta for p, q in pairs):
        return False
    return all(torch.equal(p.detach().cpu(), q) for p, q in pairs)


def _quietly(fn, *args):
    """(result, None) or (None, the exception), printing nothing."""
    try:
        return fn(*args), None
    except Exception as err:  # the learner's bug, diagnosed by the caller
        return None, err


def _left_behind(fn, device: torch.device) -> list[str]:
    """Which of "inputs" and "labels" ``fn`` leaves off ``device``: rerun it with the other one already there."""

    def fails(batches) -> bool:
        model = Tudui()
        _, error = _quietly(fn, model, nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters(), lr=0.01),
                            batches, device)  # fmt: skip
        return error is not None and module_devices(model) == {device}

    if fails([tuple(t.to(device) for t in b) for b in _batches()]):
        return []  # fails even with everything in place: something else is wrong
    return [
        name
        for name, moved in (("inputs", 1), ("labels", 0))  # pre-place the other one; fails if `name` is not moved
        if fails([tuple(t.to(device) if i == moved else t for i, t in enumerate(b)) for b in _batches()])
    ]


CLASS_COUNTS = [5000, 5000, 5000, 5000, 5000, 5000, 5000, 5000, 5000, 500]
"""A CIFAR-10 with its last class (truck) cut to a tenth: the rare class needs a bigger weight."""

WEIGHTS_HINT = (
    "Give nn.CrossEntropyLoss a float32 tensor of class weights, inverse to the counts (a class with 10 times "
    "fewer images weighs 10 times more), then move the loss to `device`: the weight is a buffer, so the loss's "
    ".to() moves it."
)
WEIGHTS_MORE = (
    "Section 3 builds a weighted loss from a tensor of ones (the weight= argument) and moves it; yours takes a "
    "tensor computed from the counts instead. Any weights whose weight x count is the same for every class are "
    "right: one over each count, or that times a constant so that they average 1. Arithmetic on a tensor of "
    "counts works element by element."
)


@exercise_check
def weighted_loss(fn) -> object:
    """``fn(class_counts, device)`` returns a CrossEntropyLoss, class weights inverse to the counts, on ``device``."""
    for device in (pick_device(), OTHER_DEVICE):
        when = f"Building the loss for {shown(device)}"
        loss_fn, problem = call_learner(
            fn, list(CLASS_COUNTS), device, when=when, hint=WEIGHTS_HINT, more=WEIGHTS_MORE, see=SECTION_MUST_MOVE
        )
        if problem is not None:
            return problem
        if not isinstance(loss_fn, nn.CrossEntropyLoss):
            return failed(
                f"{when}: return an nn.CrossEntropyLoss, not {type(loss_fn).__name__}.",
                WEIGHTS_HINT,
                more=WEIGHTS_MORE,
                see=SECTION_MUST_MOVE,
            )
        weight = loss_fn.weight
        if weight is None:
            return failed(
                f"{when}: your loss has no class weights: nn.CrossEntropyLoss() weighs every class alike.",
                WEIGHTS_HINT,
                more=WEIGHTS_MORE,
                see=SECTION_MUST_MOVE,
            )
        if weight.device != device:
            return failed(
                f"Asked for {shown(device)}, the class weights are on {weight.device}: outputs on {device} and "
                "weights elsewhere fail with 'Expected all tensors to be on the same device'. Unlike the "
                "plain loss, a weighted loss has something to move.",
                WEIGHTS_HINT,
                more=WEIGHTS_MORE,
                see=SECTION_MUST_MOVE,
            )
        if weight.shape != (10,) or not weight.is_floating_point():
            return failed(
                f"{when}: the weight must be 10 floats (one per class), got {tuple(weight.shape)} {weight.dtype}.",
                "One weight per class, computed from the 10 counts, as a float tensor.",
                more=WEIGHTS_MORE,
                see=SECTION_MUST_MOVE,
            )
        if weight.dtype != torch.float32:
            return failed(
                f"{when}: the class weights are {weight.dtype}, the model's outputs float32: the loss would raise "
                "'expected scalar type Float but found Double'.",
                "Make the weights float32 (dtype=torch.float32 where you create the tensor, or convert it).",
                see=SECTION_MUST_MOVE,
            )
        if device.type != "meta":
            w = weight.cpu().double()
            product = w * torch.tensor(CLASS_COUNTS, dtype=torch.float64)
            if w[9] <= w[0]:
                return failed(
                    "The rare class (truck, 500 images) got no more weight than the others: weights must be "
                    "inversely proportional to the counts, not proportional.",
                    WEIGHTS_HINT,
                    more=WEIGHTS_MORE,
                    see=SECTION_MUST_MOVE,
                )
            if not torch.allclose(product, product[0].expand(10), rtol=1e-4):
                return failed(
                    f"{when}: weight x count should be the same for every class, got {product.tolist()}.",
                    WEIGHTS_HINT,
                    more=WEIGHTS_MORE,
                    see=SECTION_MUST_MOVE,
                )
            outputs = torch.randn(4, 10, device=device)
            targets = torch.tensor([0, 9, 3, 9], device=device)
            _, problem = call_learner(
                loss_fn, outputs, targets, when="Calling your loss", hint=WEIGHTS_HINT, see=SECTION_MUST_MOVE
            )
            if problem is not None:
                return problem
    return passed("The class weights are a buffer of the loss: .to(device) moved them, and the rare class counts more.")


RELU_HINT = (
    "Same layers as Tudui, with nn.ReLU() after each Conv2d (or each MaxPool2d) and after Linear(1024, 64); "
    "no ReLU after the last Linear (its outputs are logits). Create every layer in __init__."
)
RELU_MORE = (
    "Start from Tudui's code (section 1 prints it) and insert the activations into its nn.Sequential: ReLU has "
    "no parameters, so the count stays 145,578. A layer created in __init__ is registered and follows .to(); "
    "one created in forward() is not (notebook 04, section 7)."
)


OTHER_ACTIVATIONS = ("sigmoid", "tanh", "gelu", "leaky_relu", "elu", "silu", "softplus", "hardtanh")


def _is_relu_clamp(args: tuple, kwargs: dict) -> bool:
    low = kwargs.get("min", args[1] if len(args) > 1 else None)
    high = kwargs.get("max", args[2] if len(args) > 2 else None)
    return isinstance(low, (int, float)) and low == 0 and high is None


def _calls(model: nn.Module, x: torch.Tensor) -> list[str]:
    """Names of the torch functions ``model(x)`` calls, in order (nn.ReLU and F.relu both show as relu)."""
    from torch.overrides import TorchFunctionMode

    names: list[str] = []

    class Recorder(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = getattr(func, "__name__", str(func))
            if name in ("clamp", "clamp_", "clamp_min", "clamp_min_", "clip", "clip_") and _is_relu_clamp(args, kwargs):
                name = "relu"  # clamp(min=0) is the same function as ReLU
            names.append(name)
            return func(*args, **kwargs)

    with Recorder():
        model(x)
    return names


@exercise_check
def tudui_relu(cls) -> object:
    """``cls()`` is Tudui with ReLU activations: same parameters, non-linear, logits out, moves with .to()."""
    model, problem = call_learner(cls, when="Building your model", hint=RELU_HINT, more=RELU_MORE, see=SECTION_MODEL)
    if problem is not None:
        return problem
    if not isinstance(model, nn.Module):
        return failed("Your class must be an nn.Module.", RELU_HINT, more=RELU_MORE, see=SECTION_MODEL)
    if count_parameters(model) != count_parameters(Tudui()):
        return failed(
            f"Your model has {count_parameters(model):,} parameters, Tudui has 145,578: ReLU adds none, so keep "
            "the same convolutions and linear layers.",
            RELU_HINT,
            more=RELU_MORE,
            see=SECTION_MODEL,
        )
    for device in (pick_device(), OTHER_DEVICE):
        model.to(device)
        x = torch.rand(2, 3, 32, 32, device=device)
        try:
            out = model(x)
        except Exception as err:  # the learner's bug is the feedback
            message = (
                f"After model.to({device}), calling it on an input on {shown(device)} raised "
                f"{type(err).__name__}: {err}"
            )
            if "device" in str(err) and module_devices(model) == {device}:
                message += (
                    "\n  Every parameter is on the device, so the culprit is a layer or tensor created inside "
                    "forward(): .to() only moves what __init__ registered."
                )
            return failed(message, RELU_HINT, more=RELU_MORE, see=SECTION_MODEL)
        if not isinstance(out, torch.Tensor) or out.shape != (2, 10) or out.device != device:
            got = f"{tuple(out.shape)} on {out.device}" if isinstance(out, torch.Tensor) else type(out).__name__
            return failed(
                f"Expected 2x10 outputs on {shown(device)}, got {got}.", RELU_HINT, more=RELU_MORE, see=SECTION_MODEL
            )
    names = _calls(model, x)
    others = sorted({name for name in names if name in OTHER_ACTIVATIONS})
    if names and names[-1] in ("softmax", "log_softmax"):
        return failed(
            f"Your model ends with {names[-1]}: its outputs must be logits (raw scores).",
            "Remove the final Softmax; nn.CrossEntropyLoss applies log-softmax itself.",
            see=SECTION_MODEL,
        )
    calls = [name for name in names if name in ("relu", "relu_", "linear", "conv2d")]
    relus = sum(name.startswith("relu") for name in calls)
    if not relus:
        if others:
            return failed(
                f"Your model uses {', '.join(others)}, not ReLU: the exercise asks for nn.ReLU().",
                RELU_HINT,
                more=RELU_MORE,
                see=SECTION_MODEL,
            )
        return failed(
            "Your model calls no ReLU: it is still linear between its layers.",
            RELU_HINT,
            more=RELU_MORE,
            see=SECTION_MODEL,
        )
    if calls[-1].startswith("relu"):
        return failed(
            "Your model ends with ReLU, so it can never output a negative logit.",
            "Leave the last Linear layer's outputs as they are; CrossEntropyLoss applies softmax itself.",
            see=SECTION_MODEL,
        )
    layers = [i for i, name in enumerate(calls) if name in ("conv2d", "linear")]
    missing = [
        f"{'convolution' if calls[a] == 'conv2d' else 'Linear'} {sum(calls[k] == calls[a] for k in layers[: n + 1])}"
        for n, (a, b) in enumerate(zip(layers, layers[1:], strict=False))
        if not any(name.startswith("relu") for name in calls[a:b])
    ]
    linears = [i for i in layers if calls[i] == "linear"]
    if len(linears) >= 2 and not any(name.startswith("relu") for name in calls[linears[0] : linears[-1]]):
        return failed(
            "Nothing non-linear sits between the two Linear layers: two linear maps in a row are one linear map.",
            RELU_HINT,
            more=RELU_MORE,
            see=SECTION_MODEL,
        )
    if missing:
        return failed(
            f"No ReLU after {', '.join(missing)}: the exercise asks for one after every convolution.",
            RELU_HINT,
            more=RELU_MORE,
            see=SECTION_MODEL,
        )
    return passed(f"Tudui with {relus} ReLU activations: the same 145,578 parameters, now non-linear.")
