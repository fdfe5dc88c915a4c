"""Checks for notebook 07's exercises (memory).

They judge numbers and what a GPU would observe, on any machine: an estimate against the bytes a real
training step keeps (:func:`helpers.lesson.memory.measure_training_memory`: storages and saved-tensor hooks); a
batch-size finder against :class:`helpers.lab.memory_budget.SimulatedGpuMemory`, a budget that raises the real
``torch.OutOfMemoryError`` and counts what is still alive, as a GPU does; gradient accumulation by the
weights it produces and by its peak live bytes (:class:`helpers.lab.memory_budget.LiveBytes`).
"""

from __future__ import annotations

import contextlib
import copy
import io
import math
import numbers
import sys
from unittest import mock

import torch
from torch import nn

from helpers.course.i18n import CHINESE, language, tr, tr_lazy
from helpers.exercises import NOT_WRITTEN, call_learner, exercise_check, failed, passed
from helpers.lab.memory_budget import LiveBytes, SimulatedGpuMemory
from helpers.lesson.memory import MiB, SavedTensors, is_out_of_memory, measure_training_memory
from helpers.lesson.models import Tudui


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


def _sentences(sentences) -> str:
    """Whole sentences, one after the other: a space between them in English, none in Chinese."""
    return ("" if language() == CHINESE else " ").join(sentences)


def _list(items) -> str:
    """Items in a list, separated by '; ' (in Chinese: '；')."""
    return ("；" if language() == CHINESE else "; ").join(items)


# ---------------------------------------------------------------- Exercise 1: estimate training memory

ESTIMATE_HINT = tr_lazy(
    "Add five parts: parameters (numel x element_size), gradients (the same for trainable parameters), "
    "optimizer state (Adam 2 copies, SGD with momentum 1, SGD 0), activations (bytes autograd saves, seen by "
    "torch.autograd.graph.saved_tensors_hooks, each storage once, parameters left out) and the batch."
)
MISTAKES = {
    "no activations": (
        lambda m: m.total - m.activations,
        tr_lazy(
            "Your estimate leaves out the activations autograd saves for the backward pass: record them with "
            "torch.autograd.graph.saved_tensors_hooks during a forward pass and add their bytes."
        ),
    ),
    "no optimizer state": (
        lambda m: m.total - m.optimizer_state,
        tr_lazy(
            "Your estimate leaves out the optimizer state (or the gradients): Adam keeps two tensors per parameter "
            "(exp_avg, exp_avg_sq), SGD with momentum one (momentum_buffer), plain SGD none."
        ),
    ),
    "no gradients": (
        lambda m: m.total - m.gradients,
        tr_lazy("Your estimate leaves out the gradients: every trainable parameter gets a .grad of its own size."),
    ),
    "two state copies": (
        lambda m: m.total - m.optimizer_state + 2 * m.gradients,
        tr_lazy(
            "You count two state tensors per parameter for every optimizer: that is Adam. SGD with momentum keeps "
            "one (momentum_buffer), plain SGD none."
        ),
    ),
    "no batch": (
        lambda m: m.total - m.batch,
        tr_lazy("Your estimate leaves out the batch itself: the inputs (and targets) are tensors on the device too."),
    ),
    "activations twice": (
        lambda m: m.total + m.activations,
        tr_lazy(
            "You count some activations twice: a tensor saved by two operations (ReLU saves its output, the next "
            "Linear saves the same tensor as its input) is stored once. Count each storage once "
            "(key: t.untyped_storage()._cdata, one number per storage on every device)."
        ),
    ),
    "parameters twice": (
        lambda m: m.total + m.weights_saved,
        tr_lazy(
            "Layers save their weights for the backward pass too; those bytes are the parameters, already counted: "
            "leave tensors that share a parameter's storage out of the activations."
        ),
    ),
}
OPTIMIZER_WORDS = {"adam": "Adam", "sgd": tr_lazy("plain SGD"), "sgd_momentum": tr_lazy("SGD with momentum")}


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
        (tr_lazy("a wide MLP, batch 32"), wide, 32, (1024,), "adam"),
        (tr_lazy("the same MLP, batch 32"), wide, 32, (1024,), "sgd"),
        (tr_lazy("a narrow MLP, batch 1024"), narrow, 1024, (256,), "sgd_momentum"),
        (tr_lazy("Tudui, batch 32"), Tudui(), 32, (3, 32, 32), "adam"),
    ]


META_POINTERS_HINT = tr_lazy(
    "Your code keyed storages by data_ptr() on meta tensors: on meta every data_ptr() is 0, so every tensor there "
    "gets the same key (and matches the parameters you leave out). Key each storage by "
    "t.untyped_storage()._cdata, distinct for each storage on every device, meta included; or count the "
    "activations on the real tensors the check passes you."
)


