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

What names each bug of exercise 1 is in :mod:`helpers.exercises.clinic_training` (with the quiet call of the
learner's code the three checks share), why a checkpoint did not load in :mod:`helpers.exercises.clinic_checkpoints`.
"""

from __future__ import annotations

import contextlib
import copy
import math
import tempfile
import warnings
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from helpers.course.i18n import tr, tr_lazy
from helpers.exercises import (
    NOT_WRITTEN,
    OTHER_DEVICE,
    call_learner,
    device_names,
    exercise_check,
    failed,
    module_devices,
    passed,
)
from helpers.exercises.clinic_checkpoints import load_error, load_result_problem
from helpers.exercises.clinic_training import (
    CLASS_WEIGHTS,
    TRAIN_HINT,
    clinic_batches,
    floats_problem,
    meta_diagnosis,
    model_problem,
    quietly,
    raised_in_training,
    reference_resume,
    resume_start,
    unwritten,
)
from helpers.lab.gpu_checkpoints import CHECKPOINTS, CODE_RAN, write_checkpoints
from helpers.lab.gpu_rules import like_a_gpu
from helpers.lab.pickle_recorder import in_process, start_method, unimportable_in_workers
from helpers.lab.simulate import simulated_machine
from helpers.lab.training_watch import BuiltModels
from helpers.lesson.checkpoints import optimizer_state_devices
from helpers.lesson.devices import pick_device
from helpers.lesson.models import Tudui

# ---------------------------------------------------------------- Exercise 1: a training script with device bugs
# (its reference and diagnoses: helpers.exercises.clinic_training)


@exercise_check
def fixed_training(train, make_model=None) -> object:
    """``train(make_model, start, batches, class_weights, device)``: build the model with ``make_model()``,
    resume it and its SGD optimizer from ``start`` (a checkpoint dict on the CPU: ``"model"`` and
    ``"optimizer"`` state_dicts), train on ``device`` one step per ``(images, labels)`` batch (on the CPU)
    with ``nn.CrossEntropyLoss(weight=class_weights)``; return the losses as floats. ``make_model`` is your
    fixed model class."""
    if make_model is None:
        return failed(tr("Pass your model class too: check.fixed_training(train, Net)."))
    problem = model_problem(make_model)
    if problem is not None:
        return problem
    start = resume_start(make_model)
    batches = clinic_batches(3, seed=2)
    built = BuiltModels(make_model)
    with like_a_gpu() as rules:
        losses, error = quietly(train, built, copy.deepcopy(start), batches, CLASS_WEIGHTS.clone(), OTHER_DEVICE)
    if error is not None:
        return meta_diagnosis(error, rules, built, OTHER_DEVICE)
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
    problem = floats_problem(losses, len(batches))
    if problem is not None:
        return problem

    device = pick_device()
    built = BuiltModels(make_model)
    torch.manual_seed(0)
    losses, error = quietly(train, built, copy.deepcopy(start), batches, CLASS_WEIGHTS.clone(), device)
    if error is not None:
        if unwritten(error):
            return failed(NOT_WRITTEN)
        return raised_in_training(device, error, tr(TRAIN_HINT))
    problem = floats_problem(losses, len(batches))
    if problem is not None:
        return problem
    expected, weights, unweighted = reference_resume(make_model, start, batches, device)
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
# (why a file did not load: helpers.exercises.clinic_checkpoints)


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
                    model, error = quietly(fn, str(path), device)
                if error is not None:
                    return load_error(error, what, training, where, saved_keys, expected)
                problem = load_result_problem(model, device, expected, what, where)
                if problem is not None:
                    return problem
        CODE_RAN.clear()
        with simulated_machine(cuda=0):
            model, error = quietly(fn, str(Path(folder) / "unsafe.pt"), torch.device("cpu"))
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
    batches, error = quietly(list, in_process(loader))
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
    again, error = quietly(list, in_process(loader))
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
    method = start_method(loader)
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
    try:
        missing = unimportable_in_workers(loader)
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
