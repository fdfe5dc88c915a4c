"""Checks for notebook 09's exercises (the device error clinic: fix three broken scripts).

Each judges what a GPU (or a Mac, or Windows) would observe, on any machine:

- ``fixed_training`` runs the learner's resumed training towards ``meta`` (a device that is never the
  CPU) under the rules a GPU enforces: an operator that mixes tensors of two devices raises (see
  :class:`GpuRules`, also the mixes meta's own kernels let through), and ``module.to()`` keeps each
  Parameter object, as it does for a GPU (a lazy module's uninitialised ones too, so they materialise on
  the device), so an optimizer loaded before a late move keeps its state on the CPU. Then it runs on the
  course device and compares the losses and weights with a reference resume.
- ``load_anywhere`` writes the files a GPU machine writes (DDP and ``torch.compile`` prefixes, a training
  checkpoint dict, tensors tagged ``cuda:0``) and loads them on a simulated laptop, towards ``meta`` and
  on the course device; one more file carries code that runs if it is unpickled unsafely.
- ``notebook_safe_loader`` reads two epochs of the learner's DataLoader (a shuffle draws a new order at each)
  and proves, without starting a worker, whether a worker started by ``spawn`` or ``forkserver`` could unpickle
  what it is sent (:mod:`helpers.lab.pickle_recorder`).
"""

from __future__ import annotations

import contextlib
import copy
import io
import math
import numbers
import re
import tempfile
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from helpers.course.i18n import tr, tr_lazy
from helpers.exercises import (
    NOT_WRITTEN,
    OTHER_DEVICE,
    Feedback,
    call_learner,
    device_names,
    exercise_check,
    failed,
    module_devices,
    passed,
)
from helpers.exercises.ex05_training import CLASS_COUNTS  # the rare class 9 (truck), as in notebook 05
from helpers.lab.gpu_checkpoints import CHECKPOINTS, CODE_RAN, write_checkpoints
from helpers.lab.gpu_rules import GpuRules, like_a_gpu
from helpers.lab.pickle_recorder import RecordingPickler, not_importable
from helpers.lab.simulate import simulated_machine
from helpers.lesson.checkpoints import optimizer_state_devices
from helpers.lesson.devices import pick_device
from helpers.lesson.models import Tudui


def _quietly(fn, *args):
    """(result, None) or (None, the exception), printing nothing and showing no warning."""
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(*args), None
    except Exception as err:  # the learner's bug, diagnosed by the caller
        return None, err


def _unwritten(err: BaseException) -> bool:
    return isinstance(err, NotImplementedError) and not str(err)


# ---------------------------------------------------------------- Exercise 1: a training script with device bugs

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


def _clinic_batches(n: int, seed: int):
    """``n`` batches of 8 small images on the CPU; each holds the rare class 9, so the class weights count."""
    gen = torch.Generator().manual_seed(seed)
    batches = [(torch.rand(8, 3, 8, 8, generator=gen), torch.randint(0, 9, (8,), generator=gen)) for _ in range(n)]
    for _, labels in batches:
        labels[:2] = 9
    return batches


class _Recorded:
    """``make_model``, remembering each model it built."""

    def __init__(self, make_model) -> None:
        self.make_model = make_model
        self.models: list[nn.Module] = []

    def __call__(self, *args, **kwargs):
        model = self.make_model(*args, **kwargs)
        self.models.append(model)
        return model


def _start(make_model) -> dict:
    """A checkpoint after a few steps of SGD with momentum, as a resumed run finds it (on the CPU)."""
    torch.manual_seed(0)
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    for images, labels in _clinic_batches(3, seed=1):
        optimizer.zero_grad()
        F.cross_entropy(model(images), labels, weight=CLASS_WEIGHTS).backward()
        optimizer.step()
    return copy.deepcopy({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 1})


def _reference(make_model, start, batches, device):
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


def _model_problem(make_model):
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
        out, error = _quietly(model, torch.rand(4, 3, 8, 8, device=OTHER_DEVICE))
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


def _raised_in_training(device, error: BaseException, hint: str) -> Feedback:
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


def _meta_diagnosis(error: Exception, rules: GpuRules, built: _Recorded, device) -> object:
    """Name the bug behind an error raised towards ``device`` (meta) under :class:`GpuRules`."""
    if _unwritten(error):
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
        return _raised_in_training(device, error, hint)
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
    return _raised_in_training(device, error, tr(TRAIN_HINT))


def _floats_problem(losses, n: int):
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