class _MetaPointers:
    """Within the block, count the calls of ``data_ptr()`` on a meta tensor or storage (they all return 0)."""

    def __init__(self) -> None:
        self.calls = 0

    @contextlib.contextmanager
    def watch(self):
        tensor_ptr, storage_ptr = torch.Tensor.data_ptr, torch.UntypedStorage.data_ptr

        def on_tensor(t):
            self.calls += t.device.type == "meta"
            return tensor_ptr(t)

        def on_storage(storage):
            self.calls += storage.device.type == "meta"
            return storage_ptr(storage)

        with (
            mock.patch.object(torch.Tensor, "data_ptr", on_tensor),
            mock.patch.object(torch.UntypedStorage, "data_ptr", on_storage),
        ):
            yield self


def _a_number(answer) -> bool:
    """Any real number of bytes: int, float (whole or not: the check asks for 10%), numpy's too; no bool."""
    if isinstance(answer, bool | torch.Tensor) or not isinstance(answer, numbers.Real):
        return False
    return math.isfinite(answer)


@exercise_check
def training_memory(fn):
    """``fn(model, inputs, targets, optimizer_name)`` returns the bytes one training step keeps (parameters,
    gradients, optimizer state, saved activations, batch), within 10% of what a real step keeps;
    ``optimizer_name`` is ``"sgd"``, ``"sgd_momentum"`` or ``"adam"``; the loss is cross-entropy."""
    results = []
    for case, model, batch, shape, opt in _estimate_cases():
        name = tr(case)
        gen = torch.Generator().manual_seed(1)
        inputs = torch.rand(batch, *shape, generator=gen)
        targets = torch.randint(0, 10, (batch,), generator=gen)
        with _MetaPointers().watch() as meta_pointers:
            answer, error = _quiet(fn, copy.deepcopy(model), inputs.clone(), targets.clone(), opt)
        if error is not None:
            return error
        measured = _Measured(measure_training_memory(copy.deepcopy(model), inputs, targets, optimizer=opt))
        measured.weights_saved = _weights_saved(model, inputs, targets)
        if not _a_number(answer):
            return failed(
                tr(
                    "For {name} your function returned {kind} {answer!r}: return a number of bytes "
                    "(an int or a float).",
                    name=name,
                    kind=type(answer).__name__,
                    answer=answer,
                ),
                tr(ESTIMATE_HINT),
            )
        off = float(answer) / measured.total - 1
        if abs(off) > 0.10:
            hints = [
                tr(hint)
                for guess, hint in MISTAKES.values()
                if abs(guess(measured) / measured.total - 1) > 0.10 and abs(answer / guess(measured) - 1) <= 0.03
            ]
            if meta_pointers.calls and answer < measured.total:
                hints = [tr(META_POINTERS_HINT)]
            return failed(
                tr(
                    "For {name} with {optimizer} your estimate is {estimate:.2f} MiB; a real step keeps "
                    "{real:.2f} MiB ({off:+.0%}).\n{table}",
                    name=name,
                    optimizer=tr(OPTIMIZER_WORDS[opt]),
                    estimate=answer / MiB,
                    real=measured.total / MiB,
                    off=off,
                    table=measured.table(names=("real step", "")),
                ),
                _sentences(dict.fromkeys(hints)) or tr(ESTIMATE_HINT),
            )
        results.append(tr("{name}: {off:+.1%}", name=name, off=off))
    return passed(tr("Every estimate within 10% of what a real step keeps ({results}).", results=_list(results)))


# ---------------------------------------------------------------- Exercise 2: the batch-size finder

FINDER_HINT = tr_lazy(
    "Start at `start`; call try_batch(size) inside a try block and return the size if it works. If it ran out of "
    "memory (is_out_of_memory from section 4), halve the size with `//` once you are out of the except block, or "
    "re-raise the error when the size is already 1; let every other error through at once."
)
FINDER_MODEL_SIZES = [64, 512, 512, 10]
MAX_CALLS = 40
MACHINES = {
    "cuda": (tr_lazy("a simulated CUDA GPU"), "torch.OutOfMemoryError"),
    "mps": (tr_lazy("a simulated Mac (MPS)"), tr_lazy("a plain RuntimeError (MPS backend out of memory ...)")),
    "cpu": (
        tr_lazy("a simulated CPU allocator"),
        tr_lazy("a plain RuntimeError (DefaultCPUAllocator: can't allocate memory ...)"),
    ),
}
SHAPE_BUG = "mat1 and mat2 shapes cannot be multiplied"


