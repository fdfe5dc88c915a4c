"""Checks for notebook 04's exercises (models vs tensors).

Each check also moves the learner's module or calls the learner's function towards
``OTHER_DEVICE`` (meta): on a CPU-only machine a tensor left on the CPU is "on the right device"
by luck, so only a device that is never the CPU shows a plain attribute or a forgotten input move.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from helpers.devices import pick_device
from helpers.exercises import OTHER_DEVICE, call_learner, exercise_check, failed, passed

MEAN = [1.0, 2.0, 3.0]
STD = [2.0, 4.0, 8.0]
BUFFER_HINT = (
    "In __init__: self.register_buffer('mean', mean) and self.register_buffer('std', std); forward then "
    "reads self.mean and self.std, which .to() moves with the module."
)


OFF_DEVICE_HINT = (
    "Compute where x is and return the result there: no .cpu() or .to() inside forward; read the constants "
    "from the module's buffers, which .to() has moved."
)


def _devices(module: nn.Module) -> set[torch.device]:
    return {t.device for t in list(module.parameters()) + list(module.buffers())}


@exercise_check
def standardize(cls) -> object:
    """``cls(mean, std)`` is a module computing ``(x - mean) / std`` whose constants follow ``.to()``."""
    mean, std = torch.tensor(MEAN), torch.tensor(STD)
    module, problem = call_learner(cls, mean, std, when="Building Standardize(mean, std)")
    if problem is not None:
        return problem
    if not isinstance(module, nn.Module):
        return failed("Standardize must be an nn.Module subclass.", "class Standardize(nn.Module): ...")
    if list(module.parameters()):
        return failed(
            "mean and std are nn.Parameter objects: model.parameters() hands them to the optimizer, "
            "which would train your constants.",
            "Constants that must move with the model but never learn are buffers: " + BUFFER_HINT,
        )
    plain = sorted(name for name, value in vars(module).items() if isinstance(value, torch.Tensor))
    if plain:
        names = ", ".join(f"self.{name}" for name in plain)
        what = "is a plain tensor attribute, not a buffer" if len(plain) == 1 else "are plain tensor attributes"
        return failed(
            f"{names} {what}: "
            ".to(device) does not know about plain attributes and leaves them where they were created.",
            BUFFER_HINT,
        )
    if not list(module.buffers()):
        return failed(
            "mean and std are not buffers: module.buffers() lists nothing, so .to(device) has nothing to move and "
            "state_dict() nothing to save.",
            BUFFER_HINT,
        )
    unsaved = sorted(set(dict(module.named_buffers())) - set(module.state_dict()))
    if unsaved:
        return failed(
            f"Buffer(s) {', '.join(unsaved)} are missing from state_dict() (persistent=False): a checkpoint would "
            "not save the statistics the model was built with.",
            "Drop persistent=False: a plain register_buffer(name, tensor) is saved with the model.",
        )
    for device in (pick_device(), OTHER_DEVICE):
        module.to(device)
        x = torch.tensor([[3.0, 6.0, 11.0], [1.0, 2.0, 3.0]], device=device)
        when = f"After module.to({device!s}), calling it on an input on {device}"
        try:
            result = module(x)
        except Exception as err:  # report it through call_learner, with the hint that fits
            hint = OFF_DEVICE_HINT if "copy out of meta" in str(err) else BUFFER_HINT
            return call_learner(module, x, when=when, hint=hint)[1]
        if not isinstance(result, torch.Tensor) or result.device != device:
            where = result.device if isinstance(result, torch.Tensor) else type(result).__name__
            return failed(
                f"After module.to({device}) the output is on {where}.",
                OFF_DEVICE_HINT,
            )
        if device.type != "meta":
            expected = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
            if not torch.allclose(result.cpu(), expected):
                return failed(
                    f"Standardize gave {result.cpu().tolist()}, expected {expected.tolist()}.", "(x - mean) / std"
                )
    return passed(
        "The constants are buffers: they follow .to() (to meta too), are saved in state_dict() and are never trained."
    )


def _tiny_classifier() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 3))


PREDICT_HINT = (
    "Move both, and keep what .to() returns for the tensor: model.to(device); x = x.to(device); then "
    "model.eval() and `with torch.no_grad(): return model(x)`."
)


FETCH_HINT = "Return model(x) as it is, on the device: the caller decides when to fetch it (copy it to the CPU)."


@exercise_check
def predict(fn) -> object:
    """``fn(model, x, device)`` returns ``model(x)`` computed on ``device``, in eval mode, without gradients."""
    for device in (pick_device(), OTHER_DEVICE):
        model = _tiny_classifier()
        reference = copy.deepcopy(model).eval()
        x = torch.randn(5, 4, generator=torch.Generator().manual_seed(1))
        try:
            result = fn(model, x, device)
        except Exception as err:  # report it through call_learner (on a fresh model), with the hint that fits
            moved = _devices(model)
            if moved != {device}:
                hint = (
                    f"Your model's parameters are on {', '.join(sorted(map(str, moved)))}, not on {device}: the "
                    "model was not moved. " + PREDICT_HINT
                )
            elif "copy out of meta" in str(err):
                hint = FETCH_HINT
            elif "device" in str(err):
                hint = (
                    f"The model is on {device}, the input is not: move the input too, and keep the new tensor "
                    "(x.to(device) returns it; x itself does not change). " + PREDICT_HINT
                )
            else:
                hint = PREDICT_HINT
            return call_learner(fn, _tiny_classifier(), x, device, when=f"Predicting on {device}", hint=hint)[1]
        model_devices = _devices(model)
        if model_devices != {device}:
            return failed(
                f"Asked for {device}, your model's parameters are on {', '.join(sorted(map(str, model_devices)))}.",
                "model.to(device) moves the model in place. " + PREDICT_HINT,
            )
        if not isinstance(result, torch.Tensor):
            return failed(f"Return the model's output tensor, not {type(result).__name__}.", PREDICT_HINT)
        if result.device != device:
            return failed(
                f"Asked for {device}, your output is on {result.device}.",
                FETCH_HINT,
            )
        if model.training:
            return failed(
                "The model is still in training mode, so Dropout zeroes random activations at prediction time.",
                "Call model.eval() before predicting.",
            )
        if result.requires_grad:
            return failed(
                "Your output requires grad: autograd recorded the whole forward pass, for nothing.",
                "Predict inside `with torch.no_grad():` (or torch.inference_mode()).",
            )
        if device.type != "meta":
            with torch.no_grad():
                expected = reference(x)
            if result.shape != expected.shape or not torch.allclose(result.cpu(), expected, atol=1e-5):
                return failed("Your output differs from model(x) in eval mode.", "Return model(x), nothing else.")
    return passed("Model and input on the same device, eval mode, no gradients: a prediction that runs anywhere.")
