"""Checks for notebook 04's exercises (models vs tensors).

Each check also moves the learner's module or calls the learner's function towards
``OTHER_DEVICE`` (meta): on a CPU-only machine a tensor left on the CPU is "on the right device"
by luck, so only a device that is never the CPU shows a plain attribute or a forgotten input move.

``predict`` is judged by what the model saw while it ran (a probe layer next to its Dropout notes the
mode, the device and whether autograd recorded the activations), not by how the learner got there: a
function that restores the caller's training mode afterwards, or predicts with a copy of the model, passes.
"""

from __future__ import annotations

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

MEAN = [1.0, 2.0, 3.0]
STD = [2.0, 4.0, 8.0]
SECTION_BUFFERS = "3. Buffers move; a plain tensor attribute does not"
SECTION_UNSAVED = "Going deeper: buffers that checkpoints leave out"
SECTION_IN_PLACE = "1. model.to() changes the model itself (article section 4, corrected)"
SECTION_EXERCISES = "Exercises"

BUFFER_HINT = tr_lazy(
    "Constants that must move with the module but never learn are buffers: register mean and std as buffers "
    "in __init__, and let forward read them from the module."
)
BUFFER_MORE = tr_lazy(
    "nn.Module has a method that registers a tensor under a name as a buffer (section 3 uses it): afterwards "
    "the module has an attribute of that name, .to() moves it, state_dict() saves it, parameters() leaves it "
    "out. A tensor assigned as a plain attribute gets none of that; an nn.Parameter gets trained."
)

OFF_DEVICE_HINT = tr_lazy(
    "Compute where x is and return the result there: no .cpu() or .to() inside forward; read the constants "
    "from the module's buffers, which .to() has moved."
)


def _saved_constants_differ(cls, module: nn.Module) -> bool:
    """Does a module built with other constants, then loaded from ``module.state_dict()``, compute otherwise?"""
    try:
        other = cls(torch.zeros(3), torch.ones(3))
        other.load_state_dict(module.state_dict())
        x = torch.tensor([[3.0, 6.0, 11.0], [1.0, 2.0, 3.0]])
        with torch.no_grad():
            return not torch.allclose(other(x), module(x))
    except Exception:  # a forward that fails is reported below, with the hint that fits
        return False