class _Attempts:
    """``try_batch`` for the check: a forward and backward pass of a small MLP on a simulated device.

    ``bug``: ``"value"`` makes every step raise a ValueError; ``"shape"`` makes every step a real shape error
    (a RuntimeError, as most bugs in a training step are). Either must pass through at the first attempt."""

    def __init__(self, capacity: int, bug: str | None = None, backend: str = "cuda") -> None:
        torch.manual_seed(0)
        self.model = _mlp(FINDER_MODEL_SIZES)
        self.gpu = SimulatedGpuMemory(capacity, backend=backend)
        self.bug = bug
        self.sizes: list = []
        self.inside_except: list = []  # sizes tried while an exception was still being handled

    def __call__(self, size) -> None:
        self.sizes.append(size)
        if len(self.sizes) > MAX_CALLS:
            raise _TooManyCalls
        if sys.exc_info()[1] is not None:
            self.inside_except.append(size)
        if self.bug == "value":
            raise ValueError(f"a bug in the training step (batch {size}): shapes do not match")
        if _is_whole(size) and size < 1:
            raise ValueError(f"batch size {size}")
        try:
            x = torch.rand(size, FINDER_MODEL_SIZES[0])  # a float size raises TypeError here, as in any real step
            if self.bug == "shape":
                x = x @ torch.rand(FINDER_MODEL_SIZES[1], 3)  # (size x 64) @ (512 x 3)
            hidden = self.model(x)
            loss = hidden.square().mean()
            loss.backward()
        finally:
            self.model.zero_grad(set_to_none=True)  # a trial step leaves no gradients behind


class _TooManyCalls(Exception):
    pass


def _is_whole(size) -> bool:
    return isinstance(size, numbers.Integral) and not isinstance(size, bool)


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


def _outcome(result, error) -> str:
    """What the learner's function did, as the end of a sentence: "returned 64", "raised ValueError"."""
    if error is None:
        return tr("returned {result!r}", result=result)
    return tr("raised {error_type}", error_type=type(error).__name__)


def _judge_run(fn, backend: str, capacity: int, start: int, expected: int, tried_log: list):
    """Feedback if ``fn`` gets the largest batch that fits wrong on this simulated device, else None."""
    machine, raised = (tr(words) for words in MACHINES[backend])
    attempts = _Attempts(capacity, backend=backend)
    result, error = _run_finder(fn, attempts, start)
    tried_log.append(attempts.sizes)
    tried = tr("(tried: {sizes})", sizes=attempts.sizes)
    if isinstance(error, _TooManyCalls):
        return failed(tr("Your function called try_batch more than {calls} times.", calls=MAX_CALLS), tr(FINDER_HINT))
    if isinstance(error, NotImplementedError) and not str(error):
        return failed(NOT_WRITTEN)
    odd = [size for size in attempts.sizes if not _is_whole(size)]
    if odd:
        return failed(
            tr(
                "Your function passed try_batch a batch size of {size!r} ({kind}) {tried}, and then {outcome}.",
                size=odd[0],
                kind=type(odd[0]).__name__,
                tried=tried,
                outcome=_outcome(result, error),
            ),
            tr(
                "A batch size is a whole number: `/` divides into a float (256 / 2 == 128.0), and tensor shapes "
                "refuse floats with a TypeError. Halve with `//`."
            ),
        )
    if 0 in attempts.sizes:
        return failed(tr("Your function tried a batch of 0: never go below 1."), tr(FINDER_HINT))
    if (error is not None or result != expected) and expected in attempts.sizes and (result or 0) < expected:
        message = tr(
            "On {machine} a batch of {expected} fits when nothing else is held, but your function tried it and "
            "failed {tried}: the failed attempt's tensors were still alive.",
            machine=machine,
            expected=expected,
            tried=tried,
        )
        if expected in attempts.inside_except:
            return failed(
                message,
                tr(
                    "Your function retried from inside an `except` block, where the error's traceback still holds "
                    "the failed step's frames and their tensors. Leave the except block first (set a flag, or `pass`), "
                    "then retry; on a GPU also hand the cache back (torch.cuda.empty_cache())."
                ),
            )
        return failed(
            message,
            tr(
                "Your function retried outside the except block, but it kept the error object (`err = e`, a list "
                "of errors, an attribute): its __traceback__ holds the failed step's frames and their tensors. "
                "Keep str(err) if you need the text, or drop the reference (`err = None`) before the next try; to "
                "raise the last error again, use a bare `raise` inside the except block."
            ),
        )
    if error is not None and is_out_of_memory(error):
        if backend == "cuda":
            return failed(
                tr(
                    "On {machine} where a batch of {expected} fits, your function let an out-of-memory error "
                    "through {tried}.",
                    machine=machine,
                    expected=expected,
                    tried=tried,
                ),
                tr("Catch the out-of-memory error around try_batch(size) and try half the size."),
            )
        return failed(
            tr(
                "On {machine} where a batch of {expected} fits, out of memory is {raised}, not "
                "torch.OutOfMemoryError, and your function let it through {tried}.",
                machine=machine,
                expected=expected,
                raised=raised,
                tried=tried,
            ),
            tr(
                "torch.OutOfMemoryError is CUDA's error only. MPS and the CPU allocator raise a plain RuntimeError "
                "worded their own way: catch RuntimeError, retry when is_out_of_memory(err) (section 4) says it is "
                "out of memory, and re-raise every other RuntimeError at once."
            ),
        )
    if error is not None:
        return failed(
            tr(
                "On {machine} your function raised {error_type}: {error} {tried}.",
                machine=machine,
                error_type=type(error).__name__,
                error=_first_line(error),
                tried=tried,
            ),
            tr(FINDER_HINT),
        )
    if result != expected:
        return failed(
            tr(
                "On {machine} with room for a batch of {expected}, your function returned {result!r} {tried}; the "
                "largest of {start}, {half}, ... that fits is {expected}.",
                machine=machine,
                expected=expected,
                result=result,
                tried=tried,
                start=start,
                half=start // 2,
            ),
            tr(FINDER_HINT),
        )
    return None


