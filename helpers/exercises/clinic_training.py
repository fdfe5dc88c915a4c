"""Lesson 09's exercise 1 judged (a resumed training script with device bugs): its reference and its diagnoses.

:func:`helpers.exercises.ex09_clinic.fixed_training` runs the learner's script; this module holds the checkpoint a
resumed run finds, the fixed script's losses and weights to compare with, and what names each bug: a layer made in
``forward()`` (it fails towards ``meta`` and is random at every call), an error raised under the rules a GPU
enforces (:class:`helpers.lab.gpu_rules.GpuRules`: which operator mixed which devices, or an optimizer stepping
with its momentum left on the CPU), and losses that are not Python floats. Also the quiet call of the learner's
code that the lesson's three checks share.
"""

from __future__ import annotations

import contextlib
import copy
import io
import numbers
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from helpers.course.i18n import tr, tr_lazy
from helpers.exercises import NOT_WRITTEN, OTHER_DEVICE, Feedback, call_learner, device_names, failed, module_devices
from helpers.exercises.ex05_training import CLASS_COUNTS  # the rare class 9 (truck), as in notebook 05
from helpers.lab.gpu_rules import GpuRules, like_a_gpu
from helpers.lab.training_watch import BuiltModels
from helpers.lesson.checkpoints import optimizer_state_devices


def quietly(fn, *args):
    """(result, None) or (None, the exception), printing nothing and showing no warning."""
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(*args), None
    except Exception as err:  # the learner's bug, diagnosed by the caller
        return None, err


def unwritten(err: BaseException) -> bool:
    return isinstance(err, NotImplementedError) and not str(err)


LR, MOMENTUM = 0.1, 0.9
CLASS_WEIGHTS = sum(CLASS_COUNTS) / (len(CLASS_COUNTS) * torch.tensor(CLASS_COUNTS, dtype=torch.float32))

TRAIN_HINT = tr_lazy(
    "Five things are wrong in the script: where the head layer is made, when the model moves (before or after its "
    "optimizer), the loss's class weights, the labels, and how the loss is logged. Section 2 of this notebook (its "
    "five ways in) and section 3 show each."
)
FLOAT_HINT = tr_lazy("Return Python floats: a tensor method turns a one-element tensor into one (section 3).")
LAYER_HINT = tr_lazy(
    "Make the layer once, in __init__, as an attribute of the model, and only call it in forward() (section 2, way "
    "4): then .to() moves it and the optimizer trains it."
)


def clinic_batches(n: int, seed: int):
    """``n`` batches of 8 small images on the CPU; each holds the rare class 9, so the class weights count."""
    gen = torch.Generator().manual_seed(seed)
    batches = [(torch.rand(8, 3, 8, 8, generator=gen), torch.randint(0, 9, (8,), generator=gen)) for _ in range(n)]
    for _, labels in batches:
        labels[:2] = 9
    return batches


def resume_start(make_model) -> dict:
    """A checkpoint after a few steps of SGD with momentum, as a resumed run finds it (on the CPU)."""
    torch.manual_seed(0)
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    for images, labels in clinic_batches(3, seed=1):
        optimizer.zero_grad()
        F.cross_entropy(model(images), labels, weight=CLASS_WEIGHTS).backward()
        optimizer.step()
    return copy.deepcopy({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 1})


