"""Checks for notebook 07's exercises (memory).

They judge numbers and what a GPU would observe, on any machine: an estimate against the bytes a real
training step keeps (:func:`helpers.memory.measure_training_memory`: storages and saved-tensor hooks); a
batch-size finder against :class:`helpers.memory_budget.SimulatedGpuMemory`, a budget that raises the real
``torch.OutOfMemoryError`` and counts what is still alive, as a GPU does; gradient accumulation by the
weights it produces and by its peak live bytes (:class:`helpers.memory_budget.LiveBytes`).
"""

from __future__ import annotations

import contextlib
import copy
import io

import torch
from torch import nn

from helpers.exercises import NOT_WRITTEN, call_learner, exercise_check, failed, passed
from helpers.memory import MiB, SavedTensors, measure_training_memory
from helpers.memory_budget import LiveBytes, SimulatedGpuMemory
from helpers.models import Tudui


def _quiet(fn, *args):
    """``call_learner`` with the learner's own printing hidden; the feedback is printed."""
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            return fn(*args), None
        except Exception as err:  # the learner's bug is the feedback
            caught = err

    def again():
        raise caught

    return call_learner(again)


def _mlp(sizes):
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:], strict=True):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


# ---------------------------------------------------------------- Exercise 1: estimate training memory

ESTIMATE_HINT = (
    "Add five parts: parameters (numel x element_size), gradients (the same for trainable parameters), "
    "optimizer state (Adam 2 copies, SGD with momentum 1, SGD 0), activations (bytes autograd saves, seen by "
    "torch.autograd.graph.saved_tensors_hooks, each storage once, parameters left out) and the batch."
)
MISTAKES = {
    "no activations": (
        lambda m: m.total - m.activations,
        "Your estimate leaves out the activations autograd saves for the backward pass: record them with "
        "torch.autograd.graph.saved_tensors_hooks during a forward pass and add their bytes.",
    ),
    "no optimizer state": (
        lambda m: m.total - m.optimizer_state,
        "Your estimate leaves out the optimizer state (or the gradients): Adam keeps two tensors per parameter "
        "(exp_avg, exp_avg_sq), SGD with momentum one (momentum_buffer), plain SGD none.",
    ),
    "no gradients": (
        lambda m: m.total - m.gradients,
        "Your estimate leaves out the gradients: every trainable parameter gets a .grad of its own size.",
    ),
    "two state copies": (
        lambda m: m.total - m.optimizer_state + 2 * m.gradients,
        "You count two state tensors per parameter for every optimizer: that is Adam. SGD with momentum keeps "
        "one (momentum_buffer), plain SGD none.",
    ),
    "no batch": (
        lambda m: m.total - m.batch,
        "Your estimate leaves out the batch itself: the inputs (and targets) are tensors on the device too.",
    ),
    "activations twice": (
        lambda m: m.total + m.activations,
        "You count some activations twice: a tensor saved by two operations (ReLU saves its output, the next "
        "Linear saves the same tensor as its input) is stored once. Count each storage once "
        "(key: t.untyped_storage().data_ptr()).",
    ),
    "parameters twice": (
        lambda m: m.total + m.weights_saved,
        "Layers save their weights for the backward pass too; those bytes are the parameters, already counted: "
        "leave tensors that share a parameter's storage out of the activations.",
    ),
}
OPTIMIZER_WORDS = {"adam": "Adam", "sgd": "plain SGD", "sgd_momentum": "SGD with momentum"}


class _Measured:
    """A measured :class:`TrainingMemory` plus the parameter bytes layers save for backward."""

    def __init__(self, memory) -> None:
        self.memory = memory
        self.weights_saved = 0

    def __getattr__(self, name):
        return getattr(self.memory, name)


def _weights_saved(model, inputs, targets) -> int:
    """Bytes of parameters that the forward pass saves for backward (a mistake may count them as activations)."""
    with SavedTensors(exclude=[inputs, targets]) as everything:
        nn.functional.cross_entropy(model(inputs), targets)
    with SavedTensors(exclude=[inputs, targets, *model.parameters()]) as activations:
        nn.functional.cross_entropy(model(inputs), targets)
    return everything.bytes - activations.bytes