def _judge_nothing_fits(fn, backend: str, start: int):
    machine = tr(MACHINES[backend][0])
    tiny = _Attempts(capacity=64 * 1024, backend=backend)
    result, error = _run_finder(fn, tiny, start)
    if isinstance(error, _TooManyCalls):
        return failed(
            tr("When nothing fits, your function called try_batch more than {calls} times.", calls=MAX_CALLS),
            tr(FINDER_HINT),
        )
    if 0 in tiny.sizes:
        return failed(tr("When nothing fits, your function tried a batch of 0: stop at 1."), tr(FINDER_HINT))
    if error is None or not is_out_of_memory(error):
        return failed(
            tr(
                "On {machine} where not even a batch of 1 fits, your function {outcome} (tried: {sizes}).",
                machine=machine,
                outcome=_outcome(result, error),
                sizes=tiny.sizes,
            ),
            tr(
                "When even a batch of 1 does not fit, raise the out-of-memory error again (a bare `raise` in the "
                "except block): no batch size can help, and the caller must know."
            ),
        )
    return None


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else tr("(no message)")


@exercise_check
def batch_finder(fn):
    """``fn(try_batch, start)`` returns the largest of ``start, start // 2, ..., 1`` for which ``try_batch(size)``
    does not run out of memory, on any device (CUDA's ``torch.OutOfMemoryError``, the CPU allocator's or
    MPS's ``RuntimeError``); every other error passes through at once; if even 1 does not fit, the
    out-of-memory error is raised."""
    start = 512
    capacity = 3 * MiB
    expected = next(s for s in (start >> k for k in range(10)) if _fits(capacity, s))
    tried: list = []
    for backend in MACHINES:
        verdict = _judge_run(fn, backend, capacity, start, expected, tried)
        if verdict is None:
            verdict = _judge_nothing_fits(fn, backend, start)
        if verdict is not None:  # a failed Feedback is falsy: test for None
            return verdict
    buggy = _Attempts(capacity, bug="value")
    result, error = _run_finder(fn, buggy, start)
    if not isinstance(error, ValueError) or len(buggy.sizes) != 1:
        return failed(
            tr(
                "A try_batch with a bug (it raises ValueError) was tried at {sizes} and your function "
                "{outcome}: a real bug was retried as if it were out of memory.",
                sizes=buggy.sizes,
                outcome=_outcome(result, error),
            ),
            tr("Retry only after an out-of-memory error. Catching Exception (or everything) halves away every bug."),
        )
    shape = _Attempts(capacity, bug="shape")
    result, error = _run_finder(fn, shape, start)
    if not (isinstance(error, RuntimeError) and SHAPE_BUG in str(error)) or len(shape.sizes) != 1:
        return failed(
            tr(
                "A try_batch with a shape bug (RuntimeError: {bug} ...) was tried at {sizes} and your "
                "function {outcome}: the bug was taken for out of memory.",
                bug=SHAPE_BUG,
                sizes=shape.sizes,
                outcome=_outcome(result, error),
            ),
            tr(
                "Out-of-memory errors are RuntimeErrors (torch.OutOfMemoryError is a subclass), but so is almost "
                "every bug in a training step: shapes, devices, dtypes. Catch RuntimeError only to look at it: retry "
                "when is_out_of_memory(err) (section 4) says it is out of memory, re-raise anything else at once."
            ),
        )
    return passed(
        tr(
            "Largest batch that fits in {mib} MiB: {expected} (tried {tried}) "
            "on a simulated CUDA GPU, a Mac and a CPU allocator; out of memory at 1 raised; a ValueError and a "
            "RuntimeError shape bug passed through at once.",
            mib=capacity // MiB,
            expected=expected,
            tried=tried[0],
        )
    )


