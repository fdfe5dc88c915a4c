"""Lesson 06's checks, their shared parts and exercise 3's verdicts: what a mixed-precision step computes.

:mod:`helpers.exercises.ex06_speed` holds the checks; this module holds what they share (the small CNN they train,
its batches, the quiet call of the learner's code) and judges one step of exercise 3 on one device: under
``torch.autocast`` for the tensors' device (the first convolution in 16 bits, the weights still float32), through a
GradScaler that is really enabled, as it is for float16 on a CUDA GPU (scaled, unscaled, updated; compared with a
float32 step), and once with an inf gradient, which must skip the step. Without a CUDA GPU,
:mod:`helpers.lab.autocast_probe` runs the step with tensors that report ``cuda``, to see the autocast device type
follow the data.
"""

from __future__ import annotations

import contextlib
import functools
import io
import warnings

import torch
from torch import nn

from helpers.course.i18n import tr, tr_lazy
from helpers.exercises import NOT_WRITTEN, failed
from helpers.lab.autocast_probe import as_cuda_labelled, autocast_types, first_forward_autocast
from helpers.lab.simulate import CudaLabelledTensor
from helpers.lab.training_watch import StepWatch

SIDE = 8  # the checks train a small CNN on 8x8 images: the same kinds of layers as Tudui, a fraction of the work


def net() -> nn.Sequential:
    """A small image classifier: convolution first (autocast runs it in 16 bits), then a linear layer."""
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * (SIDE // 2) ** 2, 10)
    )


def random_batches(device, n: int, scale: float = 1.0, seed: int = 0):
    """``n`` batches of 8 random images (scaled by ``scale``) and labels, on ``device``."""
    gen = torch.Generator().manual_seed(seed)
    return [
        (
            (scale * torch.rand(8, 3, SIDE, SIDE, generator=gen)).to(device),
            torch.randint(0, 10, (8,), generator=gen).to(device),
        )
        for _ in range(n)
    ]


def fresh_setup(device):
    """A fresh small CNN on ``device`` (seeded), its loss and its SGD optimizer, as exercise 1's loop gets them."""
    torch.manual_seed(0)
    model = net().to(device)
    return model, nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters(), lr=0.01)


def quietly(fn, *args):
    """Call the learner's code with its printing hidden (it may print losses that vary by machine).

    Returns (result, None) or (None, the exception); prints nothing.
    """
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return fn(*args), None
    except Exception as err:  # the learner's bug is the feedback
        return None, err


def report(err: Exception, when: str = "", hint: str = ""):
    """The verdict on the learner's code that raised ``err`` (``when``: on what machine or input), with ``hint``."""
    if isinstance(err, NotImplementedError) and not str(err):  # the starter's bare `raise NotImplementedError`
        return failed(NOT_WRITTEN)
    if when:
        message = tr(
            "{when}, your code raised {error_type}: {error}", when=when, error_type=type(err).__name__, error=err
        )
    else:
        message = tr("Your code raised {error_type}: {error}", error_type=type(err).__name__, error=err)
    return failed(message, hint)


CLEARED = tr_lazy(
    "the gradients were cleared before the optimizer stepped: zero_grad() ran between backward() and step(), so "
    "every step found no gradient and the weights never moved"
)


# ---------------------------------------------------------------- Exercise 3: a mixed-precision step

AMP_HINT = tr_lazy(
    "Section 4, 'Mixed precision: torch.autocast', shows the forward pass under autocast for the tensors' device "
    "and a training step through a GradScaler (scale, step, update); it also says which 16-bit type each device runs."
)
AMP_SEE = "Mixed precision: torch.autocast"
AMP_MORE = tr_lazy(
    "A GradScaler wraps three moments of the step: it multiplies the loss by its scale before the backward pass "
    "(so that small float16 gradients do not underflow to zero), it takes the optimizer's step itself (dividing "
    "the gradients by the scale, and skipping the step if any of them is inf or NaN), and it adapts the scale "
    "afterwards. Read the docstrings of torch.amp.GradScaler's scale, step and update, then check which of the "
    "three your step leaves out or does by hand."
)
LOW = (torch.bfloat16, torch.float16)
INIT_SCALE = 2.0**8


def _amp_setup(device):
    torch.manual_seed(0)
    model = net().to(device)
    gen = torch.Generator().manual_seed(1)
    imgs = torch.rand(16, 3, SIDE, SIDE, generator=gen).to(device)
    targets = torch.randint(0, 10, (16,), generator=gen).to(device)
    return model, imgs, targets, nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters(), lr=0.05)


