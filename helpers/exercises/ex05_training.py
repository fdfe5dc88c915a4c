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

from helpers.course.i18n import tr, tr_lazy
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
from helpers.lesson.devices import pick_device
from helpers.lesson.models import Tudui, count_parameters


def _batches(n_batches: int = 2, batch_size: int = 8):
    gen = torch.Generator().manual_seed(0)
    return [
        (torch.rand(batch_size, 3, 32, 32, generator=gen), torch.randint(0, 10, (batch_size,), generator=gen))
        for _ in range(n_batches)
    ]


SECTION_MODEL = "1. The model: Tudui (搭建神经网络)"
SECTION_MUST_MOVE = "3. What must move (要修改的几个地方)"
SECTION_METHOD1 = "4. Method 1: .to(device) (方法一)"

METHOD1_HINT = tr_lazy(
    "Method 1 sends everything on the article's list (section 3) to the `device` argument with .to(), and "
    "keeps what each move returns; no torch.cuda.is_available(), no .cuda()."
)
METHOD1_MORE = tr_lazy(
    "Section 4's loop is the pattern: one device, and each site of the list (the model, the loss, and in every "
    "batch the inputs and the labels) gets its move. A module moves in place; a tensor's move returns a new "
    "tensor, which the loop must keep and use. Compare it with section 5's loop line by line: each "
    "`if torch.cuda.is_available(): ... .cuda()` becomes one move to `device`."
)
LEFT_BEHIND = {
    ("inputs",): tr_lazy("inputs"),
    ("labels",): tr_lazy("labels"),
    ("inputs", "labels"): tr_lazy("inputs and the labels"),
}


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
                return call_learner(fn, model, loss_fn, optimizer, _batches(), device, hint=tr(METHOD1_HINT))[1]
            if where != {device}:
                return failed(
                    tr(
                        "Asked to train on {device}, the model stayed on {where}: it was not moved to `device`.",
                        device=shown(device),
                        where=device_names(where),
                    ),
                    tr(METHOD1_HINT),
                    more=tr(METHOD1_MORE),
                    see=SECTION_METHOD1,
                )
            left = _left_behind(fn, device)
            if left:
                return failed(
                    tr(
                        "Training on {device}: the model is there, but the {left} of each batch stayed where the "
                        "DataLoader made them. A tensor's .to() returns a moved copy, which your loop must keep and "
                        "use.",
                        device=shown(device),
                        left=tr(LEFT_BEHIND[tuple(left)]),
                    ),
                    tr(METHOD1_HINT),
                    more=tr(METHOD1_MORE),
                    see=SECTION_MUST_MOVE,
                )
            if device == OTHER_DEVICE:  # e.g. .item() on meta: the course device's checks say more
                meta_error = error
                continue
            return failed(
                tr(
                    "Training on {device}, your code raised {error_type}: {error}",
                    device=shown(device),
                    error_type=type(error).__name__,
                    error=error,
                ),
                tr(METHOD1_HINT),
                more=tr(METHOD1_MORE),
                see=SECTION_METHOD1,
            )
        if where != {device}:
            if _unchanged(model, before):
                return failed(
                    tr(
                        "Asked to train on {device}, your function left the model on {where} and did not train it.",
                        device=shown(device),
                        where=device_names(where),
                    ),
                    tr(METHOD1_HINT),
                    more=tr(METHOD1_MORE),
                    see=SECTION_METHOD1,
                )
            return failed(
                tr(
                    "Asked to train on {device}, your model's parameters are on {where}. A method-2 loop decides the "
                    "device itself (torch.cuda.is_available() and .cuda()) and ignores `device`.",
                    device=shown(device),
                    where=device_names(where),
                ),
                tr(METHOD1_HINT),
                more=tr(METHOD1_MORE),
                see=SECTION_METHOD1,
            )
        if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
            return failed(
                tr(
                    "Training on {device}: return the last batch's loss (a 0-dim tensor), not {type_name}.",
                    device=shown(device),
                    type_name=type(loss).__name__,
                ),
                tr("Return the loop's loss tensor itself, as the starter did; the caller fetches it when it needs it."),
                see=SECTION_METHOD1,
            )
        if loss.device != device:
            return failed(
                tr(
                    "Training on {device}: the returned loss is on {where}, not {wanted}.",
                    device=shown(device),
                    where=str(loss.device),
                    wanted=str(device),
                ),
                tr(METHOD1_HINT),
                more=tr(METHOD1_MORE),
                see=SECTION_METHOD1,
            )
        if device.type != "meta":
            if _unchanged(model, before):
                return failed(
                    tr(
                        "Training on {device}: the parameters did not change: the loop computed the loss but never "
                        "updated the model.",
                        device=str(device),
                    ),
                    tr("Keep the starter's three steps (clear the gradients, backward, step) in every batch."),
                    see=SECTION_METHOD1,
                )
            if not torch.isfinite(loss):
                return failed(
                    tr("Training on {device}: the loss is {loss}.", device=str(device), loss=loss.item()),
                    tr("Use the optimizer and learning rate you were given."),
                    see=SECTION_METHOD1,
                )
    if meta_error is not None:
        model = Tudui()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        return call_learner(fn, model, nn.CrossEntropyLoss(), optimizer, _batches(), OTHER_DEVICE,
                            when=tr("Training on {device}", device=shown(OTHER_DEVICE)), hint=tr(METHOD1_HINT),
                            more=tr(METHOD1_MORE), see=SECTION_METHOD1)[1]  # fmt: skip
    return passed(
        tr("Method 1: one `device` decides where everything runs (the check ran it on the course device and on meta).")
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

WEIGHTS_HINT = tr_lazy(
    "Give nn.CrossEntropyLoss a float32 tensor of class weights, inverse to the counts (a class with 10 times "
    "fewer images weighs 10 times more), then move the loss to `device`: the weight is a buffer, so the loss's "
    ".to() moves it."
)
WEIGHTS_MORE = tr_lazy(
    "Section 3 builds a weighted loss from a tensor of ones (the weight= argument) and moves it; yours takes a "
    "tensor computed from the counts instead. Any weights whose weight x count is the same for every class are "
    "right: one over each count, or that times a constant so that they average 1. Arithmetic on a tensor of "
    "counts works element by element."
)


@exercise_check
def weighted_loss(fn) -> object:
    """``fn(class_counts, device)`` returns a CrossEntropyLoss, class weights inverse to the counts, on ``device``."""
    for device in (pick_device(), OTHER_DEVICE):
        when = tr("Building the loss for {device}", device=shown(device))
        loss_fn, problem = call_learner(
            fn,
            list(CLASS_COUNTS),
            device,
            when=when,
            hint=tr(WEIGHTS_HINT),
            more=tr(WEIGHTS_MORE),
            see=SECTION_MUST_MOVE,
        )
        if problem is not None:
            return problem
        if not isinstance(loss_fn, nn.CrossEntropyLoss):
            return failed(
                tr(
                    "{when}: return an nn.CrossEntropyLoss, not {type_name}.",
                    when=when,
                    type_name=type(loss_fn).__name__,
                ),
                tr(WEIGHTS_HINT),
                more=tr(WEIGHTS_MORE),
                see=SECTION_MUST_MOVE,
            )
        weight = loss_fn.weight
        if weight is None:
            return failed(
                tr(
                    "{when}: your loss has no class weights: nn.CrossEntropyLoss() weighs every class alike.", when=when
                ),
                tr(WEIGHTS_HINT),
                more=tr(WEIGHTS_MORE),
                see=SECTION_MUST_MOVE,
            )
        if weight.device != device:
            return failed(
                tr(
                    "Asked for {device}, the class weights are on {where}: outputs on {wanted} and weights elsewhere "
                    "fail with 'Expected all tensors to be on the same device'. Unlike the plain loss, a weighted "
                    "loss has something to move.",
                    device=shown(device),
                    where=str(weight.device),
                    wanted=str(device),
                ),
                tr(WEIGHTS_HINT),
                more=tr(WEIGHTS_MORE),
                see=SECTION_MUST_MOVE,
            )
        if weight.shape != (10,) or not weight.is_floating_point():
            return failed(
                tr(
                    "{when}: the weight must be 10 floats (one per class), got {shape} {dtype}.",
                    when=when,
                    shape=tuple(weight.shape),
                    dtype=weight.dtype,
                ),
                tr("One weight per class, computed from the 10 counts, as a float tensor."),
                more=tr(WEIGHTS_MORE),
                see=SECTION_MUST_MOVE,
            )
        if weight.dtype != torch.float32:
            return failed(
                tr(
                    "{when}: the class weights are {dtype}, the model's outputs float32: the loss would raise "
                    "'expected scalar type Float but found Double'.",
                    when=when,
                    dtype=weight.dtype,
                ),
                tr("Make the weights float32 (dtype=torch.float32 where you create the tensor, or convert it)."),
                see=SECTION_MUST_MOVE,
            )
        if device.type != "meta":
            w = weight.cpu().double()
            product = w * torch.tensor(CLASS_COUNTS, dtype=torch.float64)
            if w[9] <= w[0]:
                return failed(
                    tr(
                        "The rare class (truck, 500 images) got no more weight than the others: weights must be "
                        "inversely proportional to the counts, not proportional."
                    ),
                    tr(WEIGHTS_HINT),
                    more=tr(WEIGHTS_MORE),
                    see=SECTION_MUST_MOVE,
                )
            if not torch.allclose(product, product[0].expand(10), rtol=1e-4):
                return failed(
                    tr(
                        "{when}: weight x count should be the same for every class, got {products}.",
                        when=when,
                        products=product.tolist(),
                    ),
                    tr(WEIGHTS_HINT),
                    more=tr(WEIGHTS_MORE),
                    see=SECTION_MUST_MOVE,
                )
            outputs = torch.randn(4, 10, device=device)
            targets = torch.tensor([0, 9, 3, 9], device=device)
            _, problem = call_learner(
                loss_fn, outputs, targets, when=tr("Calling your loss"), hint=tr(WEIGHTS_HINT), see=SECTION_MUST_MOVE
            )
            if problem is not None:
                return problem
    return passed(
        tr("The class weights are a buffer of the loss: .to(device) moved them, and the rare class counts more.")
    )


RELU_HINT = tr_lazy(
    "Same layers as Tudui, with nn.ReLU() after each Conv2d (or each MaxPool2d) and after Linear(1024, 64); "
    "no ReLU after the last Linear (its outputs are logits). Create every layer in __init__."
)
RELU_MORE = tr_lazy(
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


def _layer_name(call: str, n: int) -> str:
    """The n-th convolution or Linear layer, as feedback names it."""
    return tr("convolution {n}", n=n) if call == "conv2d" else tr("Linear {n}", n=n)


@exercise_check
def tudui_relu(cls) -> object:
    """``cls()`` is Tudui with ReLU activations: same parameters, non-linear, logits out, moves with .to()."""
    model, problem = call_learner(
        cls, when=tr("Building your model"), hint=tr(RELU_HINT), more=tr(RELU_MORE), see=SECTION_MODEL
    )
    if problem is not None:
        return problem
    if not isinstance(model, nn.Module):
        return failed(tr("Your class must be an nn.Module."), tr(RELU_HINT), more=tr(RELU_MORE), see=SECTION_MODEL)
    if count_parameters(model) != count_parameters(Tudui()):
        return failed(
            tr(
                "Your model has {count:,} parameters, Tudui has 145,578: ReLU adds none, so keep the same "
                "convolutions and linear layers.",
                count=count_parameters(model),
            ),
            tr(RELU_HINT),
            more=tr(RELU_MORE),
            see=SECTION_MODEL,
        )
    for device in (pick_device(), OTHER_DEVICE):
        model.to(device)
        x = torch.rand(2, 3, 32, 32, device=device)
        try:
            out = model(x)
        except Exception as err:  # the learner's bug is the feedback
            message = tr(
                "After model.to({device}), calling it on an input on {shown} raised {error_type}: {error}",
                device=str(device),
                shown=shown(device),
                error_type=type(err).__name__,
                error=err,
            )
            if "device" in str(err) and module_devices(model) == {device}:
                message += "\n  " + tr(
                    "Every parameter is on the device, so the culprit is a layer or tensor created inside "
                    "forward(): .to() only moves what __init__ registered."
                )
            return failed(message, tr(RELU_HINT), more=tr(RELU_MORE), see=SECTION_MODEL)
        if not isinstance(out, torch.Tensor) or out.shape != (2, 10) or out.device != device:
            if isinstance(out, torch.Tensor):
                got = tr("{shape} on {device}", shape=tuple(out.shape), device=str(out.device))
            else:
                got = type(out).__name__
            return failed(
                tr("Expected 2x10 outputs on {device}, got {got}.", device=shown(device), got=got),
                tr(RELU_HINT),
                more=tr(RELU_MORE),
                see=SECTION_MODEL,
            )
    names = _calls(model, x)
    others = sorted({name for name in names if name in OTHER_ACTIVATIONS})
    if names and names[-1] in ("softmax", "log_softmax"):
        return failed(
            tr("Your model ends with {name}: its outputs must be logits (raw scores).", name=names[-1]),
            tr("Remove the final Softmax; nn.CrossEntropyLoss applies log-softmax itself."),
            see=SECTION_MODEL,
        )
    calls = [name for name in names if name in ("relu", "relu_", "linear", "conv2d")]
    relus = sum(name.startswith("relu") for name in calls)
    if not relus:
        if others:
            return failed(
                tr(
                    "Your model uses {names}, not ReLU: the exercise asks for nn.ReLU().",
                    names=", ".join(others),
                ),
                tr(RELU_HINT),
                more=tr(RELU_MORE),
                see=SECTION_MODEL,
            )
        return failed(
            tr("Your model calls no ReLU: it is still linear between its layers."),
            tr(RELU_HINT),
            more=tr(RELU_MORE),
            see=SECTION_MODEL,
        )
    if calls[-1].startswith("relu"):
        return failed(
            tr("Your model ends with ReLU, so it can never output a negative logit."),
            tr("Leave the last Linear layer's outputs as they are; CrossEntropyLoss applies softmax itself."),
            see=SECTION_MODEL,
        )
    layers = [i for i, name in enumerate(calls) if name in ("conv2d", "linear")]
    missing = [
        _layer_name(calls[a], sum(calls[k] == calls[a] for k in layers[: n + 1]))
        for n, (a, b) in enumerate(zip(layers, layers[1:], strict=False))
        if not any(name.startswith("relu") for name in calls[a:b])
    ]
    linears = [i for i in layers if calls[i] == "linear"]
    if len(linears) >= 2 and not any(name.startswith("relu") for name in calls[linears[0] : linears[-1]]):
        return failed(
            tr("Nothing non-linear sits between the two Linear layers: two linear maps in a row are one linear map."),
            tr(RELU_HINT),
            more=tr(RELU_MORE),
            see=SECTION_MODEL,
        )
    if missing:
        return failed(
            tr(
                "No ReLU after {layers}: the exercise asks for one after every convolution.",
                layers=tr(", ").join(missing),
            ),
            tr(RELU_HINT),
            more=tr(RELU_MORE),
            see=SECTION_MODEL,
        )
    return passed(tr("Tudui with {relus} ReLU activations: the same 145,578 parameters, now non-linear.", relus=relus))


# The exercises as the could-not-be-checked hint states them (each check's docstring: helpers.exercises.statement).
STATEMENTS = (
    tr_lazy("`fn(model, loss_fn, optimizer, train_dataloader, device)`: an epoch on `device`, returns the last loss."),
    tr_lazy("`fn(class_counts, device)` returns a CrossEntropyLoss, class weights inverse to the counts, on `device`."),
    tr_lazy("`cls()` is Tudui with ReLU activations: same parameters, non-linear, logits out, moves with .to()."),
)