def reference_resume(make_model, start, batches, device):
    """The fixed script's losses and final weights, and the first loss without class weights."""
    torch.manual_seed(0)
    model = make_model().to(device)
    model.load_state_dict(start["model"])
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    optimizer.load_state_dict(copy.deepcopy(start["optimizer"]))
    loss_fn = nn.CrossEntropyLoss(weight=CLASS_WEIGHTS).to(device)
    images, labels = batches[0][0].to(device), batches[0][1].to(device)
    with torch.no_grad():
        unweighted = F.cross_entropy(model(images), labels).item()
    losses = []
    for images, labels in batches:
        loss = loss_fn(model(images.to(device)), labels.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, [p.detach().clone() for p in model.parameters()], unweighted


def model_problem(make_model):
    """Feedback if the model class fails on a device that is never the CPU, or is random at every call."""
    model, problem = call_learner(make_model, when=tr("Building your model"), hint=tr(LAYER_HINT))
    if problem is not None:
        return problem
    if not isinstance(model, nn.Module):
        return failed(
            tr("make_model() must build an nn.Module, not {kind}.", kind=type(model).__name__), tr(LAYER_HINT)
        )
    with like_a_gpu():
        model.to(OTHER_DEVICE)
        out, error = quietly(model, torch.rand(4, 3, 8, 8, device=OTHER_DEVICE))
    if error is not None:
        message = tr(
            "Your model on {device}, called on images on {device}, raised {error_type}: {error}",
            device=OTHER_DEVICE,
            error_type=type(error).__name__,
            error=error,
        )
        if module_devices(model) == {OTHER_DEVICE}:
            message += tr(
                "\n  Every parameter is on {device}, so the culprit is a layer (or tensor) created inside "
                "forward(): it is born on the CPU, and .to() only moves what __init__ registered. On a GPU this "
                "is 'Expected all tensors to be on the same device'.",
                device=OTHER_DEVICE,
            )
        return failed(message, tr(LAYER_HINT))
    if not isinstance(out, torch.Tensor) or out.shape != (4, 10):
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        return failed(tr("Your model must give 10 scores per image (4 x 10 here), got {got}.", got=got), tr(LAYER_HINT))
    torch.manual_seed(0)
    model = make_model().eval()
    images = torch.rand(4, 3, 8, 8)
    with torch.no_grad():
        if not torch.equal(model(images), model(images)):
            return failed(
                tr(
                    "Called twice on the same images, your model gives different outputs: a layer created inside "
                    "forward() is new and random at every call, so it is never trained (moving it with "
                    ".to(x.device) fixes the device, not that)."
                ),
                tr(LAYER_HINT),
            )
    return None


def raised_in_training(device, error: BaseException, hint: str) -> Feedback:
    """The verdict on a training exercise whose code raised: PyTorch's own message, untranslated, and ``hint``."""
    return failed(
        tr(
            "Training on {device}, your code raised {error_type}: {error}",
            device=device,
            error_type=type(error).__name__,
            error=error,
        ),
        hint,
    )


def meta_diagnosis(error: Exception, rules: GpuRules, built: BuiltModels, device) -> object:
    """Name the bug behind an error raised towards ``device`` (meta) under :class:`GpuRules`."""
    if unwritten(error):
        return failed(NOT_WRITTEN)
    if isinstance(error, TypeError) and "numpy" in str(error):
        return failed(
            tr(
                "`.numpy()` of a tensor on {device} raised TypeError: {error} On a GPU: can't convert cuda:0 device "
                "type tensor to numpy. A NumPy array lives in the CPU's memory.",
                device=device,
                error=error,
            ),
            tr(
                "A device tensor must come to the CPU before NumPy can read it; for one number, a tensor method gives "
                "a Python float directly (section 3)."
            ),
        )
    if not rules.refusals or not built.models:
        text = str(error)
        hint = (
            tr("Use the `device` argument, never .cuda() or 'cuda'.")
            if "CUDA" in text or "NVIDIA" in text
            else tr(TRAIN_HINT)
        )
        return raised_in_training(device, error, hint)
    op, args, odd, main, stepping = rules.refusals[-1]
    where = module_devices(built.models[-1])
    if where != {device}:
        on_gpu = (
            tr(
                " On a GPU: 'Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the "
                "same'."
            )
            if op == "convolution" and "weight" in args
            else ""
        )
        return failed(
            tr(
                "Asked to train on {device}, the model stayed on {where}: it was never moved "
                "({error_type}: {error}).{on_gpu}",
                device=device,
                where=device_names(where),
                error_type=type(error).__name__,
                error=error,
                on_gpu=on_gpu,
            ),
            tr(
                "Move the model to the device right after building it, before its optimizer is built and loaded "
                "(section 2, way 5)."
            ),
        )
    if stepping:
        state = set().union(*(optimizer_state_devices(o) for o in rules.optimizers)) if rules.optimizers else set()
        return failed(
            tr(
                "optimizer.step() found its momentum on {state} and the parameters on {main}: "
                "optimizer.load_state_dict() puts the state beside the parameters as they are at that moment (still "
                "on the CPU), and model.to({device}) afterwards moves the parameters, not the optimizer's state. On "
                "a GPU: 'Expected all tensors to be on the same device'.",
                state=device_names(state - {main}) or odd,
                main=main,
                device=device,
            ),
            tr("Move the model first, then build the optimizer and load its state."),
        )
    if op.startswith("nll_loss"):
        if "target" in args:
            fields = dict(odd=odd, main=main)
            if "weight" in args:
                return failed(
                    tr(
                        "The labels and the loss's class weights stayed on {odd} while the model's outputs are on "
                        "{main}: the loss raised 'Expected all tensors to be on the same device' (as on a GPU).",
                        **fields,
                    ),
                    tr(
                        "Move the labels where you move the images (section 2, way 2). The loss's class weights go "
                        "there too (way 3)."
                    ),
                )
            return failed(
                tr(
                    "The labels stayed on {odd} while the model's outputs are on {main}: the loss raised "
                    "'Expected all tensors to be on the same device' (as on a GPU).",
                    **fields,
                ),
                tr("Move the labels where you move the images (section 2, way 2)."),
            )
        if "weight" in args:
            return failed(
                tr(
                    "The loss's class weights stayed on {odd} while the outputs and labels are on {main}: the loss "
                    "raised 'Expected all tensors to be on the same device' (as on a GPU).",
                    odd=odd,
                    main=main,
                ),
                tr(
                    "The class weights are a buffer of the loss module, and a module's .to() moves its buffers "
                    "(section 2, way 3)."
                ),
            )
    if op in ("convolution", "addmm", "mm"):
        return failed(
            tr(
                "The images reached the model on {odd}, the model is on {main}: {error}",
                odd=odd,
                main=main,
                error=error,
            ),
            tr(
                "Tensor.to() returns a moved copy and leaves the original where it was: keep what it returns "
                "(section 2, way 1)."
            ),
        )
    return raised_in_training(device, error, tr(TRAIN_HINT))


def floats_problem(losses, n: int):
    if isinstance(losses, torch.Tensor) or (
        isinstance(losses, list | tuple) and any(isinstance(x, torch.Tensor) for x in losses)
    ):
        return failed(
            tr(
                "Return the losses as Python floats, not tensors: tensors on the GPU keep GPU memory (and a graph, "
                "unless detached)."
            ),
            tr(FLOAT_HINT),
        )
    if not isinstance(losses, list | tuple) or len(losses) != n:
        if isinstance(losses, list | tuple):
            message = tr("Return a list of {n} losses, one per batch; got {count} values.", n=n, count=len(losses))
        else:
            message = tr("Return a list of {n} losses, one per batch; got {kind}.", n=n, kind=type(losses).__name__)
        return failed(message, tr(FLOAT_HINT))
    if not all(isinstance(x, numbers.Real) for x in losses):
        kinds = sorted({type(x).__name__ for x in losses if not isinstance(x, numbers.Real)})
        return failed(tr("Return the losses as floats, not {kinds}.", kinds=", ".join(kinds)), tr(FLOAT_HINT))
    return None