def _estimate_cases():
    torch.manual_seed(0)
    wide, narrow = _mlp([1024, 2048, 1024, 10]), _mlp([256, 512, 512, 10])
    return [
        ("a wide MLP, batch 32", wide, 32, (1024,), "adam"),
        ("the same MLP, batch 32", wide, 32, (1024,), "sgd"),
        ("a narrow MLP, batch 1024", narrow, 1024, (256,), "sgd_momentum"),
        ("Tudui, batch 32", Tudui(), 32, (3, 32, 32), "adam"),
    ]


@exercise_check
def training_memory(fn):
    """``fn(model, inputs, targets, optimizer_name)`` returns the bytes one training step keeps (parameters,
    gradients, optimizer state, saved activations, batch), within 10% of what a real step keeps;
    ``optimizer_name`` is ``"sgd"``, ``"sgd_momentum"`` or ``"adam"``; the loss is cross-entropy."""
    results = []
    for name, model, batch, shape, opt in _estimate_cases():
        gen = torch.Generator().manual_seed(1)
        inputs = torch.rand(batch, *shape, generator=gen)
        targets = torch.randint(0, 10, (batch,), generator=gen)
        answer, error = _quiet(fn, copy.deepcopy(model), inputs.clone(), targets.clone(), opt)
        if error is not None:
            return error
        measured = _Measured(measure_training_memory(copy.deepcopy(model), inputs, targets, optimizer=opt))
        measured.weights_saved = _weights_saved(model, inputs, targets)
        if isinstance(answer, torch.Tensor) or not isinstance(answer, int | float) or isinstance(answer, bool):
            return failed(
                f"For {name} your function returned {type(answer).__name__} {answer!r}: return a number of bytes "
                "(a Python int).",
                ESTIMATE_HINT,
            )
        off = answer / measured.total - 1
        where = f"For {name} with {OPTIMIZER_WORDS[opt]}"
        if abs(off) > 0.10:
            hints = [
                hint
                for guess, hint in MISTAKES.values()
                if abs(guess(measured) / measured.total - 1) > 0.10 and abs(answer / guess(measured) - 1) <= 0.03
            ]
            return failed(
                f"{where} your estimate is {answer / MiB:.2f} MiB; a real step keeps {measured.total / MiB:.2f} MiB "
                f"({off:+.0%}).\n{measured.table()}",
                " ".join(dict.fromkeys(hints)) or ESTIMATE_HINT,
            )
        results.append(f"{name}: {off:+.1%}")
    return passed(f"Every estimate within 10% of what a real step keeps ({'; '.join(results)}).")


# ---------------------------------------------------------------- Exercise 2: the batch-size finder

FINDER_HINT = (
    "size = start; loop: try: try_batch(size); return size; except torch.OutOfMemoryError: if size == 1: raise. "
    "Then, after the except block: size //= 2."
)
FINDER_MODEL_SIZES = [256, 1024, 1024, 10]
MAX_CALLS = 40


class _Attempts:
    """``try_batch`` for the check: a forward and backward pass of a small MLP on a simulated GPU."""

    def __init__(self, capacity: int, bug_at: int | None = None) -> None:
        torch.manual_seed(0)
        self.model = _mlp(FINDER_MODEL_SIZES)
        self.gpu = SimulatedGpuMemory(capacity)
        self.bug_at = bug_at
        self.sizes: list[int] = []

    def __call__(self, size: int) -> None:
        self.sizes.append(size)
        if len(self.sizes) > MAX_CALLS:
            raise _TooManyCalls
        if size == self.bug_at:
            raise ValueError(f"a bug in the training step (batch {size}): shapes do not match")
        if size < 1:
            raise ValueError(f"batch size {size}")
        try:
            x = torch.rand(size, FINDER_MODEL_SIZES[0])
            hidden = self.model(x)
            loss = hidden.square().mean()
            loss.backward()
        finally:
            self.model.zero_grad(set_to_none=True)  # a trial step leaves no gradients behind