@exercise_check
def standardize(cls) -> object:
    """``cls(mean, std)`` is a module computing ``(x - mean) / std`` whose constants follow ``.to()``."""
    mean, std = torch.tensor(MEAN), torch.tensor(STD)
    module, problem = call_learner(
        cls,
        mean,
        std,
        when=tr("Building Standardize(mean, std)"),
        hint=tr(BUFFER_HINT),
        more=tr(BUFFER_MORE),
        see=SECTION_BUFFERS,
    )
    if problem is not None:
        return problem
    if not isinstance(module, nn.Module):
        return failed(
            tr("Standardize must be an nn.Module subclass."), tr("Keep the starter's class line."), see=SECTION_BUFFERS
        )
    parameters = [name for name, _ in module.named_parameters()]
    if parameters:
        names = ", ".join(parameters)
        if any(p.requires_grad for p in module.parameters()):
            if len(parameters) == 1:
                what = tr(
                    "{names} is an nn.Parameter: model.parameters() hands them to the optimizer, and the loss's "
                    "gradient reaches them, so training would change your constants.",
                    names=names,
                )
            else:
                what = tr(
                    "{names} are nn.Parameter objects: model.parameters() hands them to the optimizer, and the "
                    "loss's gradient reaches them, so training would change your constants.",
                    names=names,
                )
        elif len(parameters) == 1:
            what = tr(
                "{names} is an nn.Parameter with requires_grad=False: not trained today, but model.parameters() "
                "lists them, so they are counted as the model's parameters and handed to the optimizer, and "
                "model.requires_grad_(True) (which code that unfreezes a model calls) would make them trainable.",
                names=names,
            )
        else:
            what = tr(
                "{names} are nn.Parameter objects with requires_grad=False: not trained today, but "
                "model.parameters() lists them, so they are counted as the model's parameters and handed to the "
                "optimizer, and model.requires_grad_(True) (which code that unfreezes a model calls) would make "
                "them trainable.",
                names=names,
            )
        return failed(what, tr(BUFFER_HINT), more=tr(BUFFER_MORE), see=SECTION_BUFFERS)
    plain = sorted(name for name, value in vars(module).items() if isinstance(value, torch.Tensor))
    if plain:
        names = ", ".join(f"self.{name}" for name in plain)
        if len(plain) == 1:
            what = tr(
                "{names} is a plain tensor attribute, not a buffer: .to(device) does not know about plain "
                "attributes and leaves them where they were created.",
                names=names,
            )
        else:
            what = tr(
                "{names} are plain tensor attributes: .to(device) does not know about plain attributes and leaves "
                "them where they were created.",
                names=names,
            )
        return failed(what, tr(BUFFER_HINT), more=tr(BUFFER_MORE), see=SECTION_BUFFERS)
    if not list(module.buffers()):
        return failed(
            tr(
                "mean and std are not buffers: module.buffers() lists nothing, so .to(device) has nothing to move "
                "and state_dict() nothing to save."
            ),
            tr(BUFFER_HINT),
            more=tr(BUFFER_MORE),
            see=SECTION_BUFFERS,
        )
    unsaved = sorted(set(dict(module.named_buffers())) - set(module.state_dict()))
    if unsaved:
        return failed(
            tr(
                "Buffer(s) {names} are missing from state_dict() (persistent=False): a checkpoint would not save the "
                "statistics the model was built with.",
                names=", ".join(unsaved),
            ),
            tr("Drop persistent=False: a buffer registered without it is saved with the model."),
            see=SECTION_UNSAVED,
        )
    if _saved_constants_differ(cls, module):
        return failed(
            tr(
                "A module loaded from your module's state_dict() computes something else: the constants are not "
                "all in state_dict(), so a checkpoint would not restore them."
            ),
            tr(
                "Keep mean and std (or what forward computes from them) in buffers. {hint}",
                hint=tr(BUFFER_HINT),
            ),
            more=tr(BUFFER_MORE),
            see=SECTION_BUFFERS,
        )
    for device in (pick_device(), OTHER_DEVICE):
        module.to(device)
        x = torch.tensor([[3.0, 6.0, 11.0], [1.0, 2.0, 3.0]], device=device)
        when = tr(
            "After module.to({device}), calling it on an input on {where}", device=str(device), where=shown(device)
        )
        try:
            result = module(x)
        except Exception as err:  # report it through call_learner, with the hint that fits
            hint = OFF_DEVICE_HINT if "copy out of meta" in str(err) else BUFFER_HINT
            return call_learner(module, x, when=when, hint=tr(hint), more=tr(BUFFER_MORE), see=SECTION_BUFFERS)[1]
        if not isinstance(result, torch.Tensor) or result.device != device:
            where = result.device if isinstance(result, torch.Tensor) else type(result).__name__
            return failed(
                tr(
                    "After module.to({device}), with an input on {shown}, the output is on {where}.",
                    device=str(device),
                    shown=shown(device),
                    where=str(where),
                ),
                tr(OFF_DEVICE_HINT),
                more=tr(BUFFER_MORE),
                see=SECTION_BUFFERS,
            )
        if device.type != "meta":
            expected = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
            if not torch.allclose(result.cpu(), expected):
                return failed(
                    tr(
                        "With mean={mean} and std={std}, Standardize gave {got} for [[3, 6, 11], [1, 2, 3]], "
                        "expected {expected}.",
                        mean=MEAN,
                        std=STD,
                        got=result.cpu().tolist(),
                        expected=expected.tolist(),
                    ),
                    tr("forward computes (x - mean) / std, element by element, with the constants given to __init__."),
                    see=SECTION_BUFFERS,
                )
    return passed(
        tr(
            "The constants are buffers: they follow .to() (to meta too), are saved in state_dict() and are never "
            "trained."
        )
    )


class _Log(list):
    """A list that copies of the model share: a learner may predict with a copy of the model."""

    def __deepcopy__(self, memo):
        return self