@functools.cache
def _amp_reference(device: torch.device, dtype: torch.dtype):
    """Computed once per device and type: the initial weights, the loss under autocast, a float32 step's update."""
    model, imgs, targets, loss_fn, optimizer = _amp_setup(device)
    before = [p.detach().clone() for p in model.parameters()]
    with torch.no_grad(), torch.autocast(device.type, dtype=dtype):
        loss = loss_fn(model(imgs), targets).float()
    fp32_loss = loss_fn(model(imgs), targets)
    optimizer.zero_grad()
    fp32_loss.backward()
    optimizer.step()
    delta = torch.cat([(p.detach() - b).flatten() for p, b in zip(model.parameters(), before, strict=True)])
    return before, loss, delta


def amp_verdict(fn, device):
    """Exercise 3's step judged on ``device``: failed feedback, or ``(None, the 16-bit type it ran in)``."""
    model, imgs, targets, loss_fn, optimizer = _amp_setup(device)
    seen = []
    autocast_on = set()  # the device types autocast was on for during the forward pass

    def look(module, inputs, output):
        seen.append(output.dtype)
        autocast_on.update(autocast_types())

    model[0].register_forward_hook(look)
    steps = StepWatch(optimizer)
    scaler = torch.amp.GradScaler(device.type, init_scale=INIT_SCALE, growth_interval=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss, error = quietly(fn, model, imgs, targets, loss_fn, optimizer, scaler)
    no_grads = all(p.grad is None for p in model.parameters())
    if (error is not None and "No inf checks were recorded for this optimizer" in str(error) and no_grads) or (
        error is None and steps.cleared()
    ):
        return failed(
            tr("On {device}, {cleared}.", device=str(device), cleared=tr(CLEARED)),
            tr("Clear the old gradients before backward(), never between backward() and the step."),
        )
    if error is not None:
        if "_scale is None" in str(error):
            return failed(
                tr(
                    "On {device}, the scaler's step found gradients it had not scaled: backward() ran on the loss "
                    "itself, so the scaler has no scale on record for this step.",
                    device=str(device),
                ),
                tr(
                    "The backward pass starts from the loss as the scaler returns it (scaled), not from the loss "
                    "itself."
                ),
                more=tr(AMP_MORE),
                see=AMP_SEE,
            )
        if "No inf checks were recorded" in str(error):
            return failed(
                tr(
                    "On {device}, scaler.update() found a step the scaler did not take: the optimizer stepped by "
                    "itself. Step through the scaler: it unscales the gradients first (optimizer.step() alone moves "
                    "the weights by the scaled gradients) and skips a step whose gradients hold inf or NaN.",
                    device=str(device),
                ),
                tr(AMP_HINT),
                more=tr(AMP_MORE),
                see=AMP_SEE,
            )
        return report(error, when=tr("On {device}", device=str(device)), hint=tr(AMP_HINT))
    disabled = [str(w.message) for w in caught if "isabl" in str(w.message)]
    if any(p.dtype != torch.float32 for p in model.parameters()):
        return failed(
            tr(
                "Your step changed the model's weights to a lower precision (.half() or .to(bfloat16)). Autocast "
                "keeps the weights in float32 and runs selected operations in lower precision."
            ),
            tr(AMP_HINT),
        )
    if not seen or seen[0] not in LOW:
        if disabled:
            why = tr(
                " Autocast disabled itself with a warning ({warning}): its device_type must be the tensors' device "
                "type, {device_type!r} here.",
                warning=disabled[0],
                device_type=device.type,
            )
        elif autocast_on:
            why = tr(
                " Autocast was on for {types}, not for {device_type!r}: its device_type must be the tensors' device "
                "type, {device_type!r} here.",
                types=", ".join(sorted(map(repr, autocast_on))),
                device_type=device.type,
            )
        else:
            why = ""
        if seen:
            message = tr(
                "On {device} the first convolution ran in {dtype} precision: the forward pass did not run under "
                "torch.autocast for this device.{why}",
                device=str(device),
                dtype=seen[0],
                why=why,
            )
        else:
            message = tr(
                "On {device} the first convolution ran in no precision: the forward pass did not run under "
                "torch.autocast for this device.{why}",
                device=str(device),
                why=why,
            )
        return failed(message, tr(AMP_HINT))
    if scaler._scale is None:
        return failed(
            tr(
                "The GradScaler was never used. On a CUDA GPU in float16, small gradients underflow to zero without "
                "it (here it is enabled, as it is there)."
            ),
            tr(AMP_HINT),
        )
    before, ref_loss, ref_delta = _amp_reference(device, seen[0])
    delta = torch.cat([(p.detach() - b).flatten().float() for p, b in zip(model.parameters(), before, strict=True)])
    if float(delta.norm()) == 0:
        return failed(tr("The model's weights did not change: the step did not update them."), tr(AMP_HINT))
    ratio = float(delta.norm() / ref_delta.norm())
    if ratio > 4:
        return failed(
            tr(
                "The weights moved about {ratio:.0f} times too far: the gradients were still multiplied by the "
                "scale ({scale:.0f}) when the optimizer stepped. Step through the scaler: it unscales first.",
                ratio=ratio,
                scale=INIT_SCALE,
            ),
            tr(AMP_HINT),
            more=tr(AMP_MORE),
            see=AMP_SEE,
        )
    if ratio < 0.25 or float(torch.nn.functional.cosine_similarity(delta, ref_delta, dim=0)) < 0.9:
        return failed(
            tr(
                "The weights moved {ratio:.3f} times as far as a float32 step would: the gradients were divided by "
                "the scale without having been multiplied by it: the backward pass did not start from the scaled "
                "loss.",
                ratio=ratio,
            ),
            tr(AMP_HINT),
            more=tr(AMP_MORE),
            see=AMP_SEE,
        )
    if scaler.get_scale() == INIT_SCALE:
        return failed(
            tr(
                "scaler.update() was not called: the scale never adapts (it must shrink after an overflow and grow "
                "after good steps)."
            ),
            tr(AMP_HINT),
        )
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        return failed(tr("Return the loss tensor (got {type_name}).", type_name=type(loss).__name__), tr(AMP_HINT))
    if abs(float(loss.detach().float()) - float(ref_loss)) > 0.05 * abs(float(ref_loss)) + 1e-3:
        return failed(
            tr(
                "Your step returns {returned:.4g}, the loss is {loss:.4g}: return the loss itself, not "
                "scaler.scale(loss).",
                returned=float(loss.detach().float()),
                loss=float(ref_loss),
            ),
            tr(AMP_HINT),
        )
    skipped = _inf_step_skipped(fn, device)
    if skipped is not None:
        return skipped
    return None, seen[0]


def _inf_step_skipped(fn, device):
    """A step whose gradients hold inf must leave the weights alone (scaler.step skips it); None if it does."""
    model, imgs, targets, loss_fn, optimizer = _amp_setup(device)
    before = [p.detach().clone() for p in model.parameters()]
    model[0].weight.register_hook(lambda grad: torch.full_like(grad, float("inf")))
    scaler = torch.amp.GradScaler(device.type, init_scale=INIT_SCALE, growth_interval=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, error = quietly(fn, model, imgs, targets, loss_fn, optimizer, scaler)
    if error is not None:
        return report(
            error, when=tr("On {device}, in a step whose gradients held inf", device=str(device)), hint=tr(AMP_HINT)
        )
    changed = [not torch.equal(p.detach(), b) for p, b in zip(model.parameters(), before, strict=True)]
    if any(changed):
        return failed(
            tr(
                "On {device}, in a step whose gradients held inf (injected into the first convolution's weight "
                "gradient, as a float16 overflow makes them), your step still changed the weights: the optimizer "
                "stepped without the scaler's check for inf/NaN. The scaler's own step skips such a step (also "
                "after an explicit unscale_); optimizer.step() called by itself does not.",
                device=str(device),
            ),
            tr(AMP_HINT),
            more=tr(AMP_MORE),
            see=AMP_SEE,
        )
    if scaler.get_scale() >= INIT_SCALE:
        return failed(
            tr(
                "On {device}, after a step whose gradients held inf, the scale did not shrink: scaler.update() must "
                "follow the scaler's step in every step.",
                device=str(device),
            ),
            tr(AMP_HINT),
            more=tr(AMP_MORE),
            see=AMP_SEE,
        )
    return None


def autocast_follows_data(fn):
    """The step run as if the model and tensors were on a CUDA GPU, on a machine that has none: which device types
    was autocast on for during the forward pass? None when the step could not be run that far (no verdict)."""
    model, imgs, targets, loss_fn, _ = _amp_setup(torch.device("cpu"))
    as_cuda_labelled(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)  # made before the simulation (it imports torch._dynamo)
    imgs, targets = imgs.as_subclass(CudaLabelledTensor), targets.as_subclass(CudaLabelledTensor)
    scaler = torch.amp.GradScaler("cpu", init_scale=INIT_SCALE)
    return first_forward_autocast(functools.partial(fn, model, imgs, targets, loss_fn, optimizer, scaler), model[0])