@exercise_check
def fixed_training(train, make_model=None) -> object:
    """``train(make_model, start, batches, class_weights, device)``: build the model with ``make_model()``,
    resume it and its SGD optimizer from ``start`` (a checkpoint dict on the CPU: ``"model"`` and
    ``"optimizer"`` state_dicts), train on ``device`` one step per ``(images, labels)`` batch (on the CPU)
    with ``nn.CrossEntropyLoss(weight=class_weights)``; return the losses as floats. ``make_model`` is your
    fixed model class."""
    if make_model is None:
        return failed(tr("Pass your model class too: check.fixed_training(train, Net)."))
    problem = _model_problem(make_model)
    if problem is not None:
        return problem
    start = _start(make_model)
    batches = _clinic_batches(3, seed=2)
    built = _Recorded(make_model)
    with like_a_gpu() as rules:
        losses, error = _quietly(train, built, copy.deepcopy(start), batches, CLASS_WEIGHTS.clone(), OTHER_DEVICE)
    if error is not None:
        return _meta_diagnosis(error, rules, built, OTHER_DEVICE)
    if not built.models:
        return failed(tr("Your train() never called make_model(): build the model with it."), tr(TRAIN_HINT))
    where = module_devices(built.models[-1])
    if where != {OTHER_DEVICE}:
        return failed(
            tr(
                "Asked to train on {device} (a device that is never the CPU), your model is on {where}.",
                device=OTHER_DEVICE,
                where=device_names(where),
            ),
            tr("Use the `device` argument you are given, for the model (before its optimizer) and for every tensor."),
        )
    state = set().union(*(optimizer_state_devices(o) for o in rules.optimizers)) if rules.optimizers else set()
    if state - {OTHER_DEVICE}:
        return failed(
            tr(
                "After training on {device}, the optimizer's state is on {state}.",
                device=OTHER_DEVICE,
                state=device_names(state),
            ),
            tr("Move the model first, then build the optimizer and load its state."),
        )
    problem = _floats_problem(losses, len(batches))
    if problem is not None:
        return problem

    device = pick_device()
    built = _Recorded(make_model)
    torch.manual_seed(0)
    losses, error = _quietly(train, built, copy.deepcopy(start), batches, CLASS_WEIGHTS.clone(), device)
    if error is not None:
        if _unwritten(error):
            return failed(NOT_WRITTEN)
        return _raised_in_training(device, error, tr(TRAIN_HINT))
    problem = _floats_problem(losses, len(batches))
    if problem is not None:
        return problem
    expected, weights, unweighted = _reference(make_model, start, batches, device)
    got = [float(x) for x in losses]
    close = [math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-6) for a, b in zip(got, expected, strict=True)]
    shown = tr(
        "yours {got}, expected {expected}",
        got=[round(x, 4) for x in got],
        expected=[round(x, 4) for x in expected],
    )
    if not close[0]:
        if math.isclose(got[0], unweighted, rel_tol=1e-4, abs_tol=1e-6):
            return failed(
                tr("Your first loss is the unweighted one ({shown}): the loss ignores the class weights.", shown=shown),
                tr("Keep the script's class weights in the loss (on the device, section 2, way 3)."),
            )
        return failed(
            tr(
                "Your first loss is not the one the checkpoint's model gives with the class-weighted loss ({shown}).",
                shown=shown,
            ),
            tr(
                "Load the checkpoint's model state into the model before training, and keep the script's "
                "class-weighted loss."
            ),
        )
    if not all(close):
        return failed(
            tr(
                "Your first loss is right but later ones differ ({shown}): the updates are not the resumed "
                "optimizer's. Its momentum from the checkpoint was not loaded, or the model was not the one it "
                "updates.",
                shown=shown,
            ),
            tr(
                "Build the optimizer on the moved model's parameters, then load its state from the checkpoint; one "
                "zero_grad/backward/step per batch."
            ),
        )
    trained = list(built.models[-1].parameters()) if built.models else []
    if len(trained) != len(weights) or not all(
        torch.allclose(a.detach(), b, rtol=1e-3, atol=1e-5) for a, b in zip(trained, weights, strict=True)
    ):
        return failed(
            tr("The losses are right, but the model's final weights are not the reference's."), tr(TRAIN_HINT)
        )
    return passed(
        tr(
            "The resumed training runs on {device} under a GPU's rules and on the course device gives the reference "
            "losses: model, labels, class weights and optimizer state on one device, every layer registered, "
            "losses logged as floats.",
            device=OTHER_DEVICE,
        )
    )