class _Probe(nn.Module):
    """Identity layer that notes, each time the model runs, what its Dropout sees: the mode it is in, the
    device of the activations, and whether autograd is recording them (they require grad)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[bool, torch.device, bool]] = _Log()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append((self.training, x.device, x.requires_grad))
        return x


def _tiny_classifier() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), _Probe(), nn.Dropout(0.5), nn.Linear(8, 3))


def _probe_log(model: nn.Module) -> list[tuple[bool, torch.device, bool]]:
    """What the probe in ``model`` saw, in ``model`` or in any copy of it."""
    return [entry for module in model.modules() if isinstance(module, _Probe) for entry in module.seen]


PREDICT_HINT = tr_lazy(
    "Move both the model and the input to `device` (a model moves in place; a tensor's move returns a new "
    "tensor, to keep), then predict in evaluation mode without recording gradients."
)
PREDICT_MORE = tr_lazy(
    "Section 1: a model's .to() changes the model itself, a tensor's .to() returns a new tensor and leaves "
    "the original where it was. Dropout and BatchNorm act differently while training: a module's .eval() "
    "switches them off (and .train() back on). torch.no_grad(), as a with-block, stops autograd from "
    "recording. Notebook 05's test loop does all three."
)


FETCH_HINT = tr_lazy(
    "Return the model's output as it is, on the device: the caller decides when to fetch it (copy it to the CPU)."
)


@exercise_check
def predict(fn) -> object:
    """``fn(model, x, device)`` returns ``model(x)`` computed on ``device``, in eval mode, without gradients."""
    for device in (pick_device(), OTHER_DEVICE):
        model = _tiny_classifier()
        reference = _tiny_classifier().eval()
        requires_grad = [p.requires_grad for p in model.parameters()]
        x = torch.randn(5, 4, generator=torch.Generator().manual_seed(1))
        when = tr("Predicting on {device}", device=shown(device))
        try:
            result = fn(model, x, device)
        except Exception as err:  # report it through call_learner (on a fresh model), with the hint that fits
            moved = module_devices(model)
            see = SECTION_IN_PLACE
            if moved != {device}:
                hint = tr(
                    "Your model's parameters are on {where}, not on {device}: the model was not moved. {hint}",
                    where=device_names(moved),
                    device=shown(device),
                    hint=tr(PREDICT_HINT),
                )
            elif "copy out of meta" in str(err):
                hint, see = tr(FETCH_HINT), SECTION_EXERCISES
            elif "device" in str(err):
                hint = tr(
                    "The model is on {device}, the input is not: move the input too, and keep the tensor the move "
                    "returns (x itself does not change).",
                    device=shown(device),
                )
            else:
                hint = tr(PREDICT_HINT)
            return call_learner(
                fn, _tiny_classifier(), x, device, when=when, hint=hint, more=tr(PREDICT_MORE), see=see
            )[1]
        if not isinstance(result, torch.Tensor):
            return failed(
                tr(
                    "{when}: return the model's output tensor, not {type_name}.",
                    when=when,
                    type_name=type(result).__name__,
                ),
                tr(FETCH_HINT),
                see=SECTION_EXERCISES,
            )
        seen = _probe_log(model)
        if not seen:
            return failed(
                tr("{when}: your function never ran the model you were given.", when=when),
                tr("Run the model it was given on x, on `device`, and return its output."),
                see=SECTION_EXERCISES,
            )
        training, where, recorded = seen[-1]  # the run that made the output
        if where != device:
            return failed(
                tr("Asked for {device}, the model ran on {where}.", device=shown(device), where=str(where)),
                tr(PREDICT_HINT),
                more=tr(PREDICT_MORE),
                see=SECTION_IN_PLACE,
            )
        if result.device != device:
            return failed(
                tr("Asked for {device}, your output is on {where}.", device=shown(device), where=str(result.device)),
                tr(FETCH_HINT),
                see=SECTION_EXERCISES,
            )
        if training:
            return failed(
                tr(
                    "{when}: the model ran in training mode, so Dropout zeroed random activations of your prediction.",
                    when=when,
                ),
                tr(
                    "Switch the model to evaluation mode before predicting (and back afterwards, if you like); the "
                    "exercise asks for it."
                ),
                more=tr(PREDICT_MORE),
                see=SECTION_EXERCISES,
            )
        if recorded:
            if result.requires_grad:
                what = tr(
                    "{when}: autograd recorded the forward pass: gradients were enabled while the model ran.",
                    when=when,
                )
            else:
                what = tr(
                    "{when}: autograd recorded the forward pass: gradients were enabled while the model ran "
                    "(.detach() afterwards drops the graph, but it was built).",
                    when=when,
                )
            return failed(
                what,
                tr(
                    "Run the model inside a block where autograd records nothing: torch.no_grad() (or "
                    "torch.inference_mode())."
                ),
                more=tr(PREDICT_MORE),
                see=SECTION_EXERCISES,
            )
        if [p.requires_grad for p in model.parameters()] != requires_grad:
            return failed(
                tr(
                    "{when}: your function changed the model's requires_grad flags: the caller's training would no "
                    "longer update those parameters.",
                    when=when,
                ),
                tr("Leave the parameters as they are; torch.no_grad() stops recording without touching them."),
                see=SECTION_EXERCISES,
            )
        if device.type != "meta":
            with torch.no_grad():
                expected = reference(x)
            if result.shape != expected.shape or not torch.allclose(result.cpu(), expected, atol=1e-5):
                return failed(
                    tr("{when}: your output differs from the model's own output in eval mode.", when=when),
                    tr("Return the model's output as it is: no softmax, rounding or other change."),
                    see=SECTION_EXERCISES,
                )
    return passed(tr("Model and input on the same device, eval mode, no gradients: a prediction that runs anywhere."))


# The exercises as the could-not-be-checked hint states them (each check's docstring: helpers.exercises.statement).
STATEMENTS = (
    tr_lazy("`cls(mean, std)` is a module computing `(x - mean) / std` whose constants follow `.to()`."),
    tr_lazy("`fn(model, x, device)` returns `model(x)` computed on `device`, in eval mode, without gradients."),
)