class _TooManyCalls(Exception):
    pass


def _fits(capacity: int, size: int) -> bool:
    attempts = _Attempts(capacity)
    try:
        with attempts.gpu:
            attempts(size)
        return True
    except torch.OutOfMemoryError:
        return False


def _run_finder(fn, attempts: _Attempts, start: int):
    with attempts.gpu:
        try:
            return fn(attempts, start), None
        except Exception as err:  # the learner's result is the exception it lets through
            return None, err


@exercise_check
def batch_finder(fn):
    """``fn(try_batch, start)`` returns the largest of ``start, start // 2, ..., 1`` for which ``try_batch(size)``
    does not raise ``torch.OutOfMemoryError``; other errors pass through; if even 1 does not fit, the
    out-of-memory error is raised."""
    start = 512
    capacity = 8 * MiB
    expected = next(s for s in (start >> k for k in range(10)) if _fits(capacity, s))
    attempts = _Attempts(capacity)
    result, error = _run_finder(fn, attempts, start)
    if isinstance(error, _TooManyCalls):
        return failed(f"Your function called try_batch more than {MAX_CALLS} times.", FINDER_HINT)
    if isinstance(error, NotImplementedError) and not str(error):
        return failed(NOT_WRITTEN)
    if 0 in attempts.sizes:
        return failed("Your function tried a batch of 0: never go below 1.", FINDER_HINT)
    if (error is not None or result != expected) and expected in attempts.sizes and (result or 0) < expected:
        return failed(
            f"On a simulated GPU of {capacity // MiB} MiB a batch of {expected} fits when nothing else is held, but "
            f"your function tried it and failed (tried: {attempts.sizes}): the failed attempt's tensors were still "
            "alive.",
            "Inside an `except` block the error's traceback holds the failed step's frames and their tensors. Leave "
            "the except block first (set a flag, or `pass`), then retry; on a GPU also call torch.cuda.empty_cache().",
        )
    if isinstance(error, torch.OutOfMemoryError):
        return failed(
            f"On a GPU where a batch of {expected} fits, your function let an out-of-memory error through "
            f"(tried: {attempts.sizes}).",
            "Catch torch.OutOfMemoryError around try_batch(size) and try half the size.",
        )
    if error is not None:
        return failed(f"Your function raised {type(error).__name__}: {error} (tried: {attempts.sizes}).", FINDER_HINT)
    if result != expected:
        return failed(
            f"On a simulated GPU of {capacity // MiB} MiB your function returned {result!r} (tried: "
            f"{attempts.sizes}); the largest of 512, 256, ... that fits is {expected}.",
            FINDER_HINT,
        )
    tiny = _Attempts(capacity=64 * 1024)
    result, error = _run_finder(fn, tiny, start)
    if isinstance(error, _TooManyCalls):
        return failed(f"When nothing fits, your function called try_batch more than {MAX_CALLS} times.", FINDER_HINT)
    if 0 in tiny.sizes:
        return failed("When nothing fits, your function tried a batch of 0: stop at 1.", FINDER_HINT)
    if not isinstance(error, torch.OutOfMemoryError):
        got = f"raised {type(error).__name__}" if error is not None else f"returned {result!r}"
        return failed(
            f"On a GPU where not even a batch of 1 fits, your function {got}.",
            "When even a batch of 1 does not fit, raise the out-of-memory error again (a bare `raise` in the except "
            "block): no batch size can help, and the caller must know.",
        )
    buggy = _Attempts(capacity, bug_at=start)
    result, error = _run_finder(fn, buggy, start)
    if not isinstance(error, ValueError):
        return failed(
            f"A try_batch with a bug (it raises ValueError) was retried at {buggy.sizes} and your function "
            f"{'returned ' + repr(result) if error is None else 'raised ' + type(error).__name__}: a real bug was "
            "hidden.",
            "Catch torch.OutOfMemoryError only. It is a subclass of RuntimeError: catching RuntimeError or "
            "Exception halves away every bug, a shape error included.",
        )
    return passed(
        f"Largest batch that fits on a simulated {capacity // MiB} MiB GPU: {expected} (tried {attempts.sizes}); "
        "out of memory at 1 raised; other errors passed through."
    )