# ---------------------------------------------------------------- Exercise 2: a checkpoint loader for any machine

LOAD_HINT = tr_lazy(
    "Four steps, section 7 of this notebook: read the file onto the CPU, weights only; take the model's state_dict "
    "out of a training checkpoint; strip the wrappers' prefixes from its keys; load it into a plain Tudui, then "
    "move the model to the device."
)
PREFIX_HINT = tr_lazy(
    "Strip every leading 'module.' and '_orig_mod.' from each key, in whichever order and however often they come "
    "(section 7); load_state_dict's error lists the keys that do not fit."
)


def _mangled(unexpected: str, saved_keys: list[str], plain_keys) -> str:
    """How the learner's code turned one of the file's keys into ``unexpected``, and why, if we can tell."""
    sources = [k for k in saved_keys if k.endswith(unexpected) and k != unexpected]
    if not sources:
        return ""
    source = min(sources, key=len)
    plain = next((p for p in plain_keys if source.endswith(p)), None)
    if plain:
        text = tr(
            " Your code turned the file's key {source!r} into {unexpected!r}; a plain Tudui's key is {plain!r}.",
            source=source,
            unexpected=unexpected,
            plain=plain,
        )
    else:
        text = tr(
            " Your code turned the file's key {source!r} into {unexpected!r}.", source=source, unexpected=unexpected
        )
    stripped = source
    for _ in range(3):
        stripped = stripped.lstrip("module.").lstrip("_orig_mod.")  # noqa: B005 (the mistake reproduced)
    for chars in ("module.", "_orig_mod."):
        if unexpected in (source.lstrip(chars), stripped):
            text += tr(
                " str.lstrip({chars!r}) strips any of the characters {letters} from the "
                "left, not the prefix {chars!r}: it ate {eaten!r}. Remove a prefix "
                "with str.removeprefix, or slice it off after a startswith test.",
                chars=chars,
                letters=" ".join(dict.fromkeys(chars)),
                eaten=source[: len(source) - len(unexpected)],
            )
            break
    return text


def _load_error(error: Exception, what: str, training: bool, where: str, saved_keys=(), plain_keys=()):
    text = str(error)
    first = text.strip().splitlines()[0] if text.strip() else ""
    if _unwritten(error):
        return failed(NOT_WRITTEN)
    if "deserialize object on a CUDA device" in text:
        return failed(
            tr(
                "{where}, torch.load tried to put the tensors of {what} back on cuda:0, where they were saved.",
                where=where,
                what=what,
            ),
            tr(
                "torch.load puts each tensor back on the device it was saved from unless its map_location argument "
                "says otherwise (section 7)."
            ),
        )
    if isinstance(error, KeyError) and not training:
        return failed(
            tr(
                "{where}, your code raised KeyError: {error} for {what}: that file is the state_dict itself, not a "
                "training checkpoint dict.",
                where=where,
                error=error,
                what=what,
            ),
            tr(
                "A training checkpoint holds the state_dict under a key, a bare state_dict does not: look at what "
                "the file holds before taking it out."
            ),
        )
    if "Unexpected key" in text or "Missing key" in text:
        if training and ('"epoch"' in text or '"optimizer"' in text):
            return failed(
                tr(
                    "{where}, {what} holds the model's state_dict under 'model', beside 'optimizer' and 'epoch': "
                    "your code loaded the whole dict as a state_dict.",
                    where=where,
                    what=what,
                ),
                tr("Take the model's state_dict out of a training checkpoint (and only out of one)."),
            )
        odd = re.search(r'Unexpected key\(s\) in state_dict: "([^"]+)"', text)
        if odd:
            message = tr(
                "{where}, the keys of {what} did not fit a plain Tudui (unexpected key {key!r}, ...).",
                where=where,
                what=what,
                key=odd.group(1),
            )
            message += _mangled(odd.group(1), list(saved_keys), list(plain_keys))
        else:
            message = tr("{where}, the keys of {what} did not fit a plain Tudui.", where=where, what=what)
        return failed(message, tr(PREFIX_HINT))
    return failed(
        tr(
            "{where}, loading {what}, your code raised {error_type}: {error}",
            where=where,
            what=what,
            error_type=type(error).__name__,
            error=first,
        ),
        tr(LOAD_HINT),
    )