# ---------------------------------------------------------------- Exercise 3: gradient accumulation

ACCUMULATE_HINT = tr_lazy(
    "Clear the gradients once before the micro-batches; give each micro-batch its own forward and backward pass, "
    "with its loss weighted so that the micro-batches together count as the whole batch (backward() adds into "
    ".grad); step the optimizer once, after the last micro-batch."
)
ACCUMULATE_SEE = "Gradient accumulation"
ACCUMULATE_MORE = tr_lazy(
    "The loss is a mean over its own batch. Compare, on a small example, the .grad of one backward pass on the "
    "whole batch with the sum of the .grad of several backward passes on equal pieces of it: what factor turns "
    "the second into the first? torch.Tensor.chunk splits a tensor into equal pieces along dimension 0."
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
    "no divide": tr_lazy(
        "Your gradients are micro_batches times too large: divide each micro-batch's loss by the number "
        "of micro-batches (the loss is a mean over its own micro-batch)."
    ),
    "zero inside": tr_lazy(
        "Only the last micro-batch's gradient is left: zero the gradients once, before the loop, not "
        "for each micro-batch."
    ),
    "step inside": tr_lazy(
        "Your code steps the optimizer after every micro-batch: accumulate all of them, then one optimizer.step()."
    ),
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
                return failed(
                    tr("After your step the weights differ from one step on the whole batch."),
                    tr(hint),
                    more=tr(ACCUMULATE_MORE),
                    see=ACCUMULATE_SEE,
                )
        return failed(
            tr("After your step the weights differ from one step on the whole batch."),
            tr(ACCUMULATE_HINT),
            more=tr(ACCUMULATE_MORE),
            see=ACCUMULATE_SEE,
        )
    if live.peak > 0.6 * whole.peak:
        return failed(
            tr(
                "The weights are right, but your step's peak memory ({peak:.1f} MiB) is that of the whole "
                "batch at once ({whole:.1f} MiB): the batch was not split.",
                peak=live.peak / MiB,
                whole=whole.peak / MiB,
            ),
            tr(
                "Only one micro-batch's activations may be alive at a time: each micro-batch's backward pass has to "
                "run before the next micro-batch's forward pass. A single backward() on the whole batch, or on a sum "
                "of the micro-batches' losses, keeps every activation until the end."
            ),
            more=tr(
                "The forward pass saves activations for the backward pass, which frees them as it uses them. "
                "The section's cell measures both peaks with LiveBytes; measure your step the same way."
            ),
            see=ACCUMULATE_SEE,
        )
    return passed(
        tr(
            "The same weights as one step on the whole batch, with a peak of {peak:.1f} MiB instead of "
            "{whole:.1f} MiB.",
            peak=live.peak / MiB,
            whole=whole.peak / MiB,
        )
    )


# The exercises as the could-not-be-checked hint states them (each check's docstring: helpers.exercises.statement).
STATEMENTS = (
    tr_lazy(
        "`fn(model, inputs, targets, optimizer_name)` returns the bytes one training step keeps (parameters, "
        "gradients, optimizer state, saved activations, batch), within 10% of what a real step keeps; "
        '`optimizer_name` is `"sgd"`, `"sgd_momentum"` or `"adam"`; the loss is cross-entropy.'
    ),
    tr_lazy(
        "`fn(try_batch, start)` returns the largest of `start, start // 2, ..., 1` for which `try_batch(size)` does "
        "not run out of memory, on any device (CUDA's `torch.OutOfMemoryError`, the CPU allocator's or MPS's "
        "`RuntimeError`); every other error passes through at once; if even 1 does not fit, the out-of-memory error "
        "is raised."
    ),
    tr_lazy(
        "`fn(model, loss_fn, optimizer, imgs, targets, micro_batches)`: one optimizer step from the gradient of the "
        "whole batch, computed `micro_batches` pieces at a time (the batch size divides evenly)."
    ),
)