# ---------------------------------------------------------------- Exercise 3: gradient accumulation

ACCUMULATE_HINT = (
    "optimizer.zero_grad(); for x, y in zip(imgs.chunk(micro_batches), targets.chunk(micro_batches)): "
    "(loss_fn(model(x), y) / micro_batches).backward(); then one optimizer.step() after the loop."
)


def _setup_accumulation():
    torch.manual_seed(0)
    model = Tudui()
    gen = torch.Generator().manual_seed(2)
    imgs = torch.rand(32, 3, 32, 32, generator=gen)
    targets = torch.randint(0, 10, (32,), generator=gen)
    return model, nn.CrossEntropyLoss(), imgs, targets


def _variant(kind: str, micro: int):
    """The weights after one step done the right way ("big batch") or a known wrong way."""
    model, loss_fn, imgs, targets = _setup_accumulation()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    opt.zero_grad()
    pairs = list(zip(imgs.chunk(micro), targets.chunk(micro), strict=True))
    if kind == "big batch":
        loss_fn(model(imgs), targets).backward()
        opt.step()
    for x, y in pairs if kind != "big batch" else []:
        if kind == "zero inside":
            opt.zero_grad()
        loss = loss_fn(model(x), y)
        (loss if kind == "no divide" else loss / micro).backward()
        if kind == "step inside":
            opt.step()
    if kind in ("no divide", "zero inside"):
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


ACCUMULATION_MISTAKES = {
    "no divide": "Your gradients are micro_batches times too large: divide each micro-batch's loss by the number "
    "of micro-batches (the loss is a mean over its own micro-batch).",
    "zero inside": "Only the last micro-batch's gradient is left: zero the gradients once, before the loop, not "
    "for each micro-batch.",
    "step inside": "Your code steps the optimizer after every micro-batch: accumulate all of them, then one "
    "optimizer.step().",
}


def _same(a, b) -> bool:
    return all(torch.allclose(x, y, rtol=1e-4, atol=1e-5) for x, y in zip(a, b, strict=True))


@exercise_check
def accumulation(fn):
    """``fn(model, loss_fn, optimizer, imgs, targets, micro_batches)``: one optimizer step from the gradient of
    the whole batch, computed ``micro_batches`` pieces at a time (the batch size divides evenly)."""
    micro = 4
    expected = _variant("big batch", micro)
    model, loss_fn, imgs, targets = _setup_accumulation()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    with LiveBytes() as whole:
        loss_fn(model(imgs), targets).backward()
    model, loss_fn, imgs, targets = _setup_accumulation()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    with LiveBytes() as live:
        _, error = _quiet(fn, model, loss_fn, opt, imgs, targets, micro)
    if error is not None:
        return error
    got = [p.detach().clone() for p in model.parameters()]
    if not _same(got, expected):
        for kind, hint in ACCUMULATION_MISTAKES.items():
            if _same(got, _variant(kind, micro)):
                return failed("After your step the weights differ from one step on the whole batch.", hint)
        return failed("After your step the weights differ from one step on the whole batch.", ACCUMULATE_HINT)
    if live.peak > 0.6 * whole.peak:
        return failed(
            f"The weights are right, but your step's peak memory ({live.peak / MiB:.1f} MiB) is that of the whole "
            f"batch at once ({whole.peak / MiB:.1f} MiB): the batch was not split.",
            "Run the forward and backward pass on each micro-batch in turn (imgs.chunk(micro_batches)); only one "
            "micro-batch's activations are alive at a time.",
        )
    return passed(
        f"The same weights as one step on the whole batch, with a peak of {live.peak / MiB:.1f} MiB instead of "
        f"{whole.peak / MiB:.1f} MiB."
    )