def _load_result_problem(model, device, expected: dict, what: str, where: str):
    if isinstance(model, dict):
        return failed(
            tr(
                "{where}, you returned a dict for {what}: return the model with the weights loaded.",
                where=where,
                what=what,
            ),
            tr(LOAD_HINT),
        )
    if not isinstance(model, nn.Module) or isinstance(model, nn.parallel.DistributedDataParallel | nn.DataParallel):
        return failed(tr("Return a plain nn.Module (a Tudui), not {kind}.", kind=type(model).__name__), tr(LOAD_HINT))
    state = model.state_dict()
    if set(state) != set(expected):
        return failed(
            tr(
                "{where}, your model's keys for {what} are {keys}..., not a plain Tudui's.",
                where=where,
                what=what,
                keys=sorted(state)[:2],
            ),
            tr(PREFIX_HINT),
        )
    places = {v.device for v in state.values()}
    if places != {device}:
        moved = (
            tr(" load_state_dict copies values into the parameters where they are: it never moves the model.")
            if places == {torch.device("cpu")}
            else ""
        )
        return failed(
            tr(
                "{where}, asked for {device}, your model's tensors are on {places}.{moved}",
                where=where,
                device=device,
                places=device_names(places),
                moved=moved,
            ),
            tr(
                "Move the model to the device before returning it. (With load_state_dict(..., assign=True) the "
                "model takes the loaded tensors themselves, on the device torch.load put them.)"
            ),
        )
    if device.type != "meta" and not all(torch.equal(state[k].cpu(), v) for k, v in expected.items()):
        return failed(
            tr(
                "{where}, your model does not hold the saved weights of {what} (loading with strict=False skips "
                "every key that does not match, silently).",
                where=where,
                what=what,
            ),
            tr("Strip the prefixes and load with the default strict=True, which names any key that does not fit."),
        )
    return None


@exercise_check
def load_anywhere(fn) -> object:
    """``fn(path, device)``: a plain Tudui on ``device`` with the weights of the checkpoint at ``path``, saved on a
    GPU: a state_dict, or a training checkpoint dict with it under ``"model"``; keys may start with ``module.``
    (DDP), ``_orig_mod.`` (torch.compile) or both, in either order. Load safely (``weights_only=True``): a file
    that holds more than weights must raise, never run."""
    torch.manual_seed(1)
    trained = Tudui()
    expected = {k: v.clone() for k, v in trained.state_dict().items()}
    course = pick_device()
    with tempfile.TemporaryDirectory() as folder:
        files = write_checkpoints(Path(folder), trained)
        towards = tr("Towards {device} (a device that is never the CPU)", device=OTHER_DEVICE)
        runs = [(tr("On a laptop without a GPU"), torch.device("cpu"), True), (towards, OTHER_DEVICE, False)]
        if course.type != "cpu":
            runs.append((tr("On this machine's {device}", device=course), course, False))
        for where, device, laptop in runs:
            for path, saved_what, training, saved_keys in files:
                what = tr(saved_what)
                with simulated_machine(cuda=0) if laptop else contextlib.nullcontext():
                    model, error = _quietly(fn, str(path), device)
                if error is not None:
                    return _load_error(error, what, training, where, saved_keys, expected)
                problem = _load_result_problem(model, device, expected, what, where)
                if problem is not None:
                    return problem
        CODE_RAN.clear()
        with simulated_machine(cuda=0):
            model, error = _quietly(fn, str(Path(folder) / "unsafe.pt"), torch.device("cpu"))
    if CODE_RAN:
        CODE_RAN.clear()
        return failed(
            tr(
                "Opening a file that holds more than weights ran code stored in it: weights_only=False unpickles "
                "anything, and a checkpoint from elsewhere can carry code that runs on your machine."
            ),
            tr(
                "torch.load(path, map_location=..., weights_only=True) (the default since torch 2.6): it refuses "
                "such a file with an UnpicklingError. Let that error out."
            ),
        )
    if error is None:
        return failed(
            tr(
                "For a file that holds more than weights, your function returned {kind} instead of "
                "raising: weights_only=True refuses it with an UnpicklingError; let it out.",
                kind=type(model).__name__,
            ),
            tr("Do not catch the error of torch.load(..., weights_only=True)."),
        )
    return passed(
        tr(
            "{count} checkpoints saved on a GPU (DDP, torch.compile, both, training dicts) load into a plain "
            "Tudui on a laptop, towards meta and on the course device, and a file carrying code is refused.",
            count=len(CHECKPOINTS),
        )
    )


# ---------------------------------------------------------------- Exercise 3: a DataLoader that works in notebooks

LOADER_HINT = tr_lazy(
    "Either no worker processes (fine for data already in memory), or a Dataset class that a worker can import: "
    "one that torch ships, or yours in a .py file the notebook imports (section 10). Keep batches of 16, shuffled."
)
BATCH = 16


def _numbered(n: int):
    """Image i is filled with the value i, its label is i % 10: a batch tells which samples it holds."""
    images = torch.arange(n, dtype=torch.float32).view(n, 1, 1, 1).expand(n, 3, 4, 4).contiguous()
    return images, torch.arange(n) % 10


def _in_process(loader: DataLoader) -> DataLoader:
    """The same loader read without worker processes: workers change where batches are made, not what they hold."""
    view = copy.copy(loader)
    view.num_workers, view.timeout = 0, 0
    return view


def _order(batches) -> torch.Tensor:
    """Which samples an epoch gave, in its order (image i holds the value i)."""
    return torch.cat([b[0] for b in batches])[:, 0, 0, 0].long() if batches else torch.empty(0)


def _same_order_hint(loader: DataLoader) -> str:
    """Why a loader repeats its order: a sampler that waits for set_epoch, or an order fixed when it was built."""
    sampler = loader.batch_sampler.sampler if hasattr(loader.batch_sampler, "sampler") else loader.sampler
    if hasattr(sampler, "set_epoch"):
        return tr(
            "{sampler} draws a new order only when the training loop calls set_epoch(epoch) before each epoch; "
            "in one process, shuffle=True draws a new order by itself.",
            sampler=type(sampler).__name__,
        )
    return tr(
        "A shuffle draws a new order at every epoch: shuffle=True (a RandomSampler) does; a list of indices, or a "
        "Dataset permuted once, gives the order drawn at the start every time."
    )


def _start_method(loader: DataLoader) -> str:
    context = loader.multiprocessing_context
    if context is None:
        return ""
    return context.get_start_method() if hasattr(context, "get_start_method") else str(context)


@exercise_check
def notebook_safe_loader(fn) -> object:
    """``fn(images, labels)``: a DataLoader of shuffled ``(images, labels)`` batches of 16, every sample once per
    epoch, that runs in a notebook on every system: worker processes started by spawn (macOS, Windows) or
    forkserver (Linux from Python 3.14) can only unpickle classes and functions they can import."""
    n = 40
    images, labels = _numbered(n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. pin_memory=True on a machine without a GPU
        loader, problem = call_learner(fn, images, labels, when=tr("Building your loader"), hint=tr(LOADER_HINT))
    if problem is not None:
        return problem
    if not isinstance(loader, DataLoader):
        return failed(tr("Return the DataLoader itself, not {kind}.", kind=type(loader).__name__), tr(LOADER_HINT))
    torch.manual_seed(0)
    batches, error = _quietly(list, _in_process(loader))
    if error is not None:
        return failed(
            tr(
                "Reading one epoch of your loader raised {error_type}: {error}",
                error_type=type(error).__name__,
                error=error,
            ),
            tr(LOADER_HINT),
        )
    if not batches or not all(isinstance(b, list | tuple) and len(b) == 2 for b in batches):
        return failed(tr("Each batch must be an (images, labels) pair."), tr(LOADER_HINT))
    got_images = torch.cat([b[0] for b in batches])
    got_labels = torch.cat([b[1] for b in batches])
    order = got_images[:, 0, 0, 0].long()
    if sorted(order.tolist()) != list(range(n)):
        return failed(
            tr(
                "One epoch gave {count} samples; {missing} of the {n} are missing.",
                count=len(order),
                missing=n - len(set(order.tolist())),
                n=n,
            ),
            tr("Every sample once per epoch: keep drop_last=False."),
        )
    if not torch.equal(order % 10, got_labels):
        return failed(
            tr("Images and labels do not match any more."), tr("Keep each image with its label in the Dataset.")
        )
    sizes = [len(b[1]) for b in batches]
    if sizes[:-1] != [BATCH] * (len(sizes) - 1):
        return failed(
            tr("Batch sizes {sizes}: all but the last must be {batch}.", sizes=sizes, batch=BATCH),
            "DataLoader(..., batch_size=16)",
        )
    if torch.equal(order, torch.arange(n)):
        return failed(tr("The samples come in their stored order: the loader does not shuffle."), "shuffle=True")
    again, error = _quietly(list, _in_process(loader))
    if error is None and torch.equal(_order(again), order):
        return failed(
            tr(
                "Two epochs came in the same order: the loader repeats one order at every epoch, so the model meets "
                "the same batches, in the same order, every time."
            ),
            _same_order_hint(loader),
        )
    if loader.num_workers == 0:
        return passed(
            tr(
                "{count} shuffled batches, every sample once, no worker processes: nothing to pickle, so it "
                "runs in a notebook on every system.",
                count=len(batches),
            )
        )
    method = _start_method(loader)
    if method == "fork":
        return failed(
            tr(
                "multiprocessing_context='fork' is not portable: Windows has no fork (the DataLoader raises "
                "ValueError there), macOS starts with spawn because fork is unsafe with its system libraries, and "
                "Python 3.14 no longer forks by default on Linux."
            ),
            tr(LOADER_HINT),
        )
    if method and method != "spawn":
        return failed(
            tr(
                "multiprocessing_context={method!r} is not portable: Windows only has spawn (the DataLoader raises "
                "ValueError there).",
                method=method,
            ),
            tr(
                "Leave multiprocessing_context unset (each system's default), or 'spawn'. {hint}",
                hint=tr(LOADER_HINT),
            ),
        )
    sent = (loader.dataset, loader.collate_fn, loader.worker_init_fn)
    recorder = RecordingPickler(io.BytesIO())
    try:
        recorder.dump(sent)
    except Exception as err:  # e.g. a lambda: pickling fails in the notebook itself
        return failed(
            tr(
                "With {workers} worker(s) started by spawn or forkserver, the DataLoader pickles its "
                "dataset, collate_fn and worker_init_fn for each worker, and that fails here: {error_type}: {error}",
                workers=loader.num_workers,
                error_type=type(err).__name__,
                error=err,
            ),
            tr("Give the workers only classes and functions defined in modules (def in a .py file, not a lambda)."),
        )
    missing = sorted({f"{m}.{q}" for m, q in recorder.by_reference if not_importable(m)})
    if missing:
        fields = dict(workers=loader.num_workers, missing=", ".join(missing))
        if method:
            message = tr(
                "Your loader starts {workers} worker(s), and each must unpickle {missing}, defined in this notebook "
                "(module __main__). A worker started by {method} imports what it unpickles and cannot import a "
                "notebook: on every system the workers die ('DataLoader worker exited unexpectedly', after "
                "'Can't get attribute ... on <module '__main__'>').",
                method=method,
                **fields,
            )
        else:
            message = tr(
                "Your loader starts {workers} worker(s), and each must unpickle {missing}, defined in this notebook "
                "(module __main__). A worker started by spawn or forkserver imports what it unpickles and cannot "
                "import a notebook: on macOS, Windows and Linux with Python 3.14 the workers die ('DataLoader "
                "worker exited unexpectedly', after 'Can't get attribute ... on <module '__main__'>'). On Linux up "
                "to Python 3.13 workers start by fork, a copy of the notebook's process: that is where it runs, and "
                "where the bug hides.",
                **fields,
            )
        return failed(message, tr(LOADER_HINT))
    return passed(
        tr(
            "{count} shuffled batches, every sample once; {workers} worker(s) get only what they can "
            "import, so it runs in a notebook under spawn and forkserver too.",
            count=len(batches),
            workers=loader.num_workers,
        )
    )


# The exercises as the could-not-be-checked hint states them (each check's docstring: helpers.exercises.statement).
STATEMENTS = (
    tr_lazy(
        "`train(make_model, start, batches, class_weights, device)`: build the model with `make_model()`, resume it "
        'and its SGD optimizer from `start` (a checkpoint dict on the CPU: `"model"` and `"optimizer"` '
        "state_dicts), train on `device` one step per `(images, labels)` batch (on the CPU) with "
        "`nn.CrossEntropyLoss(weight=class_weights)`; return the losses as floats. `make_model` is your fixed model "
        "class."
    ),
    tr_lazy(
        "`fn(path, device)`: a plain Tudui on `device` with the weights of the checkpoint at `path`, saved on a GPU: "
        'a state_dict, or a training checkpoint dict with it under `"model"`; keys may start with `module.` (DDP), '
        "`_orig_mod.` (torch.compile) or both, in either order. Load safely (`weights_only=True`): a file that holds "
        "more than weights must raise, never run."
    ),
    tr_lazy(
        "`fn(images, labels)`: a DataLoader of shuffled `(images, labels)` batches of 16, every sample once per "
        "epoch, that runs in a notebook on every system: worker processes started by spawn (macOS, Windows) or "
        "forkserver (Linux from Python 3.14) can only unpickle classes and functions they can import."
    ),
)
